"""Reads that need no HDF5 call (issue 26): a dataset's storage resolved once, under h5py's lock, into a
``_native.Layout`` kept for the life of its ``DatasetID``, which then serves ``h5gds.read`` into NumPy
from any number of threads at once with neither h5py's lock nor the GIL held. Only where the storage
cannot change: the file open read-only and not for SWMR reading, through sec2 or gds with no user block,
the stored type the memory type; contiguous datasets with allocated storage, and chunked ones unfiltered
or with a pipeline h5gds decodes. Everything else goes through HDF5, as does a read touching chunks
never written."""

import weakref

from h5py import h5d, h5t
from h5py._objects import phil

from . import _native

#: id(DatasetID) -> (weak reference to it, its Layout or None when it has none, its dtype); also
#: read by ``_native.read_known_layout``, ``h5gds.read``'s short way
_layouts = {}


def resolved(dsid):
    """``(Layout or None, dtype)`` as ``layout`` resolved them for the DatasetID ``dsid``, or None
    where it has not yet (no HDF5 call)."""
    entry = _layouts.get(id(dsid))
    if entry is not None and entry[0]() is dsid:
        return entry[1], entry[2]
    return None


def layout(dset, dtype):
    """The ``_native.Layout`` of ``dset`` for reads into ``dtype``, or None (HDF5 reads it)."""
    dsid = dset.id
    known = resolved(dsid)
    if known is not None:
        return known[0]
    key = id(dsid)
    with phil:
        found = _resolve(dset, dsid, dtype)

    def forget(ref, key=key):
        current = _layouts.get(key)
        if current is not None and current[0] is ref:
            del _layouts[key]

    _layouts[key] = (weakref.ref(dsid, forget), found, dtype)
    return found


def _resolve(dset, dsid, dtype):
    if not dsid.valid or dset.file.mode != "r" or dset.file.swmr_mode:
        return None
    shape = dset.shape
    if not shape or dtype.hasobject or not dsid.get_type().equal(h5t.py_create(dtype)):
        return None
    dcpl = dsid.get_create_plist()
    kind = dcpl.get_layout()
    if kind == h5d.CONTIGUOUS:
        address = dsid.get_offset()
        if dcpl.get_external_count() > 0 or address is None:
            return None
        return _native.Layout.contiguous(dsid.id, dset.name, list(shape), dtype.itemsize, address)
    if kind == h5d.CHUNKED:
        filters = [(code, list(values)) for code, _flags, values, _name in
                   (dcpl.get_filter(i) for i in range(dcpl.get_nfilters()))]
        return _native.Layout.chunked(dsid.id, dset.name, list(shape), dtype.itemsize,
                                      list(dcpl.get_chunk()), filters)
    return None
