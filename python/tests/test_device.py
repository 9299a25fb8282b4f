"""h5gds.read and h5gds.write on device arrays: every layout's route (straight through the gds driver,
or staged through pinned host memory, as h5gds_route decides) byte-compared with h5py's host reads and
writes, for ``__cuda_array_interface__`` and DLPack arrays; the producer's stream waited for; every
refusal naming the culprit and leaving the dataset and the array as they were.

scripts/test.sh runs this file with h5gds's CPU emulator of CUDA and cuFile on LD_LIBRARY_PATH (test
arrays: device_arrays.py). On a GPU machine run it without the emulator: the same tests then use the
real driver, and also run against CuPy and PyTorch where they are installed with CUDA; those that need the
emulator (its counters, switches, fault injection) skip there (device_arrays.require_emulator), and the run's
last line (conftest.py) counts what passed on the GPU and what needs the emulator."""

import os

# Before anything loads CUDA: two emulated devices, async copies on streams deferred until the
# stream is synchronised (so pending work is visible).
os.environ.setdefault("H5GDS_EMU_DEVICES", "2")
os.environ.setdefault("H5GDS_EMU_DEFER_ASYNC", "1")

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import h5gds  # noqa: E402
from device_arrays import Counters, DeviceArray, DlpackArray, DlpackOnly, cuda_or_skip, require_emulator  # noqa: E402

CUDA = cuda_or_skip()
# The route log lines on (a read's verdict lines are the engine's, at debug), read where the process
# logs first: for the device run's whole process (test_gpu_codec.py reads them too), set only where
# this module runs, so that a session without CUDA (this module skipped) keeps its own level and so
# do the children its tests start.
os.environ["H5GDS_LOG"] = "info,h5gds::engine=debug"
SHAPE = (24, 10, 6)
GDS = "straight {} device memory through the gds driver"
STAGED = "device memory through pinned host memory"


def reference(shape=SHAPE, dtype="<f8"):
    return (np.arange(np.prod(shape)).reshape(shape) * 1.25 - 30).astype(dtype)


# --- array kinds: the test arrays, and CuPy / PyTorch when installed with CUDA -----------------------------

def _real(module):
    try:
        if module == "cupy":
            import cupy
            cupy.zeros(1)
            return cupy
        import torch
        if not torch.cuda.is_available():
            return None
        return torch
    except Exception:
        return None


def _kinds():
    kinds = {
        "cai": (lambda host: DeviceArray.from_host(host), lambda a: a.to_host()),
        "dlpack": (lambda host: DlpackArray(DeviceArray.from_host(host)), lambda a: a.array.to_host()),
    }
    cp, torch = (None, None) if CUDA.emulated else (_real("cupy"), _real("torch"))
    if cp is not None:
        kinds["cupy"] = (lambda host: cp.asarray(host), lambda a: cp.asnumpy(a))
    if torch is not None:
        kinds["torch"] = (lambda host: torch.from_numpy(np.ascontiguousarray(host)).cuda(),
                          lambda a: a.cpu().numpy())
        kinds["torch-dlpack"] = (lambda host: DlpackOnly(torch.from_numpy(np.ascontiguousarray(host)).cuda()),
                                 lambda a: a.inner.cpu().numpy())
    return kinds


KINDS = _kinds()
REAL_KINDS = [
    pytest.param(name, marks=pytest.mark.skipif(
        name not in KINDS, reason=f"{name} with CUDA is not importable here (or CUDA is the emulator)"))
    for name in ("cupy", "torch", "torch-dlpack")
]
ALL_KINDS = ["cai", "dlpack"] + REAL_KINDS


def device(kind, host):
    return KINDS[kind][0](host)


def to_host(kind, array):
    return KINDS[kind][1](array)


# --- files and layouts -------------------------------------------------------------------------------------

#: layout -> (create_dataset keywords, route of a read, reason fragment for staged ones)
LAYOUTS = {
    "contiguous": ({}, "gds", None),
    "chunked": ({"chunks": (8, 10, 6)}, "gds", None),
    "chunked-cached": ({"chunks": (4, 5, 6)}, "staged", "chunk cache"),
    # shuffle + deflate: a chain nvCOMP does not decode (test_gpu_codec.py reads single-codec datasets).
    "filtered": ({"chunks": (8, 5, 6), "compression": "gzip", "shuffle": True}, "staged", "filtered"),
    "compact": ({"layout": "compact"}, "staged", "compact"),
    "chunked-sparse": ({"chunks": (8, 10, 6)}, "staged", "never written"),
    "unwritten": ({}, "staged", "never written"),
}


def create(f, name, layout, data):
    kwargs, _, _ = LAYOUTS[layout]
    kwargs = dict(kwargs)
    if kwargs.pop("layout", None) == "compact":
        plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        plist.set_layout(h5py.h5d.COMPACT)
        space = h5py.h5s.create_simple(data.shape)
        dsid = h5py.h5d.create(f.id, name.encode(), h5py.h5t.py_create(data.dtype), space, dcpl=plist)
        dset = h5py.Dataset(dsid)
        dset[...] = data
        return dset
    if layout == "unwritten":
        return f.create_dataset(name, shape=data.shape, dtype=data.dtype, fillvalue=data.flat[0])
    if layout == "chunked-sparse":
        dset = f.create_dataset(name, shape=data.shape, dtype=data.dtype, fillvalue=-1.5, **kwargs)
        dset[:8] = data[:8]
        dset[16:] = data[16:]
        return dset
    return f.create_dataset(name, data=data, **kwargs)


def open_gds(path, mode="r+", **kwargs):
    # Chunks larger than the chunk cache bypass it; the "chunked-cached" layout's chunks (960 B) fit 1 KiB.
    return h5py.File(path, mode, driver="gds", rdcc_nbytes=1024, **kwargs)


@pytest.fixture
def gds_file(tmp_path):
    with open_gds(tmp_path / "d.h5", "w") as f:
        yield f


