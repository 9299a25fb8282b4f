"""Test-only device arrays over whatever libcuda this process loads — h5gds's CPU emulator of CUDA
(emulators/cuda, put on LD_LIBRARY_PATH by scripts/test.sh) or a real driver — exposing
``__cuda_array_interface__`` (v3, with a stream) and DLPack, as CuPy, Numba and PyTorch arrays do.
Never shipped: the package's tests only."""

import ctypes
import ctypes.util
import os

import numpy as np

CUresult = ctypes.c_int


class Cuda:
    """The few CUDA driver calls the test arrays need, each run with the device's primary context
    pushed and popped again (the thread's context is left as found)."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.emulated = hasattr(self.lib, "h5gds_emu_counters")
        self._check("cuInit", self.lib.cuInit(0))
        count = ctypes.c_int()
        self._check("cuDeviceGetCount", self.lib.cuDeviceGetCount(ctypes.byref(count)))
        self.device_count = count.value
        self._contexts = {}
        self._cufile_opened = False

    @staticmethod
    def _check(call, result):
        if result != 0:
            raise RuntimeError(f"{call} failed with CUDA result {result}")

    def _context(self, ordinal):
        if ordinal not in self._contexts:
            device, context = ctypes.c_int(), ctypes.c_void_p()
            self._check("cuDeviceGet", self.lib.cuDeviceGet(ctypes.byref(device), ordinal))
            self._check("cuDevicePrimaryCtxRetain",
                        self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), device))
            self._contexts[ordinal] = context
        return self._contexts[ordinal]

    def run(self, ordinal, name, *args):
        """Calls `name(*args)` with device `ordinal`'s primary context current."""
        self._check("cuCtxPushCurrent", self.lib.cuCtxPushCurrent_v2(self._context(ordinal)))
        try:
            self._check(name, getattr(self.lib, name)(*args))
        finally:
            popped = ctypes.c_void_p()
            self.lib.cuCtxPopCurrent_v2(ctypes.byref(popped))

    def counters(self, open_cufile=True):
        """The emulator's counters: cuFile reads and writes, host<->device copies (emulator only).

        h5gds opens cuFile in the background at a process's first device transfer and stages every
        device transfer until it has opened, so which path moved a transfer's bytes would depend on
        how far that open had got. Tests that count it therefore have cuFile opened first
        (`open_cufile`): `h5gds.info()` opens it on the calling thread, exactly where a transfer
        would, once per process. A test of the background open itself passes False."""
        if open_cufile and self.emulated and not self._cufile_opened:
            import h5gds

            h5gds.info()
            self._cufile_opened = True
        values = (ctypes.c_uint64 * 9)()
        assert self.lib.h5gds_emu_counters(values) == 0
        names = ("device_allocs", "device_bytes", "pinned_allocs", "double_frees", "bounds_violations",
                 "cufile_reads", "cufile_writes", "htod", "dtoh")
        return dict(zip(names, values))


_CUDA = None


def cuda():
    global _CUDA
    if _CUDA is None:
        _CUDA = Cuda()
    return _CUDA


def cuda_or_skip():
    """cuda(), for a module of device tests: without a CUDA driver in this process the module is
    skipped, unless H5GDS_REQUIRE_DEVICE_TESTS=1 (scripts/test.sh's run on the emulator) demands it runs."""
    import pytest

    try:
        return cuda()
    except (OSError, RuntimeError) as exc:
        if os.environ.get("H5GDS_REQUIRE_DEVICE_TESTS") == "1":
            raise
        pytest.skip(f"no CUDA driver in this process ({exc}): scripts/test.sh runs the device tests with the "
                    "emulator on LD_LIBRARY_PATH", allow_module_level=True)


