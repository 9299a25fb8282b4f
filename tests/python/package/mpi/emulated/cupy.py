"""A stand-in for the few CuPy calls h5gds makes for ``like="cupy"`` (and ``cupy.ascontiguousarray``
for strided tiles), over the test arrays of device_arrays.py: used by mpi/device_program.py when
libcuda is h5gds's CPU emulator, where real CuPy cannot run. Test-only, never shipped, and on
sys.path only in that program on the emulator (real CuPy is used on a GPU machine)."""

import types

import numpy as np

from device_arrays import DeviceArray


class _Runtime:
    current = 0

    @staticmethod
    def getDevice():
        return _Runtime.current


class Device:
    """``cupy.cuda.Device``: ``use()`` makes it current, ``with`` for a block."""

    def __init__(self, device=None):
        self.id = _Runtime.current if device is None else int(device)

    def use(self):
        _Runtime.current = self.id

    def __enter__(self):
        self._previous = _Runtime.current
        _Runtime.current = self.id
        return self

    def __exit__(self, *exc):
        _Runtime.current = self._previous


cuda = types.SimpleNamespace(runtime=_Runtime, Device=Device)


class ndarray(DeviceArray):
    """An emulated device array of this module (so h5gds takes it for a CuPy array)."""

    @property
    def device(self):
        return Device(self.ordinal)


def empty(shape, dtype=float):
    return ndarray(shape, dtype, _Runtime.current)


def asarray(host):
    return ndarray.from_host(host, _Runtime.current)


def asnumpy(array):
    return array.to_host()


def ascontiguousarray(array):
    """A C-ordered copy of a strided view, on the view's device (through the host here: the
    emulator has no kernels)."""
    raw = DeviceArray.to_host(array).reshape(-1).view(np.uint8)  # the allocation's bytes
    logical = np.lib.stride_tricks.as_strided(raw.view(array.dtype), array.shape, array.strides)
    return ndarray.from_host(logical, array.ordinal)
