"""h5gds.from_file, h5gds.to_file and h5gds.from_file_batched: the semantics of array-io's and
Legate's functions of the same names (destructive writes, parent directories and groups created,
clipped row-major chunks with int offsets, ValueError for a directory, a group or a bad chunk_size),
the cases Legate gets wrong (0-d and empty arrays, views, nested groups, trailing slashes, strings,
big-endian data, rewrites, self-contained files), files both ways with h5py and with array-io's
Rust functions, `like=`, device arrays on the CUDA/cuFile emulator (once h5gds.read/write take them),
and a process that also loads netCDF4's own HDF5."""

import os
import subprocess
import sys
import types
from pathlib import Path

import h5py
import numpy as np
import pytest

import h5gds
from support import ROOT, assert_ran, clean_env  # tests/python, on the path by conftest.py


def values(shape, dtype):
    n = int(np.prod(shape, dtype=np.int64))
    k = np.arange(n, dtype=np.int64)
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        data = k % 3 == 0
    elif dtype.kind == "f":
        data = k * 0.25 - 100
    elif dtype.kind == "c":
        data = k * (0.5 + 1j) - 3
    else:
        data = k * 7919 - 5000
    return data.astype(dtype).reshape(shape)


def assert_same(got, expected):
    assert isinstance(got, np.ndarray)
    assert got.dtype == expected.dtype and got.shape == expected.shape, (got.dtype, got.shape)
    assert got.tobytes() == np.ascontiguousarray(expected).tobytes()


def h5py_read(path, name):
    with h5py.File(path, "r") as f:
        dset = f[name]
        return dset[...], dset.dtype  # `...`: an array of the stored dtype also for 0-d


# --- round trips and h5py ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["<i1", "<i2", "<i4", "<i8", "<u1", "<u2", "<u4", "<u8", "<f2", "<f4",
                                   "<f8", "<c8", "<c16", "bool", ">f8", ">i4", ">u2", "S5"])
@pytest.mark.parametrize("shape", [(), (0,), (7,), (3, 5), (4, 0, 2), (2, 3, 2, 3)], ids=str)
def test_round_trips_keep_dtype_shape_and_bytes_and_h5py_agrees(tmp_path, dtype, shape):
    array = values(shape, dtype) if dtype != "S5" else \
        np.array([f"s{k}".encode() for k in range(int(np.prod(shape)))], dtype="S5").reshape(shape)
    path = tmp_path / "rt.h5"
    h5gds.to_file(array, path, "x")
    assert_same(h5gds.from_file(path, "x"), array)
    stored, stored_dtype = h5py_read(path, "/x")
    assert stored_dtype == array.dtype  # big-endian kept in the file, not swapped
    assert np.asarray(stored).tobytes() == array.tobytes()


def test_h5py_files_of_every_layout_are_read_as_h5py_reads_them(tmp_path):
    path = tmp_path / "h5py.h5"
    rng = np.random.default_rng(5)
    data = rng.standard_normal((40, 33))
    with h5py.File(path, "w") as f:
        f["contiguous"] = data
        f.create_dataset("chunked/gzip", data=data.astype("<f4"), chunks=(7, 8), compression="gzip")
        f.create_dataset("big_endian", data=np.arange(50, dtype=">i4").reshape(5, 10))
        f.create_dataset("sparse", shape=(6, 9), dtype="<i2", chunks=(4, 4), fillvalue=-3)[1:3, 2:7] = 8
        f.create_dataset("scalar", data=np.float32(2.5))
        f.create_dataset("bools", data=np.arange(10) % 2 == 0)
    with h5py.File(path, "r") as f:
        names = []
        f.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
        expected = {name: f[name][()] for name in names}
    assert len(expected) == 6
    for name, value in expected.items():
        got = h5gds.from_file(path, name)
        assert_same(got, np.asarray(value))
    assert h5gds.from_file(path, "big_endian").dtype == np.dtype(">i4")
    assert h5gds.from_file(path, "big_endian")[4, 9] == 49


def test_views_are_written_as_the_logical_array(tmp_path):
    base = values((6, 8), "<f8")
    views = {
        "transposed": base.T,
        "reversed": base[::-1, ::-2],
        "broadcast": np.broadcast_to(np.arange(5, dtype="<i8"), (4, 5)),
        "column": base[:, 3],
        "fortran": np.asfortranarray(base),
        "swapped": np.arange(6, dtype="<u4").reshape(2, 3).byteswap().view(">u4").T,
    }
    for name, view in views.items():
        path = tmp_path / f"{name}.h5"
        h5gds.to_file(view, path, name)
        got = h5gds.from_file(path, name)
        assert got.shape == view.shape and got.dtype == view.dtype
        assert np.array_equal(got, view), name
        stored, _ = h5py_read(path, name)
        assert np.array_equal(stored, view), name


def test_scalars_and_numpy_scalars(tmp_path):
    path = tmp_path / "s.h5"
    h5gds.to_file(np.float32(2.5), path, "s")
    got = h5gds.from_file(path, "s")
    assert isinstance(got, np.ndarray) and got.shape == () and got.dtype == np.float32 and got[()] == 2.5
    with h5py.File(path, "r") as f:
        assert f["s"].shape == () and f["s"][()] == np.float32(2.5)
        assert f["s"].id.get_space().get_simple_extent_type() == h5py.h5s.SCALAR


