"""Gathers: h5gds.read with a 1-D integer array of rows along the first axis (alone, or first in a
tuple whose other items are basic indexing), compared with h5py's fancy indexing of the same
distinct rows in increasing order (the only order h5py reads), rearranged by NumPy into the
caller's order; every refusal names the culprit and leaves `out` as it was."""

import h5py
import numpy as np
import pytest

import h5gds
from h5gds import _native

SHAPE_3D = (40, 6, 5)
LAYOUTS = {
    "contiguous": {},
    "chunked": {"chunks": (7, 4, 5)},
    "chunked+gzip": {"chunks": (7, 4, 5), "compression": "gzip"},
}


def reference(shape=SHAPE_3D, dtype="<f8"):
    return (np.arange(np.prod(shape), dtype=dtype).reshape(shape) * 1.5 - 7).astype(dtype)


@pytest.fixture(params=["sec2", "gds"])
def h5file(request, tmp_path):
    driver = None if request.param == "sec2" else "gds"
    with h5py.File(tmp_path / "data.h5", "w", driver=driver) as f:
        yield f


def make(h5file, layout, shape=SHAPE_3D, dtype="<f8"):
    kwargs = dict(LAYOUTS[layout])
    if "chunks" in kwargs:
        kwargs["chunks"] = tuple(min(c, s) for c, s in zip(kwargs["chunks"], shape))[:len(shape)]
    return h5file.create_dataset("x", data=reference(shape, dtype), **kwargs)


def h5py_gather(dset, idx, rest=()):
    """What the gather of `idx` (then `rest` for the other axes) holds, from h5py: its fancy indexing
    of the distinct rows in increasing order, put into the caller's order by NumPy."""
    idx = np.asarray(idx, dtype=np.int64).reshape(-1)
    idx = np.where(idx < 0, idx + dset.shape[0], idx)
    distinct, inverse = np.unique(idx, return_inverse=True)
    shape = np.empty(dset.shape[1:])[rest].shape if rest else dset.shape[1:]
    if distinct.size == 0 or 0 in shape:  # nothing to read (h5py refuses some of these)
        return np.empty((len(idx),) + shape, dtype=dset.dtype)
    rows = dset[(list(distinct),) + tuple(rest)]
    return rows[inverse.reshape(-1)]


INDICES = {
    "sorted": [0, 3, 4, 5, 17, 39],
    "one": [12],
    "all": list(range(40)),
    "unsorted": [30, 2, 17, 3, 4, 39, 0],
    "repeats": [5, 5, 1, 5, 1, 38, 38],
    "negative": [-1, -40, 3, -2, 0],
    "reversed": list(range(39, -1, -1)),
    "empty": [],
}


@pytest.mark.parametrize("name", INDICES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_gathers_of_3d_rows_match_h5py(h5file, layout, name):
    dset = make(h5file, layout)
    idx = INDICES[name]
    expected = h5py_gather(dset, idx)
    for sel in (idx, np.array(idx, dtype=np.int64)):
        got = h5gds.read(dset, sel=sel)
        assert got.shape == (len(idx),) + SHAPE_3D[1:] and got.dtype == expected.dtype
        assert got.tobytes() == expected.tobytes()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_gathers_of_1d_elements_match_h5py(h5file, layout):
    shape = (1000,)
    dset = make(h5file, layout, shape, "<i4") if layout == "contiguous" else h5file.create_dataset(
        "x", data=reference(shape, "<i4"), chunks=(64,), **({"compression": "gzip"} if "gzip" in layout else {}))
    rng = np.random.default_rng(5)
    for idx in (rng.integers(-1000, 1000, 300), np.sort(rng.choice(1000, 200, replace=False)), np.arange(1000)):
        got = h5gds.read(dset, sel=idx)
        assert got.tobytes() == h5py_gather(dset, idx).tobytes()


@pytest.mark.parametrize("rest", [
    (slice(1, 4),), (2,), (Ellipsis, 1), (slice(0, 6, 2), slice(1, None)), (-1, slice(None, None, 2)), (Ellipsis,),
    (slice(4, 2),),
], ids=repr)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_gathers_with_a_selection_of_the_other_axes_match_h5py(h5file, layout, rest):
    dset = make(h5file, layout)
    # A few runs (added to the selection one by one), and 20 runs of one row (selected by halves).
    for idx in (np.array([33, 2, 2, -7, 8, 9, 10]), np.arange(0, 40, 2)[::-1]):
        expected = h5py_gather(dset, idx, rest)
        got = h5gds.read(dset, sel=(idx,) + rest)
        assert got.shape == expected.shape
        assert got.tobytes() == expected.tobytes()


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "int8", "int32", "uint64", "int64"])
def test_every_integer_index_dtype(h5file, dtype):
    dset = make(h5file, "contiguous")
    idx = np.array([7, 1, 39, 1], dtype=dtype)
    assert h5gds.read(dset, sel=idx).tobytes() == h5py_gather(dset, idx).tobytes()


