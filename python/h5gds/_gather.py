"""Gathers for ``h5gds.read``: rows along the first axis named by a 1-D integer array, read in one
call. The extension sorts the indices, drops repeats and coalesces neighbouring rows into runs
(``_native.GatherPlan``, without the GIL); a read-only file's dataset with a layout (``_layout``)
reads the runs on the pool's threads with no HDF5 call (whole rows of a contiguous dataset straight
into the caller's order, repeats included, with nothing to scatter; compressed chunks read and decoded
once per call for all the runs they hold); otherwise it reads the distinct rows with one H5Dread of the union
of the runs under h5py's lock (``_native.dataset_gather``; compressed chunks h5gds decodes read raw
and decoded once each on the pool, ``_native.host_decode_gather``), straight into the output when the
indices are strictly increasing, and otherwise into a buffer of distinct rows that it then copies
into the caller's order, repeats included, outside HDF5's lock (``GatherPlan.scatter``). A device
``out`` gets the rows gathered in pinned host memory (``_native.PinnedHost``), copied up in one piece."""

import math
import threading

import numpy as np
from h5py import h5d, h5t
from h5py._objects import phil

from . import _arrays, _layout, _native


#: Runs of rows per H5Dread of a chunked dataset: HDF5's mapping of one selection onto the chunks
#: it touches grows faster than their number (4096 random rows of a chunked dataset: 0.33 s in one
#: read, 0.17 s in reads of 64 to 256 runs).
CHUNKED_RUNS_PER_READ = 128

#: The largest gather into a device array staged through pinned memory (256 MiB); larger ones go
#: through an ordinary NumPy buffer, so as not to pin (and keep pinned in the pool) more than that.
PINNED_GATHER_MAX = 256 << 20

#: The largest buffer of distinct rows a thread keeps between gathers (64 MiB).
SCRATCH_KEPT = 64 << 20

_kept = threading.local()


def _scratch(nbytes):
    """A buffer of ``nbytes`` for the distinct rows of an unordered gather: the calling thread's
    kept buffer when it is large enough (a fresh one is page-faulted in on every gather, which cost
    as much as the scatter itself), else a new one, kept when at most ``SCRATCH_KEPT`` bytes."""
    kept = getattr(_kept, "buffer", None)
    if kept is not None and kept.nbytes >= nbytes:
        return kept[:nbytes]
    fresh = np.empty(nbytes, dtype=np.uint8)
    if nbytes <= SCRATCH_KEPT:
        _kept.buffer = fresh
    return fresh


def _decoded_by_h5gds(dset, dcpl, mem_type, plan, rest, address, nbytes, name):
    """Reads the distinct rows of a chunked, filtered dataset HDF5 would not convert with its chunks
    decoded by h5gds, each chunk the rows touch once (``_native.host_decode_gather``); False when
    HDF5 is to read them (nothing was read). Under ``phil``."""
    nfilters = dcpl.get_nfilters()
    if nfilters == 0 or not dset.id.get_type().equal(mem_type):
        return False
    filters = [(code, list(values)) for code, _flags, values, _name in
               (dcpl.get_filter(i) for i in range(nfilters))]
    return _native.host_decode_gather(dset.id.id, mem_type.id, plan, *rest, address, nbytes,
                                      list(dcpl.get_chunk()), filters, str(name)) is None


def gather(dset, view, sel, name):
    """Reads the rows ``sel.rows`` (a ``_selection.Gather``) of ``dset`` into the host array
    ``view`` (checked by the caller: dtype, shape, contiguity, writable)."""
    if view.device is not None:
        # Into host memory first (the rows come from all over the file), then one copy up: through
        # pinned memory from the pool (kept for the next batch) up to PINNED_GATHER_MAX.
        if view.nbytes <= PINNED_GATHER_MAX:
            staging = _native.PinnedHost(view.nbytes)
            host = _arrays.ArrayView(address=staging.address, nbytes=view.nbytes, shape=view.shape, dtype=view.dtype,
                                     device=None, readonly=False, c_contiguous=True, owner=staging)
        else:
            staging = np.empty(view.shape, dtype=view.dtype)
            host = _arrays.view(staging, "out")
        gather(dset, host, sel, name)
        # Bools: bytes other than 0 and 1 refused, as the driver's device path does.
        _native.device_copy(view.address, view.nbytes, view.device[1], view.stream, host.address, True,
                            str(name) if view.dtype.base == np.bool_ else None)
        return
    rows = sel.rows
    plan = _native.GatherPlan(rows.ctypes.data, len(rows), dset.shape[0])
    row_bytes = math.prod(sel.rest.count) * view.dtype.itemsize
    rest = (list(sel.rest.start), list(sel.rest.step), list(sel.rest.count))
    found = _layout.layout(dset, view.dtype)
    # Whole rows of a read-only file's contiguous dataset: read straight into the caller's order.
    if found is not None and not plan.in_order and found.gather_in_place(plan, *rest, view.address, view.nbytes):
        return
    if plan.in_order:
        target, address, nbytes = None, view.address, view.nbytes
    else:
        target = _scratch(plan.distinct * row_bytes)
        address, nbytes = target.ctypes.data, target.nbytes
    # A read-only file's dataset: its runs read with no HDF5 call, on the pool's threads (_layout).
    if found is not None and found.gather(plan, *rest, address, nbytes):
        if target is not None:
            plan.scatter(address, nbytes, view.address, view.nbytes, row_bytes)
        return
    with phil:
        mem_type = h5t.py_create(view.dtype)
        dcpl = dset.id.get_create_plist()
        chunked = dcpl.get_layout() == h5d.CHUNKED
        if not (chunked and _decoded_by_h5gds(dset, dcpl, mem_type, plan, rest, address, nbytes, name)):
            _native.dataset_gather(dset.id.id, mem_type.id, plan, *rest, address, nbytes,
                                   CHUNKED_RUNS_PER_READ if chunked else 0)
    if target is not None:
        plan.scatter(address, nbytes, view.address, view.nbytes, row_bytes)
