"""``batches``: shuffled batches of rows for training loops, each read on a background thread while
the caller uses the one before. A thin loop over ``h5gds.read``'s gathers (``_io``, then
``_native.gather_dataset``): from a read-only file they need no HDF5 lock, so the read of the next
batch overlaps the caller's work instead of waiting for it. Importing h5gds imports no GPU library; ``like=`` imports it when asked."""

import concurrent.futures
import numbers
# Imported now, not at the first ``batches``: concurrent.futures imports its thread pools on first
# use, which registers an exit hook, and that raises once the interpreter has begun to exit (a
# daemon thread starting its first epoch then printed "can't register atexit after shutdown").
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from . import _files, _io


def batches(dset, batch_size, *, shuffle=True, seed=None, drop_last=False, like="numpy"):
    """Yields the rows of ``dset`` (along its first axis) in batches of ``batch_size``, every row once:
    in a random order drawn with ``np.random.default_rng(seed)`` (``shuffle=True``), else in order; the
    last batch shorter unless ``drop_last``. While the caller uses a batch, the next is read on a
    background thread (``h5gds.read`` with the batch's row indices). Each batch is a new array:
    NumPy, or with ``like='cupy'``/``'torch'`` (or a module or array, as for ``from_file``) a device
    array of that library, the rows copied up from host memory. Call it again for the next epoch (with
    another ``seed`` for another order). ValueError or TypeError for a bad argument, before anything is
    read; a failed read raises when its batch is due."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral):
        raise TypeError(f"batch_size must be an int, not {type(batch_size).__name__}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be 1 or more, not {batch_size}")
    shape, dtype, name = _io._dataset(dset)
    if not shape:
        raise ValueError(f"dataset {name} is a scalar: it has no rows to batch")
    result = _files.result_type(like)
    # A device library's element type for a native dtype: batches are then gathered straight into
    # its arrays (through pinned memory from a read-only file); others are copied up from NumPy.
    element = None
    if isinstance(result, _files._Device) and dtype.isnative:
        element = result._element(dtype, str(name))
    rows = shape[0]
    order = np.random.default_rng(seed).permutation(rows) if shuffle else np.arange(rows)
    # Batch ends: every full batch (the last ends at `rows`), then a short one unless drop_last.
    ends = range(batch_size, rows + (1 if drop_last else batch_size), batch_size)
    starts = [end - batch_size for end in ends]
    return _batches(dset, order, starts, batch_size, result, element, shape[1:])


def _batches(dset, order, starts, batch_size, result, element, row_shape):
    def read(start):
        picks = order[start:start + batch_size]
        if element is not None:
            return _io.read(dset, out=result._empty((len(picks),) + tuple(row_shape), element), sel=picks)
        host = _io.read(dset, sel=picks)
        return host if isinstance(result, _files._NumPy) else result._from_host(host)

    with ThreadPoolExecutor(1, thread_name_prefix="h5gds-batches") as pool:
        pending = _ahead(pool, read, starts[0]) if starts else None
        for k in range(len(starts)):
            batch = pending.result()
            pending = _ahead(pool, read, starts[k + 1]) if k + 1 < len(starts) else None
            yield batch


def _ahead(pool, read, start):
    """``read(start)`` on the pool's thread; on this one where the pool takes no more work: at
    interpreter exit, concurrent.futures stops its pools while a daemon thread may still iterate."""
    try:
        return pool.submit(read, start)
    except RuntimeError:
        done = concurrent.futures.Future()
        try:
            done.set_result(read(start))
        except Exception as error:
            done.set_exception(error)
        return done
