"""h5gds.read of compressed datasets into device memory, decoded on the GPU with nvCOMP (issue 15, the
Python package's reads): files written by h5py + hdf5plugin with deflate, Zstandard and LZ4, 1-D to 3-D,
edge chunks, chunks never written (fill value), a chunk stored unfiltered and corrupted chunks, read into
device arrays and byte-compared with h5py's own reads; the log line and the emulator's counters show the
chunks moved compressed (cuFile reads) and nvCOMP decoded them, and which reads stay on HDF5's CPU filters.

scripts/test.sh runs this file with the CUDA/cuFile emulator and the nvCOMP emulator (libnvcomp.so.6) on
LD_LIBRARY_PATH, like test_device.py (whose helpers it uses, and whose skip without CUDA it shares)."""

import itertools
import json
import os
import subprocess
import sys

import h5py
import hdf5plugin
import numpy as np
import pytest
import zstandard

import h5gds
from device_arrays import DeviceArray, require_emulator
from test_device import CUDA, STAGED, open_gds

DECODED = "decoded on the GPU with nvCOMP"
ON_HOST = "its chunks are decoded by HDF5 on the host, not on the GPU with nvCOMP"
BY_H5GDS = "its chunks are decoded by h5gds on"


@pytest.fixture(autouse=True)
def gpu_wherever_it_can(monkeypatch):
    """H5GDS_GPU_CODEC=1: these tests are about the GPU path, which unset H5GDS_GPU_CODEC may leave
    for the host's threads where h5gds estimates those faster (as for small chunks on few cores);
    tests of that choice unset it."""
    monkeypatch.setenv("H5GDS_GPU_CODEC", "1")

#: h5py keywords of each codec (the filters hdf5plugin registers: Zstandard 32015, LZ4 32004).
CODECS = {
    "gzip": {"compression": "gzip"},
    "zstd": dict(hdf5plugin.Zstd()),
    "lz4": dict(hdf5plugin.LZ4()),
}

#: name -> (shape, chunk, rows left unwritten (whole chunks along axis 0), selections)
CASES = {
    "1d": ((1000,), (64,), (320, 448), [None, (slice(37, 901),), (slice(330, 340),)]),
    "2d": ((37, 23), (8, 5), (16, 24), [None, (slice(3, 30), slice(2, 21)), (5, slice(None))]),
    "3d": ((9, 7, 11), (4, 3, 5), (4, 8), [None, (slice(1, 8), 2, slice(3, 10)), (Ellipsis, slice(4, 5))]),
}


def data_for(shape, dtype="<f4"):
    # Whole numbers (compressible by every codec, LZ4 included), varied enough that a misplaced element
    # shows.
    values = np.arange(np.prod(shape)).reshape(shape)
    return (np.round(np.sin(values * 0.01) * 100) + (values % 7)).astype(dtype)


def build(f, codec, case):
    """A dataset of `case` compressed with `codec`: rows `gap` never written (fill value -7), and the
    chunk at the origin stored unfiltered (filter mask 1), as HDF5 stores a chunk compression did not
    shrink. (HDF5 2.0 itself misreads such a chunk until the file is reopened: the tests reopen it.)"""
    shape, chunk, gap, _ = CASES[case]
    data = data_for(shape)
    dset = f.create_dataset(f"{codec}/{case}", shape=shape, dtype=data.dtype, chunks=chunk, fillvalue=-7.0,
                            **CODECS[codec])
    dset[:gap[0]] = data[:gap[0]]
    dset[gap[1]:] = data[gap[1]:]
    raw = np.ascontiguousarray(data[tuple(slice(0, c) for c in chunk)])
    dset.id.write_direct_chunk((0,) * len(shape), raw.tobytes(), filter_mask=1)
    return dset