def test_a_strided_index_array_and_numpy_integers_in_a_list(h5file):
    dset = make(h5file, "chunked")
    idx = np.arange(80)[::-4] // 2  # a view with a negative stride: read as given
    assert h5gds.read(dset, sel=idx).tobytes() == h5py_gather(dset, idx).tobytes()
    listed = [np.int16(3), np.uint32(1), 3]
    assert h5gds.read(dset, sel=listed).tobytes() == h5py_gather(dset, [3, 1, 3]).tobytes()


def test_gather_into_out_fills_and_returns_it(h5file):
    dset = make(h5file, "chunked+gzip")
    out = np.full((4, 6), -1.0)
    assert h5gds.read(dset, out=out, sel=([9, 0, 9, 31], slice(None), 4)) is out
    assert np.array_equal(out, reference()[[9, 0, 9, 31], :, 4])
    empty = np.empty((0, 6, 5))
    assert h5gds.read(dset, out=empty, sel=np.array([], dtype=np.int64)) is empty


@pytest.mark.parametrize("dtype", [">i4", "<c8", "S3", [("a", "<i4"), ("b", ">f8")]], ids=str)
def test_gathers_of_other_dtypes_match_h5py(h5file, dtype):
    dtype = np.dtype(dtype)
    values = np.zeros((30, 3), dtype=dtype)
    if dtype.names:
        values["a"] = np.arange(90).reshape(30, 3)
        values["b"] = np.arange(90).reshape(30, 3) / 4
    elif dtype.kind == "S":
        values[...] = [[f"{i}{j}".encode() for j in range(3)] for i in range(30)]
    else:
        values[...] = np.arange(90).reshape(30, 3)
    dset = h5file.create_dataset("x", data=values, chunks=(4, 3))
    idx = [29, 0, 13, 13, -3]
    assert h5gds.read(dset, sel=idx).tobytes() == h5py_gather(dset, idx).tobytes()


def test_unwritten_chunks_read_as_the_fill_value(h5file):
    dset = h5file.create_dataset("x", shape=(50, 4), dtype="<f4", chunks=(5, 4), fillvalue=2.5)
    dset[10:15] = 7
    idx = [49, 12, 0, 12]
    got = h5gds.read(dset, sel=idx)
    assert got.tobytes() == h5py_gather(dset, idx).tobytes()
    assert got[:, 0].tolist() == [2.5, 7.0, 2.5, 7.0]


def test_many_random_rows_from_a_file_opened_read_only(tmp_path):
    path = tmp_path / "big.h5"
    data = np.random.default_rng(2).standard_normal((20000, 64)).astype("<f4")
    with h5py.File(path, "w") as f:
        f.create_dataset("contiguous", data=data)
        f.create_dataset("chunked", data=data, chunks=(100, 64))
    idx = np.random.default_rng(3).integers(0, 20000, 5000)
    with h5py.File(path, "r", driver="gds") as f:
        for name in ("contiguous", "chunked"):
            assert h5gds.read(f[name], sel=idx).tobytes() == data[idx].tobytes()
            assert h5gds.read(f[name], sel=np.sort(idx)).tobytes() == data[np.sort(idx)].tobytes()


