#!/usr/bin/env python3
"""Slabs of an unfiltered chunked dataset read into NumPy where no read with no HDF5 call serves them
(the file open for writing, ``r+``): ``h5gds.read`` (the engine's host read, which reads the chunks on
the driver's I/O threads, as array-io's reads do: issue 51) against one ``H5Dread`` of the same slab
into the same array (``Dataset.read_direct``, the way ``h5gds.read`` took before), alternated in one
process. A float32 dataset of ``--size`` bytes, chunks of ``--chunk`` bytes (whole rows of 1024
elements), in the page cache; slabs: all of it, half of it, and two chunks. Prints each side's
median and the ratio HDF5 / h5gds (above 1: h5gds faster) per slab. Run with a wheel's interpreter::

    .venv-wheel/bin/python benches/unfiltered_slabs.py --size 64M --rounds 21
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

import h5gds

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from bench_python import size_arg  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=size_arg, default=size_arg("64M"))
    parser.add_argument("--chunk", type=size_arg, default=size_arg("1M"))
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    cols = 1024
    rows = max(2, args.size // (4 * cols))
    chunk_rows = max(1, args.chunk // (4 * cols))
    data = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    slabs = {"all": np.s_[:], "half": np.s_[rows // 4: rows // 4 + rows // 2],
             "two chunks": np.s_[chunk_rows // 2: chunk_rows // 2 + chunk_rows]}
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "unfiltered.h5")
        with h5py.File(path, "w") as f:
            f.create_dataset("data", data=data, chunks=(chunk_rows, cols))
        print(f"{rows} x {cols} float32 ({data.nbytes >> 20} MiB), chunks of {chunk_rows} rows, file open r+, "
              f"{args.rounds} rounds alternated; medians")
        with h5py.File(path, "r+") as f:
            dset = f["data"]
            for name, sel in slabs.items():
                want = data[sel]
                out = np.empty_like(want)
                times = {"h5gds.read": [], "H5Dread": []}
                runs = {"h5gds.read": lambda: h5gds.read(dset, out=out, sel=sel),
                        "H5Dread": lambda: dset.read_direct(out, source_sel=sel)}
                for side in runs:  # untimed first reads
                    runs[side]()
                for turn in range(args.rounds):
                    for side in (("h5gds.read", "H5Dread") if turn % 2 else ("H5Dread", "h5gds.read")):
                        out.fill(0)
                        start = time.perf_counter()
                        runs[side]()
                        times[side].append(time.perf_counter() - start)
                        assert np.array_equal(out, want), side
                ours, theirs = (statistics.median(times[s]) for s in ("h5gds.read", "H5Dread"))
                print(f"  {name:>10}: h5gds.read {ours * 1e3:8.3f} ms, one H5Dread {theirs * 1e3:8.3f} ms, "
                      f"ratio H5Dread / h5gds.read {theirs / ours:5.2f}")


if __name__ == "__main__":
    main()
