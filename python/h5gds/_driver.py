"""Registration of the ``gds`` driver in h5py's HDF5, and ``driver="gds"`` for ``h5py.File``."""

import h5py
from h5py import h5
from h5py._objects import phil

from . import _native

#: The driver's settings, usable as keywords of ``h5py.File(..., driver="gds")``.
SETTING_KEYS = tuple(_native.SETTING_KEYS)


def _set_fapl(plist, **settings):
    """h5py's driver hook: select ``gds`` on the file access list, keywords as its config."""
    config = _native.config_string(settings)
    _native.set_fapl(plist.id, config)


def _register():
    # h5py's `h5` extension module is linked with h5py's HDF5: the driver registers there,
    # whichever other HDF5 libraries (PyTables, netCDF4 wheels) the process holds.
    with phil:
        library, driver_id = _native.register_driver(h5.__file__)
    h5py.register_driver(_native.DRIVER_NAME, _set_fapl)
    return library, driver_id


#: The HDF5 library the driver was registered in, and its driver id (None when a ``gds`` driver
#: was already registered there, e.g. h5gds's plugin loaded through ``HDF5_PLUGIN_PATH``).
HDF5_LIBRARY, DRIVER_ID = _register()
