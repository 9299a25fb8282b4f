"""h5gds.to_file(..., compression=...): chunked datasets whose chunks h5gds encodes on all cores
and writes raw. Files of every codec, level, shuffle and fletcher32, 1-D to 3-D with edge chunks,
dtypes including big-endian and bool, read back by h5py (with hdf5plugin for Zstandard and LZ4)
and by h5gds.from_file equal to the array; the stored chunks as HDF5's filters store them (edge
chunks padded with zeros); the chosen chunk shape; refused arguments named, leaving an existing
file as it was; a device array on the CUDA emulator."""

import os
import subprocess
import sys
import zlib
from pathlib import Path

import h5py
import hdf5plugin
import numpy as np
import pytest

import h5gds
from support import assert_ran, clean_env  # tests/python, on the path by conftest.py

CODECS = [("gzip", None), ("gzip", 1), ("deflate", 9), ("zstd", None), ("zstd", 1), ("zstd", 19),
          ("lz4", None), (None, None)]
FILTER_IDS = {"gzip": 1, "deflate": 1, "zstd": 32015, "lz4": 32004}


def values(shape, dtype, seed=0):
    """Data that compresses somewhat: a ramp with noise in the low bits."""
    n = int(np.prod(shape, dtype=np.int64))
    rng = np.random.default_rng(seed)
    k = np.arange(n, dtype=np.int64) // 3 + rng.integers(0, 4, n)
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        data = k % 3 == 0
    elif dtype.kind == "f":
        data = k * 0.25 - 100
    elif dtype.kind == "c":
        data = k * (0.5 + 1j) - 3
    elif dtype.kind == "S":
        return np.array([f"s{v % 1000}".encode() for v in k], dtype=dtype).reshape(shape)
    else:
        data = k * 7 - 50
    return data.astype(dtype).reshape(shape)


def check_file(path, name, array, compression, level, shuffle, fletcher32, chunks=None):
    """h5py reads the dataset equal to the array, with the pipeline asked for; and so does
    h5gds.from_file."""
    with h5py.File(path, "r") as f:
        dset = f[name]
        assert dset.dtype == array.dtype and dset.shape == array.shape
        if chunks is not None:
            assert dset.chunks == chunks
        ids = [dset.id.get_create_plist().get_filter(i)[0]
               for i in range(dset.id.get_create_plist().get_nfilters())]
        expected = ([2] if shuffle else []) + ([FILTER_IDS[compression]] if compression else []) + \
            ([3] if fletcher32 else [])
        assert ids == expected
        if compression in ("gzip", "deflate"):
            assert dset.compression == "gzip"
            assert dset.compression_opts == (4 if level is None else level)
        if compression == "zstd":
            assert dset.id.get_create_plist().get_filter(ids.index(32015))[2] == (3 if level is None else level,)
        got = dset[...]
    assert got.tobytes() == np.ascontiguousarray(array).tobytes()
    back = h5gds.from_file(path, name)
    assert back.dtype == array.dtype and back.tobytes() == np.ascontiguousarray(array).tobytes()


@pytest.mark.parametrize("compression,level", CODECS, ids=str)
@pytest.mark.parametrize("shuffle", [False, True], ids=["", "shuffle"])
@pytest.mark.parametrize("fletcher32", [False, True], ids=["", "fletcher32"])
def test_every_codec_level_shuffle_and_checksum_reads_back_in_h5py(tmp_path, compression, level,
                                                                      shuffle, fletcher32):
    array = values((23, 17, 9), "<f4")
    path = tmp_path / "c.h5"
    # Chunks that leave edge chunks on every axis.
    h5gds.to_file(array, path, "g/x", chunks=(5, 4, 9), compression=compression,
                  compression_opts=level, shuffle=shuffle, fletcher32=fletcher32)
    check_file(path, "/g/x", array, compression, level, shuffle, fletcher32, chunks=(5, 4, 9))


@pytest.mark.parametrize("dtype", ["<i1", "<u2", "<i4", "<i8", "<u8", "<f2", "<f8", "<c16", ">f8",
                                   ">i4", ">u2", "bool", "S5", [("a", "<i4"), ("b", ">f8")]], ids=str)