@pytest.mark.parametrize("shape", [(), (3, 4), (0, 2)], ids=str)
def test_datasets_are_allocated_at_creation_and_never_filled(tmp_path, monkeypatch, shape):
    # Allocated storage is what lets a device array's write go straight through gds; no fill
    # value is ever written (every element is written next).
    seen = {}

    def record_write(dset, array, sel=None):
        plist = dset.id.get_create_plist()
        seen.update(offset=dset.id.get_offset(), alloc=plist.get_alloc_time(), fill=plist.get_fill_time(),
                    layout=plist.get_layout(), size=dset.id.get_storage_size())
        return write(dset, array, sel)

    write = h5gds._files._io.write
    monkeypatch.setattr(h5gds._files._io, "write", record_write)
    h5gds.to_file(values(shape, "<i8"), tmp_path / "a.h5", "/g/x")
    if 0 in shape:
        assert seen == {}  # nothing to write
        with h5py.File(tmp_path / "a.h5", "r") as f:
            plist = f["g/x"].id.get_create_plist()
            assert plist.get_alloc_time() == h5py.h5d.ALLOC_TIME_EARLY and f["g/x"].shape == shape
    else:
        assert seen["offset"] is not None and seen["size"] == 8 * int(np.prod(shape)), seen
        assert (seen["alloc"], seen["fill"], seen["layout"]) == \
            (h5py.h5d.ALLOC_TIME_EARLY, h5py.h5d.FILL_TIME_NEVER, h5py.h5d.CONTIGUOUS)
    assert_same(h5gds.from_file(tmp_path / "a.h5", "g/x"), values(shape, "<i8"))


def test_empty_arrays_keep_their_shape(tmp_path):
    path = tmp_path / "e.h5"
    h5gds.to_file(np.empty((3, 0, 4), dtype="<i2"), path, "/e")
    got = h5gds.from_file(path, "/e")
    assert got.shape == (3, 0, 4) and got.dtype == np.dtype("<i2")
    assert list(h5gds.from_file_batched(path, "e", (1, 1, 1))) == []


# --- to_file: destructive, directories, groups, one ordinary file ------------------------------------------

def test_to_file_replaces_the_file_and_creates_directories_and_groups(tmp_path):
    path = tmp_path / "a" / "b" / "c" / "out.h5"
    with pytest.raises(FileNotFoundError):
        h5gds.from_file(path, "x")
    h5gds.to_file(values((4, 4), "<f4"), path, "/g1/g2/data")
    with h5py.File(path, "r") as f:
        assert isinstance(f["g1"], h5py.Group) and isinstance(f["g1/g2"], h5py.Group)
        assert list(f) == ["g1"] and list(f["g1/g2"]) == ["data"]
    assert_same(h5gds.from_file(path, "g1/g2/data"), values((4, 4), "<f4"))
    h5gds.to_file(np.arange(3, dtype="<i8"), path, "other")
    with h5py.File(path, "r") as f:
        assert list(f) == ["other"]  # everything else went with the old file
    assert_same(h5gds.from_file(path, "/other"), np.arange(3, dtype="<i8"))


def test_writing_again_returns_the_new_data(tmp_path):
    path = tmp_path / "again.h5"
    for round_, (shape, dtype) in enumerate([((5, 5), "<f8"), ((2,), "<i4"), ((5, 5), "<f8"), ((), ">f4")]):
        array = values(shape, dtype) + round_
        h5gds.to_file(array, path, "x")
        assert_same(h5gds.from_file(path, "x"), array)
        chunks = list(h5gds.from_file_batched(path, "x", (2,) * len(shape)))
        assert chunks[0][0].ravel()[0] == array.ravel()[0]


def test_the_file_is_one_self_contained_ordinary_hdf5_file(tmp_path):
    out = tmp_path / "out"
    h5gds.to_file(values((100, 10), "<f4"), out / "one.h5", "/g/data")
    assert [p.name for p in out.iterdir()] == ["one.h5"]
    assert h5py.is_hdf5(out / "one.h5")
    moved = tmp_path / "elsewhere" / "moved.h5"
    moved.parent.mkdir()
    (out / "one.h5").rename(moved)
    out.rmdir()
    with h5py.File(moved, "r") as f:
        dset = f["g/data"]
        assert dset.chunks is None and dset.external is None and not dset.is_virtual
        assert dset.compression is None
        assert dset.id.get_create_plist().get_layout() == h5py.h5d.CONTIGUOUS
        assert dset.id.get_offset() is not None  # allocated, so device reads can go straight
    assert_same(h5gds.from_file(moved, "g/data"), values((100, 10), "<f4"))


def test_a_directory_as_path_raises_value_error_and_is_left_alone(tmp_path):
    directory = tmp_path / "dir.h5"
    directory.mkdir()
    (directory / "keep").write_text("x")
    with pytest.raises(ValueError, match=r"is a directory"):
        h5gds.to_file(np.arange(3), directory, "x")
    with pytest.raises(ValueError, match=r"is a directory"):
        h5gds.from_file(directory, "x")
    with pytest.raises(ValueError, match=r"is a directory"):
        h5gds.from_file_batched(str(directory), "x", (1,))
    assert [p.name for p in directory.iterdir()] == ["keep"]


@pytest.mark.parametrize("array, error, message", [
    (np.array(["text"]), TypeError, "encode text with np.char.encode"),
    (np.array([object(), 1], dtype=object), TypeError, "fixed-size elements"),
    ([1, 2, 3], TypeError, "np.asarray"),
    (np.zeros(3, dtype="M8[s]"), TypeError, "has no HDF5 type"),
    (np.ma.masked_array([1, 2], mask=[0, 1]), TypeError, "masked array: HDF5 stores no mask"),
])
def test_arrays_hdf5_cannot_store_are_refused_before_the_file_is_touched(tmp_path, array, error, message):
    path = tmp_path / "keep.h5"
    h5gds.to_file(np.arange(4.0), path, "x")
    before = path.read_bytes()
    with pytest.raises(error, match=message):
        h5gds.to_file(array, path, "x")
    assert path.read_bytes() == before


def test_a_write_that_fails_leaves_the_old_file_and_no_other(tmp_path, monkeypatch):
    path = tmp_path / "keep.h5"
    h5gds.to_file(np.arange(4.0), path, "x")
    before = path.read_bytes()

    def failing_write(dset, array, sel=None):
        raise OSError("H5Dwrite failed: No space left on device (simulated)")

    monkeypatch.setattr(h5gds._files._io, "write", failing_write)
    with pytest.raises(OSError, match="simulated"):
        h5gds.to_file(np.arange(100.0), path, "x")
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["keep.h5"]


