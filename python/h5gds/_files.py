"""``h5gds.from_file``, ``h5gds.to_file`` and ``h5gds.from_file_batched``: whole arrays to and from
HDF5 files in one call, with the semantics of array-io's Rust functions of the same names and of
Legate's ``legate.io.hdf5`` (where Legate fails, these raise an exception naming the problem or do
the right thing). The bytes move with ``h5gds.read`` / ``h5gds.write``, so results go wherever
those can put them.

Decisions (docs/python.md):

* ``dataset`` may omit the leading ``/`` (``"data"`` is ``"/data"``); a trailing ``/``, ``//``,
  ``.`` or ``..`` path components raise ValueError naming the name (array-io's rule).
* Result types (``like``): NumPy keeps the file's dtype, big-endian included, as h5py does. CuPy
  and PyTorch have no big-endian types: a big-endian dataset is read on the host and converted
  to the native byte order explicitly before it goes to the device. Variable-length data (strings)
  comes back as h5py's ``dset[()]`` returns it (an object array of ``bytes``), into NumPy only.
* ``to_file`` writes the logical array (transposed and broadcast views are copied into C order
  first) into a new file next to ``path`` and renames it over ``path`` once complete, so a write
  that fails leaves the old file as it was; the result is one ordinary contiguous dataset in one
  self-contained file, or with ``chunks``/``compression``/``shuffle``/``fletcher32`` one chunked
  dataset whose chunks h5gds encodes on all cores (``_encode``).
"""

import errno
import importlib
import itertools
import os
import stat
import sys
import types
from contextlib import contextmanager

import h5py
import numpy as np
from h5py import h5d, h5p, h5t

from . import _arrays, _collective, _encode, _io, _native
from ._selection import selection

# --- names and paths ---------------------------------------------------------------------------------------


def dataset_name(dataset):
    """The absolute HDF5 path of ``dataset`` (a leading ``/`` added when missing); ValueError for a
    name that is not a path below the root group."""
    if not isinstance(dataset, str):
        raise TypeError(
            f"dataset must be a str such as 'data' or '/group/data', not {type(dataset).__name__}"
        )
    name = dataset if dataset.startswith("/") else "/" + dataset
    parts = name[1:].split("/")
    if not dataset:
        reason = "it is empty"
    elif name == "/":
        reason = "it names the root group, not a dataset"
    elif name.endswith("/"):
        reason = "it ends with '/' (write the name without the trailing '/')"
    elif "" in parts:
        reason = "it has an empty path component ('//')"
    elif any(part in (".", "..") for part in parts):
        reason = "'.' and '..' are not allowed as path components"
    elif "\0" in name:
        reason = "it contains a NUL character"
    else:
        return name
    raise ValueError(f"invalid dataset name {dataset!r}: {reason}")


def is_url(path):
    """Whether ``path`` (a str) is a URL the ``gds`` driver reads remotely rather than a local path
    (the driver's own test, ``h5gds::is_url``)."""
    return isinstance(path, str) and _native.is_url(path)


def refuse_url_for_writing(path):
    """Raises OSError (errno 30, EROFS) for a URL given where a file is written: remote files are
    read-only, and nothing is created anywhere (neither remotely nor as a local path). The engine
    decides (``h5gds_engine::policy::files``), for array-io as for this package."""
    _native.check_writable(os.fspath(path))


def _file_path(path):
    """``path`` as a str, checked: not empty, not a directory. A URL (``is_url``) is kept as given:
    whether it names an object, the open says."""
    try:
        path = os.fspath(path)
    except TypeError:
        raise TypeError(f"path must be a str or os.PathLike, not {type(path).__name__}") from None
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not path:
        raise ValueError("path is empty: name an HDF5 file such as 'out/data.h5'")
    if is_url(path):
        return path
    if os.path.isdir(path):
        raise ValueError(f"path {path!r} is a directory: name an HDF5 file in it, such as "
                         f"{os.path.join(path, 'data.h5')!r}")
    return path


def _driver():
    """h5py's driver for the file: ``gds`` unless ``H5GDS_USE_VFD_GDS=0`` asks for sec2 (the staged
    path), as array-io chooses for host data; the setting is parsed by the extension, which shares
    array-io's parser."""
    return None if _native.staged_by_settings() else "gds"


