"""Where h5gds's vfd-gds compatibility library lies (``libhdf5_vfd_gds.so.1``, vfd-gds's
``H5Pset_fapl_gds`` and ``H5Pget_fapl_gds`` on h5gds's driver), for ``LD_PRELOAD`` in Legate
jobs or to replace the vfd-gds a program links: see docs/legate-and-vfd-gds.md."""

import os

VFD_GDS_COMPAT_FILE = "libhdf5_vfd_gds.so.1"


def vfd_gds_compat_library():
    """The path of the compatibility library this package carries (the wheels built by
    scripts/build-wheel.sh do). ``FileNotFoundError`` where it carries none, saying how to build
    it."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), VFD_GDS_COMPAT_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"this h5gds carries no vfd-gds compatibility library ({path} is missing): wheels "
            "built by scripts/build-wheel.sh carry it; from a source checkout, "
            "`cargo build --release -p h5gds-vfd-gds-compat` builds "
            "target/release/libhdf5_vfd_gds.so")
    return path
