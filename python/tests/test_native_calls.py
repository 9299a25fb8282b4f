"""One native call per ``h5gds.read`` and ``h5gds.write`` (issue 42): Python parses the selection and
converts the array, then one call into ``h5gds._native`` does the rest (the storage facts, the route,
the bytes). Counted with ``sys.setprofile``: every call of a function or method of the extension
from Python (its own calls back into Python are not native calls). benches/native_calls.py prints
the same counts, device arrays included."""

import sys
from collections import Counter

import h5py
import numpy as np
import pytest

import h5gds
from h5gds import _native

X = np.arange(64 * 12, dtype="<f4").reshape(64, 12)


def native_calls(action):
    """The native calls ``action()`` makes, by name."""
    calls = Counter()

    def profile(frame, event, function):
        if event != "c_call":
            return
        owner = getattr(function, "__self__", None)
        if owner is _native or type(owner).__module__ == "h5gds._native":
            calls[function.__name__] += 1
        elif owner is None and getattr(function, "__qualname__", "").split(".")[0] in vars(_native):
            calls[function.__qualname__] += 1  # a static method (Layout.resolve)

    sys.setprofile(profile)
    try:
        action()
    finally:
        sys.setprofile(None)
    return calls


@pytest.fixture
def path(tmp_path):
    path = tmp_path / "calls.h5"
    with h5py.File(path, "w") as f:
        f["contiguous"] = X
        f.create_dataset("chunked", data=X, chunks=(8, 12))
        f.create_dataset("gzip", data=X, chunks=(8, 12), compression="gzip")
    return path


@pytest.mark.parametrize("mode", ["r+", "r"])
@pytest.mark.parametrize("name", ["contiguous", "chunked", "gzip"])
def test_a_read_or_a_gather_is_one_native_call(path, mode, name):
    with h5py.File(path, mode) as f:
        dset = f[name]
        out = np.zeros_like(X)
        rows = np.array([9, 3, 3, 60])
        for turn in ("first", "again"):  # the first read of a read-only file resolves its layout
            for what, action, expected in [
                ("new array", lambda: h5gds.read(dset), X),
                ("out=", lambda: h5gds.read(dset, out=out), X),
                ("rows", lambda: h5gds.read(dset, sel=slice(2, 40, 3)), X[2:40:3]),
                ("2-D box", lambda: h5gds.read(dset, sel=(slice(1, 9), slice(2, 7))), X[1:9, 2:7]),
                ("gather", lambda: h5gds.read(dset, sel=rows), X[rows]),
            ]:
                got = []
                calls = native_calls(lambda: got.append(action()))
                assert sum(calls.values()) == 1, (turn, what, dict(calls))
                assert np.array_equal(got[0], expected), (turn, what)


@pytest.mark.parametrize("name", ["contiguous", "chunked", "gzip"])
def test_a_write_is_one_native_call(path, name):
    with h5py.File(path, "r+") as f:
        calls = native_calls(lambda: h5gds.write(f[name], X[::-1].copy()))
        assert sum(calls.values()) == 1, dict(calls)
        assert np.array_equal(f[name][...], X[::-1])


#: 4 MiB: reads of all of it use the driver's I/O threads, so they ask for its settings.
LARGE = np.arange(1024 * 1024, dtype="<f4").reshape(1024, 1024)


def settings_loads(action):
    """How many times ``action()`` loads the driver's settings (``H5GDS_*``) from the environment."""
    before = _native.settings_loads()
    action()
    return _native.settings_loads() - before


@pytest.mark.parametrize("mode", ["r+", "r"])
@pytest.mark.parametrize("name", ["contiguous", "chunked", "gzip"])
def test_a_read_a_gather_or_a_write_loads_the_settings_at_most_once_and_a_row_read_not_at_all(tmp_path, mode, name):
    """Each native call reads the settings once however many of its steps need them, and a row of a
    read-only file (a few microseconds of work) not at all."""
    path = tmp_path / "large.h5"
    with h5py.File(path, "w") as f:
        f["contiguous"] = LARGE
        f.create_dataset("chunked", data=LARGE, chunks=(64, 1024))
        f.create_dataset("gzip", data=LARGE, chunks=(64, 1024), compression="gzip")
    rows = np.arange(1023, 0, -3)
    with h5py.File(path, mode) as f:
        dset = f[name]
        for turn in ("first", "again"):  # the first read of a read-only file resolves its layout
            for what, action, expected in [
                ("all", lambda: h5gds.read(dset), LARGE),
                ("box", lambda: h5gds.read(dset, sel=(slice(3, 1000), slice(5, 900))), LARGE[3:1000, 5:900]),
                ("gather", lambda: h5gds.read(dset, sel=rows), LARGE[rows]),
                ("few rows", lambda: h5gds.read(dset, sel=np.array([9, 3, 3])), LARGE[[9, 3, 3]]),
                ("row", lambda: h5gds.read(dset, sel=7), LARGE[7]),
            ]:
                got = []
                loads = settings_loads(lambda: got.append(action()))
                assert loads <= 1, (turn, what, loads)
                assert np.array_equal(got[0], expected), (turn, what)
                if mode == "r" and turn == "again" and what == "row":
                    assert loads == 0
        if mode == "r+":
            assert settings_loads(lambda: h5gds.write(dset, -LARGE)) <= 1
            assert np.array_equal(dset[...], -LARGE)