def open_in_this_process(path):
    """Whether h5py's HDF5 holds the file at ``path`` (by any name) open in this process. HDF5
    shares such a file with a second open only through the driver it is open with; through
    another (``gds`` where it was opened with h5py's default) the second open takes the file's
    lock again and is refused (BlockingIOError), so the callers open it as h5py would by
    default, and h5gds still reads it (``h5gds.read`` reads files open with any driver)."""
    try:
        wanted = os.stat(path)
    except OSError:
        return False
    for file_id in h5py.h5f.get_obj_ids(types=h5py.h5f.OBJ_FILE):
        try:
            held = os.stat(os.fsdecode(file_id.name))
        except (OSError, ValueError):
            continue  # a file opened in memory or since removed
        if (held.st_dev, held.st_ino) == (wanted.st_dev, wanted.st_ino):
            return True
    return False


def _datasets_in(group, limit):
    """The absolute names of the first ``limit`` datasets in ``group``, in h5py's visiting order."""
    names = []

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            names.append("/" + name)
        return None if len(names) < limit else True

    group.visititems(visit)
    return names


@contextmanager
def _dataset(path, dataset, chunk_cache=True):
    """Opens dataset ``dataset`` of the file at ``path`` for reading; the file closes on exit.
    Without ``chunk_cache`` HDF5 reads unfiltered chunks straight into the caller's buffer (a
    cached chunk is copied by HDF5 itself, so a device buffer would be staged), as array-io opens
    files for device reads. A URL is opened through the ``gds`` driver whatever
    ``H5GDS_USE_VFD_GDS`` says (only that driver reads remote files): the read with no HDF5 call
    takes the driver's remote file as its source of bytes (concurrent ranged GETs,
    docs/remote.md)."""
    name = dataset_name(dataset)
    path = _file_path(path)
    remote = is_url(path)
    if not remote and not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, "no such HDF5 file", path)
    cache = {} if chunk_cache else {"rdcc_nbytes": 0}
    driver = "gds" if remote else _driver()
    try:
        try:
            file = h5py.File(path, "r", driver=driver, **cache)
        except BlockingIOError:
            if driver is None or not open_in_this_process(path):
                raise
            file = h5py.File(path, "r", **cache)
    except OSError as err:
        # The same class (PermissionError, ...), the path and h5py's reason.
        raise type(err)(f"{path!r} could not be opened as an HDF5 file: {err}") from err
    with file:
        try:
            obj = file[name]
        except KeyError:
            limit = 20
            existing = _datasets_in(file, limit)
            listed = ", ".join(existing) + (", ..." if len(existing) == limit else "")
            raise ValueError(f"{path!r} has no dataset {name!r}; its datasets: "
                             f"{listed or '(none)'}") from None
        if not isinstance(obj, h5py.Dataset):
            kind = "a group" if isinstance(obj, h5py.Group) else f"a {type(obj).__name__}"
            raise ValueError(f"{name!r} in {path!r} is {kind}, not a dataset")
        if obj.shape is None:
            raise ValueError(f"dataset {name!r} in {path!r} has a null dataspace (no shape and "
                             "no elements; h5py writes these for h5py.Empty)")
        yield obj


# --- result types (like=) ----------------------------------------------------------------------------------

_INSTALL = {
    "cupy": ("CuPy", "pip install cupy-cuda12x (or cupy-cuda13x, matching your CUDA)"),
    "torch": ("PyTorch", "pip install torch"),
}

# NumPy dtypes (kind and size) and the PyTorch dtype of the same name.
_TORCH_DTYPES = {"b1": "bool", "u1": "uint8", "i1": "int8", "i2": "int16", "i4": "int32",
                 "i8": "int64", "u2": "uint16", "u4": "uint32", "u8": "uint64", "f2": "float16",
                 "f4": "float32", "f8": "float64", "c8": "complex64", "c16": "complex128"}


class _NumPy:
    """Results as NumPy arrays of the file's dtype."""

    label = "NumPy"
    chunk_cache = True

    def read(self, dset, sel):
        if dset.dtype.hasobject:
            # Variable-length data: h5py's own conversion (objects have no fixed-size bytes).
            value = dset[sel]
            return value if isinstance(value, np.ndarray) else np.array(value, dtype=dset.dtype)
        return _io.read(dset, sel=sel)


