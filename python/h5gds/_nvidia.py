"""NVIDIA's libraries, found before the extension would look for them by soname, so that neither
``LD_LIBRARY_PATH`` nor a system CUDA toolkit on the loader's path is needed:

* cuFile (``libcufile.so.0``) as NVIDIA's ``cuda-pathfinder`` finds it (CuPy and KvikIO find
  theirs so): NVIDIA's pip wheels (``pip install h5gds[cu12]`` or ``[cu13]``; CUDA 13's
  ``nvidia/cu13/lib`` first), conda's ``$CONDA_PREFIX``, the system's loader (``LD_LIBRARY_PATH``,
  ``ld.so.conf``), then ``$CUDA_PATH`` or ``$CUDA_HOME`` (``lib64``, ``lib``). cuda-pathfinder
  finds by loading (``dlopen``, global), so libcufile is loaded when h5gds is imported; loading
  it calls nothing in it, and the extension's own load of the same file gets the same copy.
* nvCOMP (``libnvcomp.so.6``), which cuda-pathfinder does not know: its pip wheels' files below
  ``sys.path`` (``WHEEL_FILES``), else the extension's soname.
* The CUDA driver (``libcuda.so.1``) is not looked for here: it is the driver's, found by soname
  only (cuda-pathfinder does no more for it), and loaded when CUDA is first asked, not at import.
"""

import os
import sys
import warnings

#: Where nvCOMP lies below a site-packages directory, in the order tried: CUDA 13's wheel
#: (``nvidia-libnvcomp-cu13``), then CUDA 12's (``nvidia-libnvcomp-cu12``).
WHEEL_FILES = {
    "nvcomp": ("nvidia/libnvcomp/lib64/libnvcomp.so.6", "nvidia/libnvcomp/lib/libnvcomp.so.6"),
}


def find(directories=None):
    """``{"cufile": path or None, "nvcomp": path or None}``: the files the extension is to load
    first (``_native.prefer_library_files``). ``directories`` (default: ``sys.path``, which holds
    site-packages) are where nvCOMP's wheel files are looked for."""
    return {"cufile": cufile(), "nvcomp": wheel_file("nvcomp", directories)}


def cufile():
    """libcufile's file as cuda-pathfinder finds (and loads) it, or None where it finds none: the
    extension then tries the soname, and ``h5gds info`` says why it does not load. A file
    cuda-pathfinder finds but cannot load is named in a ``RuntimeWarning``."""
    try:
        from cuda.pathfinder import DynamicLibNotFoundError, load_nvidia_dynamic_lib
    except ImportError as exc:  # installed without its dependencies
        warnings.warn(f"h5gds needs cuda-pathfinder to find cuFile ({exc}); it tries the soname libcufile.so.0 only",
                      RuntimeWarning, stacklevel=2)
        return None
    try:
        return load_nvidia_dynamic_lib("cufile").abs_path
    except DynamicLibNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001  (importing h5gds works without cuFile)
        warnings.warn(f"cuda-pathfinder found no loadable libcufile.so.0 ({exc}); h5gds tries the soname",
                      RuntimeWarning, stacklevel=2)
        return None


def wheel_file(name, directories=None):
    """The first of ``WHEEL_FILES[name]`` below one of ``directories`` (default: ``sys.path``)."""
    directories = [d for d in (sys.path if directories is None else directories) if d]
    candidates = (os.path.join(d, r) for r in WHEEL_FILES[name] for d in directories)
    return next((c for c in candidates if os.path.isfile(c)), None)
