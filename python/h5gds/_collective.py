"""Collective ``to_file`` / ``from_file`` / ``from_file_batched`` over an mpi4py communicator: the
``comm=`` argument of the functions in ``_files``. The same design as array-io's ``collective``
module (docs/mpi.md): one ordinary HDF5 file with one contiguous dataset; rank 0 writes all
HDF5 metadata (creating the file under a temporary name, the dataset allocated early); every rank
writes its own tile's bytes at their file offsets through the driver's I/O engine (HDF5's public
driver API, ``H5FDopen``/``H5FDwrite``, in h5py's HDF5: no HDF5 metadata); rank 0 renames the
file into place once every rank has succeeded, or removes it. Every step ends in an agreement (an
allgather of every rank's outcome), so every rank raises the same error naming each failed rank
and its cause, and no rank waits in a collective another rank skipped.

Decompositions: ``None`` (the default) splits the leading axis in rank order — on reads rank r of
p gets rows ``[r*n//p, (r+1)*n//p)``, on writes the tiles (which must agree on every other
dimension) are stacked; ``"grid"`` or ``(rows, cols)``: a 2-D block grid over the first two axes,
rank r at grid position ``(r // cols, r % cols)``.
"""

import math
import os

import h5py
from h5py._objects import phil

from . import _arrays, _native, _nvidia


class CollectiveError(RuntimeError):
    """A collective call failed on ranks whose exceptions differ in class. ``failures`` maps each
    failed rank to its exception's text."""

    def __init__(self, message, failures):
        super().__init__(message)
        self.failures = failures


def _agree(comm, op, error, payload=None):
    """Every rank's payload when no rank failed, else raises on every rank the same error: the
    failed ranks' exception class when they all share it (ValueError for a directory, ...), else
    CollectiveError; its message names each failed rank and its cause."""
    outcomes = comm.allgather((None, payload) if error is None else (error, None))
    failures = {r: e for r, (e, _) in enumerate(outcomes) if e is not None}
    if not failures:
        return [p for _, p in outcomes]
    ranks = comm.Get_size()
    texts = {r: f"{type(e).__name__}: {e}" for r, e in failures.items()}
    distinct = set(str(e) for e in failures.values())
    if len(failures) == ranks and ranks > 1 and len(distinct) == 1:
        message = f"{op} failed on every rank ({ranks}): {next(iter(distinct))}"
    else:
        which = ", ".join(str(r) for r in failures)
        causes = "; ".join(f"rank {r}: {e}" for r, e in failures.items())
        message = f"{op} failed on rank{'s' if len(failures) > 1 else ''} {which} of {ranks}: {causes}"
    classes = {type(e) for e in failures.values()}
    cls = classes.pop() if len(classes) == 1 else None
    mine = failures.get(comm.Get_rank())
    if cls is not None and cls is not CollectiveError:
        try:
            err = cls(message)
        except Exception:  # an exception class that wants other arguments
            err = None
        if err is not None:
            err.failures = texts
            raise err from mine
    raise CollectiveError(message, texts) from mine


def _attempt(fn, *args):
    """``(fn(*args), None)``, or ``(None, the exception)``: every rank reaches the agreement."""
    try:
        return fn(*args), None
    except Exception as err:  # noqa: BLE001 - every failure is agreed on, then raised
        return None, err


# --- decompositions ----------------------------------------------------------------------------


def _grid(decomposition, ranks):
    """The ``decomposition=`` argument as the native calls take it: None (blocks of the leading
    axis) or ``(rows, cols)``. The decomposition itself is the engine's (``_native.tiles_*``, as
    array-io's), which checks the grid's size."""
    if decomposition is None:
        return None
    if isinstance(decomposition, str) and decomposition == "grid":
        return _native.tiles_grid(ranks)
    if isinstance(decomposition, tuple) and len(decomposition) == 2 and \
            all(isinstance(x, int) and x > 0 for x in decomposition):
        return decomposition
    raise ValueError(f"decomposition={decomposition!r}: accepted are None (blocks of the leading "
                     "axis), 'grid' (a near-square 2-D grid) or (rows, cols)")


def tile_of(shape, rank, ranks, decomposition=None):
    """The selection (a tuple of slices) of a dataset of ``shape`` that ``rank`` of ``ranks``
    reads under ``decomposition``."""
    # A scalar dataset's error comes before the argument's (the engine checks the shape first).
    grid = _grid(decomposition, ranks) if len(shape) else None
    start, count = _native.tiles_read_box(tuple(shape), rank, ranks, grid)
    return tuple(slice(s, s + c) for s, c in zip(start, count))


# --- the collective calls -----------------------------------------------------------------------


