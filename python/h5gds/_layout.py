"""Reads that need no HDF5 call (issue 26): a dataset's storage resolved once, under h5py's lock, into a
``_native.Layout`` kept for the life of its ``DatasetID``, which then serves ``h5gds.read`` into NumPy
from any number of threads at once with neither h5py's lock nor the GIL held. Only where the storage
cannot change: the file open read-only and not for SWMR reading, through sec2 or gds with no user block,
the stored type the memory type; contiguous datasets with allocated storage, and chunked ones unfiltered
or with a pipeline h5gds decodes (``_native.Layout.resolve`` decides, with HDF5's calls). Everything
else goes through HDF5, as does a read touching chunks never written."""

import weakref

from h5py import Dataset, h5t
from h5py._objects import phil

from . import _native

#: id(DatasetID) -> (weak reference to it, its Layout or None when it has none, its dtype); an entry
#: with a Layout is what ``h5gds.read``'s short way (``_native.read_remembered``) is given
_layouts = {}


def resolved(dsid):
    """``(Layout or None, dtype)`` as ``layout`` resolved them for the DatasetID ``dsid``, or None
    where it has not yet (no HDF5 call)."""
    entry = _layouts.get(id(dsid))
    if entry is not None and entry[0]() is dsid:
        return entry[1], entry[2]
    return None


def serving(dset):
    """``dset``'s entry of ``_layouts`` where its Layout serves reads, else None; once resolved, kept
    on the Dataset as ``_h5gds_layout`` for ``h5gds.read`` (an id() and a lookup: a third of it)."""
    try:
        entry = _layouts.get(id(dset._id))
    except AttributeError:  # not an h5py object: the general path says what is wrong
        return None
    if entry is None:
        return None  # not resolved yet (its first read resolves it)
    found = entry if entry[1] is not None else None
    if isinstance(dset, Dataset):
        dset._h5gds_layout = found
    return found


def layout(dset, dtype):
    """The ``_native.Layout`` of ``dset`` for reads into ``dtype``, or None (HDF5 reads it)."""
    dsid = dset.id
    known = resolved(dsid)
    if known is not None:
        return known[0]
    found = None
    with phil:
        if dsid.valid and not dtype.hasobject:
            mem_type = h5t.py_create(dtype)  # (held: the id is open while it lives)
            found = _native.Layout.resolve(dsid.id, mem_type.id, dtype.itemsize)
    remember(dsid, found, dtype)
    return found


def remember(dsid, found, dtype):
    """Keeps ``found`` (a Layout, or None) as the layout of the DatasetID ``dsid`` for reads into
    ``dtype``, for as long as ``dsid`` lives (also called by ``_native.read_dataset`` at a
    dataset's first read)."""
    key = id(dsid)

    def forget(ref, key=key):
        current = _layouts.get(key)
        if current is not None and current[0] is ref:
            del _layouts[key]

    _layouts[key] = (weakref.ref(dsid, forget), found, dtype)
