"""The Python MPI test program, run by test_mpi.py as `mpirun -np N python collective_program.py
<dir>`: every rank writes and reads its tiles through h5gds's collective calls (comm=), checks
what it reads, provokes the collective failures and checks every rank's error. Rank 0 writes
manifest.txt (file, dataset, dtype, shape) for the check by h5py in the pytest process. Each rank
prints `rank R: ALL OK` at the end; a failed check raises, which ends the job with an error."""

import ctypes
import os
import resource
import signal
import sys

import numpy as np
from mpi4py import MPI

import h5gds
from jobs import Manifest, expect, pattern  # pattern: the global arrays, as test_mpi.py computes them

comm = MPI.COMM_WORLD
rank, ranks = comm.Get_rank(), comm.Get_size()
directory = sys.argv[1]
manifest = Manifest(comm, directory)

DTYPES = ["i1", "i2", "<i4", "<i8", "u1", "<u2", "<u4", "<u8", "<f2", "<f4", "<f8", "?", ">f8"]


def round_trip(name, dtype, shape, decomposition=None):
    path = os.path.join(directory, f"{name}.h5")
    whole = pattern(dtype, shape)
    mine = whole[h5gds._collective.tile_of(shape, rank, ranks, decomposition)]
    h5gds.to_file(mine, path, "g/x", comm=comm, decomposition=decomposition)
    back = h5gds.from_file(path, "g/x", comm=comm, decomposition=decomposition)
    assert back.dtype == mine.dtype and back.shape == mine.shape, (name, back.dtype, back.shape)
    assert back.tobytes() == mine.tobytes(), f"rank {rank}: {name} read back"
    manifest.add(f"{name}.h5", "/g/x", dtype, shape)


p = ranks
for k, dtype in enumerate(DTYPES):
    round_trip(f"d1_{k}", dtype, (2 * p + 1,))
    round_trip(f"d2_{k}", dtype, (2 * p + 1, 3))
    round_trip(f"d3_{k}", dtype, (p + 2, 3, 2))
round_trip("short", "<f4", (p - 1, 2))
round_trip("grid2", "<f4", (2 * p + 1, 2 * p + 3), "grid")
round_trip("grid3", "<i2", (p + 3, 5, 2), "grid")

# Batched: every chunk read by exactly one rank, shares contiguous.
shape = (2 * p + 3, 5)
path = os.path.join(directory, "batched.h5")
whole = pattern("<i4", shape)
h5gds.to_file(whole[h5gds._collective.tile_of(shape, rank, ranks)], path, "b", comm=comm)
seen = []
for chunk, at in h5gds.from_file_batched(path, "b", (2, 2), comm=comm):
    sel = tuple(slice(a, a + n) for a, n in zip(at, chunk.shape))
    assert (chunk == whole[sel]).all(), (rank, at)
    seen.append(at)
everyone = comm.allgather(seen)
flat = [at for share in everyone for at in share]
assert len(flat) == len(set(flat)) == (-(-shape[0] // 2)) * 3, everyone
assert flat == sorted(flat), "shares are contiguous blocks in rank order"
manifest.add("batched.h5", "/b", "<i4", shape)

last = p - 1
if p > 1:
    bad = np.zeros((2, 4 if rank == last else 3), "<f4")
    expect(comm, "a wrong shape", lambda: h5gds.to_file(bad, os.path.join(directory, "ws.h5"), "x",
                                                        comm=comm),
           ValueError, f"rank {last}'s tile has shape [2, 4]")
    typed = np.zeros(2, "<i4" if rank == last else "<f4")
    expect(comm, "a wrong type", lambda: h5gds.to_file(typed, os.path.join(directory, "wt.h5"), "x",
                                                       comm=comm),
           ValueError, f"rank {last} has a tile of i32, rank 0 f32")
    assert not os.path.exists(os.path.join(directory, "ws.h5"))
expect(comm, "a directory", lambda: h5gds.to_file(np.zeros(2), directory, "x", comm=comm), ValueError,
       f"describing the tiles failed on rank 0 of {p}", "is a directory")

# One rank fails mid-write (its file size limit makes its write fail with EFBIG, as a full disk
# with ENOSPC): every rank raises naming it; the old file stays as it was.
path = os.path.join(directory, "mid_write.h5")
if rank == 0:
    h5gds.to_file(np.full(3, 42.0), path, "old")
comm.Barrier()
tile = np.full((2 << 20) // 4, rank, "<f4")
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
if rank == last:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, ((2 * last + 1) << 20, hard))
try:
    # Alone, rank 0 hits the limit already when HDF5 extends the new file to hold the allocated
    # dataset, which h5py reports as a RuntimeError of the file's close.
    step, cls = ("creating the file", RuntimeError) if p == 1 else ("writing the tiles", OSError)
    expect(comm, "one rank failing mid-write", lambda: h5gds.to_file(tile, path, "x", comm=comm), cls,
           f"{step} failed on rank {last} of {p}", "File too large")
finally:
    if rank == last:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
assert (h5gds.from_file(path, "old") == 42.0).all(), "the old file is untouched"
comm.Barrier()
assert not [n for n in os.listdir(directory) if n.endswith(".partial")]
manifest.add("mid_write.h5", "/old", "<f8", (3,))

# Reads: a missing dataset fails on every rank.
expect(comm, "a missing dataset", lambda: h5gds.from_file(os.path.join(directory, "batched.h5"), "nope",
                                                           comm=comm),
       ValueError, "reading the tiles failed on " + ("every rank" if p > 1 else "rank 0 of 1"),
       "no dataset '/nope'")

# Each rank's device where this process has no CUDA driver (test_mpi.py's run; with a driver, the
# device tests check h5gds.local_device): every rank fails, naming the cause.
try:
    ctypes.CDLL("libcuda.so.1")
except OSError:
    expect(comm, "no CUDA driver", lambda: h5gds.local_device(comm), OSError,
           "choosing each rank's device failed on " + ("every rank" if p > 1 else "rank 0 of 1"),
           "no CUDA driver library (libcuda.so.1) found")

manifest.finish()