@pytest.mark.parametrize("compression", ["gzip", "zstd", "lz4"])
def test_dtypes_big_endian_and_bool_are_stored_as_they_are(tmp_path, dtype, compression):
    dtype = np.dtype(dtype)
    if dtype.names:
        array = np.zeros((37, 11), dtype=dtype)
        array["a"] = values((37, 11), "<i4")
        array["b"] = values((37, 11), ">f8", seed=1)
    else:
        array = values((37, 11), dtype)
    path = tmp_path / "d.h5"
    h5gds.to_file(array, path, "x", chunks=(8, 4), compression=compression, shuffle=True)
    check_file(path, "/x", array, compression, None, True, False, chunks=(8, 4))


@pytest.mark.parametrize("shape,chunks", [((1,), (1,)), ((1000,), (64,)), ((1000,), (1000,)),
                                          ((7, 1), (3, 1)), ((40, 30), (40, 30)), ((40, 30), (1, 30)),
                                          ((40, 30), (7, 30)), ((5, 6, 7), (1, 6, 7)),
                                          ((5, 6, 7), (2, 5, 3)), ((3, 4, 5, 6), (2, 3, 4, 5))],
                         ids=str)
def test_shapes_and_chunk_shapes_from_1_to_4_axes(tmp_path, shape, chunks):
    array = values(shape, "<i8")
    path = tmp_path / "s.h5"
    h5gds.to_file(array, path, "x", chunks=chunks, compression="zstd", fletcher32=True)
    check_file(path, "/x", array, "zstd", None, False, True, chunks=chunks)


@pytest.mark.parametrize("shape", [(0,), (4, 0, 2), (0, 5)], ids=str)
def test_empty_arrays_make_empty_chunked_datasets(tmp_path, shape):
    array = values(shape, "<f8")
    path = tmp_path / "e.h5"
    h5gds.to_file(array, path, "x", compression="gzip")
    with h5py.File(path, "r") as f:
        assert f["x"].shape == shape and f["x"].compression == "gzip"
        assert f["x"].id.get_num_chunks() == 0
    assert h5gds.from_file(path, "x").shape == shape


def test_stored_chunks_are_the_filters_formats_and_edge_chunks_are_padded_with_zeros(tmp_path):
    array = values((10, 7), "<u4")
    path = tmp_path / "p.h5"
    h5gds.to_file(array, path, "x", chunks=(4, 4), compression="gzip", compression_opts=6)
    with h5py.File(path, "r") as f:
        dsid = f["x"].id
        assert dsid.get_num_chunks() == 6
        mask, stored = dsid.read_direct_chunk((8, 4))
        assert mask == 0
        chunk = np.frombuffer(zlib.decompress(stored), dtype="<u4").reshape(4, 4)
    assert (chunk[:2, :3] == array[8:, 4:]).all()
    assert (chunk[2:] == 0).all() and (chunk[:, 3:] == 0).all()

    # LZ4 blocks that do not shrink are stored as they are, which hdf5plugin reads.
    noise = np.random.default_rng(5).integers(0, 2**63, (64, 1000), dtype="<u8")
    noise[:32] = 7  # one compressible half
    h5gds.to_file(noise, path, "n", chunks=(64, 1000), compression="lz4")
    with h5py.File(path, "r") as f:
        _, stored = f["n"].id.read_direct_chunk((0, 0))
        assert int.from_bytes(stored[:8], "big") == noise.nbytes
        assert int.from_bytes(stored[8:12], "big") == noise.nbytes  # one block: the chunk
        assert int.from_bytes(stored[12:16], "big") < noise.nbytes
        assert (f["n"][...] == noise).all()
    h5gds.to_file(noise[32:], path, "n", chunks=(32, 1000), compression="lz4")
    with h5py.File(path, "r") as f:
        _, stored = f["n"].id.read_direct_chunk((0, 0))
        assert int.from_bytes(stored[12:16], "big") == noise[32:].nbytes  # stored as it is
        assert stored[16:] == noise[32:].tobytes()
        assert (f["n"][...] == noise[32:]).all()


@pytest.mark.parametrize("shape,itemsize,chunks", [
    ((1000,), 8, (1000,)),  # small: one chunk, the whole array
    ((10_000_000,), 4, (262_144,)),  # 1 MiB of float32
    ((3000, 5000), 4, (52, 5000)),  # whole rows: 52 x 20000 bytes
    ((50, 300, 500), 8, (1, 262, 500)),  # a row of 1.2 MB is too many, so rows of the next axis
    ((2, 3, 400_000), 8, (1, 1, 131_072)),
    ((0, 7), 4, (1, 7)),
])
def test_chunks_chosen_are_row_major_runs_of_at_most_1_mib(shape, itemsize, chunks):
    from h5gds import _encode
    got = _encode.default_chunks(shape, itemsize)
    assert got == chunks
    assert int(np.prod(got)) * itemsize <= 1 << 20


