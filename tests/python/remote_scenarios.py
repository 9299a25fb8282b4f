"""Programs the remote-file tests (test_remote.py) run in child interpreters under HDF5_DRIVER=gds.

Usage: python remote_scenarios.py COMMAND URL

  refuse    tries every write mode of h5py.File on URL; prints one line per mode
  missing   opens URL for reading and prints the error's class, errno and message
  replaced  opens URL, reads /compact, prints READY, waits for a line on stdin (the test replaces
            the object meanwhile), then reads /contiguous and prints what happened
  fork      opens URL, reads /compact, forks; the child reads /contiguous (a runtime and client of
            its own) and prints its digest
  device    reads /contiguous with H5Dread into device memory (libcuda on LD_LIBRARY_PATH: the
            emulator in the tests) and into host memory; prints both digests and the emulator's
            counters of what moved (a host dereference of device memory crashes the emulator)
"""

import ctypes
import hashlib
import os
import sys

import h5py


def refuse(url):
    for mode in ("r+", "a", "w", "w-", "x"):
        try:
            h5py.File(url, mode).close()
        except OSError as err:
            print(f"REFUSED {mode} {type(err).__name__} errno={err.errno}: {err}")
        else:
            print(f"OPENED {mode}")


def missing(url):
    try:
        h5py.File(url, "r").close()
    except OSError as err:
        print(f"ERROR {type(err).__name__} errno={err.errno}: {err}")
    else:
        print("OPENED")


def replaced(url):
    with h5py.File(url, "r") as f:
        f["compact"][()]
        print("READY", flush=True)
        sys.stdin.readline()
        try:
            data = f["contiguous"][()]
        except OSError as err:
            print(f"FAILED {type(err).__name__}: {err}")
        else:
            print(f"READ {hashlib.sha256(data.tobytes()).hexdigest()}")


def fork(url):
    with h5py.File(url, "r") as f:
        f["compact"][()]
        parent = hashlib.sha256(f["contiguous"][()].tobytes()).hexdigest()
        pid = os.fork()
        if pid == 0:
            try:
                child = hashlib.sha256(f["contiguous"][:700_000].tobytes()).hexdigest()
                print(f"CHILD {child}", flush=True)
                os._exit(0)
            except BaseException as err:  # the child must never return into the test's stack
                print(f"CHILD FAILED {err}", flush=True)
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child status {status}"
        print(f"PARENT {parent}")
        print(f"PARENT-PART {hashlib.sha256(f['contiguous'][:700_000].tobytes()).hexdigest()}")


def hdf5_library():
    """h5py's HDF5, found among the libraries this process has mapped."""
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "/libhdf5" in line}
    found = sorted(p for p in paths if os.path.basename(p).startswith(("libhdf5-", "libhdf5.so")))
    assert len(found) == 1, f"h5py's libhdf5 not found alone among {sorted(paths)}"
    return ctypes.CDLL(found[0])


def device(url):
    cuda = ctypes.CDLL("libcuda.so.1")

    def check(name, *args):
        result = getattr(cuda, name)(*args)
        assert result == 0, f"{name} failed with CUDA result {result}"

    check("cuInit", 0)
    dev, context = ctypes.c_int(), ctypes.c_void_p()
    check("cuDeviceGet", ctypes.byref(dev), 0)
    check("cuDevicePrimaryCtxRetain", ctypes.byref(context), dev)
    check("cuCtxSetCurrent", context)
    hdf5 = hdf5_library()
    hdf5.H5Dread.argtypes = [ctypes.c_int64] * 5 + [ctypes.c_void_p]
    hdf5.H5Dread.restype = ctypes.c_int
    with h5py.File(url, "r") as f:
        dset = f["contiguous"]
        host = dset[()]
        pointer = ctypes.c_uint64()
        check("cuMemAlloc_v2", ctypes.byref(pointer), ctypes.c_size_t(host.nbytes))
        # H5S_ALL and H5P_DEFAULT are 0; the file's own type (float32 little-endian) needs no
        # conversion, so HDF5 hands the device pointer to the driver untouched.
        file_type = dset.id.get_type()  # held: its id closes with the object
        status = hdf5.H5Dread(dset.id.id, file_type.id, 0, 0, 0, ctypes.c_void_p(pointer.value))
        if status < 0:
            hdf5.H5Eprint2(ctypes.c_int64(0), None)  # HDF5's error stack, to stderr
        assert status >= 0, f"H5Dread into device memory failed ({status})"
        back = bytearray(host.nbytes)
        buffer = (ctypes.c_char * host.nbytes).from_buffer(back)
        check("cuMemcpyDtoH_v2", buffer, pointer, ctypes.c_size_t(host.nbytes))
        check("cuMemFree_v2", pointer)
    values = (ctypes.c_uint64 * 9)()
    assert cuda.h5gds_emu_counters(values) == 0
    names = ("device_allocs", "device_bytes", "pinned_allocs", "double_frees", "bounds_violations",
             "cufile_reads", "cufile_writes", "htod", "dtoh")
    print(f"DEVICE {hashlib.sha256(bytes(back)).hexdigest()}")
    print(f"HOST {hashlib.sha256(host.tobytes()).hexdigest()}")
    print("COUNTERS " + " ".join(f"{n}={v}" for n, v in zip(names, values)))


if __name__ == "__main__":
    command, target = sys.argv[1], sys.argv[2]
    {"refuse": refuse, "missing": missing, "replaced": replaced, "fork": fork, "device": device}[command](target)
