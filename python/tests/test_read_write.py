"""h5gds.read and h5gds.write on NumPy arrays, compared with h5py's own reads and writes of the
same selections; every refusal names the culprit and leaves the dataset as it was."""

import h5py
import hdf5plugin
import numpy as np
import pytest

import h5gds
from device_arrays import DlpackOnly

SHAPE = (12, 9, 5)


@pytest.fixture(params=["sec2", "gds"])
def h5file(request, tmp_path):
    """A file opened for writing with each driver (h5gds.read/write work on any h5py dataset)."""
    driver = None if request.param == "sec2" else "gds"
    with h5py.File(tmp_path / "data.h5", "w", driver=driver) as f:
        yield f


def reference():
    return np.arange(np.prod(SHAPE), dtype="<f8").reshape(SHAPE) * 1.5 - 7


SELECTIONS = [
    None, (), Ellipsis, 3, -1, np.int64(2), slice(2, 9, 3), slice(5, 100), slice(7, 3), slice(None, None, 4),
    (slice(None), 4), (Ellipsis, 2), (1, Ellipsis, slice(0, 5, 2)), (0, 0, 0), (-12, -9, -5),
    (slice(1, 11, 2), slice(None, None, 3), slice(4, None)), (slice(3, 3), 1),
    # rows and runs of rows, alone or in a 1-tuple (the short way of _selection.hyperslab)
    (5,), (-12,), (slice(2, 9),), slice(-3, None), slice(2, 9, 1), (slice(0, 0),), slice(4, 2), (slice(-100, 3),),
]


@pytest.mark.parametrize("sel", SELECTIONS, ids=repr)
@pytest.mark.parametrize("layout", ["contiguous", "chunked"])
def test_read_matches_h5py(h5file, sel, layout):
    kwargs = {"chunks": (5, 4, 5), "compression": "gzip"} if layout == "chunked" else {}
    dset = h5file.create_dataset("x", data=reference(), **kwargs)
    expected = np.asarray(dset[() if sel is None else sel])
    got = h5gds.read(dset, sel=sel)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert got.tobytes() == expected.tobytes()


@pytest.mark.parametrize("sel", SELECTIONS, ids=repr)
def test_write_matches_h5py(h5file, sel):
    ours = h5file.create_dataset("ours", data=reference(), chunks=(4, 3, 5))
    theirs = h5file.create_dataset("theirs", data=reference(), chunks=(4, 3, 5))
    shape = np.empty(SHAPE)[() if sel is None else sel].shape
    values = np.random.default_rng(1).standard_normal(shape)
    h5gds.write(ours, values, sel=sel)
    theirs[() if sel is None else sel] = values
    assert ours[...].tobytes() == theirs[...].tobytes()


@pytest.mark.parametrize("dtype", ["<f4", ">f8", "<i2", ">u8", "u1", "bool", "<c8", "S7",
                                   [("a", "<i4"), ("b", ">f8"), ("c", "S3")]], ids=str)
def test_every_fixed_size_dtype_round_trips_as_h5py_stores_it(h5file, dtype):
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(3)
    raw = rng.integers(0, 256, size=(40, 6) + (dtype.itemsize,), dtype=np.uint8)
    values = raw.view(dtype).reshape(40, 6) if dtype.kind in "iuc" or dtype.names else None
    if dtype.kind == "f":
        values = rng.standard_normal((40, 6)).astype(dtype)
    elif dtype.kind == "b":
        values = rng.integers(0, 2, size=(40, 6)).astype(bool)
    elif dtype.kind == "S":
        values = np.array([[f"s{i}x{j}".encode() for j in range(6)] for i in range(40)], dtype=dtype)
    elif dtype.names:
        values = np.zeros((40, 6), dtype=dtype)
        values["a"] = np.arange(240).reshape(40, 6)
        values["b"] = rng.standard_normal((40, 6))
        values["c"] = b"abc"
    dset = h5file.create_dataset("x", shape=(40, 6), dtype=dtype)
    h5gds.write(dset, values)
    assert dset[...].tobytes() == values.tobytes()
    assert h5gds.read(dset).tobytes() == dset[...].tobytes()
    part = h5gds.read(dset, sel=(slice(3, 30, 4), 2))
    assert part.tobytes() == dset[3:30:4, 2].tobytes()


