"""xarray's ``engine="h5gds"``: netCDF-4 and HDF5 files opened as xarray's own h5netcdf engine
opens them, with the variables' data read through ``h5gds.read``, into NumPy or, with
``device=``, into CuPy arrays on a GPU (file to device memory, no host copy of the data).

Registered through the ``xarray.backends`` entry point (pyproject.toml); importing ``h5gds``
never imports this module, so the package works without xarray. ``DeviceDaskManager`` makes
dask chunks of device variables CuPy arrays (``chunked_array_type=``).

Decisions (docs/xarray.md):

* The netCDF structure (dimensions, coordinates, attributes, groups, unlimited dimensions,
  encodings) is h5netcdf's, read by xarray's ``H5NetCDFStore``, subclassed here; decoding
  (``_FillValue``, scale/offset, times) is xarray's CF decoding, as for every backend. Only the
  arrays differ: each indexing of a variable is one ``h5gds.read`` of a basic selection (ints,
  slices with positive steps); xarray applies the rest (integer arrays, negative steps) to what
  was read. Variable-length data (strings) and padding of non-numeric variables along a longer
  unlimited dimension are left to h5netcdf's own reading, through h5py.
* ``device``: the variables that become CuPy arrays are those whose decoded values are numbers
  or bools and that are not indexes (xarray builds pandas indexes from those, on the host, as
  cupy-xarray does); times, strings and indexes stay NumPy. xarray's CF decoding runs on the
  device, except for two steps written for NumPy only (masking fill values and the ``_Unsigned``
  cast call ``np.array``/``np.asarray``, which CuPy refuses): those are replaced by equivalents
  written with array methods. A variable whose decoding holds a step that cannot run on the
  device stays on the host.
* Dask: xarray chunks every lazily read backend array as NumPy (``meta=np.ndarray``, chunks
  converted with ``to_numpy``), which would copy device data back to the host; with
  ``chunked_array_type=DeviceDaskManager()`` the chunks of device variables are CuPy arrays,
  each read with one ``h5gds.read`` straight into device memory.
* Files open through the ``gds`` driver (``H5GDS_USE_VFD_GDS=0``: HDF5's default), with the
  chunk cache off when reading to the device, as ``h5gds.from_file`` does. A file h5py's HDF5
  holds open in this process through another driver (which refuses a ``gds`` open: its lock)
  opens as h5netcdf opens it, which HDF5 shares.
* Locks: a read ``_io.read_without_hdf5`` serves makes no HDF5 call, so takes no xarray lock.
* Writing (``to_netcdf(engine="h5gds")``; this module is imported by the first such write, through
  ``_h5gds_xarray_hook``, which the wheel's ``h5gds_xarray.pth`` runs at start-up): xarray's writers run as
  for ``engine="h5netcdf"`` with an ``H5gdsStore``; h5netcdf creates the structure, h5gds writes
  the data (``_write``): whole compressed fixed-size variables through h5gds's encoders, other
  fixed-size numbers through ``h5gds.write``, device arrays from device memory (those written
  whole into storage allocated at creation, so that they go straight through ``gds``);
  everything else h5netcdf writes.
"""

import contextlib
import contextvars
import functools
import importlib
import inspect
import operator

import numpy as np
from h5py import h5d, h5p, h5t, h5z
from xarray.backends import writers
from xarray.backends.common import _iter_nc_groups, datatree_from_dict_with_io_cleanup
from xarray.backends.h5netcdf_ import (
    H5NetCDFArrayWrapper,
    H5NetCDFStore,
    H5netcdfBackendEntrypoint,
    _check_phony_dims,
    _emit_phony_dims_warning,
    _normalize_filename_or_obj,
)
from xarray.backends.store import StoreBackendEntrypoint
from xarray.coding import variables as cf_variables
from xarray.coding.common import _ElementwiseFunctionArray
from xarray.core import indexing
from xarray.core.treenode import NodePath
from xarray.core.utils import close_on_error, is_remote_uri
from xarray.core.variable import Variable
from xarray.namedarray.daskmanager import DaskManager

from . import _driver, _encode, _files, _io


