"""Chunked and compressed datasets written by ``to_file``: the arguments (named as h5py names
them) checked before anything is created, the dataset created with h5py's filter pipeline, and
its chunks encoded by the extension's engine and written raw (``H5Dwrite_chunk``) under h5py's
lock with the GIL released (``_native.encode_write_chunks``): a device array's on the GPU with
nvCOMP where the engine can (one deflate, Zstandard or LZ4 filter, the ``gds`` driver), else on
the driver's I/O threads (a device array copied to the host first), as array-io's.

Decisions (docs/python.md):

* ``compression``: ``"gzip"`` (alias ``"deflate"``, HDF5's filter 1, levels 0-9, default 4 as
  h5py), ``"zstd"`` (hdf5plugin's Zstandard, filter 32015, client value the level, 1-22, default
  3 as hdf5plugin), ``"lz4"`` (hdf5plugin's LZ4, filter 32004, client value 0: its default block
  size; no level), or None. Zstandard and LZ4 are set as optional filters, as h5py sets filters
  it does not know, so the dataset is created whether or not this HDF5 has the plugin; readers
  need hdf5plugin (or the plugins on ``HDF5_PLUGIN_PATH``), as for files hdf5plugin writes.
* The pipeline is h5py's order: shuffle, compression, fletcher32. The filter values HDF5 holds
  after creation (shuffle's element size) are what the encoder reads.
* ``chunks=None`` (or True) chooses row-major chunks of at most ``CHUNK_TARGET`` bytes: trailing
  axes whole while they fit, then as many rows of the next axis as fit, leading axes 1. Such a
  chunk is one run of the array, encoded without a copy. 1 MiB, h5py's largest guessed chunk
  and HDF5 1.14's default chunk cache: a reader's partial reads of a chunk larger than its
  chunk cache decode the whole chunk every time.
* Edge chunks are stored whole, the part outside the array zero (HDF5's default fill value).
"""

import operator

import numpy as np
from h5py import h5d, h5p, h5s, h5t, h5z
from h5py._objects import phil

from . import _arrays, _native

FILTER_ZSTD = 32015
FILTER_LZ4 = 32004

#: Bytes a chosen chunk holds at most.
CHUNK_TARGET = 1 << 20
#: HDF5 refuses chunks of 4 GiB or more.
_CHUNK_LIMIT = 1 << 32

# name: (label, filter id, default level, accepted levels)
_CODECS = {
    "gzip": ("gzip", h5z.FILTER_DEFLATE, 4, range(0, 10)),
    "deflate": ("gzip", h5z.FILTER_DEFLATE, 4, range(0, 10)),
    "zstd": ("Zstandard", FILTER_ZSTD, 3, range(1, 23)),
    "lz4": ("LZ4", FILTER_LZ4, None, None),
}
_ACCEPTED = "'gzip' (alias 'deflate'), 'zstd', 'lz4' or None"


class Plan:
    """A checked request: the chunk shape and the filters, in pipeline order, as
    ``(id, client values)``."""

    def __init__(self, chunks, shuffle, codec, level, fletcher32):
        self.chunks, self.shuffle, self.codec, self.level = chunks, shuffle, codec, level
        self.fletcher32 = fletcher32

    def describe(self):
        parts = [f"chunks {self.chunks}"]
        if self.codec is not None:
            label = _CODECS[self.codec][0]
            parts.append(label if self.level is None else f"{label} level {self.level}")
        parts += [name for name, on in (("shuffle", self.shuffle), ("fletcher32", self.fletcher32))
                  if on]
        return ", ".join(parts)


def _flag(value, name):
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be True or False, not {value!r} ({type(value).__name__})")


def _level(codec, opts):
    label, _, default, accepted = _CODECS[codec]
    if opts is None:
        return default
    if accepted is None:
        raise ValueError(f"compression_opts={opts!r}: {label} takes no level (hdf5plugin's LZ4 "
                         "filter has none); leave compression_opts None")
    if isinstance(opts, (bool, np.bool_)):
        raise TypeError(f"compression_opts must be an int level, not {opts!r}")
    try:
        level = operator.index(opts)
    except TypeError:
        raise TypeError(f"compression_opts must be an int level ({accepted.start} to "
                        f"{accepted.stop - 1} for {label}), not {opts!r} "
                        f"({type(opts).__name__})") from None
    if level not in accepted:
        raise ValueError(f"compression_opts={level}: {label} levels are {accepted.start} to "
                         f"{accepted.stop - 1}")
    return level