def local_device(comm):
    """This rank's CUDA device: ``(node-local rank) % (device count)``, the node-local rank from
    ``MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)``, so a node's ranks spread over its GPUs without
    a per-rank ``CUDA_VISIBLE_DEVICES`` (as array-io's ``collective::local_device``). Collective;
    where CUDA does not work on some rank, every rank raises, naming those ranks. Returns the
    ordinal (``cupy.cuda.Device(h5gds.local_device(comm)).use()``,
    ``torch.cuda.set_device(...)``)."""
    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        local = node.Get_rank()
    finally:
        node.Free()
    count, error = _attempt(_native.device_count)
    _agree(comm, "choosing each rank's device", error)
    return local % count


def to_file(array, path, dataset, comm, decomposition, files):
    """See ``h5gds.to_file``; ``files`` is the ``_files`` module (its checks and conventions)."""
    rank, ranks = comm.Get_rank(), comm.Get_size()
    grid = _grid(decomposition, ranks)

    def describe():
        name = files.dataset_name(dataset)
        target = files._file_path(path) if rank == 0 else os.fsdecode(path)
        source, shape, dtype = files._logical(array)
        files._check_storable(dtype)
        use_gds = files._driver() == "gds"
        described = _native.collective_description(os.path.abspath(target), name, dtype.str, grid,
                                                    tuple(shape))
        return (name, target, source, dtype, use_gds), described

    local, error = _attempt(describe)
    described = _agree(comm, "describing the tiles", error, None if local is None else local[1])
    name, target, source, dtype, use_gds = local[0]
    shape, starts = _native.collective_plan(described, grid)

    def create():
        real = os.path.realpath(target)
        os.makedirs(os.path.dirname(real), exist_ok=True)
        tmp = _native.collective_temporary_path(real)
        try:
            with h5py.File(tmp, "w", driver="gds" if use_gds else None) as f:
                # Contiguous, allocated now (so it has an offset), never filled.
                offset = files._new_dataset(f, name, shape, dtype).id.get_offset()
            if offset is None and math.prod(shape):
                raise OSError(f"{target!r}: HDF5 gave the early-allocated dataset no offset")
        except BaseException:
            if os.path.lexists(tmp):
                os.unlink(tmp)
            raise
        return tmp, offset

    created, error = _attempt(create) if rank == 0 else ((None, None), None)
    tmp, offset = _agree(comm, "creating the file", error, created)[0]

    def write():
        """This rank's tile into ``tmp``, by the extension (``H5FDopen``/``H5FDwrite`` in h5py's
        HDF5; a device tile checked with CUDA, then to ``gds`` or staged under sec2)."""
        view = _arrays.view(source, "array")
        if offset is None or not view.nbytes:
            return
        if not view.c_contiguous:
            raise ValueError("the tile is not C-contiguous in memory and could not be made so")
        end = offset + math.prod(shape) * dtype.itemsize
        with phil:
            fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
            if use_gds:
                if _nvidia.pending and _nvidia.compat_mode_off({}):
                    _nvidia.prepare()  # the driver opens cuFile at this open
                _native.set_fapl(fapl.id, _native.config_string({}))
            else:
                fapl.set_fapl_sec2()
            try:
                _native.collective_write_tile((os.fsencode(tmp), fapl.id), (offset, end),
                                              (starts[rank], view.shape, shape), view, use_gds)
            except (OSError, ValueError) as err:
                raise type(err)(f"{target!r}: {err}") from None

    _, write_error = _attempt(write)
    try:
        _agree(comm, "writing the tiles", write_error)
        written = None
    except Exception as err:  # noqa: BLE001 - raised after rank 0 has cleaned up
        written = err

    _, finish_error = _attempt(_native.collective_finish, tmp, os.path.realpath(target),
                               written is None) if rank == 0 else (None, None)
    try:
        _agree(comm, "finishing the file", finish_error)
    finally:
        if written is not None:
            raise written


def from_file(path, dataset, like, comm, decomposition, files):
    """See ``h5gds.from_file``."""
    rank, ranks = comm.Get_rank(), comm.Get_size()

    def read():
        result = files.result_type(like)
        with files._dataset(path, dataset, result.chunk_cache) as dset:
            return result.read(dset, tile_of(dset.shape, rank, ranks, decomposition))

    tile, error = _attempt(read)
    _agree(comm, "reading the tiles", error)
    return tile


def from_file_batched(path, dataset, chunk_size, like, comm, files):
    """See ``h5gds.from_file_batched``: this rank's share of the chunks (contiguous blocks of the
    row-major chunk grid by the r*n//p rule); the open is collective, the iteration is not."""
    rank, ranks = comm.Get_rank(), comm.Get_size()
    batches, error = _attempt(files.Batches, path, dataset, chunk_size, like)
    try:
        _agree(comm, "opening for batched reads", error)
    except BaseException:
        if batches is not None:
            batches.close()
        raise
    batches.restrict(*_native.tiles_share(batches.total, ranks, rank))
    return batches