@pytest.mark.parametrize("layout", ["contiguous", "chunked", "zstd"])
@pytest.mark.parametrize("mode", ["r+", "r"])
def test_datasets_of_arrays_read_and_write_as_h5py_gives_them(tmp_path, layout, mode):
    # An HDF5 array type, NumPy's subarray dtype: h5py returns the base type with the element's
    # shape after the selection's; h5gds takes and returns the same arrays.
    element = np.dtype(("<f4", (2, 3)))
    values = np.arange(7 * 4 * 6, dtype="<f4").reshape(7, 4, 2, 3)
    path = tmp_path / "arrays.h5"
    options = {"contiguous": {}, "chunked": {"chunks": (3, 2)}, "zstd": {"chunks": (3, 2), **hdf5plugin.Zstd()}}
    with h5py.File(path, "w") as f:
        f.create_dataset("x", shape=(7, 4), dtype=element, **options[layout])[...] = values
    with h5py.File(path, mode) as f:
        dset = f["x"]
        for _ in range(2):  # the second read of a read-only file's dataset takes the short way
            assert np.array_equal(h5gds.read(dset), dset[...]) and h5gds.read(dset).shape == (7, 4, 2, 3)
            for sel in [2, (slice(1, 6, 2), 3), slice(2, 5), [5, 0, 5]]:
                got = h5gds.read(dset, sel=sel)
                assert got.dtype == np.float32 and np.array_equal(got, dset[sel] if not isinstance(sel, list)
                                                                  else dset[...][sel]), sel
        out = np.zeros((4, 2, 3), "<f4")
        assert h5gds.read(dset, out=out, sel=1) is out and np.array_equal(out, values[1])
        with pytest.raises(TypeError, match=r"out has dtype float64, dataset /x has dtype \('<f4', \(2, 3\)\) "
                                            r"\(arrays of \(2, 3\) float32, which out must hold as float32\)"):
            h5gds.read(dset, out=np.zeros((4, 2, 3)), sel=1)
        with pytest.raises(ValueError, match=r"out has shape \(4, 6\), the selection of dataset /x has shape "
                                             r"\(4,\) of elements \(2, 3\), \(4, 2, 3\) in all"):
            h5gds.read(dset, out=np.zeros((4, 6), "<f4"), sel=1)
        if mode == "r+":
            h5gds.write(dset, -values[2:5], sel=slice(2, 5))
            assert np.array_equal(dset[2:5], -values[2:5]) and np.array_equal(dset[5:], values[5:])
            with pytest.raises(ValueError, match="of elements"):
                h5gds.write(dset, values[:2].reshape(2, 4, 6), sel=slice(0, 2))
            assert np.array_equal(dset[:2], values[:2])


def test_read_into_out_fills_and_returns_it(h5file):
    dset = h5file.create_dataset("x", data=reference())
    out = np.full((5, 5), -1.0)
    assert h5gds.read(dset, out=out, sel=(slice(0, 10, 2), 3)) is out
    assert np.array_equal(out, reference()[0:10:2, 3])


def test_scalar_datasets(h5file):
    dset = h5file.create_dataset("s", data=np.float32(2.5))
    assert h5gds.read(dset).shape == () and h5gds.read(dset)[()] == np.float32(2.5)
    h5gds.write(dset, np.array(4.25, dtype="f4"))
    assert dset[()] == np.float32(4.25)


def test_a_host_array_whose_cuda_interface_raises_goes_through_dlpack():
    class CpuTensor(DlpackOnly):  # as a PyTorch CPU tensor: __cuda_array_interface__ raises, DLPack works
        @property
        def __cuda_array_interface__(self):
            raise TypeError("Can't get __cuda_array_interface__ on non-CUDA tensor type")

    class Raising:  # no DLPack to fall back to
        @property
        def __cuda_array_interface__(self):
            raise RuntimeError("requires grad")

    backing = np.zeros((12, 9), dtype="<f8")
    with h5py.File("cpu.h5", "w", driver="core", backing_store=False) as f:
        dset = f.create_dataset("x", data=reference()[:, :, 2])
        h5gds.read(dset, out=CpuTensor(backing))
        assert np.array_equal(backing, reference()[:, :, 2])
        with pytest.raises(TypeError, match=r"out \(.*Raising\): __cuda_array_interface__ raised RuntimeError"):
            h5gds.read(dset, out=Raising())


