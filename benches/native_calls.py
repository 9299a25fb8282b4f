"""Native calls per ``h5gds.read`` / ``h5gds.write``: every call from Python of a function or a method of
``h5gds._native`` counted (``sys.setprofile``), then one read (or write) of each kind timed by its count, not its clock.
Reads (and gathers of rows) into a new NumPy array, into an ``out=`` NumPy array and into a device array (the test
suite's ``__cuda_array_interface__`` array; run with the CUDA emulator on LD_LIBRARY_PATH, as
scripts/test.sh links target/emulator-lib-python), of a contiguous and a chunked dataset, in a file
open for writing and one open read-only (a first read, then a second: a read-only file's dataset
has its layout remembered after the first). Run from the repository root with an environment
where h5gds is installed:

    python benches/native_calls.py
"""

import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

import h5py
import numpy as np

import h5gds
from h5gds import _native

calls = Counter()


def _native_name(function):
    """The name of ``function`` where it is one of ``h5gds._native``'s (a function, or a method of
    one of its classes, or a class called to make an instance); else None."""
    owner = getattr(function, "__self__", None)
    if owner is _native:
        return function.__name__
    if function in _CLASSES:
        return function.__name__
    if owner is not None and type(owner).__module__ == "h5gds._native":
        return f"{type(owner).__name__}.{function.__name__}"
    if isinstance(owner, type) and owner.__module__ == "h5gds._native":
        return f"{owner.__name__}.{function.__name__}"
    # A static method of one of its classes: bound to nothing, named by its class.
    qualified = getattr(function, "__qualname__", "")
    if owner is None and qualified.split(".")[0] in _CLASS_NAMES:
        return qualified
    return None


_CLASSES = {value for value in vars(_native).values() if isinstance(value, type)}
_CLASS_NAMES = {value.__name__ for value in _CLASSES}


def _profile(frame, event, arg):
    # Every call of a C function from Python: the native calls (their own calls back into
    # Python are not native calls).
    if event == "c_call":
        name = _native_name(arg)
        if name is not None:
            calls[name] += 1


def _count_constructors():
    """Makes each of ``h5gds._native``'s classes, called through the module (as the package calls
    them), count as a native call: the profiler sees no C call when a type is called."""
    for cls in _CLASSES:
        def make(*args, _cls=cls, **kwargs):
            if sys.getprofile() is _profile:
                calls[_cls.__name__] += 1
            return _cls(*args, **kwargs)

        for name in ("__name__", "__qualname__"):
            setattr(make, name, getattr(cls, name))
        for name in dir(cls):  # its static methods (Layout.resolve), still counted when called
            if not name.startswith("_"):
                setattr(make, name, getattr(cls, name))
        setattr(_native, cls.__name__, make)


def _count(action):
    calls.clear()
    sys.setprofile(_profile)
    try:
        action()
    finally:
        sys.setprofile(None)
    return sum(calls.values()), dict(calls)


def main():
    device = None
    try:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python" / "tests"))
        from device_arrays import DeviceArray

        device = DeviceArray
    except Exception as exc:  # no CUDA in this process
        print(f"(no device arrays: {exc})")
    _count_constructors()
    x = np.arange(64 * 32, dtype="<f4").reshape(64, 32)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "calls.h5")
        with h5py.File(path, "w") as f:
            f["contiguous"] = x
            f.create_dataset("chunked", data=x, chunks=(8, 32))
        rows = []
        for mode in ("r+", "r"):
            with h5py.File(path, mode) as f:
                for name in ("contiguous", "chunked"):
                    d = f[name]
                    for turn in ("first", "again"):
                        rows.append((mode, name, turn, "read into NumPy", _count(lambda: h5gds.read(d))))
                        out = np.empty_like(x)
                        rows.append((mode, name, turn, "read out= NumPy", _count(lambda: h5gds.read(d, out=out))))
                        picks = np.array([5, 3, 3, 60])
                        rows.append((mode, name, turn, "gather into NumPy", _count(lambda: h5gds.read(d, sel=picks))))
                        if device is not None:
                            dev = device(x.shape, "<f4", fill=0)
                            rows.append((mode, name, turn, "read out= device",
                                         _count(lambda: h5gds.read(d, out=dev))))
                            dev.free()
                            dev = device((len(picks),) + x.shape[1:], "<f4", fill=0)
                            rows.append((mode, name, turn, "gather out= device",
                                         _count(lambda: h5gds.read(d, out=dev, sel=picks))))
                            dev.free()
                    if mode == "r+":
                        rows.append((mode, name, "", "write from NumPy", _count(lambda: h5gds.write(f[name], x))))
                        if device is not None:
                            dev = device(x.shape, "<f4", fill=1)
                            rows.append((mode, name, "", "write from device",
                                         _count(lambda: h5gds.write(f[name], dev))))
                            dev.free()
    for mode, name, turn, what, (total, which) in rows:
        print(f"{mode:3} {name:10} {turn:5} {what:19} {total}  {which}")


if __name__ == "__main__":
    main()
