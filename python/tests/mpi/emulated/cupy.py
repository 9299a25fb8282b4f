"""A stand-in for the CuPy h5gds meets, over the test arrays of device_arrays.py, where libcuda is
h5gds's CPU emulator and real CuPy cannot run: the few calls h5gds makes for ``like="cupy"``
(``cupy.ascontiguousarray`` for strided tiles; mpi/device_program.py), and enough of a CuPy array
for xarray to hold one (test_xarray_backend.py, ``device=``): the duck-array protocols and
``get()``. Like CuPy, it refuses implicit conversion to NumPy (``__array__`` raises TypeError), so
code that would fail on real CuPy fails here too. The emulator has no kernels: arithmetic,
indexing and NumPy functions run on a host copy whose result is copied back to the device.
Test-only, never shipped, and on sys.path only in the tests on the emulator (real CuPy is used on
a GPU machine)."""

import types

import numpy as np

from device_arrays import DeviceArray, cuda as _cuda

__version__ = "13.0.0"  # xarray asks for one (DuckArrayModule)


class _Runtime:
    current = 0

    @staticmethod
    def getDevice():
        return _Runtime.current

    @staticmethod
    def getDeviceCount():
        return _cuda().device_count


class Device:
    """``cupy.cuda.Device``: ``use()`` makes it current, ``with`` for a block."""

    def __init__(self, device=None):
        self.id = _Runtime.current if device is None else int(device)

    def use(self):
        _Runtime.current = self.id

    def synchronize(self):
        _cuda().run(self.id, "cuCtxSynchronize")

    def __enter__(self):
        self._previous = _Runtime.current
        _Runtime.current = self.id
        return self

    def __exit__(self, *exc):
        _Runtime.current = self._previous


cuda = types.SimpleNamespace(runtime=_Runtime, Device=Device)


def _host(value):
    """``value`` with every emulated array in it copied to the host (lists and tuples walked)."""
    if isinstance(value, ndarray):
        return value.get()
    if isinstance(value, (list, tuple)):
        return type(value)(_host(v) for v in value)
    return value


def _device(value, ordinal):
    """Results of a host computation as emulated arrays on device ``ordinal`` (NumPy scalars as
    0-d arrays, as CuPy's reductions return them)."""
    if isinstance(value, (np.ndarray, np.generic)):
        return ndarray.from_host(np.asarray(value), ordinal)
    if isinstance(value, tuple):
        return tuple(_device(v, ordinal) for v in value)
    return value


def _ordinal(values):
    for value in values:
        if isinstance(value, ndarray):
            return value.ordinal
        if isinstance(value, (list, tuple)):
            found = _ordinal(value)
            if found is not None:
                return found
    return None


class ndarray(DeviceArray, np.lib.mixins.NDArrayOperatorsMixin):
    """An emulated device array of this module (so h5gds and xarray take it for a CuPy array)."""

    @property
    def device(self):
        return Device(self.ordinal)

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __array__(self, dtype=None, copy=None):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to construct "
                        "a NumPy array explicitly.")

    def __bool__(self):
        return bool(self.get())

    def __int__(self):
        return int(self.get())

    def __float__(self):
        return float(self.get())

    def get(self):
        """A NumPy copy (CuPy's device-to-host copy)."""
        return self.to_host()

    def astype(self, dtype, copy=True, **kwargs):
        return ndarray.from_host(self.get().astype(dtype, **kwargs), self.ordinal)

    def copy(self):
        return ndarray.from_host(self.get(), self.ordinal)

    def __getitem__(self, key):
        parts = key if isinstance(key, tuple) else (key,)
        if all(part is Ellipsis or (isinstance(part, slice) and part == slice(None)) for part in parts):
            return self  # CuPy's view of all of it: the same memory, no copy
        return _device(np.asarray(self.get()[_host(key)]), self.ordinal)

    def __setitem__(self, key, value):
        host = self.get()
        host[_host(key)] = _host(value)
        self.copy_from_host(host)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        outs = kwargs.pop("out", None)
        host_outs = tuple(_host(o) for o in outs) if outs else None
        if host_outs is not None:
            kwargs["out"] = host_outs
        result = getattr(ufunc, method)(*_host(inputs), **kwargs)
        if outs:
            for device_out, host_out in zip(outs, host_outs):
                if isinstance(device_out, ndarray):
                    device_out.copy_from_host(host_out)
            return outs[0] if len(outs) == 1 else outs
        return _device(result, self.ordinal)

    def __array_function__(self, func, types, args, kwargs):
        return _device(func(*_host(args), **_host(kwargs)), _ordinal(args) or self.ordinal)

    def __getattr__(self, name):
        # The rest of NumPy's array methods (reshape, sum, ...), computed on a host copy.
        if name.startswith("_") or not callable(getattr(np.ndarray, name, None)):
            raise AttributeError(name)

        def method(*args, **kwargs):
            return _device(getattr(self.get(), name)(*_host(args), **_host(kwargs)), self.ordinal)

        return method


def empty(shape, dtype=float):
    return ndarray(shape, dtype, _Runtime.current)


def full(shape, fill_value, dtype=None):
    return ndarray.from_host(np.full(shape, fill_value, dtype=dtype), _Runtime.current)


def asarray(host, dtype=None):
    if isinstance(host, ndarray):
        return host if dtype is None else host.astype(dtype)
    return ndarray.from_host(np.asarray(host, dtype=dtype), _Runtime.current)


def asnumpy(array):
    return array.get() if isinstance(array, ndarray) else np.asarray(array)


def ascontiguousarray(array):
    """A C-ordered copy of a strided view, on the view's device (through the host here: the
    emulator has no kernels)."""
    raw = DeviceArray.to_host(array).reshape(-1).view(np.uint8)  # the allocation's bytes
    logical = np.lib.stride_tricks.as_strided(raw.view(array.dtype), array.shape, array.strides)
    return ndarray.from_host(logical, array.ordinal)


def __getattr__(name):
    # NumPy's functions (concatenate, where, ...: what dask and xarray call on CuPy), on host copies.
    func = getattr(np, name, None)
    if name.startswith("_") or not callable(func) or isinstance(func, type):
        raise AttributeError(f"module 'cupy' (h5gds's emulated stand-in) has no attribute {name!r}")

    def on_host(*args, **kwargs):
        return _device(func(*_host(args), **_host(kwargs)), _ordinal(args) or _Runtime.current)

    return on_host