def test_host_dlpack_arrays_are_read_into():
    backing = np.zeros((12, 9), dtype="<f8")
    with h5py.File("dl.h5", "w", driver="core", backing_store=False) as f:
        dset = f.create_dataset("x", data=reference()[:, :, 1])
        tensor = DlpackOnly(backing)  # another library's CPU array, reached through DLPack only
        assert h5gds.read(dset, out=tensor) is tensor
        assert np.array_equal(backing, reference()[:, :, 1])


# --- refusals ----------------------------------------------------------------------------------------------

@pytest.fixture
def dset(tmp_path):
    with h5py.File(tmp_path / "e.h5", "w") as f:
        yield f.create_dataset("x", data=reference())


def unchanged(dset):
    assert dset[...].tobytes() == reference().tobytes()


def test_wrong_dtype_names_both_types(dset):
    with pytest.raises(TypeError, match=r"out has dtype float32, dataset /x has dtype float64"):
        h5gds.read(dset, out=np.empty(SHAPE, dtype="f4"))
    with pytest.raises(TypeError, match=r"array has dtype int64, dataset /x has dtype float64"):
        h5gds.write(dset, np.zeros(SHAPE, dtype="i8"))
    with pytest.raises(TypeError, match=r"dtype >f8, dataset /x has dtype float64"):
        h5gds.write(dset, np.zeros(SHAPE, dtype=">f8"))
    unchanged(dset)


def test_wrong_shape_names_both_shapes(dset):
    with pytest.raises(ValueError, match=r"out has shape \(12, 9\), the selection of dataset /x has shape \(9, 5\)"):
        h5gds.read(dset, out=np.empty((12, 9)), sel=0)
    with pytest.raises(ValueError, match=r"array has shape \(12, 9, 4\), the selection .* has shape \(12, 9, 5\)"):
        h5gds.write(dset, np.zeros((12, 9, 4)))
    unchanged(dset)


def test_non_contiguous_and_read_only_out(dset):
    with pytest.raises(ValueError, match="out must be C-contiguous"):
        h5gds.read(dset, out=np.empty((12, 9, 10))[:, :, ::2])
    with pytest.raises(ValueError, match="out must be C-contiguous"):
        h5gds.read(dset, out=np.empty(SHAPE, order="F"))
    frozen = np.zeros(SHAPE)
    frozen.setflags(write=False)
    with pytest.raises(ValueError, match="out is read-only"):
        h5gds.read(dset, out=frozen)
    assert not frozen.any()
    with pytest.raises(ValueError, match="array must be C-contiguous"):
        h5gds.write(dset, np.zeros((12, 9, 10))[:, :, ::2])
    unchanged(dset)
    h5gds.write(dset, frozen)  # a read-only source is fine to write from
    assert not dset[...].any()


@pytest.mark.parametrize("sel, error, message", [
    (12, IndexError, "index 12 is out of range for axis 0 with size 12"),
    ((-13,), IndexError, "index -13 is out of range for axis 0 with size 12"),
    ((slice(0, 5, 0),), ValueError, "slice step cannot be zero"),
    (slice(0.5, 3), TypeError, "slice indices must be integers"),
    ((0, -10), IndexError, "index -10 is out of range for axis 1 with size 9"),
    ((0, 0, 0, 0), IndexError, "too many indices: the dataset has 3 dimension"),
    ((Ellipsis, 0, Ellipsis), IndexError, "single ellipsis"),
    (slice(None, None, -1), ValueError, "slice step -1 on axis 0"),
    ((0, slice(0, 5, 0)), ValueError, "slice step cannot be zero"),
    (1.0, TypeError, r"selection item 1.0 \(float\)"),
    (True, TypeError, r"selection item True \(bool\)"),
    (np.bool_(True), TypeError, r"selection item .*True.* \(bool_?\)"),
    ((0, [0, 1]), TypeError, r"selection item \[0, 1\] \(list\)"),
    ((0, np.array([1, 2])), TypeError, r"selection item array\(\[1, 2\]\) \(ndarray\)"),
])
def test_bad_selections(dset, sel, error, message):
    with pytest.raises(error, match=message):
        h5gds.read(dset, sel=sel)
    with pytest.raises(error, match=message):
        h5gds.write(dset, np.zeros(()), sel=sel)
    unchanged(dset)


