#!/usr/bin/env python3
"""Where a staged device transfer's time goes (issue 23, item 1), side by side in one run: each way
h5gds moves a float32 dataset between a file and device memory through pinned host memory, timed
whole and by its two stages alone, the file side (the same call with pinned host memory instead of
the device array) and the link (one copy of the bytes between pinned host and device memory):

* reads and writes through the ``gds`` driver, which stages where GDS cannot run (no nvidia-fs, as on
  the first real-GPU machine) in its bounce buffers, a task per pool thread;
* reads and writes of a file h5py opened with sec2, and through ``gds`` with ``H5GDS_USE_VFD_GDS=0``,
  which the Python package stages in two pinned buffers of ``H5GDS_STAGING_BUFFER_SIZE``;
* reads of a gzip dataset (1 MiB chunks of a quantised sine with noise, each chunk as costly to
  decode as the next)
  decoded on the host (``H5GDS_GPU_CODEC=0``), in pieces of whole chunks.

Reads run with the file in the page cache and evicted before each run (then the file side is the
disk's).

For each it prints ``overlap``: (file + link - whole) / min(file, link), 1.0 where the copies run
wholly beside the file side (whole = the slower stage), 0.0 where they run one after the other
(whole = file + link). Writes go to the page cache and are synced (untimed) before each run.

On a GPU the link is the real one. Without a GPU, run it on the emulators with the link's time
modelled (``H5GDS_EMU_LINK_GBPS``, pinned and pageable GB/s; the first real-GPU machine measured
55.4 and 7.6; choose a rate near this machine's own file side, and well below its memcpy rate, since
the emulator still moves each copy's bytes on the calling thread): rows are then labelled EMULATED,
and only the overlap, not the rates, says anything about a GPU::

    LD_LIBRARY_PATH=$PWD/target/emulator-lib-python H5GDS_EMU_POISON=off H5GDS_EMU_GDS=0 \\
        H5GDS_EMU_LINK_GBPS=2,0.5 .venv-wheel/bin/python benches/staged_stages.py --size 512M
"""

import argparse
import ctypes
import os
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np

import h5gds
from h5gds import _native

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "python" / "tests"))
from bench_python import drop_from_page_cache, interleave, size_arg, with_env  # noqa: E402
from device_arrays import DeviceArray, cuda  # noqa: E402


def pinned_array(pinned, n):
    """`n` float32 over the pinned buffer `pinned` (an ``_native.PinnedHost``, kept alive by the
    caller)."""
    raw = (ctypes.c_uint8 * pinned.nbytes).from_address(pinned.address)
    return np.frombuffer(raw, dtype="<f4", count=n)


def overlap(file, link, whole):
    """1.0: the copies hidden behind the file side (or the reverse); 0.0: the stages in series."""
    return (file + link - whole) / min(file, link)