class Counters:
    """The emulator's counters across a block (``with Counters() as moved:``), to tell how bytes moved:
    by cuFile or by host<->device copies. On a real GPU nothing is counted and ``check`` passes."""

    def __enter__(self):
        self.before = cuda().counters() if cuda().emulated else None
        return self

    def __exit__(self, *exc):
        self.after = cuda().counters() if cuda().emulated else None

    def delta(self, key):
        return self.after[key] - self.before[key]

    def check(self, route, op, what="the block", library_copies=False):
        """`op` ("read" or "write") took `route`: "gds", cuFile moved bytes and no host<->device copy
        did; "staged", no cuFile transfer did and CUDA copies did. `library_copies`: the block also
        holds copies the array's own library made (the contiguous copy of a strided tile, through the
        host in the CuPy stand-in), so under gds only cuFile's transfer tells."""
        if not cuda().emulated:
            return
        cufile, copies = ("cufile_reads", "htod") if op == "read" else ("cufile_writes", "dtoh")
        if route == "gds":
            moved = self.delta(cufile) > 0 and (library_copies or self.delta(copies) == 0)
        elif route == "mixed":
            moved = self.delta(cufile) > 0 and self.delta(copies) > 0
        else:
            moved = self.delta(cufile) == 0 and self.delta(copies) > 0
        assert moved, f"{what}: a {route} {op} expected ({self.before} -> {self.after})"


#: How the reason of every skip of a test that needs h5gds's emulators (their switches, fault injection,
#: counters) starts, so that conftest.py can count them in the last line of a run on a real GPU.
NEEDS_EMULATOR = "needs h5gds's emulator"

#: The nvCOMP emulator's file (emulators/nvcomp): tests link it as libnvcomp.so.6 (scripts/test.sh,
#: tests/support/nvcomp_emulator.rs).
NVCOMP_EMULATOR_FILE_NAME = "libh5gds_emu_nvcomp.so"


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _file_of(lib, symbol):
    """The file `symbol` of `lib` was loaded from, links resolved (dladdr), or None."""
    for libdl in (None, "libdl.so.2"):  # dladdr: in libc since glibc 2.34, in libdl before
        try:
            dladdr = ctypes.CDLL(libdl).dladdr
            break
        except (OSError, AttributeError):
            continue
    else:
        return None
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    info = _DlInfo()
    try:
        address = ctypes.cast(getattr(lib, symbol), ctypes.c_void_p)
    except AttributeError:
        return None
    if not dladdr(address, ctypes.byref(info)) or not info.dli_fname:
        return None
    return os.path.realpath(os.fsdecode(info.dli_fname))


_NVCOMP_EMULATED = None


def nvcomp_emulated():
    """Whether libnvcomp.so.6, as this process finds it, is h5gds's nvCOMP emulator. The emulator exports
    nothing nvCOMP lacks, so the file tells: the copy already loaded (h5gds's) or else the one the loader
    finds, resolved through the link to the emulator's file. False without any libnvcomp.so.6."""
    global _NVCOMP_EMULATED
    if _NVCOMP_EMULATED is None:
        try:
            lib = ctypes.CDLL("libnvcomp.so.6", mode=os.RTLD_NOW | os.RTLD_NOLOAD)
        except OSError:
            try:
                lib = ctypes.CDLL("libnvcomp.so.6")
            except OSError:
                lib = None
        path = _file_of(lib, "nvcompGetProperties") if lib is not None else None
        _NVCOMP_EMULATED = path is not None and os.path.basename(path) == NVCOMP_EMULATOR_FILE_NAME
    return _NVCOMP_EMULATED


def require_emulator(what, nvcomp=False):
    """Skips the calling test, with a reason starting with NEEDS_EMULATOR, unless this process's libcuda
    is h5gds's CUDA/cuFile emulator (it exports h5gds_emu_counters) and, with `nvcomp`, its libnvcomp is
    the nvCOMP emulator: `what` (switches, counters, fault injection) exists on the emulators only. On a
    real GPU such tests are not run, as the Rust device tests are compiled as ignored there."""
    import pytest

    if not cuda().emulated:
        pytest.skip(f"{NEEDS_EMULATOR} ({what}); libcuda here is a real CUDA driver")
    if nvcomp and not nvcomp_emulated():
        if os.environ.get("H5GDS_REQUIRE_DEVICE_TESTS") == "1":
            # scripts/test.sh: the CUDA emulator without the nvCOMP emulator beside it is a broken setup.
            pytest.fail(f"libcuda is the emulator but libnvcomp.so.6 is not {NVCOMP_EMULATOR_FILE_NAME}")
        pytest.skip(f"{NEEDS_EMULATOR} ({what}); libnvcomp.so.6 here is not the nvCOMP emulator "
                    f"({NVCOMP_EMULATOR_FILE_NAME})")