class _Device:
    """Results as arrays of a GPU library (CuPy, PyTorch) on one device."""

    chunk_cache = False

    def __init__(self, library, module, device):
        self.library, self.module, self.device = library, module, device
        self.label = _INSTALL[library][0]

    def _element(self, dtype, name):
        if dtype.hasobject or dtype.fields is not None or dtype.kind not in "biufc":
            raise TypeError(
                f"dataset {name!r} has dtype {dtype}: {self.label} arrays hold numbers and bools "
                "only; read it with like='numpy'")
        if self.library == "torch":
            torch_dtype = getattr(self.module, _TORCH_DTYPES.get(f"{dtype.kind}{dtype.itemsize}", ""),
                                  None)
            if torch_dtype is None:
                raise TypeError(f"dataset {name!r} has dtype {dtype}, which this PyTorch has no "
                                "type for; read it with like='numpy'")
            return torch_dtype
        return dtype.newbyteorder("=")

    def _empty(self, shape, element):
        if self.library == "torch":
            return self.module.empty(shape, dtype=element, device=self.device)
        with self.module.cuda.Device(self.device):
            return self.module.empty(shape, dtype=element)

    def _from_host(self, host):
        """``host`` (a NumPy array) copied up, in native byte order (device types have no other)."""
        if not host.dtype.isnative:
            host = host.astype(host.dtype.newbyteorder("="))
        if self.library == "torch":
            return self.module.from_numpy(host).to(self.device)
        with self.module.cuda.Device(self.device):
            return self.module.asarray(host)

    def read(self, dset, sel):
        element = self._element(dset.dtype, dset.name)
        if not dset.dtype.isnative:
            # No big-endian device types: read on the host and converted, values kept.
            return self._from_host(_io.read(dset, sel=sel))
        out = self._empty(selection(sel, dset.shape).shape, element)
        _io.read(dset, out=out, sel=sel)
        return out


def _import(library, like):
    try:
        return importlib.import_module(library)
    except ImportError as err:
        label, how = _INSTALL[library]
        raise ModuleNotFoundError(
            f"like={like!r} needs {label}, which is not installed in this environment: {how}",
            name=library) from err


def _default_device(library, module):
    if library == "cupy":
        return module.cuda.runtime.getDevice()
    if not module.cuda.is_available():
        raise RuntimeError(
            "like='torch' makes CUDA tensors, but PyTorch sees no CUDA device here "
            "(torch.cuda.is_available() is False); like=torch.empty(0) makes CPU tensors")
    return module.device("cuda", module.cuda.current_device())


_NAMES = {"numpy": "numpy", "np": "numpy", "cupy": "cupy", "torch": "torch", "pytorch": "torch"}


def library_of(like):
    """The library ``like`` names, 'numpy', 'cupy' or 'torch', when it is None, one of their names
    or modules; None for anything else. ValueError for another name, TypeError for another
    module."""
    if like is None:
        return "numpy"
    if isinstance(like, str):
        library = _NAMES.get(like.lower())
        if library is None:
            raise ValueError(f"like={like!r}: accepted names are 'numpy', 'cupy' and 'torch'")
        return library
    if isinstance(like, types.ModuleType):
        library = _NAMES.get(like.__name__)
        if library is None:
            raise TypeError(f"like={like.__name__} (a module): accepted modules are numpy, cupy "
                            "and torch")
        return library
    return None


def result_type(like):
    """What ``like`` selects: 'numpy' (the default), None, the numpy module or a NumPy array:
    NumPy; 'cupy' or the cupy module: CuPy on the current device, a CuPy array: CuPy on its device;
    'torch' or the torch module: PyTorch on the current CUDA device, a tensor: PyTorch on its
    device."""
    library = library_of(like)
    if library == "numpy":
        return _NumPy()
    if library is not None:
        module = like if isinstance(like, types.ModuleType) else _import(library, like)
        return _Device(library, module, _default_device(library, module))
    if isinstance(like, np.ndarray):
        return _NumPy()
    top = type(like).__module__.split(".")[0]
    if top == "cupy" and hasattr(like, "device"):
        return _Device("cupy", sys.modules["cupy"], like.device.id)
    if top == "torch" and isinstance(like, sys.modules["torch"].Tensor):
        return _Device("torch", sys.modules["torch"], like.device)
    raise TypeError(
        f"like must be None, 'numpy', 'cupy', 'torch', one of those modules, or a NumPy or CuPy "
        f"array or a PyTorch tensor whose type (and device) to follow, not "
        f"{type(like).__module__}.{type(like).__name__}")


# --- arrays to write ---------------------------------------------------------------------------------------