def test_chunks_are_chosen_when_not_given_and_the_array_is_written_whole(tmp_path):
    array = values((700, 1000), "<f4")  # 2.8 MB: rows of 4000 bytes, 262 per chunk
    path = tmp_path / "auto.h5"
    h5gds.to_file(array, path, "x", compression="lz4", shuffle=True)
    check_file(path, "/x", array, "lz4", None, True, False, chunks=(262, 1000))
    h5gds.to_file(array, path, "x", fletcher32=True)  # a checksum alone makes it chunked too
    check_file(path, "/x", array, None, None, False, True, chunks=(262, 1000))
    h5gds.to_file(array, path, "x", chunks=(100, 100))  # chunked, unfiltered
    check_file(path, "/x", array, None, None, False, False, chunks=(100, 100))


@pytest.mark.parametrize("threads", ["1", "3"])
def test_one_and_many_encoding_threads_write_the_same_file(tmp_path, monkeypatch, threads):
    array = values((300, 200), "<i4")
    monkeypatch.setenv("H5GDS_NTHREADS", threads)
    h5gds.to_file(array, tmp_path / f"t{threads}.h5", "x", chunks=(16, 50), compression="zstd",
                  shuffle=True)
    monkeypatch.setenv("H5GDS_NTHREADS", "2")
    h5gds.to_file(array, tmp_path / "t2.h5", "x", chunks=(16, 50), compression="zstd", shuffle=True)
    check_file(tmp_path / f"t{threads}.h5", "/x", array, "zstd", None, True, False)
    # Chunks are written in row-major order whatever the threads: the same bytes.
    assert (tmp_path / f"t{threads}.h5").read_bytes() == (tmp_path / "t2.h5").read_bytes()


def test_views_are_written_as_their_logical_elements(tmp_path):
    base = values((40, 30), "<f8")
    path = tmp_path / "v.h5"
    h5gds.to_file(base.T[::2], path, "x", compression="gzip", chunks=(7, 11))
    check_file(path, "/x", base.T[::2], "gzip", None, False, False)


REFUSALS = [
    (dict(compression="bz2"), ValueError, "compression='bz2'"),
    (dict(compression="GZIP"), ValueError, "compression='GZIP'"),
    (dict(compression=1), TypeError, "compression must be"),
    (dict(compression="gzip", compression_opts=10), ValueError, "compression_opts=10: gzip levels are 0 to 9"),
    (dict(compression="gzip", compression_opts=-1), ValueError, "compression_opts=-1"),
    (dict(compression="zstd", compression_opts=0), ValueError, "compression_opts=0: Zstandard levels are 1 to 22"),
    (dict(compression="zstd", compression_opts=23), ValueError, "compression_opts=23"),
    (dict(compression="zstd", compression_opts=3.5), TypeError, "compression_opts must be an int"),
    (dict(compression="lz4", compression_opts=1), ValueError, "LZ4 takes no level"),
    (dict(compression_opts=4), ValueError, "compression_opts=4 needs compression="),
    (dict(compression="gzip", chunks=(4,)), ValueError, "chunks (4,) has 1 entries"),
    (dict(compression="gzip", chunks=(0, 4)), ValueError, "chunks (0, 4): entry 0 is 0"),
    (dict(compression="gzip", chunks=(4, 31)), ValueError, "entry 1 is 31, more than the array's length 30"),
    (dict(compression="gzip", chunks=(4, 2.0)), TypeError, "chunks entry 1 is 2.0"),
    (dict(compression="gzip", chunks="auto"), TypeError, "chunks must be"),
    (dict(compression="gzip", chunks=False), ValueError, "chunks=False"),
    (dict(shuffle="yes"), TypeError, "shuffle must be True or False"),
    (dict(fletcher32=1), TypeError, "fletcher32 must be True or False"),
]


@pytest.mark.parametrize("kwargs,error,message", REFUSALS, ids=lambda v: str(v)[:40])
def test_refused_arguments_are_named_and_leave_an_existing_file_as_it_was(tmp_path, kwargs, error,
                                                                           message):
    path = tmp_path / "keep.h5"
    h5gds.to_file(np.arange(5), path, "old")
    before = path.read_bytes()
    with pytest.raises(error) as info:
        h5gds.to_file(values((20, 30), "<f4"), path, "x", **kwargs)
    assert message in str(info.value)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["keep.h5"]  # no temporary file left behind


