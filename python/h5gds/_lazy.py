"""``LazyDataset``: a dataset of an HDF5 file as a lazy, picklable array for Dask (``da.from_array``)
and other code that slices arrays it does not load. It holds the file's path (or an ``s3://`` or
``http(s)://`` URL: docs/remote.md) and the dataset's name, shape, dtype and chunks; the file is
opened (read-only, through the ``gds`` driver) by whichever process first indexes it, again after unpickling or in a forked child, and every indexing is one
``h5gds.read`` (so reads of a read-only file need no HDF5 lock, and threads read at once). Results
are NumPy arrays, or with ``like="cupy"``/``"torch"`` device arrays of that library (on ``device``,
else on the device current where the read runs: each worker's own GPU)."""

import os
import threading

import numpy as np

from . import _files, _io

#: Guards the first open of each array in a process; made anew in a forked child (a thread of the
#: parent may have held it at the fork).
_opening = threading.Lock()


def _new_lock():
    global _opening
    _opening = threading.Lock()


os.register_at_fork(after_in_child=_new_lock)


def _library(like):
    """The library name ``like`` selects: 'numpy', 'cupy' or 'torch' (as ``from_file`` accepts,
    by name or module; ValueError or TypeError naming what was given otherwise)."""
    library = _files.library_of(like)
    if library is None:
        raise TypeError(f"like must be None, 'numpy', 'cupy', 'torch' or one of those modules, not "
                        f"{type(like).__module__}.{type(like).__name__}")
    return library


class LazyDataset:
    """Dataset ``dataset`` of the HDF5 file at ``path`` as a lazy array: ``shape``, ``dtype``,
    ``ndim``, ``size``, ``nbytes``, ``chunks`` (the dataset's HDF5 chunks, None if not chunked),
    and ``__getitem__`` with basic indexing (ints, slices with steps of 1 or more, ``...``) and a 1-D
    integer array of rows first, each read by ``h5gds.read``. Picklable: only the path, names and
    settings travel; each process opens the file itself. ``like``: the result type ('numpy', the
    default; 'cupy' or 'torch' for device arrays, whose dtype is the file's in native byte
    order); ``device``: the CUDA device ordinal for device results (None: the device current in
    the process reading). The file, the dataset and ``like`` are checked here."""

    def __init__(self, path, dataset, like="numpy", device=None):
        library = _library(like)
        if device is not None and library == "numpy":
            raise ValueError(f"device={device!r} needs a device result type: like='cupy' or 'torch'")
        if device is not None and (isinstance(device, bool) or not isinstance(device, (int, np.integer))
                                   or device < 0):
            raise ValueError(f"device={device!r}: a CUDA device ordinal (0, 1, ...) or None")
        path = _files._file_path(path)
        # A URL is the same object from any process and directory; a local path is made absolute.
        self.path = path if _files.is_url(path) else os.path.abspath(path)
        self.name = _files.dataset_name(dataset)
        self.like = library
        self.device = None if device is None else int(device)
        self._opened = None
        dset = self._dataset()
        self.shape = tuple(dset.shape)
        stored = dset.dtype
        if library != "numpy":
            # Device results hold the file's numbers in native byte order (checked here).
            self._result()._element(stored, self.name)
            stored = stored.newbyteorder("=")
        self.dtype = stored
        self.chunks = dset.chunks

    # --- what Dask and NumPy ask of an array ---------------------------------------------------------------

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d dataset")
        return self.shape[0]

    def __repr__(self):
        return (f"<h5gds.LazyDataset {self.name!r} of {self.path!r}: shape {self.shape}, dtype {self.dtype}, "
                f"like={self.like!r}>")

    @property
    def meta(self):
        """An empty array of the result type (``da.from_array(..., meta=)``)."""
        empty = (0,) * self.ndim
        if self.like == "numpy":
            return np.empty(empty, dtype=self.dtype)
        result = self._result()
        return result._empty(empty, result._element(self.dtype, self.name))

    def __getitem__(self, key):
        """``dataset[key]`` read with ``h5gds.read``: a new array of the result type."""
        dset = self._dataset()
        if self.like == "numpy":
            return _io.read(dset, sel=key)
        return self._result().read(dset, key)

    def __array__(self, dtype=None, copy=None):
        """All of it as a NumPy array (read now; device results copied to the host)."""
        whole = _io.read(self._dataset())
        return whole if dtype is None else whole.astype(dtype)

    def __array_function__(self, func, types, args, kwargs):
        """NumPy functions given this array read all of it first (and run on the result type). Its
        presence tells ``da.from_array`` to keep chunks as read (device arrays stay on the device)."""
        def loaded(value):
            if isinstance(value, LazyDataset):
                return value[...]
            if isinstance(value, (list, tuple)):
                return type(value)(loaded(v) for v in value)
            return value
        return func(*loaded(args), **loaded(kwargs))

    def __dask_tokenize__(self):
        # The same file (as its size and modification time say), dataset and result type: the same
        # data, so Dask may share results; a rewritten file gets a new token. A remote object is
        # known by its URL and the shape and dtype seen at construction (asking its ETag would be a
        # request per token; a replaced object fails the reads of an open that saw the old one).
        if _files.is_url(self.path):
            return ("h5gds.LazyDataset", self.path, self.shape, str(self.dtype), self.name, self.like, self.device)
        stat = os.stat(self.path)
        return ("h5gds.LazyDataset", self.path, stat.st_size, stat.st_mtime_ns, self.name, self.like, self.device)

    # --- opening, pickling, forking ------------------------------------------------------------------------

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_opened"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)

    def _result(self):
        """``_files``' result type for this array's ``like`` and ``device`` in this process."""
        if self.device is None:
            return _files.result_type(self.like)
        module = _files._import(self.like, self.like)
        device = self.device if self.like == "cupy" else module.device("cuda", self.device)
        return _files._Device(self.like, module, device)

    def _dataset(self):
        """The dataset, open in this process (opened now if this process has not: after unpickling,
        and in a forked child, whose copy of the parent's file is let go)."""
        opened = self._opened
        if opened is None or opened[0] != os.getpid():
            with _opening:
                opened = self._opened
                if opened is None or opened[0] != os.getpid():
                    # Device reads skip HDF5's chunk cache, as from_file opens files for them.
                    context = _files._dataset(self.path, self.name, chunk_cache=self.like == "numpy")
                    dset = context.__enter__()
                    opened = (os.getpid(), context, dset)
                    self._opened = opened
        return opened[2]

    def close(self):
        """Closes the file in this process (the next indexing opens it again)."""
        opened, self._opened = self._opened, None
        if opened is not None and opened[0] == os.getpid():
            opened[1].__exit__(None, None, None)
