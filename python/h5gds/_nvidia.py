"""NVIDIA's libraries, found before the extension would look for them by soname, so that neither
``LD_LIBRARY_PATH`` nor a system CUDA toolkit on the loader's path is needed. ``import h5gds`` looks
for none of them: ``prepare()`` does, once per process, when Python is first about to move device
memory (``_arrays.view`` of a device array, ``h5gds.read``'s short way into a non-NumPy ``out``), at
a ``driver="gds"`` open with ``compat_mode=off`` (the driver then opens cuFile at the open), and
before ``h5gds.info()`` / ``python -m h5gds info``. A program that moves host memory only never
imports cuda-pathfinder nor loads libcufile. The runtime takes a preferred file only before it has
loaded the library, and it loads them only at a device transfer (or such an open, or ``info``):
``prepare()`` always comes first.

* cuFile (``libcufile.so.0``) as NVIDIA's ``cuda-pathfinder`` finds it (CuPy and KvikIO find
  theirs so): NVIDIA's pip wheels (``pip install h5gds[cu12]`` or ``[cu13]``; CUDA 13's
  ``nvidia/cu13/lib`` first), conda's ``$CONDA_PREFIX``, the system's loader (``LD_LIBRARY_PATH``,
  ``ld.so.conf``), then ``$CUDA_PATH`` or ``$CUDA_HOME`` (``lib64``, ``lib``). cuda-pathfinder
  finds by loading (``dlopen``, global), so ``prepare()`` loads libcufile; loading it calls
  nothing in it, and the extension's own load of the same file gets the same copy.
* nvCOMP (``libnvcomp.so.6``), which cuda-pathfinder does not know: its pip wheels' files below
  ``sys.path`` (``WHEEL_FILES``), else the extension's soname.
* The CUDA driver (``libcuda.so.1``) is not looked for here: it is the driver's, found by soname
  only (cuda-pathfinder does no more for it), and loaded when CUDA is first asked, not at import.
"""

import os
import sys
import threading
import warnings

#: Where nvCOMP lies below a site-packages directory, in the order tried: CUDA 13's wheel
#: (``nvidia-libnvcomp-cu13``), then CUDA 12's (``nvidia-libnvcomp-cu12``).
WHEEL_FILES = {
    "nvcomp": ("nvidia/libnvcomp/lib64/libnvcomp.so.6", "nvidia/libnvcomp/lib/libnvcomp.so.6"),
}


_lock = threading.Lock()

#: True until ``prepare()`` has handed the files to the extension (read without the lock: a stale
#: True only costs taking it).
pending = True


def prepare():
    """Finds the libraries (``find()``) and hands them to the extension
    (``_native.prefer_library_files``), the first time it is called in this process; later calls,
    and calls from other threads meanwhile (they wait for the first), do nothing."""
    global pending
    if not pending:
        return
    with _lock:
        if pending:
            from . import _native

            _native.prefer_library_files(**find())
            pending = False


def compat_mode_off(settings):
    """Whether a ``driver="gds"`` open with these keywords runs with ``compat_mode=off`` (the
    keyword, else ``H5GDS_COMPAT_MODE``), where the driver opens cuFile at the open itself."""
    value = settings.get("compat_mode", os.environ.get("H5GDS_COMPAT_MODE", ""))
    return value is False or str(value).strip().lower() == "off"


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