class H5gdsArrayWrapper(H5NetCDFArrayWrapper):
    """One h5netcdf variable whose data ``h5gds.read`` reads; ``device``: None for NumPy, else the
    CUDA device ordinal of the CuPy arrays it returns (set after decoding, ``_place``)."""

    def __init__(self, variable_name, datastore):
        super().__init__(variable_name, datastore)
        self.device = None
        # The h5py dataset of the last read into NumPy h5gds made itself, for the reads that
        # need no HDF5 call (_layout) and so no lock.
        self._served = None

    def __getitem__(self, key):
        # BASIC: h5gds.read takes ints and slices with positive steps; xarray indexes the result
        # with whatever else the key holds.
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.BASIC,
                                                  self._getitem)

    def _getitem(self, key):
        served = self._served
        if served is not None and self.device is None:
            # A read-only file's dataset whose storage h5gds resolved: read with no HDF5 call
            # (None, having read nothing, otherwise: closed, another selection), so without
            # xarray's lock, which keeps HDF5's calls apart.
            data = _io.read_without_hdf5(served, key, self.shape)
            if data is not None:
                return data
        with self.datastore.lock:
            variable = self.get_array(needs_lock=False)
            dset = variable._h5ds
            if dset.shape is None or dset.dtype.hasobject:
                # Null dataspaces, variable-length data: h5netcdf's (h5py's) conversions.
                return variable[key]
            padded = tuple(dset.shape) != tuple(variable.shape)
            if padded and dset.dtype.kind not in "fiu":
                # h5netcdf pads only numbers along a longer unlimited dimension.
                return variable[key]
            read = self._reader()
            if padded:
                data = _padded_read(read, dset, variable, key, self.device)
            else:
                data = read(dset, key)
            if dset.dtype.names:
                # Compound types holding char arrays: h5netcdf's view of them as strings.
                datatype = variable.datatype
                view = getattr(datatype, "dtype_view", None)
                if view is not None:
                    data = data.view(view)
            elif not padded and self.device is None:
                self._served = dset
            return data

    def __setitem__(self, key, value):
        # xarray's writes (ArrayWriter, dask's store): the whole variable (...) or a region.
        with self.datastore.lock:
            _write(self.get_array(needs_lock=False), key, value)
            if self.datastore.autoclose:
                self.datastore.close(needs_lock=False)

    def _reader(self):
        if self.device is None:
            return lambda dset, sel: _io.read(dset, sel=sel)
        return _files._Device("cupy", importlib.import_module("cupy"), self.device).read


def _padded_read(read, dset, variable, key, device):
    """``variable[key]`` of a numeric variable whose HDF5 dataset is shorter than its dimensions
    (an unlimited dimension another variable extended): the part inside the dataset read with
    one ``read``, the rest the dataset's fill value, as h5netcdf pads."""
    inside, place, shape = [], [], []
    empty = False
    for k, n_variable, n_dataset in zip(key, variable.shape, dset.shape):
        if isinstance(k, slice):
            indices = range(*k.indices(n_variable))
            kept = range(indices.start, min(indices.stop, n_dataset), indices.step)
            inside.append(slice(kept.start, kept.stop, kept.step))
            place.append(slice(0, len(kept)))
            shape.append(len(indices))
            empty = empty or not kept
        else:
            k = operator.index(k)
            k = k + n_variable if k < 0 else k
            inside.append(k)
            empty = empty or k >= n_dataset
    fill = variable.dtype.type(dset.fillvalue)
    if device is None:
        out = np.full(shape, fill, dtype=dset.dtype)
    else:
        cupy = importlib.import_module("cupy")
        with cupy.cuda.Device(device):
            out = cupy.full(shape, fill, dtype=dset.dtype.newbyteorder("="))
    if not empty:
        out[tuple(place)] = read(dset, tuple(inside))
    return out