# DLPack structs (dlpack.h) for exporting a tensor.
class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


class DLManagedTensorVersioned(ctypes.Structure):
    """DLPack 1.x: a version, flags (bit 0: read-only), then the tensor."""


_DELETER_VERSIONED = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [("version", ctypes.c_uint32 * 2), ("manager_ctx", ctypes.c_void_p),
                                     ("deleter", _DELETER_VERSIONED), ("flags", ctypes.c_uint64),
                                     ("dl_tensor", DLTensor)]

# The destructor gets the dying capsule as a raw pointer: taking it as a Python object would
# resurrect it mid-deallocation.
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_pythonapi = ctypes.pythonapi
_pythonapi.PyCapsule_New.restype = ctypes.py_object
_pythonapi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR]
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _pythonapi))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _pythonapi))

#: Exported tensors alive until their capsule (or consumer) lets go, by address.
_EXPORTED = {}


@_DELETER
def _delete(managed):
    _EXPORTED.pop(ctypes.addressof(managed.contents), None)


@_DELETER_VERSIONED
def _delete_versioned(managed):
    _EXPORTED.pop(ctypes.addressof(managed.contents), None)


@_CAPSULE_DESTRUCTOR
def _destroy_capsule(capsule):
    # An unconsumed capsule owns its tensor (DLPack: the consumer renames a capsule it takes).
    for name in (b"dltensor", b"dltensor_versioned"):
        if _capsule_is_valid(capsule, name):
            _EXPORTED.pop(_capsule_pointer(capsule, name), None)


_DLPACK_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}


class DeviceArray:
    """`shape` elements of `dtype` in device memory of device `ordinal` (row-major), exposed through
    ``__cuda_array_interface__`` and DLPack. `strides` (bytes) and `readonly` change only what the
    interfaces claim; `dlpack_device` overrides what ``__dlpack_device__`` says."""

    def __init__(self, shape, dtype, ordinal=0, fill=None):
        self.cuda = cuda()
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.ordinal = ordinal
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.strides = None
        self.readonly = False
        self.stream = None
        self.cai_version = 3
        self.dlpack_device = (2, ordinal)
        self.dlpack_streams = []
        self.ptr = ctypes.c_uint64(0)
        if self.nbytes:
            self.cuda.run(ordinal, "cuMemAlloc_v2", ctypes.byref(self.ptr), ctypes.c_size_t(self.nbytes))
        if fill is not None:
            self.copy_from_host(np.full(self.shape, fill, dtype=self.dtype))

    @classmethod
    def from_host(cls, array, ordinal=0):
        array = np.array(array, order="C")  # (ascontiguousarray makes 0-d arrays 1-d)
        out = cls(array.shape, array.dtype, ordinal)
        out.copy_from_host(array)
        return out

    def copy_from_host(self, array):
        array = np.array(array, dtype=self.dtype, order="C")
        assert array.nbytes == self.nbytes
        if self.nbytes:
            self.cuda.run(self.ordinal, "cuMemcpyHtoD_v2", self.ptr, array.ctypes.data_as(ctypes.c_void_p),
                          ctypes.c_size_t(self.nbytes))
            # From pageable memory the copy may return before the bytes land (CUDA Driver API, "API
            # synchronization behavior"; the emulator defers it under H5GDS_EMU_DEFER_ASYNC=1): the test
            # array is settled here, so the counters around a transfer count that transfer alone.
            self.cuda.run(self.ordinal, "cuCtxSynchronize")

    def copy_from_host_async(self, array):
        """Queues a copy of `array` on a new stream of this array's device (through pinned memory, so
        the emulator with H5GDS_EMU_DEFER_ASYNC=1 runs it only when the stream is synchronised), and
        names that stream in ``__cuda_array_interface__``: pending work a consumer must wait for."""
        array = np.array(array, dtype=self.dtype, order="C")
        pinned, stream = ctypes.c_void_p(), ctypes.c_void_p()
        self.cuda.run(self.ordinal, "cuMemHostAlloc", ctypes.byref(pinned), ctypes.c_size_t(self.nbytes), 0)
        ctypes.memmove(pinned, array.ctypes.data, self.nbytes)
        self.cuda.run(self.ordinal, "cuStreamCreate", ctypes.byref(stream), 0)
        self.cuda.run(self.ordinal, "cuMemcpyHtoDAsync_v2", self.ptr, pinned, ctypes.c_size_t(self.nbytes), stream)
        self._pending = (pinned, stream)
        self.stream = stream.value
        return pinned, stream

    def synchronize(self):
        """Waits for the work queued on the array's stream."""
        if self.stream is not None:
            self.cuda.run(self.ordinal, "cuStreamSynchronize", ctypes.c_void_p(self.stream))

    def to_host(self):
        out = np.empty(self.shape, dtype=self.dtype)
        if self.nbytes:
            self.cuda.run(self.ordinal, "cuMemcpyDtoH_v2", out.ctypes.data_as(ctypes.c_void_p), self.ptr,
                          ctypes.c_size_t(self.nbytes))
        return out

    def free(self):
        if self.ptr.value:
            self.cuda.run(self.ordinal, "cuMemFree_v2", self.ptr)
            self.ptr = ctypes.c_uint64(0)

    def __del__(self):
        try:
            self.free()
        except Exception:  # interpreter shutdown
            pass

    @property
    def __cuda_array_interface__(self):
        descr = self.dtype.descr if self.dtype.names else [("", self.dtype.str)]
        interface = {"shape": self.shape, "typestr": self.dtype.str, "descr": descr,
                     "data": (self.ptr.value, self.readonly), "strides": self.strides, "version": self.cai_version}
        if self.cai_version >= 3:
            interface["stream"] = self.stream
        return interface