def test_to_file_through_a_symlink_replaces_its_target_and_keeps_permissions(tmp_path):
    real = tmp_path / "real.h5"
    h5gds.to_file(np.arange(3), real, "x")
    real.chmod(0o640)
    link = tmp_path / "link.h5"
    link.symlink_to(real)
    h5gds.to_file(np.arange(5, dtype="<i2"), link, "y")
    assert link.is_symlink() and link.resolve() == real
    assert (real.stat().st_mode & 0o777) == 0o640
    assert_same(h5gds.from_file(real, "y"), np.arange(5, dtype="<i2"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.h5", "real.h5"]


def test_host_dlpack_arrays_are_written_as_their_logical_array(tmp_path):
    transposed = HostTensor(np.arange(12, dtype="<i4").reshape(3, 4).T, "cpu")
    h5gds.to_file(transposed, tmp_path / "d.h5", "x")
    assert_same(h5gds.from_file(tmp_path / "d.h5", "x"), np.arange(12, dtype="<i4").reshape(3, 4).T.copy())


class DeviceView:
    """A stand-in device array: only its __cuda_array_interface__ (never dereferenced here)."""

    def __init__(self, shape, strides, typestr="<f4"):
        self.__cuda_array_interface__ = {"shape": shape, "strides": strides, "typestr": typestr,
                                         "data": (0x7000_0000, False), "version": 3}


class TorchLikeView(DeviceView):
    """... with PyTorch's contiguous(), recording the copies it makes."""

    def __init__(self, shape, strides):
        super().__init__(shape, strides)
        self.copies = []

    def contiguous(self):
        self.copies.append(DeviceView(self.__cuda_array_interface__["shape"], None))
        return self.copies[-1]


@pytest.mark.parametrize("shape, strides, copied", [
    ((4, 3), None, False), ((4, 3), (12, 4), False), ((4, 3), (4, 16), True), ((4, 3), (0, 4), True),
    ((1, 5), (999, 4), False), ((5, 1), (4, 999), False), ((0, 3), (4, 4), False), ((3,), (8,), True),
])
def test_device_views_are_made_contiguous_by_their_library_before_writing(shape, strides, copied):
    view = TorchLikeView(shape, strides)
    source, got_shape, dtype = h5gds._files._logical(view)
    assert got_shape == shape and dtype == np.dtype("<f4")
    assert view.copies == ([source] if copied else []) and (source is view) == (not copied)


def test_a_device_view_without_a_way_to_copy_it_is_refused():
    with pytest.raises(ValueError, match=r"\(test_files.DeviceView\) is not C-contiguous, and its library offers "
                                         r"no ascontiguousarray or contiguous\(\) to copy it"):
        h5gds._files._logical(DeviceView((4, 3), (4, 16)))


# --- names -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, reason", [
    ("", "it is empty"),
    ("/", "root group"),
    ("data/", "ends with '/'"),
    ("/g1/g2/", "ends with '/'"),
    ("/a//b", "empty path component"),
    ("a/../b", "'.' and '..'"),
    ("./a", "'.' and '..'"),
    ("a\0b", "NUL"),
])
def test_bad_dataset_names_raise_value_error_naming_them(tmp_path, name, reason):
    path = tmp_path / "n.h5"
    h5gds.to_file(np.arange(4), path, "x")
    before = path.read_bytes()
    for call in (lambda: h5gds.to_file(np.arange(2), path, name), lambda: h5gds.from_file(path, name),
                 lambda: h5gds.from_file_batched(path, name, (1,))):
        with pytest.raises(ValueError) as err:
            call()
        assert repr(name) in str(err.value) and reason in str(err.value), str(err.value)
    assert path.read_bytes() == before
    with pytest.raises(TypeError, match="dataset must be a str"):
        h5gds.from_file(path, b"x")


def test_names_without_leading_slash_are_the_same_dataset(tmp_path):
    path = tmp_path / "n.h5"
    h5gds.to_file(values((3, 2), "<i4"), path, "g/data")
    for name in ("g/data", "/g/data"):
        assert_same(h5gds.from_file(path, name), values((3, 2), "<i4"))
    with h5py.File(path, "r") as f:
        assert f["/g/data"].name == "/g/data"
    h5gds.to_file(np.arange(3), path, "gr\u00fc\u00dfe/\u6570\u636e")  # UTF-8 names, as h5py writes them
    with h5py.File(path, "r") as f:
        assert list(f) == ["gr\u00fc\u00dfe"] and list(f["gr\u00fc\u00dfe"]) == ["\u6570\u636e"]
    assert_same(h5gds.from_file(path, "/gr\u00fc\u00dfe/\u6570\u636e"), np.arange(3))


# --- from_file errors --------------------------------------------------------------------------------------

def test_read_errors_name_the_culprit(tmp_path):
    path = tmp_path / "e.h5"
    with h5py.File(path, "w") as f:
        f["g1/g2/data"] = np.arange(4)
        f["other"] = np.arange(2)
        f["empty"] = h5py.Empty("f4")
        f["g1/dangling"] = h5py.SoftLink("/nowhere")
    with pytest.raises(ValueError, match=r"'/g1/g2' in .* is a group, not a dataset"):
        h5gds.from_file(path, "g1/g2")
    with pytest.raises(ValueError, match=r"is a group, not a dataset"):
        h5gds.from_file_batched(path, "/g1", (1,))
    with pytest.raises(ValueError, match=r"has no dataset '/missing'; its datasets: /empty, /g1/g2/data, /other"):
        h5gds.from_file(path, "missing")
    with pytest.raises(ValueError, match=r"has no dataset '/g1/dangling'"):
        h5gds.from_file(path, "g1/dangling")
    with pytest.raises(ValueError, match=r"has no dataset '/g1/g2/data/deeper'"):
        h5gds.from_file(path, "g1/g2/data/deeper")
    with pytest.raises(ValueError, match=r"'/empty' .* null dataspace"):
        h5gds.from_file(path, "empty")
    with pytest.raises(FileNotFoundError, match=r"no such HDF5 file"):
        h5gds.from_file(tmp_path / "nope.h5", "x")
    not_hdf5 = tmp_path / "text.h5"
    not_hdf5.write_text("not HDF5")
    with pytest.raises(OSError, match=r"could not be opened as an HDF5 file"):
        h5gds.from_file(not_hdf5, "x")
    with pytest.raises(TypeError, match=r"path must be a str or os.PathLike"):
        h5gds.from_file(3, "x")
    many = tmp_path / "many.h5"
    with h5py.File(many, "w") as f:
        for i in range(25):
            f[f"d{i:02}"] = np.arange(2)
    with pytest.raises(ValueError, match=r"its datasets: /d00, /d01, .*, /d19, \.\.\.$"):
        h5gds.from_file(many, "d99")


