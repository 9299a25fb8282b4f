"""Programs that use two or three HDF5 copies in one process (h5py's, netCDF4's and PyTables'), each
reaching the driver its HDF5 loads through HDF5_PLUGIN_PATH/HDF5_DRIVER. Run in a child
interpreter under sec2 and under gds by test_two_hdf5.py, which compares what they print: one line
per read or written selection, with a digest of its bytes.

    python two_hdf5_scenarios.py interleaved DIR [tables]
    python two_hdf5_scenarios.py xarray DIR ORDER      (ORDER: h5netcdf,netcdf4 or netcdf4,h5netcdf)
    python two_hdf5_scenarios.py dump FILE...
"""

import hashlib
import sys
from pathlib import Path

import numpy as np


def digest(label, values):
    """One output line: the label, the array's dtype and shape, and a digest of its bytes."""
    values = np.ascontiguousarray(np.asarray(values))
    print(f"{label}: {values.dtype} {values.shape} {hashlib.sha256(values.tobytes()).hexdigest()[:24]}", flush=True)


def pattern(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def points_mask(shape, seed):
    """A scattered boolean mask: h5py reads and writes it as a point selection."""
    return np.random.default_rng(seed).random(shape) < 0.07


def interleaved(directory, with_tables):
    import h5py
    import netCDF4

    directory = Path(directory)
    h5_path, nc_path, tb_path = directory / "h5py.h5", directory / "netcdf4.nc", directory / "tables.h5"
    shape = (60, 80)

    # Writes, interleaved, with files of both libraries open at once.
    h5 = h5py.File(h5_path, "w")
    nc = netCDF4.Dataset(nc_path, "w")
    nc.createDimension("t", None)
    nc.createDimension("y", shape[0])
    nc.createDimension("x", shape[1])
    v = nc.createVariable("v", "f8", ("t", "y", "x"))
    w = nc.createVariable("w", "f4", ("y", "x"), zlib=True, chunksizes=(16, 16))
    x = h5.create_dataset("x", data=pattern(shape, 1))                              # whole
    c = h5.create_dataset("c", data=pattern(shape, 2).astype("f4"), chunks=(16, 16))
    v[0:3] = pattern((3, *shape), 3)                                                # whole, unlimited
    x[5:25, 10:50] = pattern((20, 40), 4)                                           # hyperslab
    w[:] = pattern(shape, 5).astype("f4")
    v[1, 4:30, 7:70] = pattern((26, 63), 6)                                         # hyperslab
    x[::3, 1::4] = pattern((20, 20), 7)                                             # strided
    v[2, ::4, 1::3] = pattern((15, 27), 8)                                          # strided
    mask = points_mask(shape, 9)
    x[mask] = pattern(int(mask.sum()), 10)                                          # points
    c[1::5, ::2] = pattern((12, 40), 11).astype("f4")
    v[0, [2, 9, 33, 34], :] = pattern((4, shape[1]), 12)                             # listed rows
    w[3:50:7, :] = pattern((7, shape[1]), 13).astype("f4")
    h5.close()
    nc.close()

    tb = None
    if with_tables:
        import tables

        tb = tables.open_file(str(tb_path), "w")
        t = tb.create_array("/", "t", obj=pattern(shape, 14))
        t[3:40:5, :] = pattern((8, shape[1]), 15)
        t[10:20, 30:60] = pattern((10, 30), 16)
        tb.close()

    # Reads, interleaved, each file open in both libraries at once: the same file through two
    # HDF5 copies, and different files.
    h5 = h5py.File(h5_path, "r")
    nc = netCDF4.Dataset(nc_path, "r")
    nc_by_h5py = h5py.File(nc_path, "r")
    h5_by_nc = netCDF4.Dataset(h5_path, "r")
    tb = tables.open_file(str(tb_path), "r") if with_tables else None
    reads = [
        ("h5py x whole", lambda: h5["x"][...]),
        ("netCDF4 v whole", lambda: nc["v"][:].data),
        ("h5py x hyperslab", lambda: h5["x"][7:41, 3:77]),
        ("netCDF4 v hyperslab", lambda: nc["v"][1, 2:50, 5:66].data),
        ("h5py x strided", lambda: h5["x"][1::3, ::5]),
        ("netCDF4 v strided", lambda: nc["v"][::2, 3::4, ::3].data),
        ("h5py x points", lambda: h5["x"][points_mask(shape, 21)]),
        ("netCDF4 v listed", lambda: nc["v"][2, [0, 5, 6, 40], 3:9].data),
        ("h5py reads netCDF4's v strided", lambda: nc_by_h5py["v"][:, 1::2, ::7]),
        ("netCDF4 reads h5py's x strided", lambda: h5_by_nc["x"][::2, 3::5].data),
        ("h5py reads netCDF4's w points", lambda: nc_by_h5py["w"][points_mask(shape, 22)]),
        ("netCDF4 w whole", lambda: nc["w"][:].data),
        ("h5py c strided", lambda: h5["c"][2::3, 1::2]),
        ("netCDF4 reads h5py's c hyperslab", lambda: h5_by_nc["c"][4:44, 9:71].data),
        ("h5py reads netCDF4's v whole", lambda: nc_by_h5py["v"][...]),
        ("netCDF4 reads h5py's x whole", lambda: h5_by_nc["x"][:].data),
    ]
    if tb is not None:
        reads += [
            ("tables t whole", lambda: tb.root.t[:]),
            ("h5py x strided again", lambda: h5["x"][::7, ::2]),
            ("tables t strided", lambda: tb.root.t[1::3, ::4]),
            ("netCDF4 v strided again", lambda: nc["v"][:, ::5, 2::2].data),
            ("tables t listed rows", lambda: tb.root.t[[0, 4, 17, 33], 5:60:2]),
        ]
    for label, read in reads:
        digest(label, read())
    for f in (h5, nc, nc_by_h5py, h5_by_nc) + ((tb,) if tb is not None else ()):
        f.close()
    print("INTERLEAVED OK", flush=True)


def xarray_engines(directory, order):
    """xarray opens one netCDF-4 file with each engine in turn, in one process (the order given)."""
    import netCDF4
    import xarray as xr

    path = Path(directory) / "xr.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("time", None)
        nc.createDimension("lat", 30)
        nc.createDimension("lon", 40)
        t = nc.createVariable("time", "f8", ("time",))
        t.units = "days since 2000-01-01"
        t[:] = np.arange(5)
        temp = nc.createVariable("temp", "i2", ("time", "lat", "lon"), zlib=True, fill_value=-999)
        temp.scale_factor = 0.01
        temp.add_offset = 273.15
        temp[:] = (pattern((5, 30, 40), 31) * 1000).astype("i2")
        temp[1, ::4, ::3] = np.ma.masked
        grp = nc.createGroup("sub")
        grp.createDimension("n", 17)
        grp.createVariable("s", "f4", ("n",))[:] = np.arange(17, dtype="f4") / 3
    opened = {}
    for engine in order.split(","):
        with xr.open_dataset(path, engine=engine) as ds:
            ds.load()
            opened[engine] = ds
            digest(f"{engine} temp", ds["temp"].values)
            digest(f"{engine} temp strided", ds["temp"][:, 1::3, ::2].values)
        with xr.open_dataset(path, engine=engine, group="sub") as sub:
            digest(f"{engine} sub/s", sub["s"].values)
    first, second = opened.values()
    xr.testing.assert_identical(first, second)
    print("XARRAY OK", flush=True)


def dump(paths):
    """Every dataset of each file, by h5py: name and a digest of its bytes."""
    import h5py

    for path in paths:
        with h5py.File(path, "r") as f:
            def show(name, obj):
                if isinstance(obj, h5py.Dataset):
                    digest(f"{Path(path).name}:{name}", obj[()])
            f.visititems(show)


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "interleaved":
        interleaved(sys.argv[2], len(sys.argv) > 3 and sys.argv[3] == "tables")
    elif what == "xarray":
        xarray_engines(sys.argv[2], sys.argv[3])
    elif what == "dump":
        dump(sys.argv[2:])
    else:
        sys.exit(f"unknown scenario {what}")