def test_a_large_unordered_gather_scattered_in_parts(tmp_path):
    """More than 8 MiB of rows in another order than the file's: the copy into the caller's order
    is split over threads; every row lands where its index is."""
    data = np.random.default_rng(4).integers(0, 2**31, (4000, 1024), dtype="<i4")
    with h5py.File(tmp_path / "l.h5", "w") as f:
        dset = f.create_dataset("x", data=data)
        idx = np.random.default_rng(5).integers(-4000, 4000, 3000)
        assert h5gds.read(dset, sel=idx).tobytes() == data[idx].tobytes()
        out = np.zeros((3001, 1024), dtype="<i4")
        idx = np.concatenate([idx, idx[:1]])
        assert h5gds.read(dset, out=out, sel=idx) is out and np.array_equal(out, data[idx])


def test_gathers_from_threads_at_once(tmp_path, run_in_threads):
    path = tmp_path / "t.h5"
    data = reference((300, 16), "<f8")
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(10, 16))
    with h5py.File(path, "r", driver="gds") as f:
        dset = f["x"]

        def work(seed):
            def one(i):
                idx = np.random.default_rng(seed * 1000 + i).integers(-300, 300, 50)
                assert h5gds.read(dset, sel=idx).tobytes() == data[idx].tobytes()
            return one

        run_in_threads([work(seed) for seed in range(4)], 25)


# --- refusals ----------------------------------------------------------------------------------------------

@pytest.fixture
def dset(tmp_path):
    with h5py.File(tmp_path / "e.h5", "w") as f:
        yield f.create_dataset("x", data=reference())


@pytest.mark.parametrize("sel, error, message", [
    ([0, 40], IndexError, r"^index 40 is out of range for axis 0 with size 40$"),
    (np.array([3, -41, 50]), IndexError, r"^index -41 is out of range for axis 0 with size 40$"),
    (np.array([2**63 + 5], dtype=np.uint64), IndexError, r"^index 9223372036854775813 is out of range for axis 0"),
    ((np.array([1]), 6), IndexError, r"^index 6 is out of range for axis 1 with size 6$"),
    (([1], 0, 0, 0), IndexError, r"^too many indices: the dataset has 3 dimension\(s\), the selection indexes 4$"),
    (([1], slice(None, None, -1)), ValueError, r"^slice step -1 on axis 1: steps must be 1 or more"),
    (np.array([True, False] * 20), TypeError, r"^boolean index arrays are not supported along axis 0 .*"
                                               r"np\.flatnonzero\(mask\)"),
    ([True, False], TypeError, r"^boolean index arrays are not supported"),
    (np.array([1.0, 2.0]), TypeError, r"^index array along axis 0 has elements of dtype float64: "
                                      r"gathers take integer indices$"),
    ([1, 2.5], TypeError, r"^index list along axis 0 has elements of dtype float64"),
    ([1, None], TypeError, r"^index list along axis 0 has elements of dtype object"),
    (["a"], TypeError, r"^index list along axis 0 has elements of dtype <U1"),
    (np.array([[1, 2]]), TypeError, r"^index array along axis 0 has 2 dimensions, shape \(1, 2\): gathers take a "
                                    r"1-D array of row indices$"),
    ([[1], [2, 3]], TypeError, r"^index list along axis 0 cannot be read as an integer array"),
    ((0, np.array([1, 2])), TypeError, r"^selection item array\(\[1, 2\]\) \(ndarray\): .* h5gds\.read also takes "
                                       r"a 1-D integer array of rows as the first item"),
    ((slice(None), [1]), TypeError, r"^selection item \[1\] \(list\)"),
])
def test_bad_gathers_are_refused_and_out_untouched(dset, sel, error, message):
    out = np.full((2,) + SHAPE_3D[1:], -3.0)
    with pytest.raises(error, match=message):
        h5gds.read(dset, out=out, sel=sel)
    with pytest.raises(error, match=message):
        h5gds.read(dset, sel=sel)
    assert (out == -3.0).all()