class H5gdsStore(H5NetCDFStore):
    """xarray's h5netcdf store, its variables' arrays read through ``h5gds.read`` and written
    through ``h5gds.write``; local files and ``s3://``/``http(s)://`` URLs open through the ``gds``
    driver unless a driver is named (other URLs, as h5netcdf opens them)."""

    __slots__ = ()

    @classmethod
    def open(cls, filename, mode="r", *, driver=None, driver_kwds=None, **kwargs):
        local = isinstance(filename, str) and not is_remote_uri(filename)
        # s3:// and http(s):// URLs are read by the gds driver itself (docs/remote.md), not fsspec.
        url = driver is None and _files.is_url(filename)
        if url and mode != "r":
            _files.refuse_url_for_writing(filename)
        chosen = driver is None and (url or local and _files._driver() is not None)
        try:
            return super().open(filename, mode, driver="gds" if chosen else driver, driver_kwds=driver_kwds,
                                **kwargs)
        except BlockingIOError:
            if not chosen or not _files.open_in_this_process(filename):
                raise
        # Open in this process through another driver (h5netcdf's writing it, say): opened as
        # h5netcdf opens it, which HDF5 shares; the gds driver's settings do not apply.
        kept = {k: v for k, v in (driver_kwds or {}).items() if k not in _driver.SETTING_KEYS}
        return super().open(filename, mode, driver=None, driver_kwds=kept, **kwargs)

    def open_store_variable(self, name, var):
        # h5netcdf's dimensions, attributes and encoding; h5gds's array.
        variable = super().open_store_variable(name, var)
        data = indexing.LazilyIndexedArray(H5gdsArrayWrapper(name, self))
        return Variable(variable.dims, data, variable.attrs, variable.encoding)

    def prepare_variable(self, name, variable, check_encoding=False, unlimited_dims=None):
        # h5netcdf creates the variable (its netCDF-4 structure, encoding checks, attributes);
        # its data is written through the target.
        group = self.ds
        allocate = name not in group and _written_whole_from_device(group, variable, unlimited_dims)
        if allocate:
            # Storage allocated at creation (h5netcdf's, through h5py, is allocated by the first
            # write): what lets the device array's bytes go straight into the file through gds
            # (h5gds stages writes into unallocated storage). Never filled: written whole next.
            dcpl = h5p.create(h5p.DATASET_CREATE)
            dcpl.set_alloc_time(h5d.ALLOC_TIME_EARLY)
            group.create_variable = functools.partial(type(group).create_variable, group, dcpl=dcpl,
                                                      fill_time="never")
        try:
            _, data = super().prepare_variable(name, variable, check_encoding=check_encoding,
                                               unlimited_dims=unlimited_dims)
        finally:
            if allocate:
                del group.create_variable
        return H5gdsArrayWrapper(name, self), data


# --- writing ------------------------------------------------------------------------------------------------

#: The filters h5gds's encoders write (``_encode``).
_ENCODED_FILTERS = frozenset((h5z.FILTER_DEFLATE, h5z.FILTER_SHUFFLE, h5z.FILTER_FLETCHER32,
                              _encode.FILTER_ZSTD, _encode.FILTER_LZ4))


def _written_whole_from_device(group, variable, unlimited_dims):
    """Whether ``variable`` (encoded, about to be created in the h5netcdf ``group``) is a device
    array written whole right after its creation into a contiguous dataset: numbers or bools,
    not empty, no chunks or filters asked for, no unlimited dimension (those are chunked and
    extensible)."""
    if not hasattr(type(variable.data), "__cuda_array_interface__"):
        return False
    if not variable.ndim or not variable.size or variable.dtype.kind not in "biufc":
        return False
    encoding = variable.encoding
    if (encoding.get("chunksizes") is not None or encoding.get("contiguous") is False
            or encoding.get("compression") is not None
            or any(encoding.get(k) for k in ("zlib", "shuffle", "fletcher32"))):
        return False
    unlimited = set(unlimited_dims or ())
    while group is not None:
        unlimited.update(name for name, dim in group.dimensions.items() if dim.isunlimited())
        group = group.parent if group.name != "/" else None
    return not unlimited.intersection(variable.dims)


def _region(key, shape):
    """xarray's write key (``...`` or a tuple of slices, dask's regions) as slices inside
    ``shape``; None for any other key or one reaching past the dataset (h5netcdf's then)."""
    if key is Ellipsis:
        return tuple(slice(0, n) for n in shape)
    if not isinstance(key, tuple) or len(key) != len(shape):
        return None
    region = []
    for k, n in zip(key, shape):
        if not isinstance(k, slice) or k.step not in (None, 1):
            return None
        start = 0 if k.start is None else operator.index(k.start)
        stop = n if k.stop is None else operator.index(k.stop)
        if not 0 <= start <= stop <= n:
            return None
        region.append(slice(start, stop))
    return tuple(region)


