#!/usr/bin/env python3
"""Benchmark of Dask reads (not a test): one compressed variable of a netCDF-4 file summed by Dask, read
by each of

* ``da.from_array(h5py dataset)`` (what Dask's documentation shows; on ``distributed`` the workers
  reopen the file by name and read with plain h5py);
* xarray's ``open_dataset(engine="h5netcdf", chunks=...)`` and ``engine="h5gds"``;
* ``da.from_array(h5gds.LazyDataset)`` (each worker opens the file itself, reads with ``h5gds.read``);

on the threaded scheduler and on a ``distributed`` LocalCluster of ``--workers`` processes (one thread
each, the default 2), in interleaved rounds. Every sum is checked against NumPy's; medians and the ratio
to ``from_array(h5py)`` on the same scheduler are printed. The array (``--shape``, float32, smooth, in
``--chunks`` compressed with gzip, written by xarray through h5netcdf) is read with Dask chunks of
``--dask-rows`` rows. Needs dask, distributed, xarray and h5netcdf::

    .venv-bench/bin/python benches/dask_reads.py --shape 8192x8192 --reps 5
"""

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import dask
import dask.array as da
import distributed
import h5py
import numpy as np
import xarray as xr

import h5gds
import h5gds.xarray  # noqa: F401  (the engine)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="8192x8192")
    parser.add_argument("--chunks", default="512x4096", help="the file's chunks")
    parser.add_argument("--dask-rows", type=int, default=1024, help="rows per Dask chunk")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    shape = tuple(int(n) for n in args.shape.split("x"))
    chunks = tuple(int(n) for n in args.chunks.split("x"))
    r = np.arange(shape[0], dtype=np.float32)[:, None]
    c = np.arange(shape[1], dtype=np.float32)[None, :]
    data = (np.round((np.sin(r / 300) + np.cos(c / 500)) * 256) / 16).astype(np.float32)
    expected = float(data.sum(dtype=np.float64))
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = str(Path(tmp) / "dask.nc")
        xr.Dataset({"data": (("y", "x"), data)}).to_netcdf(
            path, engine="h5netcdf", encoding={"data": {"chunksizes": chunks, "compression": "gzip"}})
        del data
        dchunks = (args.dask_rows, shape[1])
        h5file = h5py.File(path, "r")

        def from_h5py():
            return da.from_array(h5file["data"], chunks=dchunks)

        def xarray(engine):
            return lambda: xr.open_dataset(path, engine=engine, chunks={"y": args.dask_rows, "x": -1})["data"].data

        def lazy():
            return da.from_array(h5gds.LazyDataset(path, "data"), chunks=dchunks)

        readers = {"from_array(h5py)": from_h5py, "xarray h5netcdf": xarray("h5netcdf"),
                   "xarray h5gds": xarray("h5gds"), "from_array(LazyDataset)": lazy}
        print(f"sum of a float32 array of shape {shape} ({np.prod(shape) * 4 / 2**20:.0f} MiB), chunks {chunks} "
              f"gzip, Dask chunks {dchunks}, page cache warm, {os.cpu_count()} CPUs, dask {dask.__version__}; "
              f"medians of {args.reps} rounds in ms")
        with distributed.LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                                      dashboard_address=None) as cluster, distributed.Client(cluster) as client:
            schedulers = {"threaded": lambda a: a.sum(dtype="f8").compute(scheduler="threads"),
                          f"distributed ({args.workers} processes)": lambda a: client.compute(a.sum(dtype="f8")).result()}
            times = {}
            for _ in range(args.reps):
                for sname, run in schedulers.items():
                    for rname, make in readers.items():
                        t = time.perf_counter()
                        total = float(run(make()))
                        times.setdefault((sname, rname), []).append(time.perf_counter() - t)
                        assert abs(total - expected) <= 1e-6 * abs(expected), (sname, rname, total, expected)
        h5file.close()
    for sname in schedulers:
        base = statistics.median(times[(sname, "from_array(h5py)")])
        print(f"\n{sname}:")
        for rname in readers:
            m = statistics.median(times[(sname, rname)])
            print(f"  {rname:<26} {m * 1e3:9.1f} ms  x{base / m:5.2f} vs from_array(h5py)")


if __name__ == "__main__":
    main()
