"""xarray's engine="h5gds" (h5gds.xarray): netCDF-4 files written by netCDF4-python and by xarray
(compressed and chunked variables, groups, unlimited dimensions, strings, fill values, scale/offset,
times, enums, big-endian and 0-d variables) opened with engine="h5gds" are identical to
engine="h5netcdf" (values, dtypes, attributes, encodings), whole, lazily indexed and in dask chunks;
each indexing is one h5gds.read through the gds driver; errors are h5netcdf's. Files written by
to_netcdf(engine="h5gds") (NumPy, dask and, on the device, CuPy data; groups, DataTrees, appends,
every option) are h5netcdf's in every object h5py sees, their data written by h5gds. Files this
process holds open through another driver open as h5netcdf opens them; reads with no HDF5 call
take no xarray lock.

The device cases (test_device_*) read into CuPy arrays: on a GPU machine with real CuPy (skipped
without it), and on h5gds's CPU emulator of CUDA with the CuPy stand-in mpi/emulated/cupy.py.
scripts/test.sh runs this file without a CUDA driver; test_the_device_cases_on_the_emulator then
runs the device cases in a child process with the emulator on LD_LIBRARY_PATH."""

import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

# Before anything loads CUDA: two emulated devices, async copies deferred until their stream is
# synchronised (as test_device.py).
os.environ.setdefault("H5GDS_EMU_DEVICES", "2")
os.environ.setdefault("H5GDS_EMU_DEFER_ASYNC", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

xr = pytest.importorskip("xarray", reason="scripts/test.sh installs the [xarray] extra's packages")
pytest.importorskip("h5netcdf", reason="scripts/test.sh installs the [xarray] extra's packages")
netCDF4 = pytest.importorskip("netCDF4", reason="scripts/test.sh installs netCDF4")

import h5gds  # noqa: E402
import h5gds.xarray  # noqa: E402
from h5gds import _io  # noqa: E402
from device_arrays import cuda, require_emulator  # noqa: E402
from support import ROOT, clean_env  # noqa: E402

HERE = Path(__file__).resolve().parent
EMULATOR_LIBS = ROOT / "target" / "emulator-lib-python"

pytestmark = pytest.mark.filterwarnings(
    "ignore:The specified chunks separate the stored chunks:UserWarning",
    "ignore:endian-ness of dtype and endian kwarg do not match:UserWarning")


# --- files --------------------------------------------------------------------------------------------------

def netcdf4_python_file(path):
    """A file as netCDF4-python writes it: an unlimited dimension extended past a shorter variable,
    compressed chunked variables (deflate with and without shuffle), packed int16 with _FillValue,
    missing_value, _Unsigned, strings (variable-length and char arrays), an enum, big-endian, 0-d and
    empty variables, times, nested groups using their parents' dimensions."""
    rng = np.random.default_rng(7)
    with netCDF4.Dataset(path, "w") as f:
        f.title = "h5gds xarray engine test"
        f.history = np.array([1, 2, 3], dtype="i4")
        f.createDimension("time", None)
        f.createDimension("lat", 9)
        f.createDimension("lon", 12)
        f.createDimension("strlen", 6)
        f.createDimension("none", 0)
        time = f.createVariable("time", "f8", ("time",))
        time.units = "hours since 2001-01-01 00:00"
        time.calendar = "gregorian"
        time[:] = np.arange(10) * 6.0
        lat = f.createVariable("lat", "f4", ("lat",))
        lat[:] = np.linspace(-40, 40, 9)
        lat.units = "degrees_north"
        lon = f.createVariable("lon", "f4", ("lon",))
        lon[:] = np.arange(12) * 30.0
        temp = f.createVariable("temp", "i2", ("time", "lat", "lon"), zlib=True, complevel=4, shuffle=True,
                                chunksizes=(3, 5, 6), fill_value=-32767)
        temp.scale_factor = np.float32(0.01)
        temp.add_offset = np.float32(273.15)
        temp.long_name = "air temperature"
        temp.set_auto_maskandscale(False)
        packed = rng.integers(-3000, 3000, size=(10, 9, 12)).astype("i2")
        packed[2, 3, 4] = packed[7, 0, 11] = -32767
        temp[:] = packed
        precip = f.createVariable("precip", "f4", ("time", "lat", "lon"), zlib=True, shuffle=False,
                                  chunksizes=(2, 9, 12), fill_value=np.float32(1e20))
        values = rng.random((10, 9, 12)).astype("f4")
        values[5] = 1e20
        precip.set_auto_mask(False)
        precip[:] = values
        counts = f.createVariable("counts", "u2", ("lat", "lon"), contiguous=True)
        counts.missing_value = np.uint16(65535)
        counts[:] = np.arange(108, dtype="u2").reshape(9, 12)
        counts[4, 4] = 65535
        flag = f.createVariable("flag", "i1", ("lon",))
        flag._Unsigned = "true"
        flag.set_auto_scale(False)
        flag[:] = np.array([-1, 0, 1, 2, -128, 127, 5, 6, -2, 3, 4, 9], dtype="i1")
        series = f.createVariable("series", "f8", ("time",))
        series[0:4] = [1.0, 2.0, 3.0, 4.0]  # time has 10 steps: h5netcdf pads the rest
        station = f.createVariable("station", str, ("lat",))
        station[:] = np.array([f"st-{i}é" for i in range(9)], dtype=object)
        code = f.createVariable("code", "S1", ("lat", "strlen"))
        code[:] = netCDF4.stringtochar(np.array([f"C{i:04d}" for i in range(9)], dtype="S6"))
        cloud_t = f.createEnumType("u1", "cloud_t", {"clear": 0, "cumulus": 1, "stratus": 2})
        cloud = f.createVariable("cloud", cloud_t, ("lon",), fill_value=0)
        cloud[:] = np.array([0, 1, 2] * 4, dtype="u1")
        big = f.createVariable("big", "f8", ("lat",), endian="big")
        big[:] = np.linspace(1.5, 9.5, 9)
        scalar = f.createVariable("scalar", "i4", ())
        scalar.assignValue(42)
        f.createVariable("empty", "f4", ("none", "lon"))
        forecast = f.createGroup("forecast")
        forecast.institution = "nowhere"
        forecast.createDimension("step", 5)
        step = forecast.createVariable("step", "i4", ("step",))
        step[:] = np.arange(5) * 3
        t2m = forecast.createVariable("t2m", "f4", ("step", "lat"), zlib=True, chunksizes=(2, 9))
        t2m[:] = rng.standard_normal((5, 9)).astype("f4")
        t2m.coordinates = "lat"
        members = forecast.createGroup("members")
        members.createDimension("member", 3)
        m = members.createVariable("m", "i8", ("member", "step"), fill_value=-1)
        m[:] = np.arange(15).reshape(3, 5)
        m[1, 2] = -1
    return ["/", "/forecast", "/forecast/members"]


def xarray_file(path):
    """A file as xarray writes it (netCDF4 engine): datetime and string coordinates, NaN, bools,
    timedeltas, packing and fill values through encodings, an unlimited dimension, compressed,
    chunked and contiguous variables, and a group."""
    rng = np.random.default_rng(11)
    times = np.arange("2020-01-01", "2020-01-13", dtype="datetime64[D]").astype("datetime64[ns]")
    sst = rng.standard_normal((12, 6, 8)) + 15
    sst[0, 0, 0] = np.nan
    ds = xr.Dataset(
        {
            "sst": (("time", "y", "x"), sst, {"units": "degC", "valid_range": np.array([-5.0, 40.0])}),
            "packed": (("time", "y", "x"), np.where(sst > 16, np.nan, sst)),
            "land": (("y", "x"), rng.random((6, 8)) > 0.5),
            "plain": (("y", "x"), rng.standard_normal((6, 8)).astype("f4")),
            "lag": (("time",), (np.arange(12) * 3600 * 10**9).astype("timedelta64[ns]")),
            "level": ((), np.int64(850)),
        },
        coords={"time": times, "y": np.arange(6) * 0.5, "x": np.arange(8) * 0.25,
                "name": (("y",), np.array([f"row {i}" for i in range(6)]))},
        attrs={"Conventions": "CF-1.8", "source": "h5gds tests"},
    )
    encoding = {
        "sst": {"zlib": True, "complevel": 2, "chunksizes": (4, 3, 8), "shuffle": False},
        "packed": {"dtype": "int16", "scale_factor": 0.001, "add_offset": 15.0, "_FillValue": -9999,
                   "zlib": True, "chunksizes": (6, 6, 8)},
        "plain": {"contiguous": True},
        "lag": {"units": "hours", "dtype": "i4"},
    }
    ds.to_netcdf(path, engine="netcdf4", unlimited_dims=["time"], encoding=encoding)
    group = xr.Dataset({"v": (("k",), np.arange(4.0)), "w": (("k", "time"), rng.random((4, 12)))},
                       coords={"k": ["a", "b", "c", "d"], "time": times})
    group.to_netcdf(path, engine="netcdf4", mode="a", group="extra",
                    encoding={"w": {"zlib": True, "chunksizes": (2, 12)}})
    return ["/", "/extra"]


BIG_ENDIAN = {"big"}
WRITERS = {"netcdf4-python": netcdf4_python_file, "xarray": xarray_file}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    directory = tmp_path_factory.mktemp("netcdf")
    return {name: (directory / f"{name}.nc", write(directory / f"{name}.nc")) for name, write in WRITERS.items()}


@pytest.fixture(params=list(WRITERS))
def file(request, files):
    return files[request.param]


def open_both(path, **kwargs):
    return (xr.open_dataset(path, engine="h5netcdf", **kwargs), xr.open_dataset(path, engine="h5gds", **kwargs))


def assert_same(theirs, ours):
    """Identical datasets (values, attributes, coordinates), with the same dtypes and encodings."""
    xr.testing.assert_identical(theirs, ours)
    assert list(ours.variables) == list(theirs.variables)
    for name, variable in theirs.variables.items():
        assert ours[name].dtype == variable.dtype, name
        np.testing.assert_equal(ours[name].encoding, variable.encoding, err_msg=str(name))
    np.testing.assert_equal(ours.encoding, theirs.encoding)


def driver(file):
    """The name of the driver an h5py file is open with (h5py calls drivers it does not know 'unknown')."""
    if file.id.get_access_plist().get_driver() == h5gds._driver.DRIVER_ID:
        return "gds"
    return file.driver


class Reads:
    """Every h5gds.read the engine makes (and every read served with no HDF5 call), as (dataset
    name, selection, file driver, result type)."""

    def __init__(self, monkeypatch):
        self.calls = []
        original = _io.read

        def counted(dset, out=None, sel=None):
            result = original(dset, out=out, sel=sel)
            self.calls.append((dset.name, sel, driver(dset.file), type(result).__module__.split(".")[0]))
            return result

        def served(dset, sel, shape):
            result = without_hdf5(dset, sel, shape)
            if result is not None:
                self.calls.append((dset.name, sel, driver(dset.file), "numpy"))
            return result

        without_hdf5 = getattr(_io, "read_without_hdf5", None)
        monkeypatch.setattr(_io, "read", counted)
        if without_hdf5 is not None:
            monkeypatch.setattr(_io, "read_without_hdf5", served)

    def take(self):
        calls, self.calls = self.calls, []
        return calls


@pytest.fixture
def reads(monkeypatch):
    return Reads(monkeypatch)


# --- host ---------------------------------------------------------------------------------------------------

def test_every_group_is_identical_to_h5netcdfs(file):
    path, groups = file
    for group in groups:
        theirs, ours = open_both(path, group=group)
        assert_same(theirs.load(), ours.load())


def test_datatree_and_groups_are_identical_to_h5netcdfs(file):
    path, groups = file
    theirs = xr.open_datatree(path, engine="h5netcdf").load()
    ours = xr.open_datatree(path, engine="h5gds").load()
    xr.testing.assert_identical(theirs, ours)
    assert sorted(node.path for node in ours.subtree) == groups
    below = xr.open_groups(path, engine="h5gds", group=groups[1])
    expected = xr.open_groups(path, engine="h5netcdf", group=groups[1])
    assert list(below) == list(expected)
    for name in expected:
        assert_same(expected[name].load(), below[name].load())


SELECTIONS = [
    {"time": slice(1, 8, 3)},
    {"time": slice(None, None, -2)},
    {"time": 4, "lat": slice(2, 7)},
    {"time": -1, "lon": [0, 5, 11, 2]},
    {"time": [1, 1, 3], "lon": slice(3, 10, 2), "lat": 0},
    {"lat": slice(8, 0, -3), "lon": np.array([4, 4, 0])},
    {"lat": ("p", [0, 2, 8]), "lon": ("p", [1, 3, 5])},  # vectorized (pointwise) indexing
    {"time": slice(7, 7)},
]
XARRAY_SELECTIONS = [
    {"time": slice(2, 11, 4), "x": [7, 0]},
    {"y": -2, "time": slice(None, None, -1)},
    {"time": ("p", [0, 5]), "x": ("p", [1, 2])},
]


def _indexers(selection):
    return {k: xr.DataArray(v[1], dims=v[0]) if isinstance(v, tuple) else v for k, v in selection.items()}


@pytest.mark.parametrize("writer, selection", [("netcdf4-python", s) for s in SELECTIONS]
                         + [("xarray", s) for s in XARRAY_SELECTIONS], ids=repr)
def test_lazily_indexed_variables_are_identical(files, writer, selection):
    path, _ = files[writer]
    theirs, ours = open_both(path)
    indexers = _indexers(selection)
    assert_same(theirs.isel(indexers).load(), ours.isel(indexers).load())


def test_each_indexing_is_one_h5gds_read_through_gds(files, reads):
    path, _ = files["netcdf4-python"]
    ds = xr.open_dataset(path, engine="h5gds")
    opened = reads.take()
    assert {name for name, *_ in opened} == {"/time", "/lat", "/lon"}  # the indexes, read at open
    part = ds.temp.isel(time=slice(1, 8, 3), lon=[0, 5, 11]).values
    # The integer array as the slice covering it; xarray picks the columns from what was read.
    assert reads.take() == [("/temp", (slice(1, 8, 3), slice(None), slice(0, 12)), "gds", "numpy")]
    expected = xr.open_dataset(path, engine="h5netcdf").temp.isel(time=slice(1, 8, 3), lon=[0, 5, 11]).values
    np.testing.assert_array_equal(part, expected)
    # Padded along the longer unlimited dimension: one read of the part the dataset holds.
    assert ds.series.isel(time=slice(2, 9, 2)).values.tolist()[:1] == [3.0]
    assert reads.take() == [("/series", (slice(2, 4, 2),), "gds", "numpy")]
    # No _FillValue attribute: padded with HDF5's fill value, netCDF's default for doubles.
    np.testing.assert_array_equal(ds.series.values, [1, 2, 3, 4] + [netCDF4.default_fillvals["f8"]] * 6)
    # Variable-length strings: h5netcdf's own reading (h5py), no h5gds.read.
    assert ds.station.values.tolist() == [f"st-{i}é" for i in range(9)]
    assert reads.take() == [("/series", (slice(0, 4, 1),), "gds", "numpy")]


def test_the_gds_driver_gives_way_to_settings_and_to_a_named_driver(files, reads, monkeypatch):
    path, _ = files["xarray"]
    xr.open_dataset(path, engine="h5gds", driver="sec2").plain.load()
    assert reads.take()[-1][2] == "sec2"
    monkeypatch.setenv("H5GDS_USE_VFD_GDS", "0")
    xr.open_dataset(path, engine="h5gds").plain.load()
    assert reads.take()[-1][2] == "sec2"
    monkeypatch.delenv("H5GDS_USE_VFD_GDS")
    # The gds driver's settings through h5netcdf's driver_kwds, checked by the driver.
    plain = xr.open_dataset(path, engine="h5gds", driver_kwds={"nthreads": 3}).plain.values
    assert reads.take()[-1][2] == "gds"
    np.testing.assert_array_equal(plain, xr.open_dataset(path, engine="h5netcdf").plain.values)
    with pytest.raises(ValueError, match="nthreads"):
        xr.open_dataset(path, engine="h5gds", driver_kwds={"nthreads": "many"})


def test_dask_chunks_are_identical_one_read_each(file, reads):
    pytest.importorskip("dask", reason="scripts/test.sh installs dask with the [xarray] extra")
    path, groups = file
    theirs, ours = open_both(path, chunks={"time": 4})
    reads.take()
    variable = "temp" if "temp" in ours else "sst"
    assert type(ours[variable].data).__module__.startswith("dask")
    chunks = ours[variable].data.npartitions
    ours[variable].compute()
    assert [name for name, *_ in reads.take()] == [f"/{variable}"] * chunks
    assert_same(theirs.compute(), ours.compute())
    # The device chunk manager chunks host variables as xarray's own does.
    managed = xr.open_dataset(path, engine="h5gds", chunks={"time": 4},
                              chunked_array_type=h5gds.xarray.DeviceDaskManager())
    assert type(managed[variable].data._meta) is np.ndarray
    assert_same(theirs.compute(), managed.compute())


def test_errors_are_h5netcdfs(files, tmp_path):
    path, _ = files["netcdf4-python"]
    not_hdf5 = tmp_path / "text.nc"
    not_hdf5.write_text("not HDF5")
    cases = [((tmp_path / "missing.nc",), {}), ((path,), {"group": "nowhere"}),
             ((path,), {"group": "forecast/nowhere"}), ((tmp_path,), {}), ((not_hdf5,), {})]
    for args, kwargs in cases:
        for opener in (xr.open_dataset, xr.open_datatree, xr.open_groups):
            with pytest.raises(Exception) as theirs:
                opener(*args, engine="h5netcdf", **kwargs)
            with pytest.raises(Exception) as ours:
                opener(*args, engine="h5gds", **kwargs)
            assert type(ours.value) is type(theirs.value), (opener.__name__, args, kwargs, theirs.value, ours.value)
            if "group" in kwargs:
                assert str(ours.value) == str(theirs.value)
    assert type(theirs.value) is OSError and "file signature not found" in str(ours.value)


def test_bad_device_names_are_refused(files, monkeypatch):
    path, _ = files["xarray"]
    for device, error, message in [
            ("gpu", ValueError, r"device='gpu': accepted are None or 'cpu'"),
            ("cuda:x", ValueError, r"device='cuda:x': accepted"),
            (True, TypeError, r"device=True: a bool names no device"),
            ([0], TypeError, r"device must be None, 'cpu', 'cuda', 'cuda:N', an int or a cupy.cuda.Device, "
                             r"not builtins.list")]:
        with pytest.raises(error, match=message):
            xr.open_dataset(path, engine="h5gds", device=device)
    assert_same(xr.open_dataset(path, engine="h5netcdf").load(),
                xr.open_dataset(path, engine="h5gds", device="cpu").load())
    monkeypatch.setitem(sys.modules, "cupy", None)  # `import cupy` fails, installed or not
    with pytest.raises(ModuleNotFoundError, match=r"device='cuda' makes CuPy arrays, and CuPy is not installed "
                                                  r"in this environment: pip install cupy-cuda12x"):
        xr.open_dataset(path, engine="h5gds", device="cuda")


def test_importing_h5gds_imports_no_xarray_and_the_entry_point_finds_the_engine():
    child = subprocess.run(
        [sys.executable, "-c",
         "import sys, h5gds\n"
         "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('xarray', 'h5netcdf', 'dask', 'pandas'))\n"
         "print(loaded)\n"
         "import xarray\n"
         "print(type(xarray.backends.list_engines()['h5gds']).__module__)\n"],
        env=clean_env(), capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    assert child.stdout.splitlines() == ["[]", "h5gds.xarray"], child.stdout
    found = [ep for ep in importlib.metadata.entry_points(group="xarray.backends") if ep.name == "h5gds"]
    assert [ep.value for ep in found] == ["h5gds.xarray:H5gdsBackendEntrypoint"]
    assert h5gds.xarray.H5gdsBackendEntrypoint().guess_can_open(__file__) is False


# --- files this process holds open, xarray's lock -----------------------------------------------------------

def test_a_file_this_process_writes_opens_as_h5netcdf_opens_it(tmp_path, reads):
    """HDF5 shares a file open in this process only through the same driver: where the gds open
    is refused by the file's lock, the engine and h5gds.from_file open it as h5netcdf does and
    still read through h5gds."""
    pytest.importorskip("dask", reason="compute=False writes with dask")
    import h5py

    path = tmp_path / "open.nc"
    ds = xr.Dataset({"v": (("x",), np.arange(6.0))}).chunk()
    delayed = ds.to_netcdf(path, engine="h5netcdf", compute=False)  # keeps the file open
    try:
        values = []
        for engine in ("h5netcdf", "h5gds"):
            with xr.open_dataset(path, engine=engine) as opened:
                values.append(opened.v.values)  # not written yet: the fill value
        np.testing.assert_array_equal(values[1], values[0])
        assert values[1].shape == (6,) and reads.take() == [("/v", (slice(None),), "sec2", "numpy")]
        with h5py.File(path, "r") as held:
            assert held["v"].shape == (6,)
    finally:
        delayed.compute()
    with h5py.File(path, "a") as writer:
        writer["v"][0] = 7.0
        writer.flush()
        # Another driver refused the same way through h5gds.from_file: opened as h5py opens it.
        np.testing.assert_array_equal(h5gds.from_file(path, "v"), [7.0, 1, 2, 3, 4, 5])
        np.testing.assert_array_equal(xr.open_dataset(path, engine="h5gds").v.values, [7.0, 1, 2, 3, 4, 5])
    # Locked by another process: the open is refused as h5netcdf's is.
    holder = subprocess.Popen([sys.executable, "-c", "import h5py, sys; f = h5py.File(sys.argv[1], 'a'); "
                               "print('open', flush=True); sys.stdin.read()", str(path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        for engine in ("h5netcdf", "h5gds"):
            with pytest.raises(BlockingIOError, match="unable to lock file"):
                xr.open_dataset(path, engine=engine)
        with pytest.raises(BlockingIOError, match="unable to lock file"):
            h5gds.from_file(path, "v")
    finally:
        holder.communicate("", timeout=60)


class CountingLock:
    """A lock that counts its acquisitions."""

    def __init__(self):
        import threading

        self.lock, self.acquired = threading.Lock(), 0

    def acquire(self, blocking=True, timeout=-1):
        self.acquired += 1
        return self.lock.acquire(blocking, timeout)

    def release(self):
        self.lock.release()

    def locked(self):
        return self.lock.locked()

    def __enter__(self):
        self.acquire()

    def __exit__(self, *exc):
        self.release()


def test_reads_h5gds_serves_without_hdf5_take_no_lock(files):
    """xarray's lock keeps HDF5's calls apart; a read h5gds serves from the dataset's resolved
    storage makes none, so takes none (dask's threads then read at once)."""
    path, _ = files["xarray"]
    expected = xr.open_dataset(path, engine="h5netcdf").load()
    lock = CountingLock()
    ds = xr.open_dataset(path, engine="h5gds", lock=lock, cache=False)
    ds.plain.isel(y=slice(0, 3)).load()  # the first read resolves the storage, under the lock
    taken = lock.acquired
    assert taken >= 1
    for y in range(6):
        np.testing.assert_array_equal(ds.plain.isel(y=y).values, expected.plain.isel(y=y).values)
        np.testing.assert_array_equal(ds.sst.isel(time=y).values, expected.sst.isel(time=y).values)
    assert lock.acquired == taken + 1  # sst's first read only
    # Reads through HDF5 keep it: a variable padded along a longer unlimited dimension, say.
    path, _ = files["netcdf4-python"]
    ds = xr.open_dataset(path, engine="h5gds", lock=lock, cache=False)
    for repeat in range(2):
        taken = lock.acquired
        assert ds.series.values[:5].tolist() == [1.0, 2.0, 3.0, 4.0, netCDF4.default_fillvals["f8"]]
        assert lock.acquired == taken + 1


# --- writing: to_netcdf(engine="h5gds") ---------------------------------------------------------------------

def h5_contents(path):
    """All h5py sees of a file, comparable: each object's kind and attributes (references as the
    names they point to), each dataset's type, shape, extent, layout, chunks, filters, fill
    value, dimension-scale role and values."""
    import h5py

    with h5py.File(path, "r") as f:
        def plain(value):
            if isinstance(value, h5py.Reference):
                return ("ref", f[value].name)
            if isinstance(value, (list, tuple)):
                return [plain(v) for v in value]
            if isinstance(value, np.ndarray):
                if value.dtype.hasobject or value.dtype.names:
                    return (value.dtype.str, value.shape, plain(value.tolist()))
                return (value.dtype.str, value.shape, value.tobytes())
            if isinstance(value, np.generic):
                return (value.dtype.str, plain(value.tolist()) if value.dtype.names else value.tobytes())
            return value

        contents = {}

        def visit(name, obj):
            attrs = {k: plain(obj.attrs[k]) for k in obj.attrs}
            if isinstance(obj, h5py.Group):
                contents[name] = ("group", attrs)
                return
            if isinstance(obj, h5py.Datatype):
                contents[name] = ("datatype", attrs, plain(obj.dtype.str), h5py.check_enum_dtype(obj.dtype))
                return
            dcpl = obj.id.get_create_plist()
            filters = [dcpl.get_filter(i) for i in range(dcpl.get_nfilters())]
            contents[name] = ("dataset", attrs, obj.dtype.str, obj.shape, obj.maxshape, dcpl.get_layout(),
                              obj.chunks, filters, plain(obj.fillvalue), h5py.h5ds.is_scale(obj.id),
                              plain(obj[()]))

        visit("/", f)
        f.visititems(visit)
        return contents


def assert_same_files(theirs, ours):
    expected, got = h5_contents(theirs), h5_contents(ours)
    assert list(got) == list(expected)
    for name in expected:
        assert got[name] == expected[name], name


def writes_dataset():
    """Variables of every kind netCDF-4 holds, with encodings: compressed (deflate, shuffle,
    fletcher32), chunked with edge chunks, contiguous, packed, big-endian, bools, strings, times,
    timedeltas, 0-d, empty."""
    rng = np.random.default_rng(3)
    times = np.arange("2021-03-01", "2021-03-08", dtype="datetime64[D]").astype("datetime64[ns]")
    t = rng.standard_normal((7, 5, 6)).astype("f4")
    t[1, 2, 3] = np.nan
    return xr.Dataset(
        {
            "t": (("time", "y", "x"), t, {"units": "K", "valid_range": np.array([-9.0, 9.0], "f4")}),
            "packed": (("time", "y", "x"), np.where(t > 1, np.nan, t.astype("f8"))),
            "counts": (("x",), np.arange(6, dtype="i8") * 1000),
            "wide": (("y", "x"), rng.integers(0, 2**31, (5, 6)).astype("u4")),
            "big": (("y",), np.linspace(0.5, 2.5, 5)),
            "mask": (("y", "x"), rng.random((5, 6)) > 0.5),
            "label": (("y",), np.array([f"row-{i}é" for i in range(5)])),
            "lag": (("time",), (np.arange(7) * 3600 * 10**9).astype("timedelta64[ns]")),
            "level": ((), np.int32(500)),
            "none": (("empty",), np.zeros(0, "f4")),
        },
        coords={"time": times, "y": np.arange(5) * 0.5, "x": np.arange(6.0)},
        attrs={"title": "h5gds writes", "version": np.int16(3)},
    )


WRITE_ENCODING = {
    "t": {"zlib": True, "complevel": 3, "shuffle": True, "fletcher32": True, "chunksizes": (2, 5, 4)},
    "packed": {"dtype": "int16", "scale_factor": 0.01, "add_offset": 1.0, "_FillValue": -999,
               "compression": "gzip", "compression_opts": 6, "chunksizes": (7, 2, 6)},
    "counts": {"chunksizes": (4,)},
    "wide": {"zlib": True, "shuffle": False, "chunksizes": (5, 6)},
    "big": {"dtype": ">f8"},
}


class Writes:
    """Every write h5gds makes for the engine, as (dataset name, route): 'encoded' (h5gds's
    encoders) or 'write' (h5gds.write), with the array's library."""

    def __init__(self, monkeypatch):
        from h5gds import _encode

        self.calls = []
        # With a function returning the emulator's counters: what each h5gds.write moved, by name.
        self.counters, self.moved = None, {}
        write, encode = _io.write, _encode.write

        def written(dset, array, sel=None):
            self.calls.append((dset.name, "write", type(array).__module__.split(".")[0]))
            before = self.counters() if self.counters else None
            result = write(dset, array, sel=sel)
            if before is not None:
                after = self.counters()
                self.moved[dset.name] = {k: after[k] - before[k] for k in after}
            return result

        def encoded(dsid, name, host):
            self.calls.append((name, "encoded", type(host).__module__.split(".")[0]))
            return encode(dsid, name, host)

        monkeypatch.setattr(_io, "write", written)
        monkeypatch.setattr(_encode, "write", encoded)

    def take(self):
        calls, self.calls = self.calls, []
        return calls


@pytest.fixture
def writes(monkeypatch):
    return Writes(monkeypatch)


def write_both(ds, tmp_path, **kwargs):
    theirs, ours = tmp_path / "h5netcdf.nc", tmp_path / "h5gds.nc"
    for path, engine in ((theirs, "h5netcdf"), (ours, "h5gds")):
        if path.exists():
            path.unlink()
        result = ds.to_netcdf(path, engine=engine, **kwargs)
        if kwargs.get("compute") is False:
            result.compute()
    return theirs, ours


WRITE_OPTIONS = {
    "defaults": {},
    "encodings": {"encoding": WRITE_ENCODING},
    "unlimited": {"encoding": WRITE_ENCODING, "unlimited_dims": ["time"]},
    "classic": {"format": "NETCDF4_CLASSIC", "encoding": {k: v for k, v in WRITE_ENCODING.items() if k != "wide"}},
    "group": {"encoding": WRITE_ENCODING, "group": "outer/inner"},
    # hdf5plugin's Zstandard (filter 32015, level 5) through h5py's filter number
    "zstd": {"encoding": dict(WRITE_ENCODING, t={"compression": 32015, "compression_opts": (5,),
                                                 "chunksizes": (2, 5, 4)})},
}


@pytest.mark.parametrize("options", list(WRITE_OPTIONS))
def test_to_netcdf_files_are_h5netcdfs_written_by_h5gds(tmp_path, writes, options):
    if options == "zstd":
        pytest.importorskip("hdf5plugin", reason="scripts/test.sh installs hdf5plugin")
    ds = writes_dataset()
    kwargs = WRITE_OPTIONS[options]
    if options == "classic":
        ds = ds.drop_vars(["wide", "label"])  # NETCDF4_CLASSIC: no unsigned types, no strings
    theirs, ours = write_both(ds, tmp_path, **kwargs)
    assert_same_files(theirs, ours)
    routes = {name.rsplit("/", 1)[-1]: route for name, route, _ in writes.take()}
    # The whole of a compressed variable of fixed size through h5gds's encoders (with unlimited
    # dimensions HDF5 writes the extensible ones, through h5gds.write); other fixed-size data
    # through h5gds.write; strings (h5py's conversion) and empty variables by h5netcdf.
    assert "label" not in routes and "none" not in routes
    if "encoding" in kwargs:
        assert routes["t"] == ("write" if options == "unlimited" else "encoded")
        assert routes["packed"] == ("write" if options == "unlimited" else "encoded")
        assert routes["counts"] == "write"
    for name in ("x", "y", "mask", "lag", "level"):
        assert routes[name] == "write", name
    group = kwargs.get("group")
    back = xr.open_dataset(ours, engine="h5gds", group=group).load()
    xr.testing.assert_identical(back, xr.open_dataset(theirs, engine="h5netcdf", group=group).load())
    # (packed is rounded to its scale factor)
    xr.testing.assert_identical(back.drop_vars("packed").drop_encoding(), ds.drop_vars("packed").drop_encoding())


def test_to_netcdf_from_dask_chunks_and_compute_false(tmp_path, writes):
    pytest.importorskip("dask", reason="scripts/test.sh installs dask with the [xarray] extra")
    ds = writes_dataset().chunk({"time": 3, "y": 2})
    theirs, ours = write_both(ds, tmp_path, encoding=WRITE_ENCODING, compute=False)
    assert_same_files(theirs, ours)
    # Each chunk a region written by h5gds.write (compressed ones through HDF5's pipeline).
    t = [call for call in writes.take() if call[0] == "/t"]
    assert t == [("/t", "write", "numpy")] * (3 * 3)
    xr.testing.assert_identical(xr.open_dataset(ours, engine="h5gds").load(),
                                xr.open_dataset(theirs, engine="h5netcdf").load())


def test_to_netcdf_appends_and_datatrees_as_h5netcdf(tmp_path, writes):
    ds = writes_dataset()
    extra = xr.Dataset({"more": (("x",), np.arange(6, dtype="f4") / 3)}, coords={"x": ds.x})
    for path, engine in ((tmp_path / "a.nc", "h5netcdf"), (tmp_path / "b.nc", "h5gds")):
        ds.to_netcdf(path, engine=engine, encoding=WRITE_ENCODING, unlimited_dims=["time"])
        extra.to_netcdf(path, engine=engine, mode="a")
        extra.to_netcdf(path, engine=engine, mode="a", group="added")
    assert_same_files(tmp_path / "a.nc", tmp_path / "b.nc")
    assert ("/more", "write", "numpy") in writes.take()
    tree = xr.DataTree.from_dict({"/": ds.drop_vars("label"), "/child": extra,
                                  "/child/grand": xr.Dataset({"g": (("k",), np.arange(3))})})
    tree.to_netcdf(tmp_path / "tree-a.nc", engine="h5netcdf")
    tree.to_netcdf(tmp_path / "tree-b.nc", engine="h5gds")
    assert_same_files(tmp_path / "tree-a.nc", tmp_path / "tree-b.nc")
    assert ("/child/grand/g", "write", "numpy") in writes.take()
    xr.testing.assert_identical(xr.open_datatree(tmp_path / "tree-b.nc", engine="h5gds").load(),
                                xr.open_datatree(tmp_path / "tree-a.nc", engine="h5netcdf").load())


def test_save_mfdataset_and_the_engine_registered_by_its_module(tmp_path, writes):
    ds = writes_dataset()
    parts = [ds.isel(time=slice(0, 3)), ds.isel(time=slice(3, None))]
    for engine in ("h5netcdf", "h5gds"):
        xr.save_mfdataset(parts, [tmp_path / f"{engine}-{i}.nc" for i in range(2)], engine=engine)
    for i in range(2):
        assert_same_files(tmp_path / f"h5netcdf-{i}.nc", tmp_path / f"h5gds-{i}.nc")
    assert ("/t", "write", "numpy") in writes.take()
    # In a process that imported xarray alone, save_mfdataset writes with engine="h5gds" (the wheel's
    # start-up hook, test_xarray_writer_hook.py). Where the hook did not run (taken off sys.meta_path
    # here, as `python -S` or `pip install --target` leave it out), xarray refuses the name until
    # h5gds.xarray is imported, as opening with the engine does.
    hooked = subprocess.run(
        [sys.executable, "-c",
         "import sys, numpy as np, xarray as xr\n"
         "ds = xr.Dataset({'v': (('x',), np.arange(3.0))})\n"
         "xr.save_mfdataset([ds], [sys.argv[1]], engine='h5gds')\n"
         "print('h5gds.xarray' in sys.modules, xr.open_dataset(sys.argv[1], engine='h5netcdf').v.values.tolist())\n",
         str(tmp_path / "m.nc")],
        env=clean_env(), capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert hooked.returncode == 0, hooked.stderr
    assert hooked.stdout.splitlines() == ["True [0.0, 1.0, 2.0]"]
    child = subprocess.run(
        [sys.executable, "-c",
         "import sys\n"
         "sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != 'XarrayWriterFinder']\n"
         "import numpy as np, xarray as xr\n"
         "ds = xr.Dataset({'v': (('x',), np.arange(3.0))})\n"
         "try:\n"
         "    ds.to_netcdf(sys.argv[1], engine='h5gds')\n"
         "except ValueError as e:\n"
         "    print(e)\n"
         "ds.to_netcdf(sys.argv[1], engine='h5netcdf')\n"
         "xr.open_dataset(sys.argv[1], engine='h5gds').close()\n"
         "ds.to_netcdf(sys.argv[2], engine='h5gds')\n"
         "print(xr.open_dataset(sys.argv[2], engine='h5netcdf').v.values.tolist())\n",
         str(tmp_path / "a.nc"), str(tmp_path / "b.nc")],
        env=clean_env(), capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert child.returncode == 0, child.stderr
    assert child.stdout.splitlines() == ["unrecognized engine for to_netcdf: 'h5gds'", "[0.0, 1.0, 2.0]"]


def test_to_netcdf_invalid_netcdf_and_errors_are_h5netcdfs(tmp_path):
    ds = xr.Dataset({"z": (("x",), np.array([1 + 2j, 3 - 1j])), "b": (("x",), np.array([True, False]))},
                    attrs={"flag": np.bool_(True)})
    theirs, ours = write_both(ds, tmp_path, invalid_netcdf=True)
    assert_same_files(theirs, ours)
    ds.attrs.clear()
    bad = [({"encoding": {"z": {"chunksizes": (1,), "bogus": 1}}}, {}),
           ({"encoding": {"z": {"chunksizes": (5,)}}}, {}),
           ({"format": "NETCDF3_64BIT"}, {}),
           ({"group": "a//b"}, {}),
           ({"mode": "x"}, {"exists": True})]
    for kwargs, how in bad:
        for engine in ("h5netcdf", "h5gds"):
            target = tmp_path / f"bad-{engine}.nc"
            if how.get("exists"):
                ds.to_netcdf(target, engine="h5netcdf", invalid_netcdf=True)
            before = target.read_bytes() if target.exists() else None
            with pytest.raises(Exception) as raised:
                ds.to_netcdf(target, engine=engine, **kwargs)
            if engine == "h5netcdf":
                expected = raised.value
            else:
                assert type(raised.value) is type(expected), (kwargs, expected, raised.value)
                if isinstance(expected, OSError):  # HDF5's, its driver's words
                    assert "File exists" in str(raised.value)
                else:
                    assert str(raised.value) == str(expected).replace("bad-h5netcdf", "bad-h5gds"), kwargs
                if before is not None:
                    assert target.read_bytes() == before
            target.unlink(missing_ok=True)
    # Another engine's name is still refused as xarray refuses it.
    with pytest.raises(ValueError, match="unrecognized engine for to_netcdf: 'h5gdss'"):
        ds.to_netcdf(tmp_path / "x.nc", engine="h5gdss")


# --- device -------------------------------------------------------------------------------------------------

def _cuda_here():
    try:
        return cuda()
    except (OSError, RuntimeError) as exc:
        return exc


CUDA = _cuda_here()
if not isinstance(CUDA, Exception) and CUDA.emulated:
    sys.path.insert(0, str(HERE / "mpi" / "emulated"))  # the CuPy stand-in: real CuPy cannot run here


@pytest.fixture
def gpu():
    """(cupy, the device ordinal to read into): device 1 where there are two."""
    if isinstance(CUDA, Exception):
        if os.environ.get("H5GDS_REQUIRE_DEVICE_TESTS") == "1":
            raise CUDA
        pytest.skip(f"no CUDA driver in this process ({CUDA}); test_the_device_cases_on_the_emulator runs "
                    "these with the emulator")
    cupy = pytest.importorskip("cupy", reason="device variables are CuPy arrays; CuPy is not installed")
    return cupy, min(1, CUDA.device_count - 1)


def device_kind(ds, name):
    """What a variable opened with device= must hold: CuPy for numbers and bools that are not indexes."""
    variable = ds[name].variable
    return "cupy" if variable.dims != (name,) and variable.dtype.kind in "biufc" else "numpy"


def assert_placed(ds, cupy, ordinal, opened=None):
    """Each variable of ``ds`` is where ``device_kind`` says for it in ``opened`` (the dataset as
    opened, before indexing dropped dimensions)."""
    opened = ds if opened is None else opened
    for name, variable in ds.variables.items():
        kind = type(variable.data).__module__.split(".")[0]
        assert kind == device_kind(opened, name), (name, kind)
        if kind == "cupy":
            assert variable.data.device.id == ordinal, name


def test_device_every_group_matches_h5netcdf(file, gpu, reads):
    cupy, ordinal = gpu
    path, groups = file
    for group in groups:
        theirs = xr.open_dataset(path, engine="h5netcdf", group=group).load()
        ours = xr.open_dataset(path, engine="h5gds", group=group, device=f"cuda:{ordinal}").load()
        assert_placed(ours, cupy, ordinal)
        assert_same(theirs, ours.as_numpy())
        kinds = {name: kind for name, _, _, kind in reads.take()}
        for name in ours.variables:
            # Big-endian data (no such CuPy types) is read on the host and converted.
            expected = "numpy" if name in BIG_ENDIAN else device_kind(ours, name)
            assert kinds.get(f"{group.rstrip('/')}/{name}", "numpy") == expected, name


@pytest.mark.parametrize("selection", SELECTIONS, ids=repr)
def test_device_lazily_indexed_variables_match_h5netcdf(files, gpu, selection):
    cupy, ordinal = gpu
    path, _ = files["netcdf4-python"]
    indexers = _indexers(selection)
    theirs = xr.open_dataset(path, engine="h5netcdf").isel(indexers).load()
    opened = xr.open_dataset(path, engine="h5gds", device=ordinal)
    ours = opened.isel(indexers).load()
    assert_placed(ours, cupy, ordinal, opened)
    assert_same(theirs, ours.as_numpy())


def test_device_datatree_matches_h5netcdf(file, gpu):
    cupy, ordinal = gpu
    path, _ = file
    theirs = xr.open_datatree(path, engine="h5netcdf").load()
    ours = xr.open_datatree(path, engine="h5gds", device=cupy.cuda.Device(ordinal)).load()
    for node in ours.subtree:
        assert_placed(node.to_dataset(inherit=False), cupy, ordinal)
    on_host = xr.DataTree.from_dict({node.path: node.to_dataset(inherit=False).as_numpy() for node in ours.subtree})
    xr.testing.assert_identical(theirs, on_host)


def test_device_unfiltered_variables_go_straight_into_device_memory(files, gpu, reads):
    require_emulator("its counters of cuFile reads and host-device copies")
    cupy, ordinal = gpu
    path, _ = files["xarray"]
    ds = xr.open_dataset(path, engine="h5gds", device=ordinal)
    before = CUDA.counters()
    plain = ds.plain.load()  # contiguous float32, NaN fill (nothing to decode)
    after = CUDA.counters()
    moved = {k: after[k] - before[k] for k in after}
    assert moved["cufile_reads"] >= 1 and moved["htod"] == 0 and moved["dtoh"] == 0, moved
    assert reads.take()[-1] == ("/plain", (slice(None), slice(None)), "gds", "cupy")
    np.testing.assert_array_equal(plain.data.get(), xr.open_dataset(path, engine="h5netcdf").plain.values)


def test_device_dask_chunks_are_cupy_one_read_each(file, gpu, reads):
    pytest.importorskip("dask", reason="scripts/test.sh installs dask with the [xarray] extra")
    cupy, ordinal = gpu
    path, _ = file
    theirs = xr.open_dataset(path, engine="h5netcdf").load()
    ours = xr.open_dataset(path, engine="h5gds", device=ordinal, chunks={"time": 4},
                           chunked_array_type=h5gds.xarray.DeviceDaskManager())
    reads.take()
    variable = "temp" if "temp" in ours else "sst"
    data = ours[variable].data
    assert type(data._meta) is cupy.ndarray
    first = data.blocks[(0,) * data.ndim].compute()
    assert type(first) is cupy.ndarray and first.device.id == ordinal
    assert [(name, kind) for name, _, _, kind in reads.take()] == [(f"/{variable}", "cupy")]
    computed = ours.compute()
    assert_placed(computed, cupy, ordinal)
    assert_same(theirs, computed.as_numpy())


def test_device_ordinals_are_checked(files, gpu):
    cupy, _ = gpu
    path, _ = files["xarray"]
    count = CUDA.device_count
    with pytest.raises(ValueError, match=rf"device='cuda:{count}': CUDA device {count} does not exist here; "
                                         rf"CuPy sees {count} device"):
        xr.open_dataset(path, engine="h5gds", device=f"cuda:{count}")
    with pytest.raises(ValueError, match=r"device=-1: CUDA device -1 does not exist"):
        xr.open_dataset(path, engine="h5gds", device=-1)


def test_device_to_netcdf_writes_from_device_memory(tmp_path, gpu, writes):
    require_emulator("its counters of cuFile writes and host-device copies")
    cupy, ordinal = gpu
    host = writes_dataset().drop_vars(["label", "lag", "none"])
    with cupy.cuda.Device(ordinal):
        on_device = host.copy(data={name: cupy.asarray(v.values) for name, v in host.data_vars.items()})
    assert type(on_device.t.data) is cupy.ndarray
    # (packing runs xarray's arithmetic on the CuPy stand-in, which lacks some of CuPy's names)
    encoding = {k: v for k, v in WRITE_ENCODING.items() if k not in ("big", "packed")}
    host.to_netcdf(tmp_path / "host.nc", engine="h5netcdf", encoding=encoding)
    writes.counters = CUDA.counters
    on_device.to_netcdf(tmp_path / "device.nc", engine="h5gds")
    # Contiguous variables from device memory straight into the file: no copy to the host (the
    # CuPy stand-in's own arithmetic, xarray's encoding, copies through the host; 0-d variables
    # are staged).
    for name in ("t", "packed", "counts", "wide", "mask"):
        moved = writes.moved[f"/{name}"]
        assert moved["cufile_writes"] == 1 and moved["dtoh"] == 0 and moved["pinned_allocs"] == 0, (name, moved)
    writes.counters = None
    host.to_netcdf(tmp_path / "host-plain.nc", engine="h5netcdf")
    assert_same_files(tmp_path / "host-plain.nc", tmp_path / "device.nc")
    routes = {name: (route, kind) for name, route, kind in writes.take()}
    assert routes["/t"] == ("write", "cupy") and routes["/counts"] == ("write", "cupy")
    # Chunked and unfiltered: h5gds.write from device memory too.
    on_device.to_netcdf(tmp_path / "chunked.nc", engine="h5gds", encoding={"counts": encoding["counts"]})
    host.to_netcdf(tmp_path / "host-chunked.nc", engine="h5netcdf", encoding={"counts": encoding["counts"]})
    assert_same_files(tmp_path / "host-chunked.nc", tmp_path / "chunked.nc")
    assert ("/counts", "write", "cupy") in writes.take()
    # Compressed: the device variable handed to the engine's write policy as it is (encoded on the
    # GPU where nvCOMP takes the pipeline, else from one copy on the host), the same bytes.
    on_device.to_netcdf(tmp_path / "compressed.nc", engine="h5gds", encoding=encoding)
    assert_same_files(tmp_path / "host.nc", tmp_path / "compressed.nc")
    routes = {name: (route, kind) for name, route, kind in writes.take()}
    assert routes["/t"] == ("encoded", "cupy") and routes["/wide"] == ("encoded", "cupy")


def test_the_device_cases_on_the_emulator(request):
    """scripts/test.sh runs this file where no CUDA driver loads: the device cases then run here, in a
    child process whose libcuda, libcufile and libnvcomp are h5gds's emulators."""
    if not isinstance(CUDA, Exception):
        pytest.skip("this process has a CUDA driver: the device cases ran in it")
    if not (EMULATOR_LIBS / "libcuda.so.1").exists():
        pytest.skip(f"no emulator libraries in {EMULATOR_LIBS} (scripts/test.sh links them there)")
    env = clean_env({"LD_LIBRARY_PATH": f"{EMULATOR_LIBS}:{os.environ.get('LD_LIBRARY_PATH', '')}",
                     "H5GDS_REQUIRE_DEVICE_TESTS": "1", "H5GDS_EMU_DEVICES": "2", "H5GDS_EMU_DEFER_ASYNC": "1"})
    child = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "test_device_",
                            Path(__file__).name], cwd=HERE, env=env, capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stdout[-6000:] + child.stderr[-3000:]
    counts = child.stdout.strip().splitlines()[-2]
    passed = re.match(r"(\d+) passed, \d+ deselected in ", counts)
    here = [item for item in request.session.items if item.module is sys.modules[__name__]]
    assert passed and int(passed.group(1)) >= sum(item.name.startswith("test_device_") for item in here) > 0, counts
    assert "EMULATED (h5gds's CPU emulators, no GPU used)" in child.stdout
