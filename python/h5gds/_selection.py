"""NumPy-style basic selections (ints, slices with positive steps, Ellipsis) as HDF5 hyperslabs."""

import operator
from typing import NamedTuple, Tuple

import numpy as np


class Hyperslab(NamedTuple):
    start: Tuple[int, ...]
    step: Tuple[int, ...]
    count: Tuple[int, ...]
    #: The shape of the selected data (axes indexed by an int dropped, as NumPy does).
    shape: Tuple[int, ...]


def _item_kind(item):
    if item is Ellipsis or isinstance(item, slice):
        return item
    refused = TypeError(
        f"selection item {item!r} ({type(item).__name__}): h5gds.read and h5gds.write take "
        "ints, slices and ... (NumPy basic indexing)"
    )
    if isinstance(item, (bool, np.bool_)):
        raise refused
    try:
        return operator.index(item)
    except TypeError:
        raise refused from None


def hyperslab(sel, shape):
    """The hyperslab ``sel`` selects in a dataset of ``shape``; slices clip as in NumPy, ints out
    of range raise IndexError, steps below 1 ValueError."""
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
            f"too many indices: the dataset has {len(shape)} dimension(s), the selection "
            f"indexes {explicit}"
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
                    f"slice step {stride} on axis {axis}: steps must be 1 or more (HDF5 "
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
                    f"index {item} is out of range for axis {axis} with size {size}"
                )
            start.append(index)
            step.append(1)
            count.append(1)
    return Hyperslab(tuple(start), tuple(step), tuple(count), tuple(out_shape))
