"""One scenario of the face-parity test (test_face_parity.py) run through the h5gds package, as
array-io's example face_probe runs it through array-io: ``face_probe.py OP PATH DATASET [ARG]``,
float64 elements, printing one JSON line on stdout: the bytes read (hex) or ``{"ok": false, "kind":
<the exception's class>, "message": ...}``. The engine's verdict lines go to stderr
(``H5GDS_LOG=debug``), where the test reads them. Run as a program: the log level is fixed at the
first log line of a process. The operations are face_probe.rs's, through h5gds's own calls:
``read`` (``from_file``), ``slab`` (the first block of ``from_file_batched``, ARG its shape ``4,6``),
``gather`` (``h5gds.read`` of the rows ARG of the file opened as ``from_file`` opens it),
``device-read``, ``device-slab`` (the same into device memory), ``write`` (``to_file`` of
``arange(ARG)``), ``device-write`` (the same from device memory), ``device-write-deflate`` (gzip,
chunks of ARG/4 elements).

Under ``mpirun`` (each rank prints its line, with its ``rank``), as face_probe.rs built with
array-io's feature ``mpi``: ``collective-write`` (``to_file(..., comm=)`` of rank r's tile, r+1
rows of ARG columns of the row-major count, stacked in rank order), ``collective-write-element``
(the last rank's tile of float32), ``collective-write-shape`` (the last rank's tile one column
wider)."""

import json
import sys

import numpy as np

import h5gds
from h5gds import _files


def _numbers(arg):
    return [int(x) for x in arg.split(",")]


def _device_read(path, dataset, sel):
    from device_arrays import DeviceArray

    with _files._dataset(path, dataset, chunk_cache=False) as dset:
        shape = np.broadcast_to(0, dset.shape)[sel].shape
        out = DeviceArray(shape, "<f8", fill=0)
        h5gds.read(dset, out=out, sel=sel)
        return out.to_host()


def _device(values):
    from device_arrays import DeviceArray

    return DeviceArray.from_host(values)


def collective(op, path, dataset, arg):
    """A collective write over MPI's world."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    cols, first = int(arg), rank * (rank + 1) // 2
    wide = cols + (op == "collective-write-shape" and size > 1 and rank == size - 1)
    tile = (np.arange(rank + 1)[:, None] + first) * cols + np.arange(wide)
    dtype = "<f4" if op == "collective-write-element" and size > 1 and rank == size - 1 else "<f8"
    if op not in ("collective-write", "collective-write-element", "collective-write-shape"):
        raise SystemExit(f"face_probe.py: unknown operation {op!r}")
    h5gds.to_file(tile.astype(dtype), path, dataset, comm=comm)


def run(op, path, dataset, arg):
    if op == "read":
        return h5gds.from_file(path, dataset)
    if op == "slab":
        with h5gds.from_file_batched(path, dataset, tuple(_numbers(arg))) as blocks:
            return next(blocks)[0]
    if op == "gather":
        with _files._dataset(path, dataset) as dset:
            return h5gds.read(dset, sel=np.array(_numbers(arg)))
    if op == "device-read":
        return _device_read(path, dataset, ())
    if op == "device-slab":
        return _device_read(path, dataset, tuple(slice(0, n) for n in _numbers(arg)))
    values = np.arange(int(arg or 0), dtype="<f8")
    if op == "write":
        h5gds.to_file(values, path, dataset)
    elif op == "device-write":
        h5gds.to_file(_device(values), path, dataset)
    elif op == "device-write-deflate":
        h5gds.to_file(_device(values), path, dataset, chunks=(len(values) // 4,), compression="gzip")
    else:
        raise SystemExit(f"face_probe.py: unknown operation {op!r}")
    return None


def main():
    op, path, dataset, *rest = sys.argv[1:]
    arg, line = (rest[0] if rest else ""), {}
    if op.startswith("collective-"):
        from mpi4py import MPI

        line["rank"] = MPI.COMM_WORLD.Get_rank()
    try:
        got = collective(op, path, dataset, arg) if "rank" in line else run(op, path, dataset, arg)
    except Exception as exc:  # the scenario's outcome, reported to the test
        line.update(ok=False, kind=type(exc).__name__, message=str(exc))
    else:
        line["ok"] = True
        if "rank" not in line and got is not None:
            got = np.asarray(got, dtype="<f8")
            line.update(shape=list(got.shape), bytes=got.tobytes().hex())
    # One write of the whole line: under mpirun (and PYTHONUNBUFFERED) print's text and newline
    # are two writes, and the ranks' lines ran together.
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
