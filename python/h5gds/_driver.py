"""Registration of the ``gds`` driver in h5py's HDF5, and ``driver="gds"`` for ``h5py.File``."""

import h5py
from h5py import h5
from h5py._objects import phil

from . import _native, _nvidia

#: The driver's settings, usable as keywords of ``h5py.File(..., driver="gds")``.
SETTING_KEYS = tuple(_native.SETTING_KEYS)


def _set_fapl(plist, **settings):
    """h5py's driver hook: select ``gds`` on the file access list, keywords as its config."""
    if OTHER_GDS_DRIVER is not None:
        raise OSError(
            "another HDF5 driver is registered as gds (value 512) in h5py's HDF5, from "
            f"{OTHER_GDS_DRIVER}: probably vfd-gds, the GPUDirect Storage driver Legate and others "
            "ship, so h5gds's driver could not be registered. Do not load the other one in this "
            "process (take its directory out of HDF5_PLUGIN_PATH, or put h5gds's first, where "
            "HDF5_DRIVER=gds is set)"
        )
    config = _native.config_string(settings)
    if _nvidia.pending and _nvidia.compat_mode_off(settings):
        _nvidia.prepare()  # the driver opens cuFile at this open
    _native.set_fapl(plist.id, config)


def _register():
    # h5py's `h5` extension module is linked with h5py's HDF5: the driver registers there,
    # whichever other HDF5 libraries (PyTables, netCDF4 wheels) the process holds.
    with phil:
        registration = _native.register_driver(h5.__file__)
    h5py.register_driver(_native.DRIVER_NAME, _set_fapl)
    return registration


#: The HDF5 library the driver was registered in; its driver id (None when h5gds's driver was
#: already registered there, e.g. its plugin loaded through ``HDF5_PLUGIN_PATH``); the library of
#: another driver holding the name ``gds`` there, if one does (then ``driver="gds"`` raises).
HDF5_LIBRARY, DRIVER_ID, OTHER_GDS_DRIVER = _register()
