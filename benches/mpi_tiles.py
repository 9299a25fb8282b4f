#!/usr/bin/env python3
"""Collective writes and reads of one float32 array split over MPI ranks (issue 23 item 3: with 4
ranks at least as fast as with 1): ``h5gds.to_file(tile, comm=)`` and ``h5gds.from_file(comm=)``,
each rank's tile in host memory or, with ``--device``, in CuPy on its ``h5gds.local_device``.
Aggregate GB/s = array bytes / the time between barriers before and after (the slowest rank), best
of the repetitions; every read is compared with what was written. Run once per rank count::

    mpirun -np 4 python3 benches/mpi_tiles.py --size 1G --reps 3 --device

Over h5gds's emulators (LD_LIBRARY_PATH as scripts/test.sh sets it) the device figures are
labelled EMULATED.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

import h5gds

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from bench_python import device_cupy, record, size_arg  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=size_arg, default=size_arg("1G"), help="array bytes (default 1G)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--device", action="store_true", help="tiles in CuPy arrays")
    parser.add_argument("--dir", default=None, help="where the file goes (default: a temporary directory)")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank, ranks = comm.Get_rank(), comm.Get_size()
    width = 1 << 14
    rows = max(ranks, args.size // (4 * width))
    first, last = rank * rows // ranks, (rank + 1) * rows // ranks
    tile = (np.arange(first * width, last * width, dtype=np.float64) % 9973).astype(np.float32)
    tile = tile.reshape(last - first, width)
    label, like = "host", "numpy"
    if args.device:
        cupy, note = device_cupy()
        if cupy is None:
            sys.exit(f"--device: {note}")
        cupy.cuda.Device(h5gds.local_device(comm)).use()
        tile, label, like = cupy.asarray(tile), f"device{note}", "cupy"
    directory = comm.bcast(tempfile.mkdtemp(dir=args.dir) if rank == 0 else None)
    path = os.path.join(directory, "tiles.h5")
    best = {"write": float("inf"), "read": float("inf")}
    for _ in range(args.reps):
        comm.Barrier()
        start = time.perf_counter()
        h5gds.to_file(tile, path, "x", comm=comm)
        comm.Barrier()
        best["write"] = min(best["write"], time.perf_counter() - start)
        comm.Barrier()
        start = time.perf_counter()
        got = h5gds.from_file(path, "x", like=like, comm=comm)
        comm.Barrier()
        best["read"] = min(best["read"], time.perf_counter() - start)
        same = bool((got == tile).all())
        if not all(comm.allgather(same)):
            sys.exit(f"rank {rank}: the tile read back differs from the tile written")
    nbytes = rows * width * 4
    if rank == 0:
        for what, seconds in best.items():
            record("mpi_tiles", f"collective {what}", seconds, nbytes, label, ranks=ranks, what=what,
                   memory="device" if args.device else "host")
            print(f"{ranks} rank(s), {nbytes} bytes, {label} tiles: collective {what} "
                  f"{seconds * 1e3:8.1f} ms  {nbytes / seconds / 1e9:6.2f} GB/s (best of {args.reps})")
        os.remove(path)
        os.rmdir(directory)


if __name__ == "__main__":
    main()
