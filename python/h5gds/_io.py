"""``h5gds.read`` and ``h5gds.write``: the arguments checked and the array converted here, then one
native call (``_native.read_dataset`` / ``write_dataset``, python/src/io_call.rs) that asks HDF5 how
the dataset is stored and moves the bytes with the GIL released: read-only files' datasets with no
HDF5 call where their layout serves the read (``_layout``), compressed chunks decoded by h5gds on
all cores, device arrays straight through the ``gds`` driver, staged through pinned host memory or
decoded on the GPU, else one H5Dread/H5Dwrite under h5py's lock. A dataset whose layout is
remembered is read by ``_native.read_remembered`` before any of this (rows read by threads)."""

import h5py
import numpy as np
from h5py._objects import phil

from . import _arrays, _layout, _native, _nvidia
from ._selection import Gather, _is_index_array, hyperslab, selection


class _Name:
    """A dataset's name, asked of HDF5 (``H5Iget_name``) only when a message or a log line needs it:
    on every read it would be a good part of a small read's cost."""

    __slots__ = ("_dset", "_text")

    def __init__(self, dset):
        self._dset, self._text = dset, None

    def __str__(self):
        if self._text is None:
            with phil:
                self._text = self._dset.name
        return self._text

    def __format__(self, spec):
        return format(str(self), spec)


def _dataset(dset):
    if not isinstance(dset, h5py.Dataset):
        raise TypeError(f"dset must be an h5py.Dataset, not {type(dset).__module__}.{type(dset).__name__}")
    dsid = dset.id
    with phil:
        if not dsid.valid:
            raise ValueError("dset is closed (its file was closed)")
        # (the id's dtype: Dataset.dtype takes phil again)
        shape, dtype = dset.shape, dsid.dtype
    name = _Name(dset)
    if shape is None:
        raise ValueError(f"dataset {name} is empty (null dataspace): it has no elements to move")
    if dtype.hasobject:
        raise TypeError(
            f"dataset {name} has dtype {dtype} (variable-length data, Python objects in NumPy): "
            "h5gds.read and h5gds.write move fixed-size elements only; use dset[...]"
        )
    return shape, dtype, name


def _check(view, role, dtype, shape, name, writable):
    """Checks ``view`` against the selection (``shape``) of a dataset of ``dtype`` and returns the
    view to move: for a dataset of arrays (an HDF5 array type, a NumPy subarray dtype such as
    ``('<f4', (2, 3))``), the array holds their elements, as h5py returns them (the selection's
    shape, then the element's), and the view returned has the dataset's dtype and the selection's
    shape, as HDF5 counts them."""
    base, inner = dtype.subdtype or (dtype, ())
    each = f" (arrays of {inner} {base}, which {role} must hold as {base})" if inner else ""
    if view.dtype != base:
        raise TypeError(
            f"{role} has dtype {view.dtype}, dataset {name} has dtype {dtype}{each}: they must be the "
            "same (h5gds converts no types)"
        )
    expected = tuple(shape) + tuple(inner)
    if view.shape != expected:
        raise ValueError(
            f"{role} has shape {view.shape}, the selection of dataset {name} has shape {tuple(shape)}"
            + (f" of elements {inner}, {expected} in all" if inner else "")
        )
    if not view.c_contiguous:
        raise ValueError(f"{role} must be C-contiguous (np.ascontiguousarray, cupy.ascontiguousarray or "
                         "torch's .contiguous() make a copy that is)")
    if writable and view.readonly:
        raise ValueError(f"{role} is read-only")
    return view._replace(dtype=dtype, shape=tuple(shape)) if inner else view


def read(dset, out=None, sel=None):
    """Reads ``dset[sel]`` (all of it when ``sel`` is None) into ``out`` and returns ``out``; a new
    NumPy array when ``out`` is None. ``sel``: ints, slices (steps of 1 or more) and ``...``; or a
    gather: a 1-D integer array (NumPy or list) of rows along the first axis, in any order, repeats
    and negative indices as in NumPy, alone or as the first item of a tuple whose other items select
    the other axes (host arrays only). ``out`` (NumPy, ``__cuda_array_interface__`` or DLPack) must
    have the dataset's dtype and the selection's shape, be C-contiguous and writable. The data is
    complete when this returns.
    """
    # A read-only file's dataset already read once, all of it or rows of it into NumPy (or into a
    # device array where the layout serves it): checked and read in one native call (threads
    # reading rows then hold the GIL only briefly); other selections, and datasets with no layout
    # remembered (no HDF5 call, no lock), go straight to the general path's one call. The tests
    # are written out here, the common kinds first: each bytecode counts in a 2 us row read.
    try:
        entry = dset._h5gds_layout
    except AttributeError:
        entry = _layout.serving(dset)
    if entry is not None:
        item = sel[0] if type(sel) is tuple and len(sel) == 1 else sel
        kind = type(item)
        # (Else anything but a tuple, ... or a gather's rows may select along the first axis.)
        if kind is int or kind is slice or sel is None or not (
                kind is tuple or item is Ellipsis or _is_index_array(item)):
            if out is not None and _nvidia.pending and type(out) is not np.ndarray:
                _nvidia.prepare()  # out may be device memory, which read_remembered reads into
            known = _native.read_remembered(entry, out, sel)
            if known is not None:
                return known
    shape, dtype, name = _dataset(dset)
    slab = selection(sel, shape)
    if out is None:
        out = np.empty(slab.shape, dtype=dtype)
    view = _check(_arrays.view(out, "out"), "out", dtype, slab.shape, name, writable=True)
    if isinstance(slab, Gather):
        _native.gather_dataset(dset, view, slab)
    else:
        _native.read_dataset(dset, view, slab)
    return out


def read_without_hdf5(dset, sel, shape):
    """``dset[sel]`` (ints and slices; ``shape`` the dataset's, known to the caller: asking HDF5
    would be a call) into a new NumPy array, where ``_layout`` resolved the dataset's storage
    already and serves the selection with no HDF5 call; None, having read nothing, otherwise."""
    entry = _layout.serving(dset)
    if entry is None:
        return None
    known = _native.read_remembered(entry, None, sel)
    if known is not None or dset.id.id == 0:
        return known
    slab = hyperslab(sel, shape)
    out = np.empty(slab.shape, dtype=entry[2])
    if entry[1].read(list(slab.start), list(slab.step), list(slab.count), out.ctypes.data, out.nbytes):
        return out
    return None


def write(dset, array, sel=None):
    """Writes ``array`` into ``dset[sel]`` (all of it when ``sel`` is None). ``array`` must have the
    dataset's dtype and the selection's shape and be C-contiguous. A device array's pending work
    (its ``__cuda_array_interface__`` stream, or its DLPack producer's) finishes first."""
    shape, dtype, name = _dataset(dset)
    slab = hyperslab(sel, shape)
    view = _check(_arrays.view(array, "array"), "array", dtype, slab.shape, name, writable=False)
    _native.write_dataset(dset, view, slab)
