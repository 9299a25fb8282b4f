"""The MPI test program for device tiles, run by test_mpi_device.py as `mpirun -np N python
device_program.py <dir>` with h5gds's CPU emulator as libcuda and libcufile (two devices). Each
rank takes its device from h5gds.local_device, writes its tiles from device memory with the
collective to_file (__cuda_array_interface__ and DLPack tiles, a strided tile, a tile whose
producer still has a copy pending on its stream) and reads its tiles back into device memory with
from_file and from_file_batched (like="cupy"; on the emulator the stand-in mpi/emulated/cupy.py),
once through the gds driver and once with H5GDS_USE_VFD_GDS=0, checking the emulator's counters
around every call. Rank 0 writes manifest.txt (file, dataset, dtype, shape) for the h5py check in
the pytest process. Each rank prints `rank R: device D`, then `rank R: ALL OK`."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # device_arrays

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import h5gds  # noqa: E402
from device_arrays import Counters, DeviceArray, DlpackArray, cuda  # noqa: E402
from jobs import Manifest, expect, pattern  # noqa: E402

CUDA = cuda()
if CUDA.emulated:
    sys.path.insert(0, os.path.join(HERE, "emulated"))
import cupy  # noqa: E402  (the stand-in on the emulator)

comm = MPI.COMM_WORLD
rank, ranks = comm.Get_rank(), comm.Get_size()
directory = sys.argv[1]
manifest = Manifest(comm, directory)
p = ranks
# Small pieces, so that staged tiles take several, and byte runs cross pieces.
os.environ["H5GDS_STAGING_BUFFER_SIZE"] = "4K"

device = h5gds.local_device(comm)
assert device == rank % CUDA.device_count, (rank, device)  # one node: node-local rank = rank
cupy.cuda.Device(device).use()
print(f"rank {rank}: device {device}", flush=True)


def host_of(array):
    return cupy.asnumpy(array) if hasattr(cupy, "asnumpy") else array.to_host()


def round_trip(mode, name, dtype, shape, make, decomposition=None):
    """Writes this rank's tile (made on this rank's device by `make`) collectively, reads it back
    into device memory, byte-compares."""
    path = os.path.join(directory, f"{mode}_{name}.h5")
    mine = pattern(dtype, shape)[h5gds._collective.tile_of(shape, rank, ranks, decomposition)]
    tile = make(mine)
    with Counters() as written:
        h5gds.to_file(tile, path, "x", comm=comm, decomposition=decomposition)
    if mine.size:
        written.check(mode, "write", f"rank {rank}: {mode} {name}", library_copies=make is strided)
    with Counters() as read:
        back = h5gds.from_file(path, "x", like="cupy", comm=comm, decomposition=decomposition)
    assert back.device.id == device, (rank, back.device.id)
    got = host_of(back)
    assert got.dtype == mine.dtype.newbyteorder("=") and got.shape == mine.shape, (name, got.dtype, got.shape)
    assert got.tobytes() == mine.astype(got.dtype).tobytes(), f"rank {rank}: {mode} {name} read back"
    if mine.size and mine.dtype.kind != "b":  # bools are checked on the host (0 or 1)
        read.check(mode, "read", f"rank {rank}: {mode} {name}")
    manifest.add(f"{mode}_{name}.h5", "/x", dtype, shape)


def cai(host):
    return cupy.asarray(host)


def dlpack(host):
    return DlpackArray(DeviceArray.from_host(host, device))


def strided(host):
    """The tile as a transposed view of device memory holding its transpose (C order)."""
    t = cupy.asarray(np.ascontiguousarray(host.T))
    if not CUDA.emulated:
        return t.T
    # The stand-in has no views: the same strides claimed over the same memory.
    t.shape, t.strides = host.shape, (host.dtype.itemsize, host.shape[0] * host.dtype.itemsize)
    return t


def pending(host):
    """A tile whose bytes are still on their way: a copy queued on the array's stream (the
    emulator runs it when the stream is synchronised), named in __cuda_array_interface__."""
    t = DeviceArray(host.shape, host.dtype, device)
    t.copy_from_host_async(host)
    return t


for mode in ("gds", "staged"):
    if mode == "gds":
        os.environ.pop("H5GDS_USE_VFD_GDS", None)
    else:
        os.environ["H5GDS_USE_VFD_GDS"] = "0"
    round_trip(mode, "d1_f8", "<f8", (1000 * p + 7,), cai)
    round_trip(mode, "grid_f4", "<f4", (2 * p + 1, 1001), dlpack, "grid")
    round_trip(mode, "d3_u1", "u1", (p + 2, 30, 70), cai)
    round_trip(mode, "d2_bool", "?", (2 * p + 1, 33), dlpack)
    round_trip(mode, "d2_i2_strided", "<i2", (3 * p + 1, 900), strided)
    round_trip(mode, "d2_f8_pending", "<f8", (2 * p + 1, 700), pending)
    round_trip(mode, "short_i4", "<i4", (p - 1, 2000), cai)  # rank p-1 holds no rows

    # like= a device array: results on its device (the other device, where there are two).
    path = os.path.join(directory, f"{mode}_d1_f8.h5")
    other = (device + 1) % CUDA.device_count
    with cupy.cuda.Device(other):
        like = cupy.empty((1,), "<f8")
    back = h5gds.from_file(path, "x", like=like, comm=comm)
    mine = pattern("<f8", (1000 * p + 7,))[h5gds._collective.tile_of((1000 * p + 7,), rank, ranks)]
    assert back.device.id == other and host_of(back).tobytes() == mine.tobytes(), rank

    # Batched into device memory: every chunk read by exactly one rank, each checked.
    shape = (2 * p + 1, 1001)
    whole = pattern("<f4", shape)
    seen = []
    with Counters() as read:
        for chunk, at in h5gds.from_file_batched(os.path.join(directory, f"{mode}_grid_f4.h5"), "x",
                                                 (2, 600), like="cupy", comm=comm):
            sel = tuple(slice(a, a + n) for a, n in zip(at, chunk.shape))
            assert chunk.device.id == device and host_of(chunk).tobytes() == whole[sel].tobytes(), (rank, at)
            seen.append(at)
    if seen:
        read.check(mode, "read", f"rank {rank}: {mode} batched")
    flat = [at for share in comm.allgather(seen) for at in share]
    assert len(flat) == len(set(flat)) == (-(-shape[0] // 2)) * 2, flat

    # A strided tile its library cannot copy (DLPack only, no ascontiguousarray): every rank
    # raises naming that rank; no file is left.
    bad = DeviceArray((4, 3), "<f4", device, fill=1.0)
    if rank == p - 1:
        bad.strides = (4, 16)
    path = os.path.join(directory, f"{mode}_refused.h5")
    expect(comm, "a strided DLPack tile", lambda: h5gds.to_file(DlpackArray(bad), path, "x", comm=comm), ValueError,
           f"describing the tiles failed on rank {p - 1} of {p}",
           "is not C-contiguous, and its library offers no ascontiguousarray")
    assert not os.path.exists(path)

    # A rank whose tile claims more than its allocation fails in the write step: every rank
    # raises naming it, the old file stays as it was, no temporary file is left.
    path = os.path.join(directory, f"{mode}_kept.h5")
    if rank == 0:
        h5gds.to_file(np.full(3, 42.0), path, "old")
    comm.Barrier()
    bad = cupy.asarray(np.zeros((4, 3), "<f4"))
    if rank == p - 1:
        bad.shape = (8, 3)  # twice the bytes of its allocation
    expect(comm, "a tile beyond its allocation", lambda: h5gds.to_file(bad, path, "x", comm=comm), ValueError,
           f"writing the tiles failed on rank {p - 1} of {p}", "beyond its allocation")
    assert (h5gds.from_file(path, "old") == 42.0).all(), "the old file is untouched"
    comm.Barrier()
    assert not [n for n in os.listdir(directory) if n.endswith(".partial")]

if CUDA.emulated:
    counters = CUDA.counters()
    assert counters["bounds_violations"] == 0 and counters["double_frees"] == 0, (rank, counters)
manifest.finish()