# DLPack device types (dlpack.h) of host memory: CPU, CUDA pinned host memory.
_DLPACK_HOST = (1, 3)


def _contiguous_copy(array):
    """A C-contiguous copy of a device array, made by its own library."""
    if callable(getattr(array, "contiguous", None)):  # PyTorch
        return array.contiguous()
    module = sys.modules.get(type(array).__module__.split(".")[0])
    copy = getattr(module, "ascontiguousarray", None)  # CuPy and other NumPy-like libraries
    if copy is None:
        raise ValueError(
            f"array ({type(array).__module__}.{type(array).__name__}) is not C-contiguous, and its "
            "library offers no ascontiguousarray or contiguous() to copy it: pass a contiguous one")
    return copy(array)


def _logical(array):
    """``array`` as C-contiguous memory holding its logical elements (views copied), its shape and
    its dtype."""
    if isinstance(array, np.generic):
        array = np.asarray(array)
    if isinstance(array, np.ma.MaskedArray):
        raise TypeError("array is a masked array: HDF5 stores no mask; write array.filled(value) "
                        "or np.ma.getdata(array)")
    if isinstance(array, np.ndarray):
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        return array, array.shape, array.dtype
    interface = getattr(array, "__cuda_array_interface__", None)
    if interface is not None:
        shape, dtype = tuple(interface["shape"]), np.dtype(interface["typestr"])
        if not _arrays._c_contiguous(shape, interface.get("strides"), dtype.itemsize):
            array = _contiguous_copy(array)
        return array, shape, dtype
    if hasattr(array, "__dlpack__") and hasattr(array, "__dlpack_device__"):
        if array.__dlpack_device__()[0] in _DLPACK_HOST:
            return _logical(np.from_dlpack(array))
        # What the capsule says (shape, element type, strides): a strided view is copied by its
        # library, as for __cuda_array_interface__ above.
        view = _arrays.view(array, "array")
        if not view.c_contiguous:
            array = _contiguous_copy(array)
        return array, view.shape, view.dtype
    raise TypeError(
        f"array must be a NumPy array, or an array with __cuda_array_interface__ or DLPack (CuPy, "
        f"PyTorch, JAX, Numba), not {type(array).__module__}.{type(array).__name__}; "
        "np.asarray(...) makes a NumPy array of it")


def _check_storable(dtype):
    text = ("to_file stores fixed-size elements (numbers, bools, fixed-length bytes 'S', "
            "structured types of these)")
    if dtype.hasobject or dtype.kind == "U":
        hint = "; encode text with np.char.encode(array, 'utf-8')" if dtype.kind == "U" else ""
        raise TypeError(f"array has dtype {dtype}: {text}{hint}")
    try:
        h5t.py_create(dtype, logical=True)
    except TypeError as err:
        raise TypeError(f"array has dtype {dtype}, which has no HDF5 type: {err}") from None


# --- the functions -----------------------------------------------------------------------------------------


def from_file(path, dataset, like="numpy", comm=None, decomposition=None):
    """Reads dataset ``dataset`` (``"data"``, ``"/group/data"``) of the HDF5 file at ``path`` whole.

    ``like`` chooses the result: NumPy ('numpy', the default, or None), CuPy or PyTorch on the GPU
    ('cupy', 'torch', the module, or an array whose library and device to follow). Raises
    FileNotFoundError for a missing file, ValueError for a directory as ``path``, a missing
    dataset (listing those that exist), a group as ``dataset`` or a bad name,
    ModuleNotFoundError naming what to install when ``like``'s library is missing.

    With ``comm`` (an mpi4py communicator), collective: every rank receives its tile, rows
    ``[r*n//p, (r+1)*n//p)`` of the leading axis, or its block of a 2-D grid with
    ``decomposition="grid"`` or ``(rows, cols)``, as ``like`` says (device results on the current
    device: ``h5gds.local_device(comm)`` is this rank's); errors are raised on every rank, naming
    the failed ranks."""
    if comm is not None:
        return _collective.from_file(path, dataset, like, comm, decomposition, sys.modules[__name__])
    if decomposition is not None:
        raise ValueError("decomposition= needs comm= (an mpi4py communicator)")
    result = result_type(like)
    with _dataset(path, dataset, result.chunk_cache) as dset:
        return result.read(dset, ())


