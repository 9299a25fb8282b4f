"""xarray's own backend tests of its h5netcdf engine, run with engine="h5gds": the six test
classes of xarray's wheel (xarray/tests/test_backends.py, test_backends_datatree.py) subclassed
with ``engine = "h5gds"``, reads and writes. They must fail nothing they pass with
engine="h5netcdf"; ``H5GDS_XARRAY_SUITE_ENGINE=h5netcdf`` runs the same subclasses with
xarray's engine for the comparison (docs/xarray.md gives both counts).

As xarray's repository runs them: its fixtures (``xarray.tests.conftest``), and the tests marked
``network`` or ``flaky`` skipped (its root conftest skips them without --run-network-tests,
--run-flaky).

In a process that imported xarray alone: nothing here imports h5gds, so engine="h5gds" writes
work as a user's do, through the wheel's start-up hook (h5gds_xarray.pth). scripts/test.sh runs
this file in a pytest process of its own; run with the other files, after one that imported h5gds,
test_h5gds_was_not_imported_before_this_suite fails."""

import os
import sys

import numpy as np
import pytest

IMPORTED_BEFORE = sorted(m for m in sys.modules if m.split(".")[0] == "h5gds")

xr = pytest.importorskip("xarray", reason="scripts/test.sh installs the [xarray] extra's packages")
pytest.importorskip("h5netcdf", reason="scripts/test.sh installs the [xarray] extra's packages")
pytest.importorskip("dask", reason="scripts/test.sh installs dask with the [xarray] extra")
backends = pytest.importorskip("xarray.tests.test_backends", reason="xarray's wheel ships its tests")
datatree = pytest.importorskip("xarray.tests.test_backends_datatree", reason="xarray's wheel ships its tests")

pytest_plugins = ["xarray.tests.conftest"]

ENGINE = os.environ.get("H5GDS_XARRAY_SUITE_ENGINE", "h5gds")
if ENGINE not in ("h5gds", "h5netcdf"):
    raise ValueError(f"H5GDS_XARRAY_SUITE_ENGINE={ENGINE!r}: 'h5gds' (the default) or 'h5netcdf'")


def test_h5gds_was_not_imported_before_this_suite():
    assert IMPORTED_BEFORE == [], ("run this file in a pytest process of its own (scripts/test.sh does): "
                                   f"{IMPORTED_BEFORE} were imported before it")


@pytest.fixture(autouse=True)
def _skip_network_and_flaky(request):
    for mark in ("network", "flaky"):
        if request.node.get_closest_marker(mark) is not None:
            pytest.skip(f"marked {mark}: xarray's repository skips these unless asked (--run-{mark})")


class WarnsAsH5netcdf:
    """xarray's test_encoding_enum__no_fill_value expects h5netcdf's warning about the enum's
    fill value for the engine named "h5netcdf" only; engine="h5gds" creates variables through
    h5netcdf, so it warns the same. The same test, expecting that."""

    def test_encoding_enum__no_fill_value(self, recwarn):
        netCDF4 = pytest.importorskip("netCDF4")
        kinds = {"clear": 0, "cloudy": 1}
        with backends.create_tmp_file() as path:
            with netCDF4.Dataset(path, mode="w") as nc:
                nc.createDimension("time", size=2)
                clouds = nc.createVariable("clouds", nc.createEnumType(np.uint8, "cloud_type", kinds), "time",
                                           fill_value=None)
                clouds[:] = 1
            with xr.open_dataset(path, engine="netcdf4") as original, self.roundtrip(original) as actual:
                warned = [(w.category, str(w.message)) for w in recwarn]
                assert len(warned) == 1 and issubclass(warned[0][0], UserWarning), warned
                assert warned[0][1].startswith("Creating variable with default fill_value 0 which IS defined in "
                                               "enum type")
                xr.testing.assert_equal(original, actual)
                assert actual.clouds.encoding["dtype"].metadata["enum"] == kinds


class TestH5gdsData(WarnsAsH5netcdf, backends.TestH5NetCDFData):
    engine = ENGINE


class TestH5gdsFileObject(WarnsAsH5netcdf, backends.TestH5NetCDFFileObject):
    engine = ENGINE


class TestH5gdsInMemoryData(backends.TestH5NetCDFInMemoryData):
    engine = ENGINE


class TestH5gdsViaDaskData(WarnsAsH5netcdf, backends.TestH5NetCDFViaDaskData):
    engine = ENGINE


class TestNetCDF4ClassicViaH5gdsData(backends.TestNetCDF4ClassicViaH5NetCDFData):
    engine = ENGINE


class TestH5gdsDatatreeIO(datatree.TestH5NetCDFDatatreeIO):
    engine = ENGINE
