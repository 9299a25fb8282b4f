#!/usr/bin/env python3
"""Benchmark of gathers (not a test): ``h5gds.read(dset, sel=rows)`` against h5py's fancy indexing
``dset[np.sort(rows)]`` of the same random rows (issue 26's goal: at least 5x h5py), host memory.

A float32 dataset of shape (N, row/4) (``--size``, default 1 GiB; ``--row``, default 4 KiB) is
written once, contiguous and chunked (``--chunk-rows`` rows per chunk, unfiltered); each round draws
``--rows`` distinct random rows (default 4096) and times, interleaved:

* h5py's fancy indexing of the sorted rows (h5py takes increasing indices only), file opened with
  HDF5's default driver (sec2) and with ``driver="gds"``;
* ``h5gds.read`` of the same sorted rows and of the rows in their random order (``driver="gds"``);
* ``h5gds.read`` of the sorted rows with sec2, which tells the call's share from the driver's;
* for the chunked dataset, both again with the chunk cache off (``rdcc_nbytes=0``): HDF5 then reads
  the selected rows of each chunk, where with the cache it reads every chunk touched whole.

Every result is checked against NumPy's gather of the data written. Medians of ``--reps`` rounds and
the ratio to h5py (sec2) are printed; the page cache is warm (the file was just written, and each
alternative reads the same rows in a round). Run it with the wheel's interpreter::

    .venv-wheel/bin/python benches/gathers.py --size 1G
"""

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

import h5gds


def size_arg(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def write_file(path, n_rows, row_elements, chunk_rows):
    """The dataset, contiguous and chunked: row i holds i, i+1, ... (float32), written in slabs."""
    with h5py.File(path, "w") as f:
        contiguous = f.create_dataset("contiguous", shape=(n_rows, row_elements), dtype="<f4")
        chunked = f.create_dataset("chunked", shape=(n_rows, row_elements), dtype="<f4",
                                   chunks=(chunk_rows, row_elements))
        slab = max(1, (64 << 20) // (row_elements * 4))
        for first in range(0, n_rows, slab):
            rows = np.arange(first, min(first + slab, n_rows), dtype=np.float32)[:, None]
            values = rows + np.arange(row_elements, dtype=np.float32)[None, :]
            contiguous[first:first + len(values)] = values
            chunked[first:first + len(values)] = values


def expected(rows, row_elements):
    return rows.astype(np.float32)[:, None] + np.arange(row_elements, dtype=np.float32)[None, :]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=size_arg, default=size_arg("1G"), help="dataset bytes (default 1G)")
    parser.add_argument("--row", type=size_arg, default=size_arg("4K"), help="bytes per row (default 4K)")
    parser.add_argument("--rows", type=int, default=4096, help="rows per gather (default 4096)")
    parser.add_argument("--chunk-rows", type=int, default=16, help="rows per chunk of the chunked dataset")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--dir", default=None, help="where the file goes (default: a temporary directory)")
    parser.add_argument("--layouts", default="contiguous,chunked")
    args = parser.parse_args()
    row_elements = args.row // 4
    n_rows = args.size // (row_elements * 4)
    if args.rows > n_rows:
        parser.error(f"--rows {args.rows} is more than the dataset's {n_rows} rows")
    rng = np.random.default_rng(26)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "gathers.h5"
        write_file(path, n_rows, row_elements, args.chunk_rows)
        print(f"gathers of {args.rows} random rows of {row_elements * 4} bytes from a float32 dataset of shape "
              f"({n_rows}, {row_elements}) ({n_rows * row_elements * 4 / 2**30:.2f} GiB), page cache warm, "
              f"{args.reps} interleaved rounds, {os.cpu_count()} CPUs, host memory (NumPy)")
        with h5py.File(path, "r") as sec2, h5py.File(path, "r", driver="gds") as gds, \
                h5py.File(path, "r", driver="gds", rdcc_nbytes=0) as uncached:
            for layout in args.layouts.split(","):
                alternatives = {
                    "h5py dset[sorted] (sec2)": lambda s, u: sec2[layout][s],
                    "h5py dset[sorted] (gds)": lambda s, u: gds[layout][s],
                    "h5gds.read sorted (sec2)": lambda s, u: h5gds.read(sec2[layout], sel=s),
                    "h5gds.read sorted (gds)": lambda s, u: h5gds.read(gds[layout], sel=s),
                    "h5gds.read random order (gds)": lambda s, u: h5gds.read(gds[layout], sel=u),
                }
                if layout == "chunked":
                    alternatives["h5py dset[sorted] (gds, no cache)"] = lambda s, u: uncached[layout][s]
                    alternatives["h5gds.read random (gds, no cache)"] = (
                        lambda s, u: h5gds.read(uncached[layout], sel=u))
                times = {name: [] for name in alternatives}
                for _ in range(args.reps):
                    unsorted = rng.choice(n_rows, args.rows, replace=False)
                    ordered = np.sort(unsorted)
                    for name, fn in alternatives.items():
                        t = time.perf_counter()
                        got = fn(ordered, unsorted)
                        times[name].append(time.perf_counter() - t)
                        want = expected(unsorted if "random" in name else ordered, row_elements)
                        assert np.array_equal(got, want), f"{name} read wrong data"
                medians = {name: statistics.median(ts) for name, ts in times.items()}
                baseline = medians["h5py dset[sorted] (sec2)"]
                nbytes = args.rows * row_elements * 4
                chunks = f", {args.chunk_rows} rows per chunk" if layout == "chunked" else ""
                print(f"\n{layout}{chunks}:")
                for name, seconds in medians.items():
                    print(f"  {name:<32} {seconds * 1e3:8.2f} ms  {nbytes / seconds / 1e9:6.2f} GB/s  "
                          f"x{baseline / seconds:6.2f} vs h5py (sec2)")


if __name__ == "__main__":
    main()
