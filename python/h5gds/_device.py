"""Device arrays for ``h5gds.read`` / ``h5gds.write``: the facts about the dataset that decide
whether its bytes may go straight between the file and device memory (gathered with h5py's own
calls), handed with the array to the extension, which decides with the same Rust code array-io
uses (``h5gds_route``) and moves the bytes with the GIL released and h5py's lock held."""

import numpy as np
from h5py import h5d, h5t
from h5py._objects import phil

from . import _native


def _allocated_chunks(dsid):
    offsets = []
    if hasattr(dsid, "chunk_iter"):
        dsid.chunk_iter(lambda info: offsets.append(list(info.chunk_offset)))
    else:
        offsets = [list(dsid.get_chunk_info(i).chunk_offset) for i in range(dsid.get_num_chunks())]
    return offsets


def storage_facts(dsid):
    """How the dataset is stored, in the terms of ``h5gds_route::route::Storage``."""
    facts = {"kind": "", "allocated": False, "chunk": [], "filtered": False, "chunks": [], "cached": False,
             "filters": []}
    dcpl = dsid.get_create_plist()
    layout = dcpl.get_layout()
    if layout == h5d.CONTIGUOUS:
        if dcpl.get_external_count() > 0:
            facts["kind"] = "external"
        else:
            facts["kind"] = "contiguous"
            facts["allocated"] = dsid.get_offset() is not None
    elif layout == h5d.COMPACT:
        facts["kind"] = "compact"
    elif layout == h5d.CHUNKED:
        chunk = dcpl.get_chunk()
        facts["kind"] = "chunked"
        facts["chunk"] = list(chunk)
        facts["filtered"] = dcpl.get_nfilters() > 0
        # The pipeline's filter ids, for the decision to decode on the GPU (route::gpu_decode).
        facts["filters"] = [dcpl.get_filter(i)[0] for i in range(dcpl.get_nfilters())]
        # HDF5 copies a chunk through its chunk cache whenever the chunk fits the cache.
        chunk_bytes = int(np.prod(chunk, dtype=np.int64)) * dsid.get_type().get_size()
        cache_bytes = dsid.get_access_plist().get_chunk_cache()[1]
        facts["cached"] = chunk_bytes <= cache_bytes
        if not facts["filtered"] and not facts["cached"]:
            facts["chunks"] = _allocated_chunks(dsid)
    else:  # h5d.VIRTUAL
        facts["kind"] = "virtual"
    return facts


def transfer(write, dset, view, slab, role, name):
    """Moves ``dset[slab]`` into (read) or out of (write) the device array ``view``; returns the
    route taken ("gds" or "staged: <reason>")."""
    with phil:
        dsid = dset.id
        mem_type = h5t.py_create(view.dtype)
        file_type = dsid.get_type()
        conversion = None
        if not file_type.equal(mem_type):
            conversion = (f"the stored type of dataset {name} differs from {view.dtype} in HDF5's terms "
                          "(byte order, padding or string padding), so HDF5 converts in the buffer itself")
        facts = storage_facts(dsid)
        return _native.device_io(
            write, dsid.id, mem_type.id, list(slab.start), list(slab.step), list(slab.count), list(slab.shape),
            view.address, view.nbytes, role, name, view.device[1], view.stream, facts, conversion,
            view.dtype.base == np.bool_,
        )