def to_file(array, path, dataset, comm=None, decomposition=None, *, chunks=None, compression=None,
            compression_opts=None, shuffle=False, fletcher32=False):
    """Writes ``array`` as dataset ``dataset`` of a new HDF5 file at ``path``.

    **Destructive**: an existing file at ``path`` is replaced with everything in it. Missing parent
    directories and groups are created. The logical array is written (transposed, sliced or
    broadcast views included), in its own dtype (big-endian kept). A NumPy array, or a device
    array through ``h5gds.write``. The file is written next to ``path`` and renamed over it when
    complete: a failed write leaves an existing file as it was. ValueError for a directory as
    ``path`` or a bad name, TypeError for an array or dtype HDF5 cannot store.

    With ``comm`` (an mpi4py communicator), collective: every rank passes its tile, stacked along
    axis 0 in rank order (or placed on a 2-D grid with ``decomposition="grid"`` or ``(rows,
    cols)``) into one contiguous dataset; each rank writes its own bytes through the gds driver
    (a device tile's straight from its device memory; with ``H5GDS_USE_VFD_GDS=0`` through sec2,
    staged through pinned host memory). A failure on any rank is raised on every rank, naming the
    ranks, and leaves ``path`` as it was.

    Chunked and compressed, named as h5py names them: ``compression`` ``"gzip"`` (alias
    ``"deflate"``; ``compression_opts`` the level, 0-9, default 4), ``"zstd"`` (hdf5plugin's
    Zstandard, filter 32015; level 1-22, default 3) or ``"lz4"`` (hdf5plugin's LZ4, filter 32004;
    no level); ``shuffle`` and ``fletcher32`` as in h5py; ``chunks`` a tuple of ints, one per axis
    (None: row-major chunks of at most 1 MiB). The chunks are encoded in parallel on the driver's
    I/O threads (``nthreads``; the GIL released) and written raw, edge chunks padded with zeros as
    HDF5 pads them: h5py reads the file (with ``import hdf5plugin`` for Zstandard and LZ4). A
    device array's chunks are encoded on the GPU with nvCOMP (its own fast level; the level asked
    is what the file records) where gzip, zstd or lz4 alone is asked for and the file goes through
    the ``gds`` driver, and written from device memory; else the array is copied into host memory
    and encoded as a NumPy array's, as array-io's ``to_file_compressed`` does. The arguments are
    checked before anything is created (ValueError or TypeError naming the argument). With ``comm``, these are not supported (ValueError).
    A URL as ``path`` raises OSError (errno 30): remote files are read-only."""
    refuse_url_for_writing(path)
    if comm is not None:
        if (chunks is not None or compression is not None or compression_opts is not None
                or shuffle is not False or fletcher32 is not False):
            raise ValueError("to_file with comm= writes one contiguous dataset: chunks, "
                             "compression, compression_opts, shuffle and fletcher32 are not "
                             "supported with comm=")
        return _collective.to_file(array, path, dataset, comm, decomposition, sys.modules[__name__])
    if decomposition is not None:
        raise ValueError("decomposition= needs comm= (an mpi4py communicator)")
    name = dataset_name(dataset)
    path = _file_path(path)
    driver = _driver()
    if isinstance(array, np.ndarray) and not isinstance(array, np.ma.MaskedArray):
        # The arguments are checked before a view is copied.
        _check_storable(array.dtype)
        _encode.plan(array.shape, array.dtype, chunks, compression, compression_opts, shuffle,
                     fletcher32)
    source, shape, dtype = _logical(array)
    _check_storable(dtype)
    chunked = _encode.plan(shape, dtype, chunks, compression, compression_opts, shuffle, fletcher32)
    if chunked is not None:
        def fill(file):
            _encode.write(_encode.create(file, name, shape, dtype, chunked), name, source)

        _replace(path, driver, fill)
        return

    def fill(file):
        dset = _new_dataset(file, name, shape, dtype)
        if int(np.prod(shape)):
            _io.write(dset, source)

    _replace(path, driver, fill)


