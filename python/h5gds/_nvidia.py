"""NVIDIA's libraries from their pip wheels (``pip install h5gds[cu12]`` or ``[cu13]``): found in
site-packages, each wheel's library directory, and handed to the extension before it would search
by soname, so neither ``LD_LIBRARY_PATH`` nor a system CUDA toolkit is needed. Where no wheel is
installed the system's libraries are found as before (``libcufile.so.0``, ``libnvcomp.so.6``)."""

import os
import sys

#: Where each library lies below a site-packages directory, in the order tried: CUDA 13's wheels
#: (``nvidia-cufile``, ``nvidia-libnvcomp-cu13``), then CUDA 12's (``nvidia-cufile-cu12``,
#: ``nvidia-libnvcomp-cu12``).
WHEEL_FILES = {
    "cufile": ("nvidia/cu13/lib/libcufile.so.0", "nvidia/cufile/lib/libcufile.so.0"),
    "nvcomp": ("nvidia/libnvcomp/lib64/libnvcomp.so.6", "nvidia/libnvcomp/lib/libnvcomp.so.6"),
}


def find(directories=None):
    """``{"cufile": path or None, "nvcomp": path or None}``: the first wheel file of each library
    found in ``directories`` (default: ``sys.path``, which holds site-packages)."""
    directories = [d for d in (sys.path if directories is None else directories) if d]
    found = {}
    for name, relative in WHEEL_FILES.items():
        candidates = (os.path.join(d, r) for r in relative for d in directories)
        found[name] = next((c for c in candidates if os.path.isfile(c)), None)
    return found
