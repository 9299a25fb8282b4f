#!/usr/bin/env python3
"""Reads of compressed datasets, side by side in one run (issue 24): for each codec and chunk size, a
float32 dataset like `bench_compressed_read`'s (a smooth signal quantised to 1/64) read whole

* into NumPy: h5py (HDF5's filters, one core, under HDF5's lock) against ``h5gds.read`` with its chunks
  decoded on the driver's I/O threads (all cores, ``H5GDS_NTHREADS``), and on one thread (the decoders'
  own speed);
* into device memory, where CuPy imports (or the package tests' CuPy stand-in over the emulators, with
  the emulator libraries on LD_LIBRARY_PATH: rows labelled EMULATED): h5py + ``cupy.asarray`` against
  ``h5gds.read(out=cupy array)`` decoding on the GPU with nvCOMP (``H5GDS_GPU_CODEC=1``) with the
  checksums the chunks carry checked on the host (the default) and unchecked
  (``H5GDS_VERIFY_CHECKSUMS=0``), and with ``H5GDS_GPU_CODEC=0``; then the checked GPU decode's rate
  over the unchecked one (issue 49's goal: at least 0.8 for deflate on a GPU).

Alternatives are interleaved, each repeated; medians, GB/s of decoded bytes and ratios to h5py are
printed. Files stay in the page cache (this measures decoding, not storage). Run it with the wheel's
interpreter (hdf5plugin installed)::

    .venv-wheel/bin/python benches/compressed_read.py --size 256M --chunks 256K,1M,4M,16M

On a machine without a GPU, add the emulators to get the (EMULATED) device rows::

    LD_LIBRARY_PATH=$PWD/target/emulator-lib-python H5GDS_EMU_POISON=off \\
        .venv-wheel/bin/python benches/compressed_read.py
"""

import argparse
import os
import sys
import tempfile
from pathlib import Path

import h5py
import hdf5plugin
import numpy as np

import h5gds

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from bench_python import device_cupy, interleave, record, size_arg, with_env  # noqa: E402

CODECS = {
    "gzip": {"compression": "gzip", "compression_opts": 4},
    "gzip+shuffle": {"compression": "gzip", "compression_opts": 4, "shuffle": True},
    "zstd": dict(hdf5plugin.Zstd()),
    "lz4": dict(hdf5plugin.LZ4()),
}


# Columns of the rank-2 datasets, and of their chunks: a chunk spans a quarter of a row, so no
# chunk is contiguous in the array and every one is placed by a strided copy.
COLUMNS, CHUNK_COLUMNS = 4096, 1024