def test_out_of_the_wrong_shape_dtype_or_kind_is_refused_untouched(dset):
    out = np.full((3, 6, 5), -3.0)
    with pytest.raises(ValueError, match=r"^out has shape \(3, 6, 5\), the selection of dataset /x has shape "
                                         r"\(2, 6, 5\)$"):
        h5gds.read(dset, out=out, sel=[1, 2])
    with pytest.raises(TypeError, match=r"^out has dtype float32, dataset /x has dtype float64"):
        h5gds.read(dset, out=np.zeros((2, 6, 5), dtype="f4"), sel=[1, 2])
    with pytest.raises(ValueError, match=r"^out must be C-contiguous"):
        h5gds.read(dset, out=np.full((2, 6, 10), -3.0)[:, :, ::2], sel=[1, 2])
    frozen = np.full((2, 6, 5), -3.0)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match=r"^out is read-only$"):
        h5gds.read(dset, out=frozen, sel=[1, 2])
    assert (out == -3.0).all() and (frozen == -3.0).all()


def test_a_gather_into_memory_cuda_does_not_know_is_refused(dset):
    """Gathers into device arrays read the rows into host memory and copy them up (test_device.py); an
    address CUDA does not know (here: no CUDA at all) is refused, and nothing is written there."""
    class CudaArray:
        __cuda_array_interface__ = {"shape": (2, 6, 5), "typestr": "<f8", "data": (0xDEAD0000, False), "version": 3}

    with pytest.raises(ValueError, match=r"^array is CUDA device memory, but CUDA does not work in this process"):
        h5gds.read(dset, out=CudaArray(), sel=[1, 2])


def test_scalar_datasets_have_no_rows_to_gather(tmp_path):
    with h5py.File(tmp_path / "s.h5", "w") as f:
        dset = f.create_dataset("s", data=np.float32(2.5))
        with pytest.raises(IndexError, match=r"^too many indices: the dataset has 0 dimension\(s\), the selection "
                                             r"indexes 1$"):
            h5gds.read(dset, sel=[0])


def test_writes_take_no_index_arrays(dset):
    with pytest.raises(TypeError, match=r"^selection item \[1, 2\] \(list\): h5gds\.read and h5gds\.write take"):
        h5gds.write(dset, np.zeros((2, 6, 5)), sel=[1, 2])
    assert dset[...].tobytes() == reference().tobytes()


# --- compressed chunks: each chunk a read touches decoded once ------------------------------------------------

#: Chunks larger than the 1 MiB h5gds keeps decoded between reads, so that only decoding once per call
#: (not a cache) keeps the count down: 4 chunks of 16 rows of 20000 float32 (1.28 MB).
BIG_CHUNKS = (64, 20000), (16, 20000)


@pytest.fixture(params=["gzip", "zstd", "lz4"])
def compressed(request, tmp_path):
    import hdf5plugin

    codec = {"gzip": {"compression": "gzip"}, "zstd": hdf5plugin.Zstd(), "lz4": hdf5plugin.LZ4()}[request.param]
    shape, chunks = BIG_CHUNKS
    data = np.round(np.sin(np.arange(np.prod(shape), dtype="f4").reshape(shape) / 300) * 64) / 64
    path = tmp_path / f"{request.param}.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data.astype("f4"), chunks=chunks, **codec)
    with h5py.File(path, "r") as f:  # read-only: h5gds reads and decodes the chunks itself
        yield f["x"]


@pytest.mark.parametrize("sel, chunks", [
    # Rows in chunks 0, 1 and 2, several runs in each, unordered with a repeat.
    ([40, 1, 3, 17, 19, 5, 3], 3),
    # The same rows with a slice of the other axis.
    (([40, 1, 3, 17, 19, 5, 3], slice(100, 19000, 7)), 3),
    # Every other row of one chunk: 8 runs, one chunk.
    (list(range(16, 32, 2)), 1),
    # A strided partial hyperslab across every chunk.
    ((slice(2, 60, 3), slice(5, 19000, 7)), 4),
    # Rows across a chunk boundary, part of the other axis.
    ((slice(14, 18), slice(3, 50)), 2),
])
def test_compressed_reads_decode_each_chunk_they_touch_once(compressed, sel, chunks):
    before = _native.chunks_decoded()
    got = h5gds.read(compressed, sel=sel)
    decoded = _native.chunks_decoded() - before
    rows = sel[0] if isinstance(sel, tuple) else sel
    if isinstance(rows, list):
        rest = sel[1:] if isinstance(sel, tuple) else ()
        expected = h5py_gather(compressed, rows, rest)
    else:
        expected = compressed[sel]
    np.testing.assert_array_equal(got, expected)
    assert decoded == chunks, f"{decoded} chunks decoded for a read touching {chunks}"