def _new_dataset(file, name, shape, dtype):
    """Dataset ``name`` (missing groups created) of ``shape`` and ``dtype``: contiguous, its storage
    allocated at creation and never filled (every element is written next). Allocated storage is
    what lets a device array's bytes go straight through the ``gds`` driver (unwritten storage is
    staged); h5py's ``create_dataset`` would allocate late, and ignores the creation list of 0-d
    datasets."""
    dcpl = h5p.create(h5p.DATASET_CREATE)
    dcpl.set_layout(h5d.CONTIGUOUS)
    dcpl.set_alloc_time(h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_time(h5d.FILL_TIME_NEVER)
    dcpl.set_obj_track_times(False)  # as h5py: the same array gives the same bytes
    return h5py.Dataset(_encode.create_dataset(file, name, dtype, shape, dcpl))


def _replace(path, driver, fill):
    """Creates a new file next to ``path``, ``fill``s it and renames it over ``path``: a write that
    fails (a refused array, a full disk) leaves the old file as it was. Through a symlink the file
    it points to is replaced; an existing file's permission bits are kept."""
    target = os.path.realpath(path)
    directory, name = os.path.split(target)
    os.makedirs(directory, exist_ok=True)
    new = os.path.join(directory, f".{name}.{os.getpid()}-{os.urandom(4).hex()}.h5gds-tmp")
    try:
        with h5py.File(new, "x", driver=driver) as file:
            fill(file)
        try:
            os.chmod(new, stat.S_IMODE(os.stat(target).st_mode))
        except FileNotFoundError:
            pass
        os.replace(new, target)
    except BaseException:
        if os.path.lexists(new):
            os.unlink(new)
        raise


class Batches:
    """The chunks of a dataset as ``(chunk, offsets)`` pairs, in row-major order of the chunks,
    boundary chunks clipped; ``offsets`` is a tuple of ints, the chunk's position in the dataset.
    The file stays open until the last chunk is read or ``close()`` is called (also a context
    manager)."""

    def __init__(self, path, dataset, chunk_size, like="numpy"):
        self._result = result_type(like)
        self._opened = _dataset(path, dataset, self._result.chunk_cache)
        dset = self._opened.__enter__()
        try:
            self._chunk = _chunk_shape(chunk_size, dset.shape, dset.name)
        except BaseException:
            self._opened.__exit__(None, None, None)
            raise
        self._dset = dset
        self.shape = dset.shape
        self._starts = itertools.product(
            *(range(0, n, c) for n, c in zip(self.shape, self._chunk)))
        self.total = int(np.prod([-(-n // c) for n, c in zip(self.shape, self._chunk)]))

    def __iter__(self):
        return self

    def __next__(self):
        if self._dset is None:
            raise StopIteration
        start = next(self._starts, None)
        if start is None:
            self.close()
            raise StopIteration
        sel = tuple(slice(s, min(s + c, n)) for s, c, n in zip(start, self._chunk, self.shape))
        try:
            chunk = self._result.read(self._dset, sel)
        except BaseException:
            self.close()
            raise
        return chunk, tuple(int(s) for s in start)

    def restrict(self, first, end):
        """Yields only chunks ``[first, end)`` of the row-major order (a rank's share)."""
        self._starts = itertools.islice(self._starts, first, end)

    def close(self):
        """Closes the file; no more chunks come."""
        if self._dset is not None:
            self._dset = None
            self._opened.__exit__(None, None, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _chunk_shape(chunk_size, shape, name):
    described = f"dataset {name!r} has shape {shape} (rank {len(shape)})"
    if isinstance(chunk_size, (str, bytes)) or not hasattr(chunk_size, "__iter__"):
        raise TypeError(f"chunk_size must be a sequence of ints, one per dimension, not "
                        f"{type(chunk_size).__name__}: {described}")
    return _encode.positive_entries(chunk_size, "chunk_size", shape, described, "dimension")


def from_file_batched(path, dataset, chunk_size, like="numpy", comm=None):
    """Reads dataset ``dataset`` of the file at ``path`` in chunks of ``chunk_size`` (one positive
    int per dimension): an iterator (``Batches``) of ``(chunk, offsets)`` in row-major order, the
    chunks at the far edges clipped (a length of 5 in chunks of 2 gives 2, 2, 1), each read
    touching only its own elements. ``like`` as for ``from_file``. The file, the dataset and
    ``chunk_size`` are checked at this call (ValueError for a bad ``chunk_size``: wrong length,
    zero or negative entries).

    With ``comm`` (an mpi4py communicator), the open is collective and each rank iterates over its
    share of the chunks: contiguous blocks of the row-major chunk order, rank r of p taking
    chunks ``[r*n//p, (r+1)*n//p)`` of n."""
    if comm is not None:
        return _collective.from_file_batched(path, dataset, chunk_size, like, comm,
                                             sys.modules[__name__])
    return Batches(path, dataset, chunk_size, like)
