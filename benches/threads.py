#!/usr/bin/env python3
"""Many threads, one file (issue 26): random rows of a float32 dataset read by 1, 2 and 8 threads
(``--threads``), side by side in one run, into NumPy: ``h5gds.read`` (a read-only file's reads served
with no HDF5 call, so threads run at once) against h5py in the same threads (HDF5's global lock
serialises them), and both in 2 worker processes (each opening the file, as DataLoader workers do). Per
layout (contiguous, chunked unfiltered, chunked Zstandard) and row size; files in the page cache.
Alternatives interleaved, each repeated; medians of GB/s, ratios to h5py in one thread, and each h5gds
row's scaling against its one thread (the issue's goal: at least 0.8 x min(threads, cores)). Run with
the wheel's interpreter::

    .venv-wheel/bin/python benches/threads.py --size 256M --rows 64K,1M

``--device``: rows into CuPy arrays instead, h5py's rows copied up as users do (``out[...] = row``); no
worker processes then. With real CuPy these are GPU figures; over h5gds's emulators (the package tests'
CuPy stand-in, LD_LIBRARY_PATH as scripts/test.sh sets it) they are labelled EMULATED.
"""

import argparse
import concurrent.futures
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import h5py
import hdf5plugin
import numpy as np

import h5gds

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from bench_python import device_cupy, record, size_arg  # noqa: E402

LAYOUTS = {
    "contiguous": {},
    "chunked": {"chunks": True},
    "zstd": {"chunks": True, **hdf5plugin.Zstd()},
}


def write(path, rows, row_elements, layout):
    with h5py.File(path, "w") as f:
        options = dict(LAYOUTS[layout])
        if options.pop("chunks", False):
            options["chunks"] = (max(1, (1 << 20) // (row_elements * 4)), row_elements)
        d = f.create_dataset("x", shape=(rows, row_elements), dtype="<f4", **options)
        step = max(1, (64 << 20) // (row_elements * 4))
        for a in range(0, rows, step):
            b = min(rows, a + step)
            d[a:b] = (np.arange(a * row_elements, b * row_elements, dtype=np.float64) % 9973).reshape(b - a, -1)


def h5gds_rows(dset, picks, out):
    for i in picks:
        h5gds.read(dset, out=out, sel=(int(i),))


def h5py_rows(dset, picks, out):
    host = out if isinstance(out, np.ndarray) else np.empty(out.shape, dtype=out.dtype)
    for i in picks:
        dset.read_direct(host, source_sel=np.s_[int(i)])
        if host is not out:
            out[...] = host  # what users do with a device array: read on the host, copy up


def in_threads(fn, dset, picks, threads, row_elements, empty=np.empty):
    parts = np.array_split(picks, threads)
    outs = [empty((row_elements,), dtype="<f4") for _ in range(threads)]
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(fn, [dset] * threads, parts, outs))


def process_worker(args):
    path, picks, row_elements, reader = args
    out = np.empty((row_elements,), dtype="<f4")
    with h5py.File(path, "r") as f:
        (h5gds_rows if reader == "h5gds" else h5py_rows)(f["x"], picks, out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=size_arg, default=size_arg("1G"), help="dataset bytes (default 1G)")
    parser.add_argument("--rows", default="64K,1M,4M", help="row sizes in bytes (default 64K,1M,4M)")
    parser.add_argument("--reads", type=size_arg, default=size_arg("256M"), help="bytes read per alternative")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    parser.add_argument("--dir", default=None)
    parser.add_argument("--device", action="store_true", help="rows into CuPy arrays")
    parser.add_argument("--threads", default="1,2,8", help="thread counts, 1 among them (default 1,2,8)")
    args = parser.parse_args()
    counts = [int(t) for t in args.threads.split(",")]
    if 1 not in counts:
        parser.error("--threads must include 1: every scaling is against one thread")
    cores = os.cpu_count()
    empty, label = np.empty, "NumPy"
    if args.device:
        cupy, note = device_cupy()
        if cupy is None:
            sys.exit(f"--device: {note}")
        empty, label = cupy.empty, f"CuPy{note}"
    print(f"Random rows into {label}, {args.size} bytes of float32, {args.reads} bytes read per alternative, "
          f"{args.reps} interleaved rounds, {cores} CPUs; GB/s (medians) and ratios to h5py in one thread")
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp, context.Pool(2) as workers:
        for layout in args.layouts.split(","):
            for row in args.rows.split(","):
                row_bytes = size_arg(row)
                row_elements = row_bytes // 4
                rows = args.size // row_bytes
                path = Path(tmp) / f"{layout}-{row}.h5"
                write(path, rows, row_elements, layout)
                n = max(8, args.reads // row_bytes)
                rng = np.random.default_rng(26)
                with h5py.File(path, "r") as f:
                    dset = f["x"]
                    picks = rng.integers(0, rows, n)
                    want = dset[int(picks[0])]
                    got = h5gds.read(dset, out=empty((row_elements,), dtype="<f4"), sel=(int(picks[0]),))
                    assert np.array_equal(want, np.asarray(got if isinstance(got, np.ndarray) else got.get()))
                    alternatives = {}
                    for threads in counts:
                        alternatives[f"h5gds.read, {threads} threads"] = (
                            lambda t=threads: in_threads(h5gds_rows, dset, picks, t, row_elements, empty))
                        alternatives[f"h5py, {threads} threads"] = (
                            lambda t=threads: in_threads(h5py_rows, dset, picks, t, row_elements, empty))
                    if not args.device:
                        for reader in ("h5gds.read", "h5py"):
                            alternatives[f"{reader}, 2 worker processes"] = lambda r=reader.split(".")[0]: workers.map(
                                process_worker, [(str(path), part, row_elements, r) for part in np.array_split(picks, 2)])
                    times = {name: [] for name in alternatives}
                    for _ in range(args.reps):
                        for name, fn in alternatives.items():
                            t = time.perf_counter()
                            fn()
                            times[name].append(time.perf_counter() - t)
                nbytes = n * row_bytes
                rate = {name: nbytes / statistics.median(ts) / 1e9 for name, ts in times.items()}
                base = rate["h5py, 1 threads"]
                print(f"\n  {layout}, rows of {row} ({n} random rows)")
                for name, r in rate.items():
                    reader, how = name.split(", ")
                    record("threads", name, statistics.median(times[name]), nbytes, label,
                           case=f"{layout}, rows of {row}", memory="device" if args.device else "host",
                           reader=reader.split(".")[0], threads=int(how.split()[0]),
                           processes="worker processes" in how, cores=cores)
                    extra = ""
                    if name.startswith("h5gds") and not name.endswith(" 1 threads"):
                        threads = int(name.split(", ")[1].split()[0])
                        scale = r / rate["h5gds.read, 1 threads"]
                        extra = f"  scaling x{scale:4.2f} (goal {0.8 * min(threads, cores):.1f})"
                    print(f"    {name:<30} {r:7.2f} GB/s  x{r / base:5.2f}{extra}")
                path.unlink()


if __name__ == "__main__":
    main()
