"""What an I/O call needs from an array: its address, size, shape, dtype and where it lives.

Host memory: NumPy arrays, and objects whose DLPack device is the CPU (or CUDA pinned host
memory). Device memory: objects with ``__cuda_array_interface__`` (CuPy, Numba, PyTorch; v3 with
its ``stream``) or with DLPack on a CUDA device (PyTorch, JAX, CuPy; ``__dlpack__(stream=1)``: the
producer orders its pending work before the legacy default stream, which h5gds then waits for).

``view`` is where Python first sees device memory about to move: it has cuFile and nvCOMP looked for
(``_nvidia.prepare``, once per process) before returning a device array's view.
"""

import math
from typing import Any, NamedTuple, Optional, Tuple

import numpy as np

from . import _native, _nvidia

# DLPack device types (dlpack.h).
_DLPACK_HOST = (1, 3)  # CPU, CUDA pinned host memory
_DLPACK_CUDA = (2, 13)  # CUDA, CUDA managed memory
_DLPACK_NAMES = {4: "OpenCL", 7: "Vulkan", 8: "Metal", 9: "VPI", 10: "ROCm", 11: "ROCm host",
                 12: "ext_dev", 14: "oneAPI", 15: "WebGPU", 16: "Hexagon", 17: "MAIA"}
# DLPack type codes (kDLInt, kDLUInt, kDLFloat, kDLComplex, kDLBool) as NumPy kinds.
_DLPACK_KINDS = {0: "i", 1: "u", 2: "f", 5: "c", 6: "b"}
#: The stream passed to ``__dlpack__``: CUDA's legacy default stream (array API standard).
DLPACK_STREAM = 1


class ArrayView(NamedTuple):
    address: int
    nbytes: int
    shape: Tuple[int, ...]
    dtype: np.dtype
    #: None for host memory, else ("cuda", ordinal or None when the array does not say).
    device: Optional[Tuple[str, Optional[int]]]
    readonly: bool
    c_contiguous: bool
    #: The object that keeps the memory alive while the view is used.
    owner: Any
    #: For device memory: the CUDA stream whose work must finish before bytes move (0: none).
    stream: int = 0


def _type_name(array):
    return f"{type(array).__module__}.{type(array).__name__}"


def _c_contiguous(shape, strides, itemsize):
    """Whether byte `strides` are those of a C-contiguous array of `shape` (axes of length 1 and
    empty arrays have any stride)."""
    if strides is None or 0 in shape:
        return True
    expected = itemsize
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _cuda_interface(array, name):
    """``array.__cuda_array_interface__``, or None when it has none, or when asking raises and
    DLPack remains (a PyTorch CPU tensor raises TypeError here)."""
    try:
        return array.__cuda_array_interface__
    except AttributeError:
        return None
    except Exception as exc:
        if hasattr(array, "__dlpack__"):
            return None
        raise TypeError(f"{name} ({_type_name(array)}): __cuda_array_interface__ raised {exc!r}") from None


def _cuda_view(array, interface, name):
    try:
        interface = dict(interface)
        shape = tuple(int(d) for d in interface["shape"])
        typestr = interface["typestr"]
        address, readonly = interface["data"]
        dtype = np.dtype(typestr)
        descr = interface.get("descr")
        if dtype.kind == "V" and descr and descr != [("", typestr)]:
            dtype = np.dtype([tuple(field) for field in descr])
    except (TypeError, KeyError, ValueError, AttributeError) as exc:
        raise TypeError(f"{name} ({_type_name(array)}) has an invalid __cuda_array_interface__: {exc!r}") from None
    if interface.get("mask") is not None:
        raise ValueError(f"{name} has a mask in its __cuda_array_interface__: masked arrays are not supported")
    # v3 names the stream to wait for (None: nothing to wait for). Older versions name none, and
    # producers such as PyTorch (version 2) may have work queued: then the whole device is waited for.
    stream = interface.get("stream") if interface.get("version", 0) >= 3 else 1
    if stream == 0:
        raise ValueError(f"{name}'s __cuda_array_interface__ has stream 0, which the interface disallows "
                         "(1 is the legacy default stream, 2 the per-thread default stream)")
    strides = interface.get("strides")
    return ArrayView(
        address=int(address or 0),
        nbytes=math.prod(shape) * dtype.itemsize,
        shape=shape,
        dtype=dtype,
        device=("cuda", None),
        readonly=bool(readonly),
        c_contiguous=_c_contiguous(shape, None if strides is None else tuple(strides), dtype.itemsize),
        owner=array,
        stream=int(stream or 0),
    )


def _dlpack_dtype(name, code, bits, lanes):
    kind = _DLPACK_KINDS.get(code)
    if kind is None or lanes != 1 or bits % 8 or (kind == "b" and bits != 8):
        raise TypeError(f"{name} has DLPack element type (code {code}, {bits} bits, {lanes} lanes), "
                        "which has no NumPy dtype (bfloat16 and vector types are not supported)")
    return np.dtype("?" if kind == "b" else f"<{kind}{bits // 8}")


def _dlpack_view(array, name, on_cuda):
    """The view of a DLPack array on a CUDA device (``on_cuda``) or in host memory, read from its
    capsule (``np.from_dlpack`` would do for host memory, but NumPy 1 makes every such array
    read-only)."""
    # A CUDA producer orders its work before the legacy default stream, which h5gds then waits for;
    # a host producer takes no stream.
    stream = DLPACK_STREAM if on_cuda else None
    try:
        capsule = array.__dlpack__(stream=stream, max_version=(1, 0))
    except TypeError:  # a producer of DLPack < 1.0, without max_version
        capsule = array.__dlpack__(stream=stream)
    address, shape, strides, (code, bits, lanes), (dev_kind, dev_id), readonly = _native.dlpack_tensor(capsule)
    dtype = _dlpack_dtype(name, code, bits, lanes)
    shape = tuple(shape)
    return ArrayView(
        address=address,
        nbytes=math.prod(shape) * dtype.itemsize,
        shape=shape,
        dtype=dtype,
        device=("cuda", dev_id) if on_cuda else None,
        readonly=readonly,
        c_contiguous=_c_contiguous(shape, None if strides is None else tuple(s * dtype.itemsize for s in strides),
                                   dtype.itemsize),
        # The capsule (its producer frees the tensor when it is dropped) and the array.
        owner=(array, capsule),
        stream=DLPACK_STREAM if on_cuda else 0,
    )


def view(array, name):
    """The ``ArrayView`` of ``array``; TypeError for what is not an array, ValueError for memory on a
    device h5gds cannot reach (not CUDA)."""
    if not isinstance(array, np.ndarray):
        interface = _cuda_interface(array, name)
        if interface is not None:
            _nvidia.prepare()
            return _cuda_view(array, interface, name)
        dlpack_device = getattr(array, "__dlpack_device__", None)
        if dlpack_device is None or not hasattr(array, "__dlpack__"):
            raise TypeError(
                f"{name} must be a NumPy array, an array with __cuda_array_interface__ or one with DLPack, "
                f"not {_type_name(array)}"
            )
        kind, ordinal = dlpack_device()
        if kind not in _DLPACK_CUDA and kind not in _DLPACK_HOST:
            raise ValueError(
                f"{name} is on a {_DLPACK_NAMES.get(kind, f'DLPack type {kind}')} device ({ordinal}): "
                "h5gds moves data between files and CUDA devices or host memory only"
            )
        if kind in _DLPACK_CUDA:
            _nvidia.prepare()
        return _dlpack_view(array, name, kind in _DLPACK_CUDA)
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