def row(name, nbytes, file, link, whole):
    print(f"  {name:<44} whole {whole * 1e3:8.1f} ms {nbytes / whole / 1e9:6.2f} GB/s | "
          f"file side {file * 1e3:8.1f} ms | link {link * 1e3:7.1f} ms | overlap {overlap(file, link, whole):5.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=size_arg, default=size_arg("512M"), help="dataset bytes (default 512M)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where the files go (default: a temporary directory)")
    args = parser.parse_args()
    n = args.size // 4
    nbytes = n * 4
    emulated = cuda().emulated
    link_model = os.environ.get("H5GDS_EMU_LINK_GBPS")
    if emulated:
        label = f" [EMULATED: link modelled at H5GDS_EMU_LINK_GBPS={link_model}, not GPU figures]"
        if link_model is None:
            print("note: H5GDS_EMU_LINK_GBPS is unset, so the emulated link costs only a memcpy")
    else:
        label = ""
    print(f"staged device transfers by stage: float32 dataset of {nbytes} bytes, {args.reps} interleaved "
          f"rounds, {os.cpu_count()} CPUs, medians{label}")

    data = np.arange(n, dtype="<f4")
    dev = DeviceArray((n,), "<f4")
    pinned = _native.PinnedHost(nbytes)
    host = pinned_array(pinned, n)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "stages.h5"
        with h5py.File(path, "w") as f:
            f.create_dataset("x", data=data)
            # A signal whose chunks all cost the same to decode (np.arange's do not: its early chunks
            # decode slower, and the pipeline then waits on them whatever it does), with noise.
            noise = np.random.default_rng(0).integers(0, 16, n) / 64
            signal = (np.round(np.sin(np.arange(n, dtype="<f8") * 1e-3) * 64) / 64 + noise).astype("<f4")
            del noise
            f.create_dataset("gzip", data=signal, chunks=(1 << 18,), compression="gzip", compression_opts=1)
            del signal

        def link(to_device):
            return lambda: _native.device_copy(dev.ptr.value, nbytes, None, 0, pinned.address, to_device)

        # Reads: each opening of the file, into pinned host memory and into the device array.
        with h5py.File(path, "r", driver="gds") as gds, h5py.File(path, "r") as sec2:
            ways = {
                "read, gds driver (bounce buffers)": (gds["x"], None),
                "read, sec2 file (two pinned buffers)": (sec2["x"], None),
                "read, gds + H5GDS_USE_VFD_GDS=0": (gds["x"], ("H5GDS_USE_VFD_GDS", "0")),
                "read, gzip decoded on the host": (gds["gzip"], ("H5GDS_GPU_CODEC", "0")),
            }
            alternatives = {"link": link(True)}
            for name, (dset, env) in ways.items():
                for side, out in (("file", host), ("whole", dev)):
                    def call(dset=dset, out=out):
                        h5gds.read(dset, out=out)
                    alternatives[(name, side)] = with_env(*env, call) if env else call
            warm = interleave(alternatives, args.reps)
            cold = interleave(alternatives, args.reps, before=lambda: drop_from_page_cache(path))
            # Each way's bytes are h5py's.
            for name, (dset, _) in ways.items():
                alternatives[(name, "whole")]()
                assert np.array_equal(dev.to_host(), dset[...]), name
        for title, reads in (("page cache warm", warm), ("file evicted before each run", cold)):
            print(f"\nreads ({title}){label}:")
            for name in ways:
                row(name, nbytes, reads[(name, "file")], reads["link"], reads[(name, "whole")])

        # Writes: the device array and the pinned buffer hold the same bytes.
        host[:] = data
        dev.copy_from_host(data)
        with h5py.File(path, "r+", driver="gds") as gds, h5py.File(path.with_name("sec2.h5"), "w") as sec2:
            sec2.create_dataset("x", shape=(n,), dtype="<f4")
            ways = {
                "write, gds driver (bounce buffers)": (gds["x"], None),
                "write, sec2 file (two pinned buffers)": (sec2["x"], None),
                "write, gds + H5GDS_USE_VFD_GDS=0": (gds["x"], ("H5GDS_USE_VFD_GDS", "0")),
            }
            alternatives = {"link": link(False)}
            for name, (dset, env) in ways.items():
                for side, source in (("file", host), ("whole", dev)):
                    def call(dset=dset, source=source):
                        h5gds.write(dset, source)
                    alternatives[(name, side)] = with_env(*env, call) if env else call
            writes = interleave(alternatives, args.reps, before=os.sync)
            for name, (dset, _) in ways.items():
                dset[...] = 0
                alternatives[(name, "whole")]()
                assert np.array_equal(dset[...], data), name
        print(f"\nwrites (page cache, synced before each run){label}:")
        for name in ways:
            row(name, nbytes, writes[(name, "file")], writes["link"], writes[(name, "whole")])
    dev.free()
    del host
    del pinned


if __name__ == "__main__":
    main()