# --- strings -----------------------------------------------------------------------------------------------

def test_string_datasets(tmp_path):
    path = tmp_path / "strings.h5"
    fixed = np.array([[b"ab", b"cde"], [b"", b"fghij"]], dtype="S5")
    with h5py.File(path, "w") as f:
        f["fixed"] = fixed
        f["variable"] = ["alpha", "b\u00e9ta", "", "gamma"]
        f["variable_scalar"] = "one"
    assert_same(h5gds.from_file(path, "fixed"), fixed)
    variable = h5gds.from_file(path, "variable")
    assert variable.dtype == object and variable.tolist() == [b"alpha", "b\u00e9ta".encode(), b"", b"gamma"]
    scalar = h5gds.from_file(path, "variable_scalar")
    assert isinstance(scalar, np.ndarray) and scalar.shape == () and scalar[()] == b"one"
    chunks = list(h5gds.from_file_batched(path, "variable", (3,)))
    assert [(c.tolist(), o) for c, o in chunks] == [([b"alpha", "b\u00e9ta".encode(), b""], (0,)), ([b"gamma"], (3,))]
    assert [(c.tobytes(), o) for c, o in h5gds.from_file_batched(path, "fixed", (1, 2))] == \
        [(fixed[0].tobytes(), (0, 0)), (fixed[1].tobytes(), (1, 0))]


# --- from_file_batched -------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, chunk", [((5,), (2,)), ((5, 5), (2, 2)), ((7, 6, 5), (3, 4, 5)), ((4, 3), (10, 10)),
                                          ((6, 4), (1, 1)), ((), ())], ids=str)