def layout(n, chunk_elements, rank):
    """The dataset's shape and chunk shape: 1-D, or rows of COLUMNS in chunks CHUNK_COLUMNS wide."""
    if rank == 1:
        return (n,), (min(n, chunk_elements),)
    rows = n // COLUMNS
    return (rows, COLUMNS), (max(1, min(rows, chunk_elements // CHUNK_COLUMNS)), CHUNK_COLUMNS)


def write(path, shape, chunks, codec):
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", shape=shape, dtype="<f4", chunks=chunks, **CODECS[codec])
        width = int(np.prod(shape[1:]))
        step = max(1, (1 << 24) // width)
        for a in range(0, shape[0], step):
            b = min(shape[0], a + step)
            k = np.arange(a * width, b * width, dtype=np.float64)
            d[a:b] = (np.round((np.sin(k / 5000.0) * 100 + (k % 7)) * 64) / 64).reshape((b - a,) + shape[1:])
        return sum(d.id.get_chunk_info(i).size for i in range(d.id.get_num_chunks()))


def row(name, seconds, nbytes, baseline, label="", **fields):
    record("compressed_read", name, seconds, nbytes, label, **fields)
    print(f"    {name:<46} {seconds * 1e3:9.1f} ms  {nbytes / seconds / 1e9:6.2f} GB/s  x{baseline / seconds:5.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=size_arg, default=size_arg("256M"), help="decoded bytes (default 256M)")
    parser.add_argument("--chunks", default="256K,1M,4M,16M", help="chunk sizes in bytes (default 256K,1M,4M,16M)")
    parser.add_argument("--codecs", default=",".join(CODECS), help=f"of {', '.join(CODECS)}")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where the files go (default: a temporary directory)")
    parser.add_argument("--rank", type=int, choices=(1, 2), default=1,
                        help=f"1: a vector; 2: rows of {COLUMNS} in chunks {CHUNK_COLUMNS} columns wide (default 1)")
    args = parser.parse_args()
    n = args.size // 4
    if args.rank == 2:
        n -= n % COLUMNS
    cores = os.cpu_count()
    threads = os.environ.get("H5GDS_NTHREADS", str(min(cores, 16)))
    cupy, label = device_cupy()
    print(f"Compressed reads: float32, {n * 4} decoded bytes, {args.reps} interleaved rounds, {cores} CPUs; "
          f"ratios against h5py (HDF5's filters)")
    if cupy is None:
        print(f"  device rows skipped: {label}")
    shape, _ = layout(n, n, args.rank)
    host_out = np.empty(shape, dtype="<f4")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for codec in args.codecs.split(","):
            for chunk in args.chunks.split(","):
                path = Path(tmp) / f"{codec}-{chunk}.h5"
                shape, chunks = layout(n, size_arg(chunk) // 4, args.rank)
                stored = write(path, shape, chunks, codec)
                print(f"\n  {codec}, chunks of {chunk} {chunks}: stored {100 * stored / (n * 4):.1f}%")
                with h5py.File(path, "r") as f:
                    d = f["x"]
                    want = d[...]
                    host = interleave({
                        "into NumPy: h5py": lambda: d.read_direct(host_out),
                        f"into NumPy: h5gds.read, {threads} threads": lambda: h5gds.read(d, out=host_out),
                        "into NumPy: h5gds.read, 1 thread": with_env("H5GDS_NTHREADS", "1",
                                                                     lambda: h5gds.read(d, out=host_out)),
                    }, args.reps)
                    assert np.array_equal(h5gds.read(d), want)
                    base = host["into NumPy: h5py"]
                    roles = dict(zip(host, ("h5py", "host threads", "host 1 thread")))
                    for name, seconds in host.items():
                        row(name, seconds, n * 4, base, codec=codec, chunk=chunk, rank=args.rank,
                            role=roles[name], threads=int(threads) if roles[name] == "host threads" else 1)
                    if cupy is None:
                        continue
                    dev = cupy.empty(shape, dtype="<f4")

                    def settled(fn):
                        def run():
                            fn()
                            cupy.cuda.Device().synchronize()
                        return run
                    def gpu(verify):
                        read = with_env("H5GDS_VERIFY_CHECKSUMS", verify, lambda: h5gds.read(d, out=dev))
                        return settled(with_env("H5GDS_GPU_CODEC", "1", read))
                    device = interleave({
                        "into CuPy: h5py + cupy.asarray": settled(lambda: cupy.asarray(d[...])),
                        "into CuPy: h5gds.read, GPU decode (nvCOMP)": gpu("1"),
                        "into CuPy: h5gds.read, GPU decode, unchecked": gpu("0"),
                        "into CuPy: h5gds.read, H5GDS_GPU_CODEC=0": settled(
                            with_env("H5GDS_GPU_CODEC", "0", lambda: h5gds.read(d, out=dev))),
                    }, args.reps)
                    assert np.array_equal(cupy.asnumpy(dev), want)
                    base = device["into CuPy: h5py + cupy.asarray"]
                    roles = dict(zip(device, ("users", "gpu", "gpu unchecked", "gpu codec off")))
                    for name, seconds in device.items():
                        row(name + label, seconds, n * 4, base, label, codec=codec, chunk=chunk, rank=args.rank,
                            role=roles[name])
                    checked = device["into CuPy: h5gds.read, GPU decode (nvCOMP)"]
                    unchecked = device["into CuPy: h5gds.read, GPU decode, unchecked"]
                    print(f"    GPU decode rate, checksums checked / unchecked (H5GDS_VERIFY_CHECKSUMS=0): "
                          f"x{unchecked / checked:.2f}{label}")
                path.unlink()


if __name__ == "__main__":
    main()