def test_a_scalar_and_comm_with_compression_are_refused(tmp_path):
    path = tmp_path / "keep.h5"
    h5gds.to_file(np.arange(5), path, "old")
    before = path.read_bytes()
    with pytest.raises(ValueError, match=r"array is a scalar \(shape \(\)\)"):
        h5gds.to_file(np.float64(2.5), path, "x", compression="gzip")
    with pytest.raises(ValueError, match="not supported with comm="):
        h5gds.to_file(np.arange(4), path, "x", comm=object(), compression="zstd")
    assert path.read_bytes() == before
    # HDF5's chunk limit, 4 GiB (an axis of length 0 takes any chunk length).
    with pytest.raises(ValueError, match="HDF5 refuses chunks of 4 GiB or more"):
        h5gds.to_file(np.zeros((0, 2), "u1"), path, "x", chunks=(1 << 31, 2), compression="gzip")
    assert path.read_bytes() == before


def test_arguments_are_checked_before_a_view_is_copied(tmp_path):
    import tracemalloc
    huge = np.broadcast_to(np.float64(1), (1 << 16, 1 << 14))  # 8 GiB once copied
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="compression='gz'"):
            h5gds.to_file(huge, tmp_path / "x.h5", "x", compression="gz")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    assert os.listdir(tmp_path) == []


DEVICE_CHILD = """
import sys
import numpy as np, h5gds
from device_arrays import DeviceArray
d = sys.argv[1]
a = (np.arange(60_000, dtype="<f4") // 7).reshape(300, 200)
dev = DeviceArray(a.shape, a.dtype)
dev.copy_from_host_async(a)  # still queued on its stream: the copy to the host waits for it
h5gds.to_file(dev, d + "/dev.h5", "x", chunks=(64, 64), compression="zstd", shuffle=True)
dev.synchronize()
h5gds.to_file(DeviceArray.from_host(a[:, :0]), d + "/empty.h5", "x", compression="gzip")
print("written")
"""


def test_a_device_array_is_copied_to_the_host_and_encoded_on_the_emulator(tmp_path):
    from support import emulator_library
    libs = tmp_path / "emulator"
    libs.mkdir()
    for name in ("libcuda.so.1", "libcufile.so.0"):
        (libs / name).symlink_to(emulator_library())
    proc = subprocess.run([sys.executable, "-c", DEVICE_CHILD, str(tmp_path)], cwd=Path(__file__).parent,
                          env=clean_env({"LD_LIBRARY_PATH": str(libs), "H5GDS_EMU_DEVICES": "1",
                                         "H5GDS_EMU_DEFER_ASYNC": "1",
                                         "PYTHONPATH": str(Path(__file__).parent)}),
                          capture_output=True, text=True, timeout=120)
    assert_ran(proc, "the device child")
    assert proc.stdout.splitlines() == ["written"], proc.stdout
    a = (np.arange(60_000, dtype="<f4") // 7).reshape(300, 200)
    check_file(tmp_path / "dev.h5", "/x", a, "zstd", None, True, False, chunks=(64, 64))
    with h5py.File(tmp_path / "empty.h5", "r") as f:
        assert f["x"].shape == (300, 0)


def test_hdf5plugin_is_what_reads_zstd_and_lz4(tmp_path):
    """The filters are hdf5plugin's ids with its client values: hdf5plugin's own files and
    h5gds's have the same pipeline."""
    array = values((100, 50), "<i2")
    h5gds.to_file(array, tmp_path / "a.h5", "x", chunks=(10, 50), compression="zstd",
                  compression_opts=5)
    with h5py.File(tmp_path / "b.h5", "w") as f:
        f.create_dataset("x", data=array, chunks=(10, 50), **hdf5plugin.Zstd(clevel=5))
    pipelines = []
    for name in ("a.h5", "b.h5"):
        with h5py.File(tmp_path / name, "r") as f:
            dcpl = f["x"].id.get_create_plist()
            pipelines.append([dcpl.get_filter(i)[:3] for i in range(dcpl.get_nfilters())])
            assert (f["x"][...] == array).all()
    assert pipelines[0] == pipelines[1]