def _encodable(dset, region):
    """Whether the chunks of ``dset`` are written encoded by h5gds (on the host's cores): all of
    a chunked dataset of fixed size whose filters it encodes. (An extensible dataset is left to
    HDF5, which stores the fill value past the edge of its edge chunks for later extension.)"""
    shape = dset.shape
    if any(r.start != 0 or r.stop != n for r, n in zip(region, shape)) or not all(shape):
        return False
    if dset.chunks is None or dset.maxshape != shape or any(c > n for c, n in zip(dset.chunks, shape)):
        return False
    dcpl = dset.id.get_create_plist()
    filters = [dcpl.get_filter(i)[0] for i in range(dcpl.get_nfilters())]
    # (the encoders write the array's bytes as they are: no padded or converted types)
    return (bool(filters) and set(filters) <= _ENCODED_FILTERS
            and dset.id.get_type().equal(h5t.py_create(dset.dtype)))


def _write(variable, key, value):
    """Writes ``value`` into ``variable[key]`` (an h5netcdf variable): with h5gds's encoders for
    the whole of a compressed variable of fixed size, with ``h5gds.write`` for anything else of
    fixed-size numbers and bools (device arrays from device memory); by h5netcdf, as it writes,
    for the rest: type conversions, broadcasting, enums, strings, compound types, regions past
    the dataset's extent (device arrays copied to the host first)."""
    dset = variable._h5ds
    dtype = dset.dtype
    region = None
    if dset.shape is not None and dtype.kind in "biufc" and not dtype.metadata and not dtype.subdtype:
        region = _region(key, dset.shape)
    shape = None if region is None else tuple(r.stop - r.start for r in region)
    if hasattr(type(value), "__cuda_array_interface__"):
        library = importlib.import_module(type(value).__module__.split(".")[0])
        if shape is None or not all(shape) or tuple(value.shape) != shape or value.dtype != dtype:
            # Big-endian files, conversions and broadcasts are HDF5's and h5py's: on a host copy.
            value = library.asnumpy(value)
        else:
            # (reshaped: ascontiguousarray makes 0-d arrays 1-d)
            value = library.ascontiguousarray(value).reshape(shape)
            if _encodable(dset, region):
                # Encoded on the GPU where the engine can (one filter nvCOMP encodes, the gds
                # driver), else copied to the host and encoded on its cores.
                _encode.write(dset.id, dset.name, value)
            else:
                _io.write(dset, value, sel=region)
            return
    if shape is not None and all(shape):
        host = np.asarray(value)
        if host.shape == shape and host.dtype.newbyteorder("=") == dtype.newbyteorder("="):
            host = np.asarray(host, dtype=dtype, order="C")
            if _encodable(dset, region):
                _encode.write(dset.id, dset.name, host)
            else:
                _io.write(dset, host, sel=region)
            return
    variable[key] = value


# to_netcdf(engine="h5gds"): xarray's writers know their engines by name and take no plugin, so
# h5gds.xarray wraps its two writing functions: engine="h5gds" runs as engine="h5netcdf" (the
# same options, checks and errors), the file opened as an H5gdsStore.
_WRITING = contextvars.ContextVar("h5gds_xarray_writing", default=False)


def _open_writable(target, **kwargs):
    """``WRITEABLE_STORES["h5netcdf"]``: h5netcdf's store, or h5gds's inside a write that named
    ``engine="h5gds"``."""
    return (H5gdsStore if _WRITING.get() else H5NetCDFStore).open(target, **kwargs)