def region_of(sel, shape):
    """Start and stop per axis of a selection of ints, slices of step 1 and Ellipsis."""
    sel = () if sel is None else sel
    if Ellipsis in sel:
        at = sel.index(Ellipsis)
        sel = sel[:at] + (slice(None),) * (len(shape) - len(sel) + 1) + sel[at + 1:]
    sel = sel + (slice(None),) * (len(shape) - len(sel))
    bounds = []
    for s, n in zip(sel, shape):
        if isinstance(s, int):
            bounds.append((s, s + 1))
        else:
            start, stop, _ = s.indices(n)
            bounds.append((start, stop))
    return bounds


def chunk_counts(dset, sel):
    """(allocated, never written) chunks touching the selection, as HDF5 lists them."""
    bounds = region_of(sel, dset.shape)
    axes = [range(a // c * c, b, c) for (a, b), c in zip(bounds, dset.chunks)]
    allocated = missing = 0
    for offset in itertools.product(*axes):
        if dset.id.get_chunk_info_by_coord(offset).byte_offset is None:
            missing += 1
        else:
            allocated += 1
    return allocated, missing


def read_on_device(dset, sel):
    expected = dset[() if sel is None else sel]
    out = DeviceArray(expected.shape, expected.dtype, fill=0)
    before = CUDA.counters() if CUDA.emulated else None
    assert h5gds.read(dset, out=out, sel=sel) is out
    after = CUDA.counters() if CUDA.emulated else None
    return expected, out.to_host(), before, after


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("codec", CODECS)
def test_compressed_chunks_are_decoded_on_the_gpu_and_match_h5py(tmp_path, capfd, codec, case):
    with h5py.File(tmp_path / "c.h5", "w") as f:
        build(f, codec, case)
    with open_gds(tmp_path / "c.h5", "r") as f:
        dset = f[f"{codec}/{case}"]
        assert dset.id.get_chunk_info_by_coord((0,) * dset.ndim).filter_mask == 1
        for sel in CASES[case][3]:
            capfd.readouterr()
            expected, got, before, after = read_on_device(dset, sel)
            assert got.shape == expected.shape and got.tobytes() == expected.tobytes(), (codec, case, sel)
            err = capfd.readouterr().err
            allocated, missing = chunk_counts(dset, sel)
            line = [ln for ln in err.splitlines() if DECODED in ln and "move compressed" in ln]
            assert len(line) == 1, err
            assert (f"{allocated} chunks move compressed" in line[0]
                    and f"{missing} chunks were never written" in line[0]), (sel, line[0])
            assert STAGED not in err, err
            if CUDA.emulated:
                delta = {k: after[k] - before[k] for k in after}
                # Every allocated chunk's stored bytes moved file -> device through cuFile.
                assert delta["cufile_reads"] >= allocated, (sel, delta)
                # Host -> device: nvCOMP's argument arrays in one copy (one batched call) and
                # nothing else unless chunks were never written (HDF5's fill, made on the host, is
                # copied up).
                nvcomp_arguments = 1 if allocated else 0
                if missing:
                    assert delta["htod"] > nvcomp_arguments, (sel, delta)
                else:
                    assert delta["htod"] == nvcomp_arguments, (sel, delta)
                assert delta["bounds_violations"] == 0, delta
    # The file is still what h5py wrote (the reads changed nothing).
    with h5py.File(tmp_path / "c.h5", "r") as f:
        dset = f[f"{codec}/{case}"]
        shape, _, gap, _ = CASES[case]
        data = data_for(shape)
        assert np.array_equal(dset[gap[1]:], data[gap[1]:])
        assert (dset[gap[0]:gap[1]] == -7.0).all()


def test_whole_chunk_rows_read_with_more_chunks_than_one_batch_holds(tmp_path, capfd):
    # Many small chunks of a 2-D dataset whose chunks span whole rows: decoded straight into place.
    data = data_for((512, 16), "<i4")
    with open_gds(tmp_path / "rows.h5", "w") as f:
        dset = f.create_dataset("rows", data=data, chunks=(4, 16), **CODECS["zstd"])
        capfd.readouterr()
        expected, got, _, _ = read_on_device(dset, None)
        assert got.tobytes() == expected.tobytes() == data.tobytes()
        assert "128 chunks move compressed" in capfd.readouterr().err


@pytest.mark.parametrize("codec", CODECS)
def test_chunks_the_driver_would_stage_are_read_by_host_threads(tmp_path, capfd, monkeypatch, codec):
    """With compat_mode=on the driver stages device reads, so the stored chunks of a file open read-only
    are read by the host's threads into pinned memory and copied up a batch at a time (no cuFile read),
    across the pipeline's batches (1300 chunks; 512 per batch), and a damaged chunk in the second batch
    is still the one named."""
    monkeypatch.delenv("H5GDS_USE_VFD_GDS", raising=False)
    monkeypatch.setenv("H5GDS_COMPAT_MODE", "on")
    data = data_for((1300 * 256,), "<f4")
    with h5py.File(tmp_path / "many.h5", "w") as f:
        f.create_dataset("many", data=data, chunks=(256,), **CODECS[codec])
        corrupt(f.create_dataset("bad", data=data, chunks=(256,), **CODECS[codec]), codec, (700 * 256,))
    with open_gds(tmp_path / "many.h5", "r") as f:
        capfd.readouterr()
        expected, got, before, after = read_on_device(f["many"], None)
        assert got.tobytes() == expected.tobytes() == data.tobytes()
        err = capfd.readouterr().err
        assert "1300 chunks move compressed" in err and "into pinned host memory on" in err, err
        assert "compat_mode=on" in err and DECODED in err, err
        if CUDA.emulated:
            assert after["cufile_reads"] == before["cufile_reads"]
        out = DeviceArray(data.shape, data.dtype, fill=0)
        with pytest.raises(OSError, match=r"chunk at \[179200\]"):
            h5gds.read(f["bad"], out=out)


def corrupt(dset, codec, offset=(64,)):
    """Overwrites the stored bytes of the chunk at `offset` with bytes the codec's decoder refuses, keeping
    the framing where one exists, so that the decoder (not a framing check) finds the damage."""
    stored = bytearray(dset.id.read_direct_chunk(offset)[1])
    keep = {"gzip": 2, "zstd": 7, "lz4": 16}[codec]  # zlib header; frame header; LZ4 sizes
    stored[keep:] = bytes([0xFF]) * (len(stored) - keep)
    dset.id.write_direct_chunk(offset, bytes(stored))


@pytest.mark.parametrize("codec", CODECS)
def test_a_corrupted_chunk_raises_naming_the_dataset_and_the_chunk(tmp_path, codec):
    data = np.tile(np.array([1.5, 2.5, 3.5, -1], "<f4"), 64)  # compresses: every chunk holds coded blocks
    with open_gds(tmp_path / "bad.h5", "w") as f:
        dset = f.create_dataset("bad", data=data, chunks=(64,), **CODECS[codec])
        corrupt(dset, codec)
        out = DeviceArray((256,), "<f4", fill=0)
        with pytest.raises(OSError) as info:
            h5gds.read(dset, out=out)
        message = str(info.value)
        assert "dataset /bad" in message and "chunk at [64]" in message, message
        assert "cannot be decoded" in message, message
        if codec != "zstd":
            # HDF5's own filter refuses the same chunk. (hdf5plugin's Zstandard filter returns garbage
            # for this block without an error; the GPU path refuses it.)
            with pytest.raises(OSError):
                dset[...]
        # The intact chunks read fine on the GPU path.
        good = DeviceArray((64,), "<f4", fill=0)
        h5gds.read(dset, out=good, sel=(slice(128, 192),))
        assert good.to_host().tobytes() == data[128:192].tobytes()


def wrong_checksums(f, data):
    """Datasets whose chunk at [64] carries a wrong checksum behind intact data, so that only the
    checksum catches it: deflate's Adler-32 (the zlib trailer), a Zstandard frame's content checksum
    (frames written with one by zstandard; hdf5plugin writes none) and, in a chain the host decodes,
    HDF5's Fletcher-32. Returns {name: words of the host check's refusal}."""
    flip = lambda b: b[:-4] + bytes(x ^ 0xFF for x in b[-4:])  # noqa: E731
    gzip = f.create_dataset("gzip", data=data, chunks=(64,), **CODECS["gzip"])
    gzip.id.write_direct_chunk((64,), flip(gzip.id.read_direct_chunk((64,))[1]))
    zstd = f.create_dataset("zstd", shape=data.shape, dtype=data.dtype, chunks=(64,), **CODECS["zstd"])
    frames = zstandard.ZstdCompressor(level=3, write_checksum=True)
    for at in range(0, len(data), 64):
        frame = frames.compress(data[at:at + 64].tobytes())
        zstd.id.write_direct_chunk((at,), flip(frame) if at == 64 else frame)
    fletcher = f.create_dataset("fletcher", data=data, chunks=(64,), compression="gzip", fletcher32=True)
    fletcher.id.write_direct_chunk((64,), flip(fletcher.id.read_direct_chunk((64,))[1]))
    return {"gzip": "Adler-32", "zstd": "Zstandard content checksum", "fletcher": "Fletcher-32 checksum"}


@pytest.mark.parametrize("verify", [None, "1", "0"])
def test_wrong_checksums_are_refused_by_default_on_every_path(tmp_path, monkeypatch, verify):
    """By default (H5GDS_VERIFY_CHECKSUMS unset or 1) the GPU path checks on the host what nvCOMP does
    not (deflate's Adler-32, a Zstandard frame's content checksum) and refuses the chunk naming it, as
    the host decoders do (and HDF5's filters, but for hdf5plugin's Zstandard filter, which reads the
    frame with the wrong checksum); H5GDS_VERIFY_CHECKSUMS=0 opts the GPU path out, and those
    chunks then read there unchecked. The Fletcher-32 chain is decoded on the host and refused either
    way. Intact chunks of the same datasets read."""
    if verify is not None:
        monkeypatch.setenv("H5GDS_VERIFY_CHECKSUMS", verify)
    data = data_for((256,))
    with h5py.File(tmp_path / "sums.h5", "w") as f:
        refusals = wrong_checksums(f, data)
    with open_gds(tmp_path / "sums.h5", "r") as f:
        for name, words in refusals.items():
            dset = f[name]
            if name != "zstd":
                # HDF5's own filters refuse these; hdf5plugin's Zstandard filter reads the frame
                # whose checksum says its data is not what was written (h5gds refuses it).
                with pytest.raises(OSError):
                    dset[...]
            # The host path (a NumPy array) refuses, naming the chunk.
            with pytest.raises(OSError, match=r"chunk at \[64\]"):
                h5gds.read(dset)
            out = DeviceArray((256,), "<f4", fill=0)
            if verify == "0" and name != "fletcher":
                h5gds.read(dset, out=out)
                assert out.to_host().tobytes() == data.tobytes(), name  # the intact data, unchecked
            else:
                with pytest.raises(OSError) as info:
                    h5gds.read(dset, out=out)
                message = str(info.value)
                assert f"dataset /{name}" in message and "chunk at [64]" in message, message
                assert words in message, message
            good = DeviceArray((64,), "<f4", fill=0)
            h5gds.read(dset, out=good, sel=(slice(128, 192),))
            assert good.to_host().tobytes() == data[128:192].tobytes(), name
            # The first elements of the damaged chunk alone (the host decoders' partial decode where
            # the codec allows it) are refused too.
            with pytest.raises(OSError, match=r"chunk at \[64\]"):
                h5gds.read(dset, sel=(slice(64, 66),))


FAILED_DECODE = """
import sys
import h5py, hdf5plugin, numpy as np
import h5gds
from device_arrays import DeviceArray
with h5py.File(sys.argv[1], "r", driver="gds", rdcc_nbytes=0) as f:
    out = DeviceArray((256,), "<f4", fill=0)
    try:
        h5gds.read(f["z"], out=out)
    except OSError as exc:
        print("refused:", exc)
    else:
        print("read:", out.to_host().tobytes() == f["z"][...].tobytes())
"""


def test_a_decode_the_gpu_reports_failed_fails_the_read(tmp_path):
    # The nvCOMP emulator's fault switch: the second chunk decoded reports failure (and leaves poison in
    # its output, as a failed kernel leaves garbage). The read must raise, never return that data. Real
    # nvCOMP has no such switch: there the child would read the chunk fine.
    require_emulator("the fault switch H5GDS_EMU_NVCOMP_FAIL_CHUNK", nvcomp=True)
    data = np.tile(np.array([1.5, 2.5, 3.5, -1], "<f4"), 64)
    with h5py.File(tmp_path / "z.h5", "w") as f:
        f.create_dataset("z", data=data, chunks=(64,), **CODECS["zstd"])
    env = dict(os.environ, H5GDS_EMU_NVCOMP_FAIL_CHUNK="2")
    run = subprocess.run([sys.executable, "-c", FAILED_DECODE, str(tmp_path / "z.h5")], env=env,
                         capture_output=True, text=True, timeout=120, cwd=os.path.dirname(__file__))
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("refused: dataset /z: the chunk at [64] cannot be decoded"), run.stdout
    assert "nvcompErrorCannotDecompress" in run.stdout, run.stdout


#: The device array the writes below take (whole numbers, compressible by every codec, varied enough
#: that a misplaced element shows), and their child process (its own H5GDS_LOG=debug).
ENCODED_DATA = "(np.arange(5550) % 97 * 3 + np.arange(5550) // 500).astype('<f4').reshape(37, 50, 3)"
ENCODE_CHILD = """
import json, sys
import numpy as np, h5gds
from device_arrays import DeviceArray, DlpackArray, cuda
d, cases = sys.argv[1], json.loads(sys.argv[2])
moved = {}
for name, (dlpack, kwargs) in cases.items():
    dev = DeviceArray.from_host(%s)
    before = cuda().counters() if cuda().emulated else None
    h5gds.to_file(DlpackArray(dev) if dlpack else dev, f"{d}/{name}.h5", "g/x", chunks=(8, 16, 3), **kwargs)
    after = cuda().counters() if cuda().emulated else None
    moved[name] = after and {k: after[k] - before[k] for k in after}
print(json.dumps(moved))
""" % ENCODED_DATA

#: name -> (through DLPack only, to_file's keywords): each writes a device array of 20 chunks.
ENCODED = {
    "gzip": (False, {"compression": "gzip", "compression_opts": 6}),
    "zstd": (True, {"compression": "zstd"}),
    "lz4": (False, {"compression": "lz4"}),
    "shuffled": (False, {"compression": "zstd", "shuffle": True}),
}
#: The GPU codec the engine's verdict names for each write it encodes on the GPU.
GPU_CODECS = {"gzip": "Deflate", "zstd": "Zstd", "lz4": "Lz4"}


@pytest.mark.parametrize("path", ["gds", "staged"])
def test_compressed_writes_from_device_arrays_are_encoded_on_the_gpu_and_read_by_h5py(tmp_path, path):
    """h5gds.to_file(device_array, compression=...) takes the engine's way, as array-io's
    to_file_compressed does: one gzip, zstd or lz4 filter encoded on the GPU with nvCOMP and written
    from device memory through the gds driver (cuFile writes, no copy of the array to the host); a
    pipeline nvCOMP does not encode (shuffle) or the staged path encoded on the host's cores after one
    copy. The engine's verdict line says which, and h5py with hdf5plugin reads the same bytes back."""
    env = dict(os.environ, H5GDS_LOG="debug")
    if path == "staged":
        env["H5GDS_USE_VFD_GDS"] = "0"
    run = subprocess.run([sys.executable, "-c", ENCODE_CHILD, str(tmp_path), json.dumps(ENCODED)], env=env,
                         capture_output=True, text=True, timeout=300, cwd=os.path.dirname(__file__))
    assert run.returncode == 0, run.stderr
    moved = json.loads(run.stdout.splitlines()[-1])
    verdicts = [ln for ln in run.stderr.splitlines() if "/g/x: way=" in ln]
    assert len(verdicts) == len(ENCODED), run.stderr
    data = eval(ENCODED_DATA)
    for (name, (_, kwargs)), verdict in zip(ENCODED.items(), verdicts):
        on_gpu = path == "gds" and name in GPU_CODECS
        if on_gpu:
            assert (f"way=gpu-encoded: 20 chunks encoded ({GPU_CODECS[name]}) on the GPU with nvCOMP and "
                    "written straight from device memory") in verdict, verdict
        else:
            assert "way=host-encoded: 20 chunks encoded (" in verdict, verdict
            why = "is not one filter nvCOMP encodes" if name == "shuffled" else "H5GDS_USE_VFD_GDS=0"
            assert why in verdict, verdict
        if moved[name] is not None:
            delta = moved[name]
            assert delta["bounds_violations"] == 0 and delta["double_frees"] == 0, (name, delta)
            if on_gpu:
                # Every chunk from device memory through cuFile.
                assert delta["cufile_writes"] >= 20, (name, delta)
            else:
                # One copy of the array to the host, whose chunks the driver writes from host memory.
                assert delta["cufile_writes"] == 0 and delta["dtoh"] == 1, (name, delta)
        with h5py.File(tmp_path / f"{name}.h5", "r") as f:
            dset = f["g/x"]
            assert dset.chunks == (8, 16, 3)
            assert dset[()].tobytes() == data.tobytes(), name
            filters = dset.id.get_create_plist()
            ids = [filters.get_filter(i)[0] for i in range(filters.get_nfilters())]
            expected = {"gzip": [1], "zstd": [32015], "lz4": [32004], "shuffled": [2, 32015]}[name]
            assert ids == expected, (name, ids)
            if name == "gzip":
                assert dset.compression_opts == 6  # the level asked is the level recorded


FAILED_ENCODE = """
import sys
import numpy as np, h5gds
from device_arrays import DeviceArray
try:
    h5gds.to_file(DeviceArray.from_host(np.arange(4096, dtype="<i4")), sys.argv[1], "x", chunks=(512,),
                  compression="zstd")
except OSError as exc:
    print("refused:", exc)
"""


def test_an_encode_the_gpu_reports_failed_fails_the_write_and_leaves_the_file(tmp_path):
    require_emulator("the fault switch H5GDS_EMU_NVCOMP_FAIL_CALL", nvcomp=True)
    path = tmp_path / "keep.h5"
    h5gds.to_file(np.arange(5), path, "old")
    before = path.read_bytes()
    env = dict(os.environ, H5GDS_EMU_NVCOMP_FAIL_CALL="1")
    run = subprocess.run([sys.executable, "-c", FAILED_ENCODE, str(path)], env=env, capture_output=True,
                         text=True, timeout=120, cwd=os.path.dirname(__file__))
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("refused: dataset /x: encoding its chunks on the GPU failed:"), run.stdout
    assert path.read_bytes() == before


def stays_on_host(capfd, dset, sel, reason, by=ON_HOST):
    """Reads `dset[sel]` into device memory with its chunks decoded on the host (`by` h5gds's threads or
    HDF5's filters), for `reason`, through pinned host memory, with no cuFile read."""
    capfd.readouterr()
    expected, got, before, after = read_on_device(dset, sel)
    assert got.tobytes() == expected.tobytes()
    err = capfd.readouterr().err
    assert DECODED not in err, err
    line = [ln for ln in err.splitlines() if by in ln]
    assert line and reason in line[0], err
    assert STAGED in err, err
    if CUDA.emulated:
        assert after["cufile_reads"] == before["cufile_reads"], (before, after)


def test_reads_nvcomp_cannot_serve_are_decoded_on_the_host_and_say_why(tmp_path, capfd, monkeypatch):
    """h5gds's host threads decode what nvCOMP cannot but h5gds can (chains with shuffle, steps, the
    GPU turned off, the staged path); HDF5's filters what neither decodes (Blosc)."""
    data = data_for((40, 12))
    with open_gds(tmp_path / "host.h5", "w") as f:
        chain = f.create_dataset("chain", data=data, chunks=(8, 12), compression="gzip", shuffle=True)
        stays_on_host(capfd, chain, None, "chain of filters (shuffle (2), deflate (1))", BY_H5GDS)
        blosc = f.create_dataset("blosc", data=data, chunks=(8, 12), **dict(hdf5plugin.Blosc()))
        stays_on_host(capfd, blosc, None, "Blosc (32001) has no nvCOMP decoder")
        stays_on_host(capfd, blosc, None, "Blosc (32001) is not one h5gds decodes")
        zstd = f.create_dataset("zstd", data=data, chunks=(8, 12), **CODECS["zstd"])
        stays_on_host(capfd, zstd, (slice(1, 30, 3),), "steps greater than 1", BY_H5GDS)
        monkeypatch.setenv("H5GDS_GPU_CODEC", "0")
        stays_on_host(capfd, zstd, None, "H5GDS_GPU_CODEC=0 keeps decoding on the host", BY_H5GDS)
        stays_on_host(capfd, blosc, None, "H5GDS_GPU_CODEC=0 keeps decoding on the host")
        # H5GDS_HOST_CODEC=0 leaves the chunks to HDF5's filters, as array-io's device reads do.
        monkeypatch.setenv("H5GDS_HOST_CODEC", "0")
        stays_on_host(capfd, zstd, None, "H5GDS_GPU_CODEC=0 keeps decoding on the host")
        monkeypatch.setenv("H5GDS_HOST_CODEC", "maybe")
        with pytest.raises(ValueError, match="H5GDS_HOST_CODEC"):
            h5gds.read(zstd, out=DeviceArray((40, 12), "<f4"))
        monkeypatch.delenv("H5GDS_HOST_CODEC")
        monkeypatch.setenv("H5GDS_GPU_CODEC", "2")
        with pytest.raises(ValueError, match="H5GDS_GPU_CODEC"):
            h5gds.read(zstd, out=DeviceArray((40, 12), "<f4"))
        monkeypatch.delenv("H5GDS_GPU_CODEC")
        monkeypatch.setenv("H5GDS_USE_VFD_GDS", "0")
        stays_on_host(capfd, zstd, None, "H5GDS_USE_VFD_GDS=0", BY_H5GDS)


def test_a_file_opened_for_writing_with_sec2_is_decoded_on_the_host(tmp_path, capfd):
    data = data_for((40, 12))
    with h5py.File(tmp_path / "sec2.h5", "w") as f:
        dset = f.create_dataset("zstd", data=data, chunks=(8, 12), **CODECS["zstd"])
        stays_on_host(capfd, dset, None, "the sec2 driver", BY_H5GDS)


@pytest.mark.parametrize("codec", CODECS)
def test_a_file_opened_read_only_with_sec2_is_decoded_on_the_gpu_from_host_reads(tmp_path, capfd, codec):
    """h5py's default driver never reads into device memory, but a file it has open read-only holds its
    stored chunks at their addresses: the host's threads read them into pinned memory and the GPU decodes
    them (no cuFile read), chunks of every rank placed as h5py reads them; a damaged chunk is named."""
    data = data_for((60, 50, 7))
    with h5py.File(tmp_path / "sec2.h5", "w") as f:
        f.create_dataset("x", data=data, chunks=(8, 16, 4), **CODECS[codec])
        corrupt(f.create_dataset("bad", data=data, chunks=(8, 16, 4), **CODECS[codec]), codec, (8, 16, 4))
    with h5py.File(tmp_path / "sec2.h5", "r") as f:
        for sel in (None, (slice(3, 57), slice(5, 50), slice(1, 6))):
            capfd.readouterr()
            expected, got, before, after = read_on_device(f["x"], sel)
            assert got.tobytes() == expected.tobytes()
            err = capfd.readouterr().err
            assert "chunks move compressed" in err and "into pinned host memory on" in err, err
            assert "the file is open with the sec2 driver" in err and DECODED in err, err
            if CUDA.emulated:
                assert after["cufile_reads"] == before["cufile_reads"]
        out = DeviceArray(data.shape, data.dtype, fill=0)
        with pytest.raises(OSError, match=r"chunk at \[8, 16, 4\]"):
            h5gds.read(f["bad"], out=out)


def test_host_decoded_reads_are_staged_in_pieces_cut_where_the_selection_enters_a_chunk_layer(
        tmp_path, capfd, monkeypatch):
    """Decoded on the host's threads into pinned buffers a piece at a time, two buffers taking turns so a
    piece's copy up runs while the next decodes (with the emulator's copies deferred to synchronisation,
    a buffer reused too early shows as wrong bytes). Pieces end where the selection enters a new layer of
    chunks, so no chunk is decoded for two pieces: 400 x 50 float32 in chunks of 7 rows through 4 KiB
    (1024 elements) is 29 pieces of two layers (700 elements), not 20 of 1024."""
    monkeypatch.setenv("H5GDS_GPU_CODEC", "0")
    monkeypatch.setenv("H5GDS_STAGING_BUFFER_SIZE", "4K")
    monkeypatch.setenv("H5GDS_NTHREADS", "2")
    data = data_for((400, 50))
    with open_gds(tmp_path / "pieces.h5", "w") as f:
        dset = f.create_dataset("x", data=data, chunks=(7, 16), **CODECS["zstd"])
        for sel in (None, (slice(3, 390, 2), slice(1, 50))):
            capfd.readouterr()
            expected, got, before, after = read_on_device(dset, sel)
            assert got.tobytes() == expected.tobytes(), sel
            assert BY_H5GDS in capfd.readouterr().err
            if CUDA.emulated and sel is None:
                assert after["htod"] - before["htod"] == 29, (before, after)


def test_host_decoded_pieces_hold_a_whole_layer_of_chunks(tmp_path, monkeypatch):
    """Pieces are an eighth of a transfer (here the 16 MiB least), but never smaller than the selection's
    largest layer of chunks, which would then be decoded for two pieces: 64 MiB whose chunk layers hold
    32 MiB each moves in 2 pieces of a layer, not 4 of 16 MiB."""
    monkeypatch.setenv("H5GDS_GPU_CODEC", "0")
    monkeypatch.setenv("H5GDS_NTHREADS", "2")
    data = np.tile(np.arange(1 << 18, dtype="<f4") % 97, (64, 1))
    with open_gds(tmp_path / "layers.h5", "w") as f:
        dset = f.create_dataset("x", data=data, chunks=(32, 1 << 16), **CODECS["zstd"])
        expected, got, before, after = read_on_device(dset, None)
        assert got.tobytes() == expected.tobytes()
        if CUDA.emulated:
            assert after["htod"] - before["htod"] == 2, (before, after)


@pytest.mark.parametrize("codec", CODECS)
def test_unset_h5gds_gpu_codec_chooses_by_the_estimates_and_says_so(tmp_path, capfd, monkeypatch, codec):
    """Unset, the faster side by h5gds's estimates decodes (route::choose_decoder): here few, small chunks
    and two host threads; either way the bytes are h5py's and the log names the estimates."""
    monkeypatch.delenv("H5GDS_GPU_CODEC")
    monkeypatch.setenv("H5GDS_NTHREADS", "2")
    data = data_for((400, 12))
    with open_gds(tmp_path / "choice.h5", "w") as f:
        dset = f.create_dataset(codec, data=data, chunks=(8, 12), **CODECS[codec])
        capfd.readouterr()
        expected, got, _, _ = read_on_device(dset, None)
        assert got.tobytes() == expected.tobytes()
        err = capfd.readouterr().err
        line = [ln for ln in err.splitlines() if "its chunks are decoded" in ln]
        assert len(line) == 1 and "ms on the GPU against" in line[0] and "ms on 2 host threads (50 chunks " \
            "of 384 bytes)" in line[0], err
        # 19 KB: the GPU call's fixed cost loses to two threads.
        assert BY_H5GDS in line[0], line[0]


def test_the_emulator_saw_no_bounds_violation_or_double_free_after_decoding():
    require_emulator("its bounds and double-free counters")
    counters = CUDA.counters()
    assert counters["bounds_violations"] == 0 and counters["double_frees"] == 0, counters
