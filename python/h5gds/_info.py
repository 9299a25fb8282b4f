"""``h5gds.info()``: the report of ``h5gds info --json``, gathered by the same Rust code."""

import json

from . import _native, _nvidia
from ._driver import DRIVER_ID, HDF5_LIBRARY, OTHER_GDS_DRIVER


def info():
    """What decides the path data takes here (CUDA, cuFile, settings, plugins on
    ``HDF5_PLUGIN_PATH``) and a verdict per path, as a dict with the keys ``h5gds info --json``
    prints. ``plugin`` is this package's extension module (it carries the driver); ``python``
    adds where the driver was registered (and which other ``gds`` driver, if any, took its
    place)."""
    _nvidia.prepare()
    report = json.loads(_native.info_json(_native.__file__))
    report["python"] = {
        "hdf5_library": HDF5_LIBRARY,
        "registered_here": DRIVER_ID is not None,
        "other_gds_driver": OTHER_GDS_DRIVER,
    }
    return report
