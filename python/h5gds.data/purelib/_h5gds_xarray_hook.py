"""``to_netcdf(engine="h5gds")`` without ``import h5gds.xarray`` first: run at every interpreter
start by ``h5gds_xarray.pth``, which the h5gds wheel installs beside it in site-packages.

xarray looks its writers up by name in a fixed table and takes no plugin for them (xarray issue
5954); ``h5gds.xarray`` wraps xarray's two writing functions when it is imported. This module
makes that import happen when, and only when, a write names ``engine="h5gds"``: a finder on
``sys.meta_path`` answers nothing but ``xarray.backends.writers``, and for that module hands back
the spec the other finders give with one step added after the module runs: its ``to_netcdf``
and ``_datatree_to_netcdf`` become stand-ins that import ``h5gds.xarray`` (which wraps xarray's
functions in their place) for a call naming ``engine="h5gds"`` and pass every other call to
xarray's function unchanged.

At start-up it imports nothing (``sys`` is always loaded) and touches neither h5gds, h5py, numpy
nor xarray; where xarray is absent, or is never imported, it does nothing else. A failure of its
own (an xarray without these functions, an unexpected loader) leaves xarray as it is: every step
is guarded, and ``engine="h5gds"`` then needs ``import h5gds.xarray`` as before. An error of the
import it makes for an ``engine="h5gds"`` write (h5netcdf missing, say) is that write's error.
``python -S`` (no site-packages processing) runs without it."""

import sys

_WRITERS_MODULE = "xarray.backends.writers"
_WRITING_FUNCTIONS = ("to_netcdf", "_datatree_to_netcdf")


def _stand_in(module, name, original):
    """``module.name`` until ``h5gds.xarray`` replaces it: ``original``, except that a call naming
    ``engine="h5gds"`` first imports ``h5gds.xarray`` and then goes to what it installed."""
    import functools
    import inspect

    signature = inspect.signature(original)

    @functools.wraps(original)
    def write(*args, **kwargs):
        try:
            engine = signature.bind(*args, **kwargs).arguments.get("engine")
        except TypeError:
            engine = None  # xarray's function names the mistake
        if engine != "h5gds":
            return original(*args, **kwargs)
        from h5gds import xarray as h5gds_xarray

        h5gds_xarray._install_writers()  # done by its import; again after a reload of xarray's module
        installed = getattr(module, name)
        if installed is write:
            raise RuntimeError(f"h5gds.xarray installed no writer as xarray.backends.writers.{name}")
        return installed(*args, **kwargs)

    write.h5gds_deferred = original
    return write


def _install(module):
    """The stand-ins, in the freshly run ``xarray.backends.writers``; nothing where a function is
    missing or already stands in."""
    for name in _WRITING_FUNCTIONS:
        original = getattr(module, name, None)
        if callable(original) and getattr(original, "h5gds_deferred", None) is None and \
                not getattr(original, "h5gds_writes", False):
            setattr(module, name, _stand_in(module, name, original))


class _Loader:
    """The loader the other finders chose, plus ``_install`` once the module has run; the module
    keeps that loader as its ``__loader__``."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        try:  # the module and its spec name the loader that runs it, as without this finder
            module.__loader__ = self.loader
            module.__spec__.loader = self.loader
        except Exception:  # noqa: BLE001  (they keep naming this one)
            pass
        self.loader.exec_module(module)
        try:
            _install(module)
        except Exception:  # noqa: BLE001  (xarray stays as it is; see the module's docstring)
            pass


class XarrayWriterFinder:
    """On ``sys.meta_path``, first: finds no module itself; for ``xarray.backends.writers`` it
    returns the other finders' spec with its loader wrapped in ``_Loader``."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _WRITERS_MODULE:
            return None
        try:
            for finder in sys.meta_path:
                if finder is self or isinstance(finder, XarrayWriterFinder):
                    continue
                find_spec = getattr(finder, "find_spec", None)
                spec = find_spec(fullname, path, target) if find_spec is not None else None
                if spec is None:
                    continue
                if spec.loader is None or not hasattr(spec.loader, "exec_module"):
                    return None  # the import goes on as if this finder were absent
                spec.loader = _Loader(spec.loader)
                return spec
        except Exception:  # noqa: BLE001  (the import goes on as if this finder were absent)
            return None
        return None


def _start():
    if any(isinstance(finder, XarrayWriterFinder) for finder in sys.meta_path):
        return
    writers = sys.modules.get(_WRITERS_MODULE)
    if writers is not None:  # imported before this ran (by another .pth file)
        _install(writers)
    sys.meta_path.insert(0, XarrayWriterFinder())


try:
    _start()
except Exception:  # noqa: BLE001  (never an error at interpreter start)
    pass