class DlpackOnly:
    """Another library's array, in host or device memory, reached through DLPack only (`inner`'s
    ``__dlpack__`` and ``__dlpack_device__``, nothing else)."""

    def __init__(self, inner):
        self.inner = inner

    def __dlpack__(self, **kwargs):
        return self.inner.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.inner.__dlpack_device__()


class DlpackArray:
    """The same memory reachable through DLPack only (as a JAX array is); `versioned`: a DLPack 1.x
    capsule when the consumer asks for one (max_version), flagged read-only if the array is."""

    def __init__(self, array, versioned=False):
        self.array = array
        self.versioned = versioned
        self.max_versions = []

    def __dlpack_device__(self):
        return self.array.dlpack_device

    def __dlpack__(self, stream=None, max_version=None, **kwargs):
        a = self.array
        a.dlpack_streams.append(stream)
        self.max_versions.append(max_version)
        if a.stream is not None:
            # A producer orders its pending work before the consumer's stream; one that cannot
            # record events waits for it.
            a.cuda.run(a.ordinal, "cuStreamSynchronize", ctypes.c_void_p(a.stream))
        ndim = len(a.shape)
        shape = (ctypes.c_int64 * max(ndim, 1))(*a.shape)
        strides = None
        if a.strides is not None:
            strides = (ctypes.c_int64 * max(ndim, 1))(*(s // a.dtype.itemsize for s in a.strides))
        kind = a.dtype.kind
        versioned = self.versioned and max_version is not None and tuple(max_version) >= (1, 0)
        managed = DLManagedTensorVersioned() if versioned else DLManagedTensor()
        if versioned:
            managed.version[0], managed.version[1] = 1, 0
            managed.flags = 1 if a.readonly else 0
        managed.dl_tensor.data = a.ptr.value
        managed.dl_tensor.device = DLDevice(*a.dlpack_device)
        managed.dl_tensor.ndim = ndim
        managed.dl_tensor.dtype = DLDataType(_DLPACK_CODES[kind], a.dtype.itemsize * 8, 1)
        managed.dl_tensor.shape = shape
        managed.dl_tensor.strides = strides if strides is not None else ctypes.POINTER(ctypes.c_int64)()
        managed.dl_tensor.byte_offset = 0
        managed.deleter = _delete_versioned if versioned else _delete
        _EXPORTED[ctypes.addressof(managed)] = (managed, shape, strides, a)
        name = b"dltensor_versioned" if versioned else b"dltensor"
        return _pythonapi.PyCapsule_New(ctypes.addressof(managed), name, _destroy_capsule)
