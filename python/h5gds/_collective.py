"""Collective ``to_file`` / ``from_file`` / ``from_file_batched`` over an mpi4py communicator: the
``comm=`` argument of the functions in ``_files``. The protocol is the engine's, as for array-io's
``collective`` module (docs/mpi.md), run by ``_native.collective_to_file`` over the communicator:
one ordinary HDF5 file with one contiguous dataset; rank 0 writes all HDF5 metadata (here with
h5py: ``_Tile.create``); every rank writes its own tile's bytes at their file offsets through the
driver (``H5FDopen``/``H5FDwrite`` in h5py's HDF5); rank 0 renames the file into place once every
rank has succeeded, or removes it. Every step ends in an agreement (``_native.collective_agree``),
so every rank raises the same error naming each failed rank and its cause (the exception class of
the kind the failed ranks share: ValueError, TypeError, OSError, RuntimeError; else
``CollectiveError``), and no rank waits in a collective another rank skipped.

Decompositions: ``None`` (the default) splits the leading axis in rank order — on reads rank r of
p gets rows ``[r*n//p, (r+1)*n//p)``, on writes the tiles (which must agree on every other
dimension) are stacked; ``"grid"`` or ``(rows, cols)``: a 2-D block grid over the first two axes,
rank r at grid position ``(r // cols, r % cols)``.
"""

import os

import h5py
from h5py._objects import phil

from . import _arrays, _native, _nvidia


class CollectiveError(RuntimeError):
    """A collective call failed on ranks whose failures differ in kind. ``failures`` maps each
    failed rank to its cause."""

    def __init__(self, message, failures):
        super().__init__(message)
        self.failures = failures


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
    _native.collective_agree(comm, "choosing each rank's device", error)
    return local % count


class _Tile:
    """This rank's side of a collective ``to_file``, called by the engine's protocol: its own checks,
    rank 0's file (h5py), and its memory for the driver."""

    def __init__(self, array, path, dataset, files):
        self.array, self.path, self.dataset, self.files = array, path, dataset, files

    def describe(self):
        """The tile's checks; the target, the dataset, the element type (numpy's type string, a
        structured type's text) and its size, and the shape."""
        files = self.files
        name = files.dataset_name(self.dataset)
        self.source, shape, dtype = files._logical(self.array)
        files._check_storable(dtype)
        self.use_gds, self.dtype = files._driver() == "gds", dtype
        element = str(dtype) if dtype.kind == "V" else dtype.str
        return os.fsdecode(os.fspath(self.path)), name, element, dtype.itemsize, tuple(shape)

    def create(self, tmp, dataset, shape):
        """Rank 0: the file ``tmp`` holding the dataset, contiguous, allocated now (so it has an
        offset), never filled; the dataset's offset."""
        with h5py.File(tmp, "w", driver="gds" if self.use_gds else None) as f:
            return self.files._new_dataset(f, dataset, tuple(shape), self.dtype).id.get_offset()

    def access(self):
        """The access list for the tile's bytes (``gds``, which takes device pointers, or sec2, a
        device tile then staged through pinned memory), the tile's memory, and whether ``gds``."""
        view = _arrays.view(self.source, "array")
        if not view.c_contiguous:
            raise ValueError("the tile is not C-contiguous in memory and could not be made so")
        with phil:
            fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
            if self.use_gds:
                if _nvidia.pending and _nvidia.compat_mode_off({}):
                    _nvidia.prepare()  # the driver opens cuFile at this open
                _native.set_fapl(fapl.id, _native.config_string({}))
            else:
                fapl.set_fapl_sec2()
        return fapl, view, self.use_gds


def to_file(array, path, dataset, comm, decomposition, files):
    """See ``h5gds.to_file``; ``files`` is the ``_files`` module (its checks and conventions)."""
    grid = _grid(decomposition, comm.Get_size())
    _native.collective_to_file(comm, _Tile(array, path, dataset, files), grid)


def from_file(path, dataset, like, comm, decomposition, files):
    """See ``h5gds.from_file``."""
    rank, ranks = comm.Get_rank(), comm.Get_size()

    def read():
        result = files.result_type(like)
        with files._dataset(path, dataset, result.chunk_cache) as dset:
            return result.read(dset, tile_of(dset.shape, rank, ranks, decomposition))

    tile, error = _attempt(read)
    _native.collective_agree(comm, "reading the tiles", error)
    return tile


def from_file_batched(path, dataset, chunk_size, like, comm, files):
    """See ``h5gds.from_file_batched``: this rank's share of the chunks (contiguous blocks of the
    row-major chunk grid by the r*n//p rule); the open is collective, the iteration is not."""
    rank, ranks = comm.Get_rank(), comm.Get_size()
    batches, error = _attempt(files.Batches, path, dataset, chunk_size, like)
    try:
        _native.collective_agree(comm, "opening for batched reads", error)
    except BaseException:
        if batches is not None:
            batches.close()
        raise
    batches.restrict(*_native.tiles_share(batches.total, ranks, rank))
    return batches