def default_chunks(shape, itemsize):
    """Row-major chunks of at most ``CHUNK_TARGET`` bytes (one element at least): trailing axes
    whole while they fit, then as many entries of the next axis as fit, leading axes 1; an axis of
    length 0 gets 1."""
    chunks = [1] * len(shape)
    inner = max(int(itemsize), 1)
    for k in range(len(shape) - 1, -1, -1):
        n = max(int(shape[k]), 1)
        if inner * n <= CHUNK_TARGET:
            chunks[k] = n
            inner *= n
        else:
            chunks[k] = max(1, min(n, CHUNK_TARGET // inner))
            break
    return tuple(chunks)


def int_entries(values, what):
    """The entries of ``values`` as a tuple of ints; TypeError naming ``what`` and the entry for a
    bool or anything without ``__index__``."""
    entries = []
    for i, entry in enumerate(values):
        if isinstance(entry, (bool, np.bool_)):
            raise TypeError(f"{what} entry {i} is {entry!r}: entries must be ints")
        try:
            entries.append(operator.index(entry))
        except TypeError:
            raise TypeError(f"{what} entry {i} is {entry!r} ({type(entry).__name__}): entries must "
                            "be ints") from None
    return tuple(entries)


def positive_entries(values, what, shape, described, per):
    """The entries of ``values`` (named ``what``) as a tuple of positive ints, one ``per`` axis of
    ``shape`` (``described`` in the messages); TypeError or ValueError naming the entry."""
    entries = int_entries(values, what)
    if len(entries) != len(shape):
        raise ValueError(f"{what} {entries} has {len(entries)} entries, but {described}: one entry "
                         f"per {per} is needed")
    for i, c in enumerate(entries):
        if c <= 0:
            raise ValueError(f"{what} {entries}: entry {i} is {c}; every entry must be positive "
                             f"({described})")
    return entries


def _chunks(chunks, shape, itemsize):
    described = f"the array has shape {tuple(shape)}"
    if chunks is None or chunks is True:
        return default_chunks(shape, itemsize)
    if isinstance(chunks, (str, bytes, bool)) or not hasattr(chunks, "__iter__"):
        raise TypeError(f"chunks must be None, True or a tuple of ints, one per axis, not "
                        f"{chunks!r}")
    entries = positive_entries(chunks, "chunks", shape, described, "axis")
    for i, (c, n) in enumerate(zip(entries, shape)):
        if n > 0 and c > n:
            raise ValueError(f"chunks {entries}: entry {i} is {c}, more than the array's length "
                             f"{n} there ({described}); HDF5 refuses chunks larger than the "
                             "dataset")
    nbytes = int(np.prod(entries, dtype=object)) * itemsize
    if nbytes >= _CHUNK_LIMIT:
        raise ValueError(f"chunks {entries} hold {nbytes} bytes: HDF5 refuses chunks of 4 GiB or "
                         "more")
    return entries


def plan(shape, dtype, chunks, compression, compression_opts, shuffle, fletcher32):
    """The checked request, or None for a plain contiguous dataset (no chunks, no filters).
    TypeError/ValueError name the argument; nothing has been created yet."""
    shuffle, fletcher32 = _flag(shuffle, "shuffle"), _flag(fletcher32, "fletcher32")
    if compression is not None and not isinstance(compression, str):
        raise TypeError(f"compression must be {_ACCEPTED}, not {compression!r} "
                        f"({type(compression).__name__})")
    if compression is not None and compression not in _CODECS:
        raise ValueError(f"compression={compression!r} is not one h5gds writes: accepted are "
                         f"{_ACCEPTED}")
    if compression is None and compression_opts is not None:
        raise ValueError(f"compression_opts={compression_opts!r} needs compression= (a level for "
                         "'gzip' or 'zstd')")
    level = None if compression is None else _level(compression, compression_opts)
    if chunks is False:
        if compression is not None or shuffle or fletcher32:
            raise ValueError("chunks=False: compression, shuffle and fletcher32 need a chunked "
                             "dataset; leave chunks None to have them chosen")
        return None
    if chunks is None and compression is None and not shuffle and not fletcher32:
        return None
    if len(shape) == 0:
        raise ValueError("array is a scalar (shape ()): HDF5 stores scalars unchunked, so chunks, "
                         "compression, shuffle and fletcher32 do not apply")
    codec = None if compression is None else ("gzip" if compression == "deflate" else compression)
    return Plan(_chunks(chunks, shape, dtype.itemsize), shuffle, codec, level, fletcher32)


def create(file, name, shape, dtype, p):
    """Dataset ``name`` (missing groups created) of ``shape`` and ``dtype``, chunked as ``p``
    says with its filters in h5py's order."""
    dcpl = h5p.create(h5p.DATASET_CREATE)
    dcpl.set_chunk(p.chunks)
    dcpl.set_obj_track_times(False)  # as h5py: the same array gives the same bytes
    if p.shuffle:
        dcpl.set_shuffle()
    if p.codec == "gzip":
        dcpl.set_deflate(p.level)
    elif p.codec == "zstd":
        dcpl.set_filter(FILTER_ZSTD, h5z.FLAG_OPTIONAL, (p.level,))
    elif p.codec == "lz4":
        dcpl.set_filter(FILTER_LZ4, h5z.FLAG_OPTIONAL, (0,))
    if p.fletcher32:
        dcpl.set_fletcher32()
    return create_dataset(file, name, dtype, shape, dcpl)


def create_dataset(file, name, dtype, shape, dcpl):
    """Dataset ``name`` of ``dtype`` and ``shape`` in ``file`` with the creation list ``dcpl``, its
    missing groups created and its name UTF-8, as h5py creates them; its h5py DatasetID."""
    lcpl = h5p.create(h5p.LINK_CREATE)
    lcpl.set_create_intermediate_group(True)
    lcpl.set_char_encoding(h5t.CSET_UTF8)
    space = h5s.create_simple(tuple(shape))
    return h5d.create(file.id, name.encode(), h5t.py_create(dtype, logical=True), space, dcpl=dcpl,
                      lcpl=lcpl)


def write(dsid, name, array):
    """Encodes ``array`` (C-contiguous, host or device memory, the dataset's dtype and shape) into
    the chunks of ``dsid`` and writes them raw; returns the number of chunks written."""
    view = _arrays.view(array, "array")
    with phil:
        file_type = dsid.get_type()
        if not file_type.equal(h5t.py_create(view.dtype)):
            raise TypeError(f"array has dtype {view.dtype}, whose HDF5 type differs from its "
                            "bytes in memory (padding or layout), so h5gds cannot write its "
                            "chunks raw")
        dcpl = dsid.get_create_plist()
        filters = [(code, list(values)) for code, _flags, values, _name in
                   (dcpl.get_filter(i) for i in range(dcpl.get_nfilters()))]
        return _native.encode_write_chunks(
            dsid.id, file_type.id, view, list(view.shape), list(dcpl.get_chunk()), filters, name)
