"""What an I/O call needs from an array: its address, size, shape, dtype and where it lives.

Host memory: NumPy arrays, and objects whose DLPack device is the CPU (or CUDA pinned host
memory). Device arrays (``__cuda_array_interface__``, DLPack on a GPU) are recognised here and
refused until a build with the device path adds their adapter.
"""

from typing import Any, NamedTuple, Optional, Tuple

import numpy as np

# DLPack device types (dlpack.h): CPU, CUDA pinned host memory; every other is a device.
_DLPACK_HOST = (1, 3)


class ArrayView(NamedTuple):
    address: int
    nbytes: int
    shape: Tuple[int, ...]
    dtype: np.dtype
    #: None for host memory, else (kind, ordinal) of the device.
    device: Optional[Tuple[str, int]]
    readonly: bool
    c_contiguous: bool
    #: The object that keeps the memory alive while the view is used.
    owner: Any


def _device_refusal(name, array, where):
    return TypeError(
        f"{name} is a device array ({type(array).__module__}.{type(array).__name__}, {where}): "
        "device arrays are not supported yet by this build of h5gds; pass a NumPy array"
    )


def view(array, name):
    """The ``ArrayView`` of ``array``; TypeError for what is not an array or is device memory."""
    if not isinstance(array, np.ndarray):
        if hasattr(array, "__cuda_array_interface__"):
            raise _device_refusal(name, array, "__cuda_array_interface__")
        dlpack_device = getattr(array, "__dlpack_device__", None)
        if dlpack_device is None or not hasattr(array, "__dlpack__"):
            raise TypeError(
                f"{name} must be a NumPy array (or a host array with DLPack), not "
                f"{type(array).__module__}.{type(array).__name__}"
            )
        kind, _ordinal = dlpack_device()
        if kind not in _DLPACK_HOST:
            raise _device_refusal(name, array, f"DLPack device type {kind}")
        array = np.from_dlpack(array)
    interface = array.__array_interface__
    address, readonly = interface["data"]
    return ArrayView(
        address=address,
        nbytes=array.nbytes,
        shape=tuple(array.shape),
        dtype=array.dtype,
        device=None,
        readonly=bool(readonly) or not array.flags.writeable,
        c_contiguous=bool(array.flags.c_contiguous),
        owner=array,
    )