def test_not_a_dataset_or_not_an_array(dset):
    with pytest.raises(TypeError, match="dset must be an h5py.Dataset, not h5py._hl.group.Group"):
        h5gds.read(dset.parent)
    with pytest.raises(TypeError, match="dset must be an h5py.Dataset, not numpy.ndarray"):
        h5gds.read(reference())
    with pytest.raises(TypeError, match="out must be a NumPy array, .* not builtins.list"):
        h5gds.read(dset, out=[0.0] * 540)
    with pytest.raises(TypeError, match="array must be a NumPy array, .* not builtins.bytes"):
        h5gds.write(dset, b"\0" * 4320)
    unchanged(dset)


def test_device_arrays_this_process_cannot_reach_are_refused_clearly(dset):
    """Without a CUDA driver in the process (this run; test_device.py runs with the emulator), or with one
    that does not know the address, a device array is refused by name, never dereferenced."""
    class CudaArray:
        __cuda_array_interface__ = {"shape": SHAPE, "typestr": "<f8", "data": (0xDEAD0000, False), "version": 3}

    refused = r"out is CUDA device memory, but CUDA does not work in this process|out's address 0xdead0000 is not CUDA"
    with pytest.raises(ValueError, match=refused):
        h5gds.read(dset, out=CudaArray())
    with pytest.raises(ValueError, match=refused.replace("out", "array")):
        h5gds.write(dset, CudaArray())

    class RocmArray:
        def __dlpack__(self, **kwargs):
            raise AssertionError("must not be exported")

        def __dlpack_device__(self):
            return (10, 0)  # kDLROCM

    with pytest.raises(ValueError, match=r"out is on a ROCm device \(0\): h5gds moves data between files and CUDA"):
        h5gds.read(dset, out=RocmArray())
    unchanged(dset)


def test_datasets_h5gds_cannot_move(tmp_path):
    with h5py.File(tmp_path / "odd.h5", "w") as f:
        empty = f.create_dataset("empty", data=h5py.Empty("f4"))
        with pytest.raises(ValueError, match="dataset /empty is empty"):
            h5gds.read(empty)
        strings = f.create_dataset("strings", data=["a", "bc"], dtype=h5py.string_dtype())
        with pytest.raises(TypeError, match="variable-length data"):
            h5gds.read(strings)
        kept = f["strings"]
    with pytest.raises(ValueError, match="dset is closed"):
        h5gds.read(kept)


def test_writing_to_a_read_only_file_raises_os_error(tmp_path):
    path = tmp_path / "ro.h5"
    with h5py.File(path, "w") as f:
        f["x"] = reference()
    with h5py.File(path, "r", driver="gds") as f:
        with pytest.raises(OSError, match="H5Dwrite failed: .*no write intent"):
            h5gds.write(f["x"], np.zeros(SHAPE))
        assert f["x"][...].tobytes() == reference().tobytes()


# --- threads -----------------------------------------------------------------------------------------------

def test_threads_reading_with_h5gds_while_others_use_h5py(tmp_path, run_in_threads):
    rows, cols = 256, 4096  # 8 MiB per dataset: reads long enough to overlap
    data = np.arange(rows * cols, dtype="<f8").reshape(rows, cols)
    path = tmp_path / "threads.h5"
    with h5py.File(path, "w", driver="gds", nthreads=2) as f:
        f["a"] = data
        f.create_dataset("b", data=data[::-1], chunks=(32, 512))
        f.create_dataset("w", shape=(8, cols), dtype="<f8")
    with h5py.File(path, "r+", driver="gds", nthreads=2) as f:
        def h5gds_reader(i):
            got = h5gds.read(f["a"], sel=slice(i, rows, 3))
            assert np.array_equal(got, data[i::3])

        def h5py_reader(i):
            assert np.array_equal(f["b"][i * 10:(i + 1) * 10 + 50], data[::-1][i * 10:(i + 1) * 10 + 50])

        def h5gds_writer(i):
            h5gds.write(f["w"], np.full(cols, float(i)), sel=i)

        def h5py_attrs(i):
            f["a"].attrs[f"n{i}"] = i
            assert f["a"].attrs[f"n{i}"] == i

        run_in_threads((h5gds_reader, h5gds_reader, h5py_reader, h5py_reader, h5gds_writer, h5py_attrs), repeats=6)
        assert np.array_equal(f["w"][:6], np.repeat(np.arange(6.0)[:, None], cols, axis=1))