def test_a_large_chunk_read_a_call_at_a_time_is_decoded_at_most_twice(compressed):
    """Rows read one call at a time through a 1.28 MB chunk (rows walked in order, as batches of
    neighbouring rows read them): the first read decodes what it needs, the second the whole chunk,
    kept for the rest; each read equal to h5py's."""
    before = _native.chunks_decoded()
    for row in range(16, 32):
        np.testing.assert_array_equal(h5gds.read(compressed, sel=row), compressed[row])
    for first in range(16, 32, 4):
        rows = list(range(first, first + 4))
        np.testing.assert_array_equal(h5gds.read(compressed, sel=rows), compressed[first:first + 4])
    assert _native.chunks_decoded() - before <= 2


def test_the_large_chunk_kept_goes_with_its_file(tmp_path):
    """A kept decoded chunk belongs to the dataset as opened read-only: rewritten and reopened, the
    file's new values are read."""
    path = tmp_path / "kept.h5"
    shape, chunks = BIG_CHUNKS
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.zeros(shape, "f4"), chunks=chunks, compression="gzip")
    with h5py.File(path, "r") as f:
        assert not h5gds.read(f["x"], sel=3).any() and not h5gds.read(f["x"], sel=[5, 9]).any()
    with h5py.File(path, "r+") as f:
        f["x"][:16] = 7
    with h5py.File(path, "r") as f:
        assert (h5gds.read(f["x"], sel=3) == 7).all() and (h5gds.read(f["x"], sel=[5, 9]) == 7).all()


@pytest.mark.parametrize("sel, chunks", [
    ([40, 1, 3, 17, 19, 5, 3], 3),
    (([40, 1, 3, 17, 19, 5, 3], slice(100, 19000, 7)), 3),
    # Rows inside one chunk: left to HDF5, which keeps the chunk in its cache.
    (list(range(16, 32, 2)), 0),
])
def test_gathers_from_a_file_open_for_writing_decode_each_chunk_once(compressed, sel, chunks):
    """Files the layouts do not serve (here open for writing): the rows' chunks read raw through
    h5py's HDF5 and decoded by h5gds, each once."""
    path = compressed.file.filename
    compressed.file.close()
    with h5py.File(path, "r+") as f:
        dset = f["x"]
        before = _native.chunks_decoded()
        got = h5gds.read(dset, sel=sel)
        decoded = _native.chunks_decoded() - before
        rows, rest = (sel[0], sel[1:]) if isinstance(sel, tuple) else (sel, ())
        np.testing.assert_array_equal(got, h5py_gather(dset, rows, rest))
    assert decoded == chunks, f"{decoded} chunks decoded for a read touching {chunks}"


def test_gathers_of_chunks_never_written_from_a_file_open_for_writing(tmp_path):
    import hdf5plugin

    shape, chunks = BIG_CHUNKS
    with h5py.File(tmp_path / "sparse.h5", "w") as f:
        dset = f.create_dataset("x", shape=shape, dtype="f4", chunks=chunks, fillvalue=-2.5, **hdf5plugin.Zstd())
        dset[16:32] = 4.0
        dset[48:] = np.arange(16 * 20000, dtype="f4").reshape(16, 20000)
        rows = [50, 3, 20, 40, 63, 3]
        before = _native.chunks_decoded()
        got = h5gds.read(dset, sel=rows)
        assert _native.chunks_decoded() - before == 2  # the two chunks written
        np.testing.assert_array_equal(got, h5py_gather(dset, rows))
        assert (got[1] == -2.5).all() and (got[2] == 4).all()