def test_batches_are_row_major_clipped_cover_once_and_have_int_offsets(tmp_path, shape, chunk):
    array = values(shape, "<f8")
    path = tmp_path / "b.h5"
    h5gds.to_file(array, path, "/d")
    whole = np.full(shape, np.nan)
    seen = np.zeros(shape, dtype=int)
    previous = None
    batches = h5gds.from_file_batched(path, "d", chunk)
    assert batches.shape == shape and batches.total == len(list(np.ndindex(*[-(-n // c) for n, c in zip(shape, chunk)])))
    count = 0
    for got, offsets in batches:
        assert type(offsets) is tuple and all(type(o) is int for o in offsets), offsets
        assert previous is None or previous < offsets, "row-major order"
        previous = offsets
        assert got.shape == tuple(min(c, n - o) for c, n, o in zip(chunk, shape, offsets))
        region = tuple(slice(o, o + s) for o, s in zip(offsets, got.shape))
        assert got.tobytes() == np.ascontiguousarray(array[region]).tobytes()
        whole[region] = got
        seen[region] += 1
        count += 1
    assert count == batches.total
    assert np.all(seen == 1) and whole.tobytes() == array.tobytes()


def test_legates_documented_example_offsets(tmp_path):
    path = tmp_path / "doc.h5"
    h5gds.to_file(np.arange(5, dtype="<i4"), path, "line")
    assert [(c.tolist(), o) for c, o in h5gds.from_file_batched(path, "line", [2])] == \
        [([0, 1], (0,)), ([2, 3], (2,)), ([4], (4,))]
    h5gds.to_file(np.zeros((5, 5)), path, "square")
    assert [o for _, o in h5gds.from_file_batched(path, "square", (2, 2))] == \
        [(0, 0), (0, 2), (0, 4), (2, 0), (2, 2), (2, 4), (4, 0), (4, 2), (4, 4)]


@pytest.mark.parametrize("chunk_size, error, message", [
    ((2,), ValueError, r"chunk_size \(2,\) has 1 entries, but dataset '/d' has shape \(5, 4\) \(rank 2\)"),
    ((2, 2, 2), ValueError, r"has 3 entries"),
    ((), ValueError, r"has 0 entries"),
    ((2, 0), ValueError, r"entry 1 is 0; every entry must be positive"),
    ((-2, 3), ValueError, r"entry 0 is -2; every entry must be positive"),
    ((-1, -1), ValueError, r"entry 0 is -1; every entry must be positive"),
    ((2, 1.5), TypeError, r"chunk_size entry 1 is 1.5 \(float\): entries must be ints"),
    ((True, 2), TypeError, r"chunk_size entry 0 is True"),
    (2, TypeError, r"chunk_size must be a sequence of ints, one per dimension, not int"),
    ("22", TypeError, r"not str"),
])
def test_a_bad_chunk_size_raises_at_the_call_naming_it(tmp_path, chunk_size, error, message):
    path = tmp_path / "c.h5"
    h5gds.to_file(np.arange(20.0).reshape(5, 4), path, "d")
    with pytest.raises(error, match=message):
        h5gds.from_file_batched(path, "d", chunk_size)
    # The refused call left no file open: the file can be replaced.
    h5gds.to_file(np.arange(3), path, "d")


def test_numpy_integer_chunk_sizes_and_closing_early(tmp_path):
    path = tmp_path / "c.h5"
    h5gds.to_file(np.arange(20.0).reshape(5, 4), path, "d")
    batches = h5gds.from_file_batched(path, "d", np.array([2, 3]))
    chunk, offsets = next(batches)
    assert offsets == (0, 0) and chunk.tolist() == [[0, 1, 2], [4, 5, 6]]
    batches.close()
    assert list(batches) == []
    h5gds.to_file(np.arange(3), path, "d")  # the closed batches hold no file open
    with h5gds.from_file_batched(path, "d", (2,)) as batches:
        assert [o for _, o in batches] == [(0,), (2,)]


# --- like= -------------------------------------------------------------------------------------------------

def test_like_numpy_in_every_spelling(tmp_path):
    path = tmp_path / "l.h5"
    h5gds.to_file(values((3, 3), "<f4"), path, "x")
    for like in (None, "numpy", "NumPy", np, np.empty(0, dtype="i1")):
        assert_same(h5gds.from_file(path, "x", like=like), values((3, 3), "<f4"))
        chunk, _ = next(h5gds.from_file_batched(path, "x", (2, 2), like=like))
        assert type(chunk) is np.ndarray and chunk.dtype == np.float32


@pytest.mark.parametrize("library, label, install", [("cupy", "CuPy", "pip install cupy-cuda12x"),
                                                     ("torch", "PyTorch", "pip install torch")])
def test_like_a_missing_library_says_what_to_install(tmp_path, monkeypatch, library, label, install):
    monkeypatch.setitem(sys.modules, library, None)  # `import library` fails, installed or not
    path = tmp_path / "l.h5"
    h5gds.to_file(np.arange(3), path, "x")
    for call in (lambda: h5gds.from_file(path, "x", like=library),
                 lambda: h5gds.from_file_batched(path, "x", (1,), like=library)):
        with pytest.raises(ModuleNotFoundError) as err:
            call()
        assert f"like={library!r} needs {label}, which is not installed" in str(err.value)
        assert install in str(err.value)


def test_like_refuses_what_it_does_not_know(tmp_path):
    path = tmp_path / "l.h5"
    h5gds.to_file(np.arange(3), path, "x")
    with pytest.raises(ValueError, match=r"like='jax': accepted names are 'numpy', 'cupy' and 'torch'"):
        h5gds.from_file(path, "x", like="jax")
    with pytest.raises(TypeError, match=r"like must be None, 'numpy', 'cupy', 'torch'.* not builtins.list"):
        h5gds.from_file(path, "x", like=[1])
    with pytest.raises(TypeError, match=r"like=os \(a module\)"):
        h5gds.from_file(path, "x", like=os)


class HostTensor:
    """An array of a stand-in GPU library over host memory (DLPack, CPU), on a named device."""

    def __init__(self, array, device):
        self.array, self.device = array, device

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()

    def to(self, device):  # PyTorch's
        return HostTensor(self.array, device)


class StandInTorch(types.ModuleType):
    """A stand-in `torch` module over host memory: enough for from_file's PyTorch results to be
    allocated, filled by h5gds.read and converted (no PyTorch here). Records its calls."""

    Tensor = HostTensor

    def __init__(self, cuda_available=True):
        super().__init__("torch")
        for name in ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"):
            setattr(self, name, name)
        self.cuda = types.SimpleNamespace(is_available=lambda: cuda_available, current_device=lambda: 2)
        self.calls = []

    def device(self, kind, index):
        return f"{kind}:{index}"

    def empty(self, shape, dtype, device):
        self.calls.append(("empty", shape, dtype, device))
        return HostTensor(np.empty(shape, dtype=dtype), device)

    def from_numpy(self, array):
        self.calls.append(("from_numpy", array.dtype.str))
        return HostTensor(array, "cpu")


class StandInCupy(types.ModuleType):
    """A stand-in `cupy` module over host memory, with CuPy's current-device context manager."""

    def __init__(self):
        super().__init__("cupy")
        self.current, self.calls = 0, []
        module = self

        class Device:
            def __init__(self, index):
                self.id = index

            def __enter__(self):
                self.previous, module.current = module.current, self.id

            def __exit__(self, *exc):
                module.current = self.previous

        self.cuda = types.SimpleNamespace(Device=Device, runtime=types.SimpleNamespace(getDevice=lambda: 3))

    def empty(self, shape, dtype):
        self.calls.append(("empty", shape, np.dtype(dtype).str, self.current))
        return HostTensor(np.empty(shape, dtype=dtype), self.current)

    def asarray(self, array):
        self.calls.append(("asarray", array.dtype.str, self.current))
        return HostTensor(array, self.current)


@pytest.fixture
def tensor_type_in(monkeypatch):
    """Makes HostTensor look like a class of the given library (from_file follows its type)."""
    def set_library(name):
        monkeypatch.setattr(HostTensor, "__module__", name)
    return set_library


def test_like_torch_allocates_on_the_device_and_converts_big_endian(tmp_path, monkeypatch, tensor_type_in):
    torch = StandInTorch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    tensor_type_in("torch")
    path = tmp_path / "t.h5"
    h5gds.to_file(values((4, 5), "<f4"), path, "x")
    for like, device in (("torch", "cuda:2"), (torch, "cuda:2"), (HostTensor(np.empty(0), "cuda:1"), "cuda:1")):
        got = h5gds.from_file(path, "x", like=like)
        assert isinstance(got, HostTensor) and got.device == device
        assert got.array.tobytes() == values((4, 5), "<f4").tobytes()
        assert torch.calls[-1] == ("empty", (4, 5), "float32", device)
    like = HostTensor(np.empty(0), "cuda:1")
    # Device results are read with the chunk cache off (HDF5 copies cached chunks itself), NumPy ones with it.
    caches = []
    read = h5gds._files._io.read
    monkeypatch.setattr(h5gds._files._io, "read", lambda dset, out=None, sel=None: (
        caches.append(dset.id.get_access_plist().get_chunk_cache()[1]), read(dset, out=out, sel=sel))[1])
    chunked = tmp_path / "chunked.h5"
    with h5py.File(chunked, "w") as f:
        f.create_dataset("c", data=values((8, 8), "<f4"), chunks=(4, 4))
    h5gds.from_file(chunked, "c", like=like)
    h5gds.from_file(chunked, "c")
    next(h5gds.from_file_batched(chunked, "c", (2, 2), like=like))
    assert caches[0] == 0 and caches[1] > 0 and caches[2] == 0, caches
    # Big-endian data: converted to the native order explicitly, values kept.
    h5gds.to_file(values((6,), ">i8"), path, "be")
    got = h5gds.from_file(path, "be", like=like)
    assert torch.calls[-1] == ("from_numpy", "<i8") and got.device == "cuda:1"
    assert np.array_equal(got.array, values((6,), ">i8")) and got.array.dtype == np.dtype("<i8")
    chunks = [(c.array.tolist(), o) for c, o in h5gds.from_file_batched(path, "be", (4,), like=like)]
    assert chunks == [(values((4,), "<i8").tolist(), (0,)), (values((6,), "<i8")[4:].tolist(), (4,))]
    # No device type for strings, structured data or types the library lacks.
    h5gds.to_file(np.array([b"ab"]), path, "s")
    with pytest.raises(TypeError, match=r"dataset '/s' has dtype \|S2: PyTorch arrays hold numbers and bools"):
        h5gds.from_file(path, "s", like=like)
    h5gds.to_file(np.arange(3, dtype="<u4"), path, "u")
    with pytest.raises(TypeError, match=r"dtype uint32, which this PyTorch has no type for"):
        h5gds.from_file(path, "u", like=like)
    monkeypatch.setitem(sys.modules, "torch", StandInTorch(cuda_available=False))
    with pytest.raises(RuntimeError, match=r"like='torch' makes CUDA tensors, but PyTorch sees no CUDA device"):
        h5gds.from_file(path, "x", like="torch")


def test_like_cupy_allocates_under_the_device_and_converts_big_endian(tmp_path, monkeypatch, tensor_type_in):
    cupy = StandInCupy()
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    tensor_type_in("cupy")
    path = tmp_path / "c.h5"
    h5gds.to_file(values((3, 4), "<i2"), path, "x")
    on_device_1 = HostTensor(np.empty(0), types.SimpleNamespace(id=1))
    for like, device in (("cupy", 3), (cupy, 3), (on_device_1, 1)):
        got = h5gds.from_file(path, "x", like=like)
        assert got.array.tobytes() == values((3, 4), "<i2").tobytes()
        assert cupy.calls[-1] == ("empty", (3, 4), "<i2", device) and cupy.current == 0
    h5gds.to_file(values((5,), ">f8"), path, "be")
    got = h5gds.from_file(path, "be", like=on_device_1)
    assert cupy.calls[-1] == ("asarray", "<f8", 1)
    assert np.array_equal(got.array, values((5,), ">f8")) and got.array.dtype == np.dtype("<f8")
    h5gds.to_file(np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")]), path, "rec")
    with pytest.raises(TypeError, match=r"CuPy arrays hold numbers and bools only; read it with like='numpy'"):
        h5gds.from_file(path, "rec", like="cupy")


# --- the driver, and array-io ------------------------------------------------------------------------------

def child(code, **env):
    return subprocess.run([sys.executable, "-c", code], env=clean_env(env), capture_output=True, text=True,
                          timeout=120)


def test_files_go_through_the_gds_driver_unless_h5gds_use_vfd_gds_is_0(tmp_path):
    path = tmp_path / "d.h5"
    code = ("import h5gds, numpy as np\n"
            f"h5gds.to_file(np.arange(10.0), {str(path)!r}, 'x')\n"
            f"print(h5gds.from_file({str(path)!r}, 'x').sum())\n"
            f"print(sum(c.sum() for c, _ in h5gds.from_file_batched({str(path)!r}, 'x', (3,))))\n")
    proc = assert_ran(child(code, H5GDS_LOG="info"), "the gds child")
    assert proc.stdout.split() == ["45.0", "45.0"]
    # to_file writes a new file next to `path` (renamed over it when complete), then two reads.
    assert proc.stderr.count(f'opened "{tmp_path}/.d.h5.') == 1, proc.stderr
    assert proc.stderr.count(f'opened "{path}"') == 2, proc.stderr
    proc = assert_ran(child(code, H5GDS_LOG="info", H5GDS_USE_VFD_GDS="0"), "the sec2 child")
    assert proc.stdout.split() == ["45.0", "45.0"] and "opened" not in proc.stderr, proc.stderr
    proc = child(code, H5GDS_USE_VFD_GDS="yes")
    assert proc.returncode != 0 and 'ValueError: invalid H5GDS_USE_VFD_GDS="yes": accepted values are 1 (the gds driver)' in proc.stderr
    assert "1 (the gds driver), 0 (the staged path) or unset" in proc.stderr


def array_file():
    """array-io's example `array_file` (built by `cargo test`, or `cargo build -p array-io --example array_file`)."""
    built = [p for p in (ROOT / "target" / profile / "examples" / "array_file" for profile in ("debug", "release"))
             if p.is_file()]
    assert built, "build array-io's example first: cargo build -p array-io --example array_file"
    return str(max(built, key=lambda p: p.stat().st_mtime))


ARRAY_IO_TYPES = {"i8": "<i1", "i16": "<i2", "i32": "<i4", "i64": "<i8", "u8": "u1", "u16": "<u2", "u32": "<u4",
                  "u64": "<u8", "f16": "<f2", "f32": "<f4", "f64": "<f8", "bool": "bool"}


@pytest.mark.parametrize("rust, dtype", ARRAY_IO_TYPES.items())
def test_files_go_both_ways_with_array_io(tmp_path, rust, dtype):
    for shape, text in (((3, 4, 2), "3,4,2"), ((), "scalar"), ((0, 5), "0,5")):
        theirs = tmp_path / "array-io" / f"{rust}.h5"
        subprocess.run([array_file(), "write", str(theirs), "/g/x", rust, text], check=True, timeout=60)
        assert_same(h5gds.from_file(theirs, "g/x"), values(shape, dtype))
        ours = tmp_path / "h5gds" / f"{rust}.h5"
        h5gds.to_file(values(shape, dtype), ours, "/h/y")
        out = subprocess.run([array_file(), "read", str(ours), "/h/y", rust], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == [f"shape={text}", f"bytes={values(shape, dtype).tobytes().hex()}"]


# --- device memory, on the emulator ------------------------------------------------------------------------

DEVICE_CHILD = """
import sys, types
import numpy as np, h5gds
from device_arrays import DeviceArray, cuda

class Device:  # CuPy's current-device context manager, over the test arrays' ordinals
    def __init__(self, index):
        self.id = index
    def __enter__(self):
        cupy.current = self.id
    def __exit__(self, *exc):
        cupy.current = 0

# A stand-in `cupy` whose arrays are the package tests' device arrays (over the emulator).
cupy = types.ModuleType("cupy")
cupy.current = 0
cupy.cuda = types.SimpleNamespace(Device=Device, runtime=types.SimpleNamespace(getDevice=lambda: 0))
cupy.empty = lambda shape, dtype: DeviceArray(shape, dtype, ordinal=cupy.current)
cupy.asarray = lambda host: DeviceArray.from_host(np.ascontiguousarray(host), ordinal=cupy.current)
sys.modules["cupy"] = cupy

d = sys.argv[1]
a = (np.arange(300 * 257, dtype="<f4") * 0.5).reshape(300, 257)
before = cuda().counters()
h5gds.to_file(DeviceArray.from_host(a), d + "/dev.h5", "/g/x")
after = cuda().counters()
print("to_file", after["cufile_writes"] - before["cufile_writes"], after["dtoh"] - before["dtoh"],
      np.array_equal(h5gds.from_file(d + "/dev.h5", "g/x"), a))
got = h5gds.from_file(d + "/dev.h5", "g/x", like="cupy")
final = cuda().counters()
print("from_file", type(got).__name__, final["cufile_reads"] - after["cufile_reads"], final["htod"] - after["htod"],
      np.array_equal(got.to_host(), a))
whole, n = np.zeros_like(a), 0
for chunk, (i, j) in h5gds.from_file_batched(d + "/dev.h5", "g/x", (128, 100), like="cupy"):
    whole[i:i + chunk.shape[0], j:j + chunk.shape[1]] = chunk.to_host()
    n += 1
print("batched", n, np.array_equal(whole, a))
h5gds.to_file(np.arange(10, dtype=">i8"), d + "/be.h5", "be")
be = h5gds.from_file(d + "/be.h5", "be", like="cupy").to_host()
print("big-endian", be.dtype.str, be.tolist() == list(range(10)))
h5gds.to_file(DeviceArray.from_host(np.array(2.5)), d + "/s.h5", "s")
print("0-d", h5gds.from_file(d + "/s.h5", "s").tolist(), h5gds.from_file(d + "/s.h5", "s", like="cupy").to_host().tolist())
h5gds.to_file(DeviceArray((3, 0), "f4"), d + "/e.h5", "e")
print("empty", h5gds.from_file(d + "/e.h5", "e", like="cupy").shape)
import h5py
with h5py.File(d + "/chunked.h5", "w") as f:  # unfiltered chunks far smaller than h5py's chunk cache
    f.create_dataset("c", data=a, chunks=(64, 64))
before = cuda().counters()
got = h5gds.from_file(d + "/chunked.h5", "c", like="cupy")
after = cuda().counters()
print("chunked", after["cufile_reads"] - before["cufile_reads"] > 0, after["htod"] - before["htod"],
      np.array_equal(got.to_host(), a))
"""


def test_device_arrays_go_to_and_from_files_straight_through_gds_on_the_emulator(tmp_path):
    from support import emulator_library
    libs = tmp_path / "emulator"
    libs.mkdir()
    for name in ("libcuda.so.1", "libcufile.so.0"):
        (libs / name).symlink_to(emulator_library())
    proc = subprocess.run([sys.executable, "-c", DEVICE_CHILD, str(tmp_path)], cwd=Path(__file__).parent,
                          env=clean_env({"LD_LIBRARY_PATH": str(libs), "H5GDS_EMU_DEVICES": "1", "H5GDS_LOG": "info,h5gds::engine=debug",
                                         "PYTHONPATH": str(Path(__file__).parent)}),
                          capture_output=True, text=True, timeout=120)
    assert_ran(proc, "the device child")
    assert proc.stdout.splitlines() == [
        "to_file 1 0 True",  # one cuFile write, no device-to-host copy: straight from device memory
        "from_file DeviceArray 1 0 True",  # one cuFile read, no host-to-device copy
        "batched 9 True",
        "big-endian <i8 True",
        "0-d 2.5 2.5",
        "empty (3, 0)",
        "chunked True 0 True",  # the chunk cache off, as array-io opens files for device reads
    ], proc.stdout
    assert 'h5gds.write "/g/x": 308400 bytes straight from device memory through the gds driver' in proc.stderr
    assert ('h5gds.read "/g/x": 308400 bytes straight into device memory through the gds driver (way=direct'
            in proc.stderr)


FIRST_READ_CHILD = """
import ctypes, sys, time
import numpy as np, h5gds
from device_arrays import cuda

emulator = cuda().lib
def opens_completed():
    out = ctypes.c_uint64()
    assert emulator.h5gds_emu_report_counter(b"cufile driver opens completed", ctypes.byref(out)) == 0
    return out.value

def moved(read):
    before = cuda().counters(open_cufile=False)
    got = read()
    after = cuda().counters(open_cufile=False)
    return got, after["cufile_reads"] - before["cufile_reads"], after["htod"] - before["htod"], opens_completed()

d = sys.argv[1]
a = np.arange(1 << 18, dtype="<f4")
h5gds.to_file(a, d + "/x.h5", "x")
read = lambda: h5gds.from_file(d + "/x.h5", "x", like="cupy")  # the CuPy stand-in over the emulator
got, reads, htod, opened = moved(read)
print("first", reads, htod > 0, opened, np.array_equal(got.to_host(), a))
deadline = time.monotonic() + 60
while opens_completed() == 0 and time.monotonic() < deadline:
    time.sleep(0.005)
got, reads, htod, opened = moved(read)
print("after the open", reads > 0, htod, opened, np.array_equal(got.to_host(), a))
"""


def test_the_first_device_read_of_a_process_is_staged_while_cufile_opens_then_gds(tmp_path):
    """Where cuFile could give GDS (the emulated machine's cufile.json asks for P2PDMA), a fresh
    process's first from_file into device memory does not wait for cuFile's open (0.5 s here, 0.47 s
    on the first real-GPU machine): it is staged, with the same bytes, and returns before the open
    has; the reads after it go through cuFile."""
    from support import emulator_library
    libs = tmp_path / "emulator"
    libs.mkdir()
    for name in ("libcuda.so.1", "libcufile.so.0"):
        (libs / name).symlink_to(emulator_library())
    proc = subprocess.run([sys.executable, "-c", FIRST_READ_CHILD, str(tmp_path)], cwd=Path(__file__).parent,
                          env=clean_env({"LD_LIBRARY_PATH": str(libs), "H5GDS_EMU_DEVICES": "1", "H5GDS_LOG": "info",
                                         "H5GDS_EMU_CUFILE_OPEN_MS": "500",
                                         "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent / "mpi" / "emulated"),
                                                                        str(Path(__file__).parent)])}),
                          capture_output=True, text=True, timeout=120)
    assert_ran(proc, "the first-read child")
    assert proc.stdout.splitlines() == [
        "first 0 True 0 True",  # no cuFile read, host-to-device copies, the open not yet returned
        "after the open True 0 1 True",  # cuFile reads, no host-to-device copy
    ], (proc.stdout, proc.stderr)
    log = proc.stderr
    staged = log.index("while cuFile opens in the background")
    opened = log.index("cuFile opened in the background")
    # The read after the open says GPUDirect Storage: as the same file's switch ("cuFile has
    # opened; ..."), or, the file being opened afresh by from_file, as its first device transfer.
    direct = log.index("device buffers: GPUDirect Storage through cuFile", opened)
    assert staged < opened < direct, log


# --- another HDF5 in the process (netCDF4's wheel) ---------------------------------------------------------

NETCDF4_ORDERS = {
    "netCDF4 first": "import netCDF4\nimport h5gds, h5py\n",
    "netCDF4 last": "import h5gds, h5py\nimport netCDF4\n",
    "netCDF4 between": "import h5py\nimport netCDF4\nimport h5gds\n",
}


@pytest.mark.parametrize("order", NETCDF4_ORDERS)
def test_a_process_that_also_loads_netcdf4s_hdf5(tmp_path, order):
    found = subprocess.run([sys.executable, "-c", "import netCDF4"], capture_output=True, text=True)
    assert found.returncode == 0, f"scripts/test.sh installs netCDF4 into the wheel environments:\n{found.stderr}"
    nc, ours = tmp_path / "n.nc", tmp_path / "o.h5"
    code = NETCDF4_ORDERS[order] + (
        "import numpy as np, os\n"
        "libs = {os.path.basename(l.split()[-1]) for l in open('/proc/self/maps') if '/' in l}\n"
        "print(len([l for l in libs if l.startswith('libhdf5-')]))\n"
        "print(h5gds.HDF5_LIBRARY)\n"
        f"with netCDF4.Dataset({str(nc)!r}, 'w') as d:\n"
        "    d.createDimension('n', 6)\n"
        "    d.createVariable('v', 'f8', ('n',))[:] = np.arange(6) * 1.5\n"
        f"h5gds.to_file(np.arange(24, dtype='<i4').reshape(4, 6), {str(ours)!r}, 'g/x')\n"
        f"print(h5gds.from_file({str(ours)!r}, 'g/x').sum())\n"
        f"print([o for _, o in h5gds.from_file_batched({str(ours)!r}, '/g/x', (3, 4))])\n"
        f"with h5py.File({str(ours)!r}, 'r', driver='gds') as f:\n"
        "    print(h5gds.read(f['g/x'], sel=(slice(1, 3), 2)).tolist(), f['g/x'][3, 5])\n"
        f"print(h5gds.from_file({str(nc)!r}, 'v').tolist())\n"  # netCDF-4 files are HDF5 files
        f"with netCDF4.Dataset({str(ours)!r}) as d:\n"  # and netCDF4 reads h5gds's file
        "    print(int(d['g']['x'][:].sum()))\n"
        f"with netCDF4.Dataset({str(nc)!r}) as d:\n"
        "    print(d['v'][:].tolist())\n")
    proc = assert_ran(child(code, H5GDS_LOG="info"), f"the netCDF4 child ({order})")
    lines = proc.stdout.splitlines()
    assert lines[0] == "2", "netCDF4's HDF5 and h5py's are both loaded"
    assert Path(lines[1]).resolve() == Path(h5gds.HDF5_LIBRARY).resolve(), lines[1]
    assert lines[2:] == ["276", "[(0, 0), (0, 4), (3, 0), (3, 4)]", "[8, 14] 23",
                         "[0.0, 1.5, 3.0, 4.5, 6.0, 7.5]", "276", "[0.0, 1.5, 3.0, 4.5, 6.0, 7.5]"], lines
    # to_file, from_file, the batches and h5py's driver="gds" open all went through h5gds's driver.
    assert proc.stderr.count(f'opened "{tmp_path}/.o.h5.') == 1, proc.stderr
    assert proc.stderr.count(f'opened "{ours}"') == 3, proc.stderr
    assert proc.stderr.count(f'opened "{nc}"') == 1, proc.stderr