def read_route(capfd, expect, reason, op="read"):
    """The h5gds log line of the last transfer names the expected route ("mixed": a read whose written
    chunks went straight through the driver and whose chunks never written were staged, for `reason`)."""
    err = capfd.readouterr().err
    if expect == "mixed":
        assert "way=direct" in err and "way=staged" in err and reason in err, err
        return
    if op == "read":  # the engine's verdict: direct, or one of the ways through pinned host memory
        ways = ["direct"] if expect == "gds" else ["staged", "host-decoded", "stored"]
        assert any(f"way={way}" in err for way in ways), err
    if expect == "gds":
        assert GDS.format("into" if op == "read" else "from") in err, err
        assert STAGED not in err, err
    else:
        assert STAGED in err and reason in err, err
        assert "through the gds driver" not in err.split(f"h5gds.{op}")[-1].split("\n")[0], err


def expected_route(layout, sel, op="read"):
    """The route and reason fragment h5gds_route gives `layout` for `sel`: the sparse dataset's rows 8-15
    were never written, and row 5 lies in a written chunk. A read of steps 1 moves each chunk its own way
    (h5gds_engine::policy::device_read); a write, or a read with steps, stages all of it."""
    if layout == "chunked-sparse" and sel == 5:
        return "gds", None
    if layout == "chunked-sparse" and op == "read" and sel != (slice(1, 23, 4), slice(2, 9, 3)):
        return "mixed", "never written"
    return LAYOUTS[layout][1:]


SELECTIONS = [None, 5, (slice(3, 20), slice(None), 2), (slice(1, 23, 4), slice(2, 9, 3)), (Ellipsis, slice(1, 5))]


@pytest.mark.parametrize("sel", SELECTIONS, ids=repr)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", ALL_KINDS)
def test_read_into_device_memory_matches_h5py(gds_file, capfd, kind, layout, sel):
    dset = create(gds_file, "x", layout, reference())
    expected = dset[() if sel is None else sel]
    out = device(kind, np.zeros(expected.shape, expected.dtype))
    capfd.readouterr()
    with Counters() as counters:
        assert h5gds.read(dset, out=out, sel=sel) is out
    got = to_host(kind, out)
    assert got.shape == expected.shape and got.tobytes() == expected.tobytes()
    route, reason = expected_route(layout, sel)
    read_route(capfd, route, reason)
    counters.check(route, "read")


WRITABLE = ["contiguous", "chunked", "chunked-cached", "filtered", "compact", "chunked-sparse"]


@pytest.mark.parametrize("sel", SELECTIONS, ids=repr)
@pytest.mark.parametrize("layout", WRITABLE)
@pytest.mark.parametrize("kind", ALL_KINDS)
def test_write_from_device_memory_matches_h5py(gds_file, capfd, kind, layout, sel):
    ours = create(gds_file, "ours", layout, reference())
    theirs = create(gds_file, "theirs", layout, reference())
    shape = np.empty(SHAPE)[() if sel is None else sel].shape
    values = np.random.default_rng(7).standard_normal(shape)
    array = device(kind, values)
    capfd.readouterr()
    with Counters() as counters:
        h5gds.write(ours, array, sel=sel)
    theirs[() if sel is None else sel] = values
    assert ours[...].tobytes() == theirs[...].tobytes()
    route, reason = expected_route(layout, sel, op="write")
    read_route(capfd, route, reason, op="write")
    counters.check(route, "write")


@pytest.mark.parametrize("kind", ["cai", "dlpack"])
def test_a_file_opened_with_sec2_is_staged(tmp_path, capfd, kind):
    with h5py.File(tmp_path / "s.h5", "w") as f:
        dset = f.create_dataset("x", data=reference())
        out = device(kind, np.zeros(SHAPE))
        capfd.readouterr()
        h5gds.read(dset, out=out)
        assert to_host(kind, out).tobytes() == reference().tobytes()
        read_route(capfd, "staged", "the sec2 driver")
        h5gds.write(dset, device(kind, -reference()), sel=None)
        assert dset[...].tobytes() == (-reference()).tobytes()


@pytest.mark.parametrize("dtype", ["<f4", "<i2", "u1", "<c16", "bool"])
def test_element_types(gds_file, capfd, dtype):
    data = reference(dtype=dtype) if dtype != "bool" else (reference() > 0)
    dset = gds_file.create_dataset("x", data=data)
    out = DeviceArray(SHAPE, dtype)
    capfd.readouterr()
    h5gds.read(dset, out=out)
    assert out.to_host().tobytes() == dset[...].tobytes()
    # bool bytes are checked on the host (0 or 1), as array-io does.
    read_route(capfd, "staged" if dtype == "bool" else "gds", "bool values")
    h5gds.write(dset, DeviceArray.from_host(data[::-1].copy()))
    assert dset[...].tobytes() == data[::-1].tobytes()


@pytest.mark.parametrize("mode", ["r+", "r"])
def test_bytes_other_than_0_and_1_are_refused_for_device_bools_by_slabs_and_gathers_alike(tmp_path, mode):
    raw = np.array([[0, 1], [2, 0], [1, 255]], "u1")
    with h5py.File(tmp_path / "b.h5", "w") as f:
        f["x"] = raw.view("?")
    with h5py.File(tmp_path / "b.h5", mode) as f:
        for sel, at in [(slice(1, 3), 0), ([2, 0, 1], 1)]:
            out = DeviceArray.from_host(np.ones((3 if isinstance(sel, list) else 2, 2), "?"))
            with pytest.raises(ValueError, match=f"holds the byte {2 if at == 0 else 255} at element {at} .*not a bool"):
                h5gds.read(f["x"], out=out, sel=sel)
        good = DeviceArray((2, 2), "?")
        h5gds.read(f["x"], out=good, sel=[0, 0])
        assert good.to_host().view("u1").tolist() == [[0, 1], [0, 1]]