def _writing_as_h5netcdf(function):
    signature = inspect.signature(function)

    @functools.wraps(function)
    def write(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        if bound.arguments.get("engine") != "h5gds":
            return function(*args, **kwargs)
        bound.arguments["engine"] = "h5netcdf"
        token = _WRITING.set(True)
        try:
            return function(*bound.args, **bound.kwargs)
        finally:
            _WRITING.reset(token)

    write.h5gds_writes = True
    return write


def _install_writers():
    """Idempotent; called again by ``_h5gds_xarray_hook``'s stand-ins (after a reload of xarray's
    module, which puts them back)."""
    writers.WRITEABLE_STORES["h5netcdf"] = _open_writable
    for name in ("to_netcdf", "_datatree_to_netcdf"):
        function = getattr(writers, name)
        if not getattr(function, "h5gds_writes", False):
            # The start-up hook's stand-in (h5gds_xarray.pth) is replaced: xarray's function is wrapped.
            function = getattr(function, "h5gds_deferred", function)
            setattr(writers, name, _writing_as_h5netcdf(function))


_install_writers()


# --- device= -----------------------------------------------------------------------------------------------


def _cupy(device):
    try:
        return importlib.import_module("cupy")
    except ImportError as err:
        label, how = _files._INSTALL["cupy"]
        raise ModuleNotFoundError(f"device={device!r} makes CuPy arrays, and {label} is not installed in "
                                  f"this environment: {how}", name="cupy") from err


def _device_ordinal(device):
    """The CUDA device ordinal ``device`` names, or None for the host: None or 'cpu' (NumPy),
    'cuda' (CuPy's current device), 'cuda:N' or N, or a ``cupy.cuda.Device``."""
    if device is None:
        return None
    if isinstance(device, str):
        name = device.strip().lower()
        if name == "cpu":
            return None
        if name == "cuda":
            return _checked(_cupy(device).cuda.runtime.getDevice(), device)
        kind, _, number = name.partition(":")
        if kind == "cuda" and number.isdigit():
            return _checked(int(number), device)
        raise ValueError(f"device={device!r}: accepted are None or 'cpu' (NumPy), 'cuda' (CuPy's current "
                         "device), 'cuda:N' or N (CUDA device N), or a cupy.cuda.Device")
    if isinstance(device, (bool, np.bool_)):
        raise TypeError(f"device={device!r}: a bool names no device; use 'cuda' or an ordinal")
    if type(device).__module__.split(".")[0] == "cupy" and hasattr(device, "id"):
        return _checked(int(device.id), device)
    try:
        ordinal = operator.index(device)
    except TypeError:
        raise TypeError(f"device must be None, 'cpu', 'cuda', 'cuda:N', an int or a cupy.cuda.Device, not "
                        f"{type(device).__module__}.{type(device).__name__}") from None
    return _checked(ordinal, device)


def _checked(ordinal, device):
    count = _cupy(device).cuda.runtime.getDeviceCount()
    if not 0 <= ordinal < count:
        raise ValueError(f"device={device!r}: CUDA device {ordinal} does not exist here; CuPy sees {count} "
                         f"device{'s' if count != 1 else ''} (0 to {count - 1})")
    return ordinal


def _mask(data, encoded_fill_values, decoded_fill_value, dtype):
    """xarray's ``_apply_mask`` (fill values to ``decoded_fill_value``, in a copy of ``dtype``)
    with the array's own methods, so that a CuPy array stays on its device."""
    data = data.astype(data.dtype if dtype is None else dtype, copy=True)
    for value in encoded_fill_values:
        data[data == value] = decoded_fill_value
    return data


def _cast(data, dtype):
    """``np.asarray(data, dtype=dtype)`` (xarray's ``_Unsigned`` decoding) as the array's own cast."""
    return data.astype(dtype, copy=False)


def _on_any_device(func):
    """``func`` (a decoding step of xarray's), or its equivalent for arrays of any library; None
    when there is none."""
    if not isinstance(func, functools.partial) or func.args:
        return None
    if func.func is getattr(cf_variables, "_scale_offset_decoding", None):
        return func  # astype and in-place arithmetic: any array library
    if func.func is getattr(cf_variables, "_apply_mask", None):
        return functools.partial(_mask, **func.keywords)
    if func.func is np.asarray and set(func.keywords) == {"dtype"}:
        return functools.partial(_cast, **func.keywords)
    return None


# The lazily decoded arrays xarray stacks over a backend array whose steps are array methods.
_ANY_DEVICE = (indexing.LazilyIndexedArray, cf_variables.NativeEndiannessArray, cf_variables.BoolTypeArray)


def _device_plan(array):
    """The h5gds array under a decoded variable's lazy layers and the decoding steps to replace,
    or None when a layer cannot run on the device."""
    swaps = []
    while not isinstance(array, H5gdsArrayWrapper):
        if isinstance(array, _ElementwiseFunctionArray):
            func = _on_any_device(array.func)
            if func is None:
                return None
            if func is not array.func:
                swaps.append((array, func))
        elif not isinstance(array, _ANY_DEVICE):
            return None
        array = getattr(array, "array", None)
    return array, swaps


def _place(dataset, ordinal):
    """Makes the decoded numeric variables of ``dataset`` that are not indexes read into CuPy
    arrays on device ``ordinal`` (their data is not read yet; indexes were read, on the host)."""
    if ordinal is None:
        return dataset
    for name, variable in dataset.variables.items():
        # Dimension coordinates become pandas indexes (xarray may create them after this).
        index = name in dataset.xindexes or variable.dims == (name,)
        if index or variable.dtype.kind not in "biufc":
            continue
        plan = _device_plan(variable._data)
        if plan is None:
            continue
        wrapper, swaps = plan
        for layer, func in swaps:
            layer.func = func
        wrapper.device = ordinal
    return dataset


# --- dask ---------------------------------------------------------------------------------------------------


def _device_of(array):
    """The device ordinal the h5gds array under xarray's lazy layers reads into (None: host or not
    h5gds's)."""
    while not isinstance(array, H5gdsArrayWrapper):
        array = getattr(array, "array", None)
        if array is None:
            return None
    return array.device


def _device_chunk(array, key, asarray=False, lock=None):
    """One dask chunk: ``array[key]``'s decoded values, left where they were read (CuPy)."""
    if lock:
        lock.acquire()
    try:
        chunk = array[key]
        return chunk.get_duck_array() if isinstance(chunk, indexing.ImplicitToExplicitIndexingAdapter) else chunk
    finally:
        if lock:
            lock.release()


class DeviceDaskManager(DaskManager):
    """xarray's dask chunk manager, except that variables ``engine="h5gds"`` reads to a device
    become dask arrays of CuPy chunks (xarray's own makes NumPy chunks of every lazily read
    backend array, copying device data to the host). Pass an instance as ``chunked_array_type``
    with ``chunks=``; other arrays are chunked as xarray's dask manager chunks them."""

    def from_array(self, data, chunks, **kwargs):
        ordinal = _device_of(data)
        if ordinal is None:
            return super().from_array(data, chunks, **kwargs)
        import dask.array

        cupy = importlib.import_module("cupy")
        with cupy.cuda.Device(ordinal):
            meta = cupy.empty((0,) * data.ndim, dtype=data.dtype)
        kwargs.update(getitem=_device_chunk, asarray=False, meta=meta)
        return dask.array.from_array(data, chunks, **kwargs)


# --- the entry point ---------------------------------------------------------------------------------------


class H5gdsBackendEntrypoint(H5netcdfBackendEntrypoint):
    """xarray backend ``engine="h5gds"``: netCDF-4 and HDF5 files as the h5netcdf engine reads them
    (the same keywords), each variable's data read with ``h5gds.read`` through the ``gds`` driver;
    ``device="cuda"`` (or ``"cuda:N"``, N, a ``cupy.cuda.Device``) reads numeric variables into
    CuPy arrays in GPU memory. Never guessed: name the engine."""

    description = "Open netCDF-4 and HDF5 files with h5netcdf, data read by h5gds into NumPy or CuPy (device=)"
    url = ""  # the project has no public address; docs/xarray.md describes the engine
    supports_groups = True

    def guess_can_open(self, filename_or_obj):
        # h5netcdf's engine opens the same files; this one is chosen by name only.
        return False

    @contextlib.contextmanager
    def _opened(self, filename_or_obj, *, device, format, group, lock, invalid_netcdf, phony_dims,
                decode_vlen_strings, driver, driver_kwds, storage_options, open_kwargs):
        """The store of ``filename_or_obj`` and the ordinal of ``device`` (None for NumPy), with the
        store's file held for the block: the store closed if the block fails, h5netcdf's warning
        about phony dimensions after it, as the h5netcdf engine's opening."""
        ordinal = _device_ordinal(device)
        warn_phony_dims, phony_dims = _check_phony_dims(phony_dims)
        filename_or_obj = _normalize_filename_or_obj(filename_or_obj)
        if ordinal is not None and "rdcc_nbytes" not in (driver_kwds or {}):
            # No chunk cache: unfiltered chunks go straight into device memory (as from_file).
            driver_kwds = dict(driver_kwds or {}, rdcc_nbytes=0)
        # Remote files' keywords only when given: older xarray has no open_kwargs.
        remote = {k: v for k, v in (("storage_options", storage_options), ("open_kwargs", open_kwargs))
                  if v is not None}
        store = H5gdsStore.open(
            filename_or_obj, format=format, group=group, lock=lock, invalid_netcdf=invalid_netcdf,
            phony_dims=phony_dims, decode_vlen_strings=decode_vlen_strings, driver=driver,
            driver_kwds=driver_kwds, **remote)
        with close_on_error(store), store._manager.acquire_context():
            yield store, ordinal
            if warn_phony_dims and store.ds._root._phony_dim_count > 0:
                _emit_phony_dims_warning()

    def open_dataset(self, filename_or_obj, *, mask_and_scale=True, decode_times=True, concat_characters=True,
                     decode_coords=True, drop_variables=None, use_cftime=None, decode_timedelta=None,
                     format="NETCDF4", group=None, lock=None, invalid_netcdf=None, phony_dims=None,
                     decode_vlen_strings=True, driver=None, driver_kwds=None, storage_options=None,
                     open_kwargs=None, device=None):
        """As the h5netcdf engine's ``open_dataset``, plus ``device``: None (NumPy, the default) or
        the GPU whose CuPy arrays receive the numeric variables ('cuda', 'cuda:N', N, a
        ``cupy.cuda.Device``). ``driver``: None reads local files through h5gds's ``gds`` driver
        (unless ``H5GDS_USE_VFD_GDS=0``); any h5py driver name otherwise, its settings (and the
        ``gds`` driver's: ``nthreads``, ...) in ``driver_kwds``."""
        with self._opened(
                filename_or_obj, device=device, format=format, group=group, lock=lock, invalid_netcdf=invalid_netcdf,
                phony_dims=phony_dims, decode_vlen_strings=decode_vlen_strings, driver=driver,
                driver_kwds=driver_kwds, storage_options=storage_options, open_kwargs=open_kwargs) as (store, ordinal):
            dataset = StoreBackendEntrypoint().open_dataset(
                store, mask_and_scale=mask_and_scale, decode_times=decode_times,
                concat_characters=concat_characters, decode_coords=decode_coords, drop_variables=drop_variables,
                use_cftime=use_cftime, decode_timedelta=decode_timedelta)
            _place(dataset, ordinal)
        return dataset

    def open_datatree(self, filename_or_obj, **kwargs):
        """Every group below ``group`` (the root by default) as ``open_dataset`` opens it, as a
        DataTree; the keywords are ``open_dataset``'s (``open_groups_as_dict`` takes them)."""
        return datatree_from_dict_with_io_cleanup(self.open_groups_as_dict(filename_or_obj, **kwargs))

    def open_groups_as_dict(self, filename_or_obj, *, mask_and_scale=True, decode_times=True,
                            concat_characters=True, decode_coords=True, drop_variables=None, use_cftime=None,
                            decode_timedelta=None, format="NETCDF4", group=None, lock=None, invalid_netcdf=None,
                            phony_dims=None, decode_vlen_strings=True, driver=None, driver_kwds=None,
                            storage_options=None, open_kwargs=None, device=None):
        """Every group below ``group`` (the root by default) as ``open_dataset`` opens it, by path
        relative to ``group``; all share one open file."""
        parent = NodePath("/") / NodePath(group or "/")
        groups = {}
        with self._opened(
                filename_or_obj, device=device, format=format, group=group, lock=lock, invalid_netcdf=invalid_netcdf,
                phony_dims=phony_dims, decode_vlen_strings=decode_vlen_strings, driver=driver,
                driver_kwds=driver_kwds, storage_options=storage_options, open_kwargs=open_kwargs) as (store, ordinal):
            for path in _iter_nc_groups(store.ds, parent=parent):
                group_store = H5gdsStore(store._manager, group=path, format=format, lock=store.lock)
                with close_on_error(group_store):
                    dataset = StoreBackendEntrypoint().open_dataset(
                        group_store, mask_and_scale=mask_and_scale, decode_times=decode_times,
                        concat_characters=concat_characters, decode_coords=decode_coords,
                        drop_variables=drop_variables, use_cftime=use_cftime, decode_timedelta=decode_timedelta)
                groups[str(NodePath(path).relative_to(parent)) if group else path] = _place(dataset, ordinal)
        return groups
