"""Several HDF5 copies in one process, each loading the plugin through HDF5_PLUGIN_PATH and
HDF5_DRIVER=gds: h5py's (HDF5 2.0), netCDF4's (2.2) and PyTables' (1.14). Ids of one copy mean
nothing, or something else, to another, so every call the driver makes back into HDF5 must reach
the copy that called it. Every read and written selection is compared with sec2 byte for byte."""

from pathlib import Path

import pytest

from support import NEW_PYTHON, assert_ran, run_child

SCENARIOS = Path(__file__).with_name("two_hdf5_scenarios.py")


def run(driver, *args, log=None):
    proc = run_child(SCENARIOS, args, driver, python=NEW_PYTHON, timeout=300, log=log)
    return assert_ran(proc, f"{args[0]} under {driver}")


def under_both_drivers(tmp_path, scenario, *args):
    """Runs `scenario` under sec2 and under gds, each in its own directory below `tmp_path`;
    returns (stdout, stderr) dicts by driver."""
    out, err = {}, {}
    for driver in ("sec2", "gds"):
        (tmp_path / driver).mkdir()
        proc = run(driver, scenario, tmp_path / driver, *args)
        out[driver], err[driver] = proc.stdout, proc.stderr
    return out, err


def hdf5_libraries(stderr):
    """The HDF5 libraries the driver's debug log says called it, and the counts of loaded ones."""
    lines = [line for line in stderr.splitlines() if "calls the driver through binding" in line]
    libraries = {line.split('HDF5 library "')[1].split('"')[0] for line in lines}
    counts = [int(line.rsplit("(", 1)[1].split()[0]) for line in lines]
    return libraries, counts


@pytest.mark.parametrize("third", ["", "tables"], ids=["h5py+netCDF4", "h5py+netCDF4+PyTables"])
def test_interleaved_selections_through_each_hdf5_copy_match_sec2(tmp_path, third):
    out, err = under_both_drivers(tmp_path, "interleaved", third)
    assert "INTERLEAVED OK" in out["sec2"]
    assert out["gds"] == out["sec2"]
    assert err["gds"] == err["sec2"] == ""
    # The files written through each copy: byte for byte (PyTables stamps times: by content).
    for name in ("h5py.h5", "netcdf4.nc"):
        assert (tmp_path / "gds" / name).read_bytes() == (tmp_path / "sec2" / name).read_bytes(), name
    if third:
        dumps = [run("sec2", "dump", tmp_path / d / "tables.h5").stdout for d in ("sec2", "gds")]
        assert dumps[0] == dumps[1] and "tables.h5:t" in dumps[0]


def test_each_hdf5_copy_gets_its_own_binding(tmp_path):
    proc = run("gds", "interleaved", tmp_path, "tables", log="debug")
    assert "INTERLEAVED OK" in proc.stdout
    libraries, counts = hdf5_libraries(proc.stderr)
    names = sorted(Path(lib).parent.name for lib in libraries)
    assert names == ["h5py.libs", "netcdf4.libs", "tables.libs"], libraries
    # Only HDF5 libraries are counted (PyTables' is loaded last), not the extension modules that
    # link one (27 of them).
    assert max(counts) == 3, counts
    # Every file was opened through gds.
    for name in ("h5py.h5", "netcdf4.nc", "tables.h5"):
        assert f'opened "{tmp_path / name}"' in proc.stderr, name


@pytest.mark.parametrize("order", ["h5netcdf,netcdf4", "netcdf4,h5netcdf"])
def test_xarray_opens_one_file_with_both_engines(tmp_path, order):
    out, err = under_both_drivers(tmp_path, "xarray", order)
    assert "XARRAY OK" in out["sec2"]
    assert out["gds"] == out["sec2"]
    assert err["gds"] == err["sec2"] == ""
    assert (tmp_path / "gds" / "xr.nc").read_bytes() == (tmp_path / "sec2" / "xr.nc").read_bytes()