def test_a_big_endian_dataset_into_a_big_endian_device_array(gds_file, capfd):
    dset = gds_file.create_dataset("x", data=reference(dtype=">f8"))
    out = DeviceArray(SHAPE, ">f8")
    capfd.readouterr()
    h5gds.read(dset, out=out)
    assert out.to_host().tobytes() == dset[...].tobytes()
    read_route(capfd, "gds", None)


def test_scalar_and_empty_selections(gds_file):
    scalar = gds_file.create_dataset("s", data=np.float64(2.5))
    out = DeviceArray((), "<f8")
    h5gds.read(scalar, out=out)
    assert out.to_host()[()] == 2.5
    h5gds.write(scalar, DeviceArray.from_host(np.array(-4.0)))
    assert scalar[()] == -4.0
    dset = gds_file.create_dataset("x", data=reference())
    empty = DeviceArray((0, 10, 6), "<f8")
    assert h5gds.read(dset, out=empty, sel=slice(5, 5)) is empty
    h5gds.write(dset, empty, sel=slice(5, 5))
    assert dset[...].tobytes() == reference().tobytes()


# --- settings ----------------------------------------------------------------------------------------------

def test_use_vfd_gds_0_stages_and_the_staging_buffer_size_bounds_the_pieces(gds_file, capfd, monkeypatch):
    data = reference((300, 70))
    dset = gds_file.create_dataset("x", data=data)
    monkeypatch.setenv("H5GDS_USE_VFD_GDS", "0")
    monkeypatch.setenv("H5GDS_STAGING_BUFFER_SIZE", "4K")  # 168 kB through a 4 KiB buffer
    out = DeviceArray((100, 23), "<f8")
    capfd.readouterr()
    with Counters() as counters:
        h5gds.read(dset, out=out, sel=(slice(1, 300, 3), slice(2, 70, 3)))
    assert out.to_host().tobytes() == data[1::3, 2::3].tobytes()
    read_route(capfd, "staged", "H5GDS_USE_VFD_GDS=0")
    if CUDA.emulated:
        assert counters.delta("htod") == -(-100 * 23 * 8 // 4096)  # one copy per full buffer
    h5gds.write(dset, DeviceArray.from_host(-data))
    assert dset[...].tobytes() == (-data).tobytes()


def test_staged_transfers_move_in_eighths_so_the_copies_overlap_the_file_io(gds_file, monkeypatch):
    """Two pinned buffers take turns, so the first piece's file I/O and the last piece's copy run alone:
    pieces are an eighth of the transfer (at least 16 MiB and a task per I/O thread), not the whole
    staging size. 64 MiB with the default 128 MiB buffers and 2 threads: 4 pieces of 16 MiB each way."""
    monkeypatch.setenv("H5GDS_USE_VFD_GDS", "0")
    monkeypatch.setenv("H5GDS_NTHREADS", "2")
    data = np.arange(8 << 20, dtype="<f8")
    dset = gds_file.create_dataset("x", data=data)
    out = DeviceArray(data.shape, "<f8", fill=0.0)
    with Counters() as counters:
        h5gds.read(dset, out=out)
    assert out.to_host().tobytes() == data.tobytes()
    if CUDA.emulated:
        assert counters.delta("htod") == 4
    source = DeviceArray.from_host(-data)
    with Counters() as counters:
        h5gds.write(dset, source)
    if CUDA.emulated:
        assert counters.delta("dtoh") == 4
    assert dset[...].tobytes() == (-data).tobytes()
    out.free()
    source.free()


@pytest.mark.parametrize("variable, value, message", [
    ("H5GDS_USE_VFD_GDS", "yes", r"invalid H5GDS_USE_VFD_GDS=\"yes\": accepted values are 1 \(the gds driver\)"),
    ("H5GDS_STAGING_BUFFER_SIZE", "1K", r"invalid H5GDS_STAGING_BUFFER_SIZE=\"1K\": accepted values are a byte "
                                        r"count of at least 4K"),
])
def test_invalid_settings_are_refused_by_name(gds_file, monkeypatch, variable, value, message):
    dset = gds_file.create_dataset("x", data=reference())
    monkeypatch.setenv(variable, value)
    out = DeviceArray(SHAPE, "<f8", fill=0.0)
    with pytest.raises(ValueError, match=message):
        h5gds.read(dset, out=out)
    assert not out.to_host().any()


@pytest.mark.parametrize("use_vfd_gds", [None, "0"])
@pytest.mark.parametrize("mode", ["r+", "r"])
def test_a_device_read_write_or_gather_loads_the_settings_at_most_once(tmp_path, monkeypatch, mode, use_vfd_gds):
    """The driver's settings (H5GDS_*) are read from the environment once per native call, however many
    of its steps ask for them (the route, where chunks are decoded, the staged pieces' size)."""
    if use_vfd_gds is not None:
        monkeypatch.setenv("H5GDS_USE_VFD_GDS", use_vfd_gds)
    data = reference((64, 10, 6))
    with open_gds(tmp_path / "s.h5", "w") as f:
        for layout in ("contiguous", "chunked", "chunked-cached", "filtered"):
            create(f, layout, layout, data)
    with open_gds(tmp_path / "s.h5", mode) as f:
        for name in ("contiguous", "chunked", "chunked-cached", "filtered"):
            for sel in (None, 5, (slice(3, 60, 2), slice(1, 9)), [7, 3, 3, 60]):
                want = data if sel is None else data[sel]
                for turn in ("first", "again"):  # the first read of a read-only file resolves its layout
                    out = DeviceArray(want.shape, "<f8", fill=0)
                    before = h5gds._native.settings_loads()
                    h5gds.read(f[name], out=out, sel=sel)
                    loads = h5gds._native.settings_loads() - before
                    assert loads <= 1, (name, sel, turn, loads)
                    assert out.to_host().tobytes() == want.tobytes(), (name, sel, turn)
                    out.free()
            if mode == "r+":
                source = DeviceArray.from_host(-data)
                before = h5gds._native.settings_loads()
                h5gds.write(f[name], source)
                assert h5gds._native.settings_loads() - before <= 1, name
                assert f[name][...].tobytes() == (-data).tobytes(), name
                source.free()


def test_a_read_only_files_device_read_with_no_hdf5_call_moves_its_bytes_without_h5pys_lock(tmp_path, monkeypatch):
    """A tile of a read-only file's dataset whose storage h5gds has resolved is read into device memory
    with no HDF5 call: after the brief look at the dataset (under h5py's lock, as h5py's own), its bytes
    move without the lock, so threads reading tiles overlap. Here another thread holds the lock from that
    moment on, and the read still completes."""
    import threading

    from h5py._objects import phil

    data = reference((64, 10, 6))
    path = tmp_path / "t.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("chunked", data=data, chunks=(8, 10, 6))
        f.create_dataset("contiguous", data=data)
    sel = (slice(3, 40, 2), slice(1, 9))
    looked = h5gds._io._dataset
    with h5py.File(path, "r") as f:  # sec2: the driver would stage a device read anyway
        for name in ("chunked", "contiguous"):
            dset = f[name]
            first = DeviceArray(data[sel].shape, "<f8", fill=0)
            h5gds.read(dset, out=first, sel=sel)  # resolves the storage, under the lock
            first.free()
            out = DeviceArray(data[sel].shape, "<f8", fill=0)
            seen, held, done, errors = threading.Event(), threading.Event(), threading.Event(), []

            def look(d):
                found = looked(d)
                seen.set()
                held.wait(20)
                return found

            def read():
                try:
                    h5gds.read(dset, out=out, sel=sel)
                except BaseException as e:  # noqa: BLE001 (asserted below)
                    errors.append(e)
                done.set()

            monkeypatch.setattr(h5gds._io, "_dataset", look)
            thread = threading.Thread(target=read)
            thread.start()
            assert seen.wait(20), name
            with phil:
                held.set()
                finished = done.wait(20)
            thread.join()
            monkeypatch.setattr(h5gds._io, "_dataset", looked)
            assert finished, f"{name}: the read waited for h5py's lock"
            assert not errors, errors
            assert out.to_host().tobytes() == data[sel].tobytes(), name
            out.free()


# --- streams -----------------------------------------------------------------------------------------------

def test_a_write_waits_for_the_producers_stream(gds_file):
    dset = gds_file.create_dataset("x", shape=SHAPE, dtype="<f8")
    array = DeviceArray(SHAPE, "<f8")
    array.copy_from_host_async(reference())  # pending on array's stream (deferred by the emulator)
    h5gds.write(dset, array)
    assert dset[...].tobytes() == reference().tobytes()


def test_a_version_2_interface_names_no_stream_so_the_device_is_waited_for(gds_file):
    dset = gds_file.create_dataset("x", shape=SHAPE, dtype="<f8")
    array = DeviceArray(SHAPE, "<f8")
    array.copy_from_host_async(reference())
    array.cai_version = 2  # as PyTorch's: no stream named, work may be queued
    h5gds.write(dset, array)
    assert dset[...].tobytes() == reference().tobytes()


def test_a_read_waits_for_the_producers_stream_before_overwriting(gds_file):
    dset = gds_file.create_dataset("x", data=reference())
    array = DeviceArray(SHAPE, "<f8")
    array.copy_from_host_async(np.zeros(SHAPE))  # pending: must not land after h5gds's read
    h5gds.read(dset, out=array)
    array.synchronize()  # whatever was still queued lands now
    assert array.to_host().tobytes() == reference().tobytes()


def test_dlpack_is_asked_for_the_legacy_default_stream(gds_file):
    dset = gds_file.create_dataset("x", data=reference())
    inner = DeviceArray(SHAPE, "<f8")
    inner.copy_from_host_async(-reference())
    h5gds.write(dset, DlpackArray(inner))
    assert inner.dlpack_streams == [1]
    assert dset[...].tobytes() == (-reference()).tobytes()


# --- devices -----------------------------------------------------------------------------------------------

@pytest.mark.skipif(CUDA.device_count < 2, reason="one CUDA device")
@pytest.mark.parametrize("kind", ["cai", "dlpack"])
def test_an_array_on_device_1_goes_straight_through_gds_in_its_own_context(gds_file, capfd, kind):
    # The driver takes the device and context from the pointer; on the emulator cuFile refuses memory
    # of another context (CU_FILE_CUDA_CONTEXT_MISMATCH), so device 0's context would show as a staged
    # fallback with host copies.
    dset = gds_file.create_dataset("x", data=reference())
    inner = DeviceArray(SHAPE, "<f8", ordinal=1)
    out = inner if kind == "cai" else DlpackArray(inner)
    capfd.readouterr()
    with Counters() as moved:
        h5gds.read(dset, out=out)
    assert inner.to_host().tobytes() == reference().tobytes()
    read_route(capfd, "gds", "")
    source = DeviceArray.from_host(-reference(), ordinal=1)
    with Counters() as written:
        h5gds.write(dset, source)
    assert dset[...].tobytes() == (-reference()).tobytes()
    moved.check("gds", "read")
    written.check("gds", "write")


# --- refusals ----------------------------------------------------------------------------------------------

@pytest.fixture
def dset(gds_file):
    return gds_file.create_dataset("x", data=reference())


def unchanged(dset):
    assert dset[...].tobytes() == reference().tobytes()


@pytest.mark.parametrize("kind", ["cai", "dlpack"])
def test_wrong_dtype_and_shape_name_both(dset, kind):
    with pytest.raises(TypeError, match=r"out has dtype float32, dataset /x has dtype float64"):
        h5gds.read(dset, out=device(kind, np.zeros(SHAPE, "<f4")))
    with pytest.raises(TypeError, match=r"array has dtype int64, dataset /x has dtype float64"):
        h5gds.write(dset, device(kind, np.zeros(SHAPE, "<i8")))
    with pytest.raises(ValueError, match=r"out has shape \(24, 10\), the selection of dataset /x has shape \(10, 6\)"):
        h5gds.read(dset, out=device(kind, np.zeros((24, 10))), sel=0)
    with pytest.raises(ValueError, match=r"array has shape \(24, 10, 5\), the selection .* has shape \(24, 10, 6\)"):
        h5gds.write(dset, device(kind, np.zeros((24, 10, 5))))
    unchanged(dset)


@pytest.mark.parametrize("kind", ["cai", "dlpack"])
def test_non_contiguous_output_is_refused(dset, kind):
    inner = DeviceArray(SHAPE, "<f8", fill=0.0)
    inner.strides = (8, 24 * 8, 24 * 10 * 8)  # Fortran order
    out = inner if kind == "cai" else DlpackArray(inner)
    with pytest.raises(ValueError, match="out must be C-contiguous"):
        h5gds.read(dset, out=out)
    with pytest.raises(ValueError, match="array must be C-contiguous"):
        h5gds.write(dset, out)
    assert not inner.to_host().any()
    unchanged(dset)


def test_versioned_dlpack_capsules_and_their_read_only_flag(dset):
    inner = DeviceArray(SHAPE, "<f8", fill=0.0)
    versioned = DlpackArray(inner, versioned=True)
    h5gds.read(dset, out=versioned)
    assert versioned.max_versions == [(1, 0)]
    assert inner.to_host().tobytes() == reference().tobytes()
    frozen = DeviceArray(SHAPE, "<f8", fill=0.0)
    frozen.readonly = True
    with pytest.raises(ValueError, match="out is read-only"):
        h5gds.read(dset, out=DlpackArray(frozen, versioned=True))
    assert not frozen.to_host().any()
    h5gds.write(dset, DlpackArray(frozen, versioned=True))  # a read-only source is fine to write from
    assert not dset[...].any()


def test_read_only_output_is_refused(dset):
    out = DeviceArray(SHAPE, "<f8", fill=0.0)
    out.readonly = True
    with pytest.raises(ValueError, match="out is read-only"):
        h5gds.read(dset, out=out)
    assert not out.to_host().any()
    h5gds.write(dset, out)  # a read-only source is fine to write from
    assert not dset[...].any()


def test_arrays_on_devices_h5gds_cannot_reach(dset):
    claims_1 = DeviceArray(SHAPE, "<f8", fill=0.0)
    claims_1.dlpack_device = (2, 1)  # says device 1, lives on device 0
    rocm = DeviceArray(SHAPE, "<f8", fill=0.0)
    rocm.dlpack_device = (10, 0)
    beyond = DeviceArray(SHAPE, "<f8", fill=0.0)
    beyond.dlpack_device = (2, 7)
    expected_1 = (r"out says it is on CUDA device 1, but its memory is on device 0" if CUDA.device_count > 1
                  else r"out is on CUDA device 1, and this process sees 1 CUDA device")
    for array, message in [
        (DlpackArray(claims_1), expected_1),
        (DlpackArray(rocm), r"out is on a ROCm device \(0\): h5gds moves data between files and CUDA devices"),
        (DlpackArray(beyond), rf"out is on CUDA device 7, and this process sees {CUDA.device_count} CUDA device"),
    ]:
        with pytest.raises(ValueError, match=message):
            h5gds.read(dset, out=array)
    host = np.zeros(SHAPE)

    class HostPointer:  # claims device memory at a host address
        __cuda_array_interface__ = {"shape": SHAPE, "typestr": "<f8", "data": (host.ctypes.data, False), "version": 3}

    with pytest.raises(ValueError, match=r"out's address 0x[0-9a-f]+ is not CUDA device memory"):
        h5gds.read(dset, out=HostPointer())
    with pytest.raises(ValueError, match=r"array's address 0x[0-9a-f]+ is not CUDA device memory"):
        h5gds.write(dset, HostPointer())
    small = DeviceArray((4,), "<f8", fill=0.0)

    class TooBig:  # claims more bytes than its allocation holds
        __cuda_array_interface__ = {"shape": SHAPE, "typestr": "<f8", "data": (small.ptr.value, False), "version": 3}

    with pytest.raises(ValueError, match=r"out claims 11520 bytes at 0x[0-9a-f]+, beyond its allocation \(32 bytes"):
        h5gds.read(dset, out=TooBig())
    assert not host.any() and not small.to_host().any()
    for array in (claims_1, rocm, beyond):
        assert not array.to_host().any()
    unchanged(dset)


@pytest.mark.parametrize("sel, error, message", [
    (24, IndexError, "index 24 is out of range for axis 0 with size 24"),
    ((0, -11), IndexError, "index -11 is out of range for axis 1 with size 10"),
    ((0, 0, 0, 0), IndexError, "too many indices"),
])
def test_selections_out_of_range(dset, sel, error, message):
    out = DeviceArray((), "<f8", fill=0.0)
    with pytest.raises(error, match=message):
        h5gds.read(dset, out=out, sel=sel)
    with pytest.raises(error, match=message):
        h5gds.write(dset, out, sel=sel)
    unchanged(dset)


def test_bad_interfaces_raise_instead_of_crashing(dset):
    class Broken:
        __cuda_array_interface__ = {"shape": SHAPE, "typestr": "<f8", "version": 3}  # no data

    class Masked:
        __cuda_array_interface__ = {"shape": SHAPE, "typestr": "<f8", "data": (0, False), "version": 3,
                                    "mask": object()}

    class StreamZero:
        __cuda_array_interface__ = {"shape": SHAPE, "typestr": "<f8", "data": (0, False), "version": 3, "stream": 0}

    class NotACapsule:
        def __dlpack__(self, **kwargs):
            return "capsule"

        def __dlpack_device__(self):
            return (2, 0)

    with pytest.raises(TypeError, match="invalid __cuda_array_interface__"):
        h5gds.read(dset, out=Broken())
    with pytest.raises(ValueError, match="has a mask"):
        h5gds.read(dset, out=Masked())
    with pytest.raises(ValueError, match="stream 0"):
        h5gds.write(dset, StreamZero())
    with pytest.raises(TypeError):
        h5gds.read(dset, out=NotACapsule())
    unchanged(dset)


# --- read-only files: no HDF5 call (issue 26) ---------------------------------------------------------------

LOCK_FREE = "way=stored"


@pytest.fixture(params=["sec2", "gds"])
def read_only(tmp_path, request, monkeypatch):
    """A file of every layout a dataset's layout serves (and one it does not: LZF), opened read-only with
    sec2, or with gds and H5GDS_USE_VFD_GDS=0: either way a device read is staged through pinned memory."""
    path = tmp_path / "ro.h5"
    x = reference((40, 12, 6), "<f4")
    with h5py.File(path, "w") as f:
        f["contiguous"] = x
        f.create_dataset("chunked", data=x, chunks=(7, 5, 6))
        f.create_dataset("gzip", data=x, chunks=(8, 12, 3), compression="gzip", shuffle=True)
        f.create_dataset("deflate", data=x, chunks=(8, 12, 6), compression="gzip")  # nvCOMP decodes it
        f.create_dataset("lzf", data=x, chunks=(8, 12, 6), compression="lzf")
    if request.param == "gds":
        monkeypatch.setenv("H5GDS_USE_VFD_GDS", "0")
    with h5py.File(path, "r", driver=None if request.param == "sec2" else "gds") as f:
        yield f, x


def _served(dset, sel, out):
    """Whether the dataset's layout served the read of ``sel`` into the device array ``out`` itself."""
    from h5gds import _layout
    from h5gds._selection import hyperslab

    found = _layout.layout(dset, dset.dtype)
    if found is None:
        return False
    slab = hyperslab(sel, dset.shape)
    return found.read_to_device(list(slab.start), list(slab.step), list(slab.count), out.ptr.value, out.nbytes,
                                None, 0)


def test_where_the_driver_would_stage_a_read_only_files_reads_need_no_hdf5_call(read_only, capfd):
    f, x = read_only
    for name in ("contiguous", "chunked", "gzip", "deflate"):
        for sel in (None, (slice(3, 37), slice(None), 2), (slice(1, 40, 3), slice(2, 9)), 5, (Ellipsis, slice(1, 4))):
            want = f[name][sel] if sel is not None else f[name][...]
            out = DeviceArray(want.shape, "<f4", fill=0)
            with Counters() as moved:
                assert _served(f[name], sel, out) is True, (name, sel)
            moved.check("staged", "read", f"{name}[{sel}]")
            assert out.to_host().tobytes() == want.tobytes(), (name, sel)
            # h5gds.read takes the same way, and says so.
            again = DeviceArray(want.shape, "<f4", fill=0)
            capfd.readouterr()
            assert h5gds.read(f[name], out=again, sel=sel) is again
            assert again.to_host().tobytes() == want.tobytes(), (name, sel)
            read_route(capfd, "staged", LOCK_FREE)
            out.free()
            again.free()
    # LZF is not decoded by h5gds: HDF5 reads it, staged.
    out = DeviceArray(x.shape, "<f4", fill=0)
    assert _served(f["lzf"], None, out) is False
    capfd.readouterr()
    h5gds.read(f["lzf"], out=out)
    assert out.to_host().tobytes() == x.tobytes()
    err = capfd.readouterr().err
    assert STAGED in err and LOCK_FREE not in err, err


def test_the_driver_keeps_reads_it_may_take_straight_or_that_are_large(read_only, capfd, monkeypatch):
    f, x = read_only
    out = DeviceArray(x.shape, "<f4", fill=0)
    with open_gds(f.filename, "r") as straight:
        with monkeypatch.context() as m:
            m.delenv("H5GDS_USE_VFD_GDS", raising=False)
            if CUDA.emulated:
                # The emulator's machine has a GDS kernel path (H5GDS_EMU_GDS=1): the driver takes the read.
                assert _served(straight["contiguous"], None, out) is False
                capfd.readouterr()
                h5gds.read(straight["contiguous"], out=out)
                read_route(capfd, "gds", None)
                assert out.to_host().tobytes() == x.tobytes()
            for setting, value in (("H5GDS_USE_VFD_GDS", "1"), ("H5GDS_COMPAT_MODE", "off")):
                with monkeypatch.context() as n:
                    n.setenv(setting, value)
                    assert _served(straight["contiguous"], None, out) is False, setting
        # compat_mode=on: the driver stages, but nvCOMP could still decode compressed chunks read through
        # it, so they stay with the driver where the GPU is told to decode them (or estimated faster).
        with monkeypatch.context() as m:
            m.delenv("H5GDS_USE_VFD_GDS", raising=False)
            m.setenv("H5GDS_COMPAT_MODE", "on")
            assert _served(straight["contiguous"], None, out) is True
            assert out.to_host().tobytes() == x.tobytes()
            m.setenv("H5GDS_GPU_CODEC", "1")
            assert _served(straight["deflate"], None, out) is False
            # (a shuffle chain, which nvCOMP does not decode, is decoded on the host)
            assert _served(straight["gzip"], None, out) is True
            m.setenv("H5GDS_GPU_CODEC", "0")
            assert _served(straight["deflate"], None, out) is True
            assert out.to_host().tobytes() == x.tobytes()
    # Told to decode on the GPU: with H5GDS_USE_VFD_GDS=0 (which stages everything) the layout decodes on
    # the host; a file open read-only with sec2 has its stored chunks read by the host's threads and
    # decoded on the GPU, so the layout leaves the read to that path.
    with monkeypatch.context() as m:
        m.setenv("H5GDS_GPU_CODEC", "1")
        sec2 = f.driver == "sec2"
        assert _served(f["deflate"], None, out) is not sec2
        if sec2:
            capfd.readouterr()
            h5gds.read(f["deflate"], out=out)
            err = capfd.readouterr().err
            assert "decoded on the GPU with nvCOMP" in err and "the sec2 driver" in err, err
        assert out.to_host().tobytes() == x.tobytes()
    out.free()
    # Above 16 MiB the driver's staged path, which overlaps file reads and copies, takes it.
    path = f.filename + ".big"
    big = np.arange((16 << 20) // 4 + 256, dtype="<f4")
    with h5py.File(path, "w") as w:
        w["x"] = big
    with h5py.File(path, "r") as r:
        whole = DeviceArray(big.shape, "<f4", fill=0)
        assert _served(r["x"], None, whole) is False
        part = DeviceArray(((16 << 20) // 4,), "<f4", fill=0)
        assert _served(r["x"], slice(256, None), part) is True
        assert part.to_host().tobytes() == big[256:].tobytes()
        h5gds.read(r["x"], out=whole)
        assert whole.to_host().tobytes() == big.tobytes()
        whole.free()
        part.free()


def test_device_reads_of_a_read_only_file_from_many_threads_at_once(read_only, run_in_threads):
    f, x = read_only

    def reader(name, seed):
        rng = np.random.default_rng(seed)

        def one(_):
            a = int(rng.integers(0, 39))
            b = int(rng.integers(a + 1, 41))
            out = DeviceArray((b - a, 12, 6), "<f4", fill=0)
            h5gds.read(f[name], out=out, sel=slice(a, b))
            assert out.to_host().tobytes() == x[a:b].tobytes(), (name, a, b)
            out.free()
        return one

    run_in_threads([reader(name, seed) for seed, name in enumerate(["contiguous", "chunked", "gzip"] * 2)], 25)


def test_a_wrong_device_array_is_refused_naming_it_and_the_file_is_untouched(read_only):
    f, x = read_only
    host = np.zeros(x.shape, "<f4")
    from h5gds import _layout

    found = _layout.layout(f["contiguous"], f["contiguous"].dtype)
    with pytest.raises(ValueError, match="is not CUDA device memory"):
        found.read_to_device([0, 0, 0], [1, 1, 1], list(x.shape), host.ctypes.data, host.nbytes, None, 0)
    small = DeviceArray((2, 12, 6), "<f4", fill=0)
    with pytest.raises(ValueError, match="the buffer has"):
        found.read_to_device([0, 0, 0], [1, 1, 1], list(x.shape), small.ptr.value, small.nbytes, None, 0)
    with pytest.raises(ValueError, match="beyond its allocation"):
        found.read_to_device([0, 0, 0], [1, 1, 1], list(x.shape), small.ptr.value, host.nbytes, None, 0)
    small.free()
    assert f["contiguous"][...].tobytes() == x.tobytes()


def read_short_way(dset, out, sel):
    """h5gds.read's short way alone, as ``_io.read`` takes it: the entry ``_layout.serving`` keeps, read
    by ``_native.read_remembered``; None where it declines (having read nothing)."""
    from h5gds import _layout, _native

    entry = _layout.serving(dset)
    return None if entry is None else _native.read_remembered(entry, out, sel)


def test_the_short_way_reads_rows_of_a_known_layout_into_device_arrays(read_only, monkeypatch):
    """h5gds.read's short way (``_native.read_remembered``) for device arrays: once a read-only file's
    dataset has been read, all of it, an index or a slice along the first axis into a device array with
    ``__cuda_array_interface__`` are read in one native call (the general path's dataset and selection
    checks are not called), with h5py's bytes; what it does not serve takes the general path, which
    raises its errors and writes nothing."""
    from h5gds import _io

    f, x = read_only
    for name in ("contiguous", "chunked", "gzip"):
        dset = f[name]
        h5gds.read(dset, out=DeviceArray((12, 6), "<f4", fill=0), sel=0)
        with monkeypatch.context() as m:
            def general(*args):
                raise AssertionError("the general path was taken")
            m.setattr(_io, "_dataset", general)
            for sel in (None, 0, -1, 17, np.int64(3), slice(2, 30), slice(1, 40, 9), (slice(5, 6),)):
                want = dset[sel] if sel is not None else dset[...]
                out = DeviceArray(want.shape, "<f4", fill=0)
                assert h5gds.read(dset, out=out, sel=sel) is out
                assert out.to_host().tobytes() == want.tobytes(), (name, sel)
                out.free()
            # Pending work on the array's stream finishes first (the emulator runs it at the
            # stream's synchronisation): the read lands after it, not under it.
            out = DeviceArray((12, 6), "<f4", fill=0)
            out.copy_from_host_async(np.full((12, 6), 5, "<f4"))
            assert h5gds.read(dset, out=out, sel=4) is out
            assert out.to_host().tobytes() == x[4].tobytes()
            out.free()
        # Declined, then refused by the general path as before, nothing written.
        row = DeviceArray((12, 6), "<f4", fill=0)
        for out, sel, error, message in [
            (DeviceArray((12, 6), "<f8", fill=0), 2, TypeError, "out has dtype float64"),
            (DeviceArray((11, 6), "<f4", fill=0), 2, ValueError, r"out has shape \(11, 6\)"),
            (row, 40, IndexError, "index 40 is out of range"),
            (row, (slice(None), 3), ValueError, "out has shape"),
        ]:
            assert read_short_way(dset, out, sel) is None, (name, sel)
            with pytest.raises(error, match=message):
                h5gds.read(dset, out=out, sel=sel)
            assert not out.to_host().any(), (name, sel)
        row.readonly = True
        assert read_short_way(dset, row, 2) is None
        with pytest.raises(ValueError, match="out is read-only"):
            h5gds.read(dset, out=row, sel=2)
        row.readonly, row.strides = False, (4, 48)
        assert read_short_way(dset, row, 2) is None
        with pytest.raises(ValueError, match="C-contiguous"):
            h5gds.read(dset, out=row, sel=2)
        row.strides, row.stream = None, 0
        assert read_short_way(dset, row, 2) is None
        with pytest.raises(ValueError, match="stream 0"):
            h5gds.read(dset, out=row, sel=2)
        assert not row.to_host().any()


# --- threads -----------------------------------------------------------------------------------------------

def test_device_reads_in_threads_while_others_use_h5py(tmp_path, run_in_threads):
    data = reference((256, 1024))
    with open_gds(tmp_path / "t.h5", "w") as f:
        f["a"] = data
        f.create_dataset("b", data=data[::-1], chunks=(32, 256), compression="gzip")
    with open_gds(tmp_path / "t.h5", "r") as f:
        def device_reader(i):
            out = DeviceArray((256 // 4, 1024), "<f8")
            h5gds.read(f["a"], out=out, sel=slice(i, 256, 4))
            assert out.to_host().tobytes() == data[i::4].tobytes()

        def staged_reader(i):
            out = DeviceArray((16, 1024), "<f8")
            h5gds.read(f["b"], out=out, sel=slice(i * 16, (i + 1) * 16))
            assert out.to_host().tobytes() == data[::-1][i * 16:(i + 1) * 16].tobytes()

        def h5py_reader(i):
            assert np.array_equal(f["b"][i:i + 40], data[::-1][i:i + 40])

        run_in_threads((device_reader, staged_reader, h5py_reader, device_reader), repeats=4)


def test_the_emulator_saw_no_bounds_violation_or_double_free():
    require_emulator("its bounds and double-free counters")
    counters = CUDA.counters()
    assert counters["bounds_violations"] == 0 and counters["double_frees"] == 0, counters


def test_gathers_into_device_arrays_read_the_rows_then_copy_them_up(tmp_path):
    path = tmp_path / "g.h5"
    x = np.arange(60 * 5, dtype="<f4").reshape(60, 5)
    with h5py.File(path, "w") as f:
        f["x"] = x
        f.create_dataset("z", data=x, chunks=(8, 5), compression="gzip")
    for mode in ("r", "r+"):
        with h5py.File(path, mode) as f:
            for name in ("x", "z"):
                out = DeviceArray((4, 5), "<f4", fill=0)
                assert h5gds.read(f[name], out=out, sel=[7, 3, 3, -1]) is out
                assert np.array_equal(out.to_host(), x[[7, 3, 3, -1]]), (mode, name)
                out.free()


def test_device_gathers_of_compressed_rows_decode_each_chunk_once(tmp_path):
    """Rows of a read-only file's compressed dataset whose chunks (1.28 MB) are larger than h5gds
    keeps decoded: each chunk the gather touches decoded once, however many runs of rows it holds."""
    path = tmp_path / "z.h5"
    x = (np.arange(64 * 20000, dtype="<f4").reshape(64, 20000) % 977) / 8
    with h5py.File(path, "w") as f:
        f.create_dataset("z", data=x, chunks=(16, 20000), compression="gzip")
    rows = [40, 1, 3, 17, 19, 5, 3]
    with h5py.File(path, "r") as f:
        out = DeviceArray((len(rows), 20000), "<f4", fill=0)
        before = h5gds._native.chunks_decoded()
        h5gds.read(f["z"], out=out, sel=rows)
        assert h5gds._native.chunks_decoded() - before == 3
        assert np.array_equal(out.to_host(), x[rows])
        out.free()


@pytest.mark.parametrize("mode, driver", [("r", None), ("r", "gds"), ("r+", None)])
def test_gathers_go_to_device_arrays_through_pinned_memory_in_one_copy(tmp_path, mode, driver):
    """Gathered in pinned host memory from the pool (read-only files through the layout, others
    through HDF5), then one host-to-device copy."""
    path = tmp_path / "g.h5"
    x = np.arange(60 * 5 * 3, dtype="<f4").reshape(60, 5, 3)
    with h5py.File(path, "w") as f:
        f["x"] = x
        f.create_dataset("chunked", data=x, chunks=(8, 5, 3))
        f.create_dataset("z", data=x, chunks=(8, 5, 3), compression="gzip")
    cases = [([7, 3, 3, -1], ()), (list(range(0, 60, 7)), ()), ([9, 8, 10, 11, 2], ()),
             ([5, 1, 1], (slice(1, 4), 2)), (np.arange(60)[::-1], (Ellipsis, slice(0, 1)))]
    with h5py.File(path, mode, driver=driver) as f:
        for name in ("x", "chunked", "z"):
            dset = f[name]
            for rows, rest in cases:
                want = x[(np.asarray(rows),) + rest] if rest else x[np.asarray(rows)]
                out = DeviceArray(want.shape, "<f4", fill=0)
                with Counters() as moved:
                    assert h5gds.read(dset, out=out, sel=(rows,) + rest if rest else rows) is out
                if CUDA.emulated:
                    assert moved.delta("htod") == 1 and moved.delta("cufile_reads") == 0, (name, rows)
                assert out.to_host().tobytes() == want.tobytes(), (name, rows, rest)
                out.free()
        # The pinned staging buffer the gathers use.
        staging = h5gds._native.PinnedHost(4096)
        assert staging.nbytes == 4096 and staging.address != 0

        # Host memory posing as device memory is refused naming it, and nothing is written there.
        host = np.zeros((2, 5, 3), "<f4")

        class HostPosingAsDevice:
            __cuda_array_interface__ = {"shape": host.shape, "typestr": "<f4", "data": (host.ctypes.data, False),
                                        "version": 3, "stream": None}

        with pytest.raises(ValueError, match="is not CUDA device memory"):
            h5gds.read(f["x"], out=HostPosingAsDevice(), sel=[1, 0])
        assert not host.any()
