"""NumPy-style basic selections (ints, slices with positive steps, Ellipsis) as HDF5 hyperslabs, and
gathers: a 1-D integer array of rows along the first axis, with a basic selection of the others."""

import operator
from typing import NamedTuple, Tuple

import numpy as np



class Hyperslab(NamedTuple):
    start: Tuple[int, ...]
    step: Tuple[int, ...]
    count: Tuple[int, ...]
    #: The shape of the selected data (axes indexed by an int dropped, as NumPy does).
    shape: Tuple[int, ...]


class Gather(NamedTuple):
    #: The rows along the first axis, in the caller's order (repeats kept), as non-negative
    #: indices: a C-contiguous uint64 array.
    rows: np.ndarray
    #: The basic selection of the other axes (over the dataset's shape without its first axis).
    rest: Hyperslab
    #: The shape of the gathered data: one row per index, then the rest's shape.
    shape: Tuple[int, ...]


def _is_index_array(item):
    """Whether ``item`` is a candidate index array: a list, or a NumPy array of at least one
    dimension (a 0-d array is a scalar, as in NumPy)."""
    return isinstance(item, list) or (isinstance(item, np.ndarray) and item.ndim > 0)


def _rows(item, size):
    """The 1-D integer index array ``item`` along axis 0 of ``size`` rows, negative indices counted
    from the end, as uint64; TypeError for any other kind of array, IndexError naming the first
    index out of range."""
    if isinstance(item, list) and not item:
        return np.empty(0, dtype=np.uint64)
    what = "list" if isinstance(item, list) else "array"
    try:
        array = np.asarray(item)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"index {what} along axis 0 cannot be read as an integer array ({exc})") from None
    if array.dtype == np.bool_:
        raise TypeError(
            "boolean index arrays are not supported along axis 0 (h5gds gathers rows by integer "
            "index): pass np.flatnonzero(mask) instead"
        )
    if array.dtype.kind not in "iu":
        raise TypeError(
            f"index {what} along axis 0 has elements of dtype {array.dtype}: gathers take integer "
            "indices"
        )
    if array.ndim != 1:
        raise TypeError(
            f"index array along axis 0 has {array.ndim} dimensions, shape {array.shape}: gathers "
            "take a 1-D array of row indices"
        )
    if array.dtype.kind == "u":
        array = array.astype(np.uint64, copy=False)
        bad = np.flatnonzero(array >= size)
    else:
        array = array.astype(np.int64, copy=False)
        bad = np.flatnonzero((array < -size) | (array >= size))
    if bad.size:
        raise IndexError(
            f"index {array[bad[0]]} is out of range for axis 0 with size {size}"
        )
    if array.dtype.kind == "i":
        array = np.where(array < 0, array + size, array)
    return np.ascontiguousarray(array, dtype=np.uint64)


def selection(sel, shape):
    """What ``sel`` selects in a dataset of ``shape``: a ``Hyperslab`` (basic indexing, as
    ``hyperslab``), or a ``Gather`` where ``sel`` is a 1-D integer array (a list or NumPy array)
    or a tuple whose first item is one."""
    first = sel[0] if isinstance(sel, tuple) and sel else sel
    if not _is_index_array(first):
        return hyperslab(sel, shape)
    if not shape:
        raise IndexError("too many indices: the dataset has 0 dimension(s), the selection indexes 1")
    rest = hyperslab(sel[1:] if isinstance(sel, tuple) else None, shape[1:], leading=1)
    rows = _rows(first, shape[0])
    return Gather(rows, rest, (len(rows),) + rest.shape)


def _item_kind(item):
    if item is Ellipsis or isinstance(item, slice):
        return item
    refused = TypeError(
        f"selection item {item!r} ({type(item).__name__}): h5gds.read and h5gds.write take "
        "ints, slices and ... (NumPy basic indexing; h5gds.read also takes a 1-D integer array "
        "of rows as the first item)"
    )
    if isinstance(item, (bool, np.bool_)):
        raise refused
    try:
        return operator.index(item)
    except TypeError:
        raise refused from None


def hyperslab(sel, shape, leading=0):
    """The hyperslab ``sel`` selects in a dataset of ``shape``; slices clip as in NumPy, ints out
    of range raise IndexError, steps below 1 ValueError. ``leading``: axes before ``shape`` that
    another item already selected (a gather's rows), counted in the messages' axis numbers."""
    if sel is None:
        items = ()
    elif isinstance(sel, tuple):
        items = sel
    else:
        items = (sel,)
    items = [_item_kind(item) for item in items]
    ellipses = sum(1 for item in items if item is Ellipsis)
    if ellipses > 1:
        raise IndexError("a selection can only have a single ellipsis ('...')")
    explicit = len(items) - ellipses
    if explicit > len(shape):
        raise IndexError(
            f"too many indices: the dataset has {len(shape) + leading} dimension(s), the "
            f"selection indexes {explicit + leading}"
        )
    if ellipses:
        at = items.index(Ellipsis)
        items[at:at + 1] = [slice(None)] * (len(shape) - explicit)
    else:
        items += [slice(None)] * (len(shape) - explicit)
    start, step, count, out_shape = [], [], [], []
    for axis, (item, size) in enumerate(zip(items, shape)):
        if isinstance(item, slice):
            first, stop, stride = item.indices(size)
            if stride < 1:
                raise ValueError(
                    f"slice step {stride} on axis {axis + leading}: steps must be 1 or more (HDF5 "
                    "selects forward only)"
                )
            n = len(range(first, stop, stride))
            start.append(first if n else 0)
            step.append(stride)
            count.append(n)
            out_shape.append(n)
        else:
            index = item + size if item < 0 else item
            if not 0 <= index < size:
                raise IndexError(
                    f"index {item} is out of range for axis {axis + leading} with size {size}"
                )
            start.append(index)
            step.append(1)
            count.append(1)
    return Hyperslab(tuple(start), tuple(step), tuple(count), tuple(out_shape))
