"""h5gds.read served with no HDF5 call (issue 26 item 1): a read-only file's contiguous and chunked
datasets (unfiltered and compressed) are resolved once into a layout kept for the dataset's id, then read
with neither h5py's lock nor the GIL held; from many threads at once the bytes are h5py's. Files open for
writing, SWMR readers, user blocks, other layouts and reads touching chunks never written go through HDF5."""

import os
import subprocess
import sys

import h5py
import hdf5plugin
import numpy as np
import pytest

import h5gds
from h5gds import _layout
from h5gds._selection import hyperslab

SELECTIONS = [None, (slice(3, 97),), (slice(10, 11),), (7,), (slice(1, 90, 7),), (slice(None), slice(2, 9)),
              (slice(5, 60), slice(None, None, 3)), (slice(None, None, 4), 3), (Ellipsis, slice(1, 2))]


def data(shape, dtype="<f4"):
    return (np.arange(np.prod(shape)) % 1000 + np.arange(np.prod(shape)) // 7).astype(dtype).reshape(shape)


@pytest.fixture
def files(tmp_path):
    path = tmp_path / "d.h5"
    x = data((100, 12))
    with h5py.File(path, "w") as f:
        f.create_dataset("contiguous", data=x)
        f.create_dataset("chunked", data=x, chunks=(8, 5))
        f.create_dataset("gzip", data=x, chunks=(8, 12), compression="gzip", shuffle=True)
        f.create_dataset("zstd", data=x, chunks=(16, 6), **hdf5plugin.Zstd())
        f.create_dataset("ints", data=data((100, 12), "<i2"), chunks=(10, 12), **hdf5plugin.LZ4())
        f.create_dataset("big_endian", data=data((100, 12), ">f8"))
        f.create_dataset("cube", data=data((9, 10, 11)), chunks=(4, 3, 5), compression="gzip")
        f.create_dataset("cube_contiguous", data=data((9, 10, 11)))
    return path


@pytest.mark.parametrize("driver", [None, "gds"])
def test_every_selection_of_every_layout_reads_what_h5py_reads(files, driver):
    with h5py.File(files, "r", driver=driver) as f:
        for name in f:
            dset = f[name]
            found = _layout.layout(dset, dset.dtype)
            assert found is not None, name
            for sel in SELECTIONS:
                want = dset[sel] if sel is not None else dset[...]
                got = h5gds.read(dset, sel=sel)
                assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), (name, sel)
                # The layout itself served it (True: no HDF5 call).
                slab = hyperslab(sel, dset.shape)
                direct = np.zeros_like(want)
                assert found.read(list(slab.start), list(slab.step), list(slab.count), direct.ctypes.data,
                                  direct.nbytes) is True
                assert direct.tobytes() == want.tobytes(), (name, sel)


def test_many_threads_read_at_once_and_get_h5pys_bytes(files, run_in_threads):
    with h5py.File(files, "r") as f:
        names = list(f)
        want = {name: f[name][...] for name in names}
        rng = np.random.default_rng(26)

        def work(seed):
            local = np.random.default_rng(seed)

            def one(_):
                name = names[local.integers(len(names))]
                dset = f[name]
                a = int(local.integers(0, dset.shape[0] - 1))
                b = int(local.integers(a + 1, dset.shape[0] + 1))
                assert np.array_equal(h5gds.read(dset, sel=slice(a, b)), want[name][a:b], equal_nan=True)
            return one

        run_in_threads([work(int(s)) for s in rng.integers(0, 1 << 30, 8)], 40)


def test_what_stays_with_hdf5(tmp_path):
    path, swmr, block = tmp_path / "w.h5", tmp_path / "swmr.h5", tmp_path / "ub.h5"
    x = data((40, 6))
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=x, chunks=(8, 6), compression="gzip")
        f.create_dataset("lzf", data=x, chunks=(8, 6), compression="lzf")
        f.create_dataset("empty", shape=(40, 6), dtype="<f4")
    with h5py.File(swmr, "w", libver="latest") as f:
        f.create_dataset("x", data=x, chunks=(8, 6), maxshape=(None, 6))
    with h5py.File(block, "w", userblock_size=512) as f:
        f.create_dataset("x", data=x)
    with h5py.File(path, "r+") as f:
        assert _layout.layout(f["x"], f["x"].dtype) is None
        f["x"][3] = -1
        assert np.array_equal(h5gds.read(f["x"]), f["x"][...])
    with h5py.File(path, "r") as f:
        assert _layout.layout(f["lzf"], f["lzf"].dtype) is None
        assert _layout.layout(f["empty"], f["empty"].dtype) is None
        assert np.array_equal(h5gds.read(f["lzf"]), x)
    with h5py.File(swmr, "r", libver="latest", swmr=True) as f:
        assert _layout.layout(f["x"], f["x"].dtype) is None
        assert np.array_equal(h5gds.read(f["x"]), x)
    with h5py.File(block, "r") as f:
        assert _layout.layout(f["x"], f["x"].dtype) is None
        assert np.array_equal(h5gds.read(f["x"]), x)


def test_a_read_touching_chunks_never_written_goes_through_hdf5(tmp_path):
    path = tmp_path / "holes.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", shape=(40, 6), chunks=(8, 6), dtype="<i4", fillvalue=-7, **hdf5plugin.Zstd())
        d[8:24] = 5
    with h5py.File(path, "r") as f:
        assert _layout.layout(f["x"], f["x"].dtype) is not None
        assert np.array_equal(h5gds.read(f["x"], sel=slice(8, 24)), np.full((16, 6), 5, "<i4"))
        assert np.array_equal(h5gds.read(f["x"]), f["x"][...])
        assert (h5gds.read(f["x"], sel=slice(0, 8)) == -7).all()


def test_chunks_far_apart_in_a_huge_grid_are_found(tmp_path):
    # Three chunks written in a grid of 10^12 chunks: the layout's index holds the chunks listed,
    # not the grid (a table of it would not fit in memory), and serves each of them itself.
    path = tmp_path / "sparse.h5"
    corners = [(0, 0), (999_999 * 4, 2), (123_456 * 4, 999_998 * 2)]
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", shape=(4_000_000, 2_000_000), chunks=(4, 2), dtype="<i4", fillvalue=-1,
                             **hdf5plugin.Zstd())
        for n, (row, col) in enumerate(corners):
            d[row:row + 4, col:col + 2] = np.arange(8, dtype="<i4").reshape(4, 2) + 10 * n
    with h5py.File(path, "r") as f:
        d = f["x"]
        layout = _layout.layout(d, d.dtype)
        for n, (row, col) in enumerate(corners):
            out = np.zeros((3, 2), "<i4")
            assert layout.read([row + 1, col], [1, 1], [3, 2], out.ctypes.data, out.nbytes)
            assert np.array_equal(out, np.arange(2, 8, dtype="<i4").reshape(3, 2) + 10 * n)
            assert h5gds.read(d, sel=(row + 1, col + 1)) == 10 * n + 3
        # A chunk never written is HDF5's to fill.
        hole = np.zeros((4, 2), "<i4")
        assert not layout.read([4, 0], [1, 1], [4, 2], hole.ctypes.data, hole.nbytes)
        assert np.array_equal(h5gds.read(d, sel=(slice(4, 8), slice(0, 2))), np.full((4, 2), -1, "<i4"))


def test_a_corrupt_chunk_and_a_closed_file_are_refused(tmp_path):
    path = tmp_path / "bad.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", data=data((64,)), chunks=(16,), compression="gzip")
        stored = d.id.read_direct_chunk((32,))[1]
        d.id.write_direct_chunk((32,), stored[: len(stored) // 2])
    f = h5py.File(path, "r")
    dset = f["x"]
    with pytest.raises(OSError, match=r"dataset /x: the chunk at \[32\] cannot be decoded"):
        h5gds.read(dset)
    f.close()
    with pytest.raises(ValueError, match="closed"):
        h5gds.read(dset)


def test_the_layout_refuses_a_wrong_selection_or_buffer(files):
    with h5py.File(files, "r") as f:
        found = _layout.layout(f["zstd"], f["zstd"].dtype)
        out = np.zeros(12, "<f4")
        with pytest.raises(ValueError, match="out of range on axis 0"):
            found.read([100, 0], [1, 1], [1, 12], out.ctypes.data, 48)
        with pytest.raises(ValueError, match="the selection has 1 axes"):
            found.read([0], [1], [1], out.ctypes.data, 48)
        with pytest.raises(ValueError, match="the buffer has 40 bytes"):
            found.read([0, 0], [1, 1], [1, 12], out.ctypes.data, 40)
        assert not out.any()


def test_a_layout_belongs_to_its_dataset_id(files):
    with h5py.File(files, "r") as f:
        first = f["zstd"]
        found = _layout.layout(first, first.dtype)
        assert _layout.layout(first, first.dtype) is found
        again = f["zstd"]
        assert again.id is not first.id
        assert np.array_equal(h5gds.read(again), first[...])


def test_h5gds_host_codec_0_leaves_compressed_chunks_to_hdf5_here_too(tmp_path, monkeypatch):
    path = tmp_path / "bad.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", data=data((64,)), chunks=(16,), compression="gzip")
        stored = d.id.read_direct_chunk((32,))[1]
        d.id.write_direct_chunk((32,), stored[: len(stored) // 2])
        f.create_dataset("plain", data=data((64,)), chunks=(16,))
    with h5py.File(path, "r") as f:
        monkeypatch.setenv("H5GDS_HOST_CODEC", "0")
        with pytest.raises(OSError) as raised:
            h5gds.read(f["x"], sel=slice(30, 40))
        assert "cannot be decoded" not in str(raised.value)
        # Unfiltered chunks are no decoding: still served by the layout.
        assert _layout.layout(f["plain"], f["plain"].dtype).read([0], [1], [64], data((64,)).ctypes.data, 256)
        monkeypatch.setenv("H5GDS_HOST_CODEC", "yes")
        with pytest.raises(ValueError, match="H5GDS_HOST_CODEC"):
            h5gds.read(f["x"])


def test_rows_read_one_at_a_time_decode_each_chunk_once_and_match(tmp_path):
    """As with HDF5's chunk cache, reads inside one chunk decode it once: 64 rows in chunks of 16 rows,
    then four more rows, decode four chunks (the debug log lists each)."""
    path = tmp_path / "rows.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data((64, 10)), chunks=(16, 10), **hdf5plugin.Zstd())
    program = (
        "import sys, h5py, hdf5plugin, h5gds, numpy as np\n"
        "f = h5py.File(sys.argv[1], 'r')\n"
        "dset = f['x']\n"
        "x = dset[...]\n"
        "for i in range(64):\n"
        "    assert np.array_equal(h5gds.read(dset, sel=i), x[i])\n"
        "for i in (63, 0, 17, 40):\n"
        "    assert np.array_equal(h5gds.read(dset, sel=(slice(i, i + 1), slice(2, 9, 3))), x[i:i + 1, 2:9:3])\n"
    )
    env = dict(os.environ, H5GDS_LOG="debug")
    run = subprocess.run([sys.executable, "-c", program, str(path)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    decoded = [line for line in run.stderr.splitlines() if "decoded and kept for the next reads" in line]
    assert len(decoded) == 4, run.stderr
    assert [line.split("the chunk at ")[1].split(" decoded")[0] for line in decoded] == \
        ["[0, 0]", "[16, 0]", "[32, 0]", "[48, 0]"]


def test_a_child_forked_while_threads_read_compressed_rows_reads_them_too(tmp_path):
    """A DataLoader worker forked while the parent's threads read rows of a compressed dataset (the
    decoded chunks kept under a lock), with the debug log on (a line for every read): the child reads
    the same dataset, logs its reads and finishes (each child is killed after 10 s; 19 of 20 hung when
    the child waited on the chunks' lock a fork copied held, and 2 of 20 on the log writer's lock)."""
    path = tmp_path / "rows.h5"
    with h5py.File(path, "w") as f:
        # 64 chunks of 256 KiB, more than the 8 MiB of decoded chunks kept: the threads keep
        # replacing them under the lock.
        f.create_dataset("x", data=data((4096, 512), "<i8"), chunks=(64, 512), compression="gzip")
    program = (
        "import os, random, signal, sys, threading, time, h5py, h5gds, numpy as np\n"
        "f = h5py.File(sys.argv[1], 'r')\n"
        "d = f['x']\n"
        "x = d[...]\n"
        "h5gds.read(d, sel=0)\n"
        "stop = False\n"
        "def rows(seed):\n"
        "    rng = random.Random(seed)\n"
        "    while not stop:\n"
        "        h5gds.read(d, sel=rng.randrange(4096))\n"
        "threads = [threading.Thread(target=rows, args=(n,)) for n in range(4)]\n"
        "for t in threads:\n"
        "    t.start()\n"
        "outcomes = []\n"
        "for k in range(20):\n"
        "    time.sleep(0.01)\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        signal.alarm(10)\n"
        "        rows_read = [h5gds.read(d, sel=slice(i, i + 2)) for i in (k, 3000 + k, k)]\n"
        "        os._exit(0 if all(np.array_equal(r, x[i:i + 2]) for r, i in zip(rows_read, (k, 3000 + k, k))) else 1)\n"
        "    outcomes.append(os.waitpid(pid, 0)[1])\n"
        "stop = True\n"
        "for t in threads:\n"
        "    t.join()\n"
        "print(outcomes)\n"
    )
    # The log (hundreds of thousands of lines) goes to a file: the children's reads, two rows each,
    # are its 8192-byte lines, the threads' single rows 4096.
    log_path = tmp_path / "log.txt"
    with open(log_path, "w") as log:
        run = subprocess.run([sys.executable, "-c", program, str(path)], stdout=subprocess.PIPE, stderr=log,
                             text=True, timeout=600, env=dict(os.environ, H5GDS_LOG="debug"))
    with open(log_path) as log:
        lines = log.readlines()
    log_path.unlink()
    assert run.returncode == 0, "".join(lines[-20:])
    assert run.stdout.strip() == str([0] * 20), run.stdout  # SIGALRM (14): a hung child
    assert sum("host read: " in line and ": /x: 8192 bytes, " in line for line in lines) == 60, lines[-20:]


def test_gathers_of_rows_of_every_layout_match_numpy(files):
    """That the layout serves them with no HDF5 call (the distinct rows of every layout; whole rows
    of contiguous datasets straight into the caller's order): tests/engine_calls.rs."""
    rng = np.random.default_rng(7)
    with h5py.File(files, "r") as f:
        for name in f:
            dset = f[name]
            x = dset[...]
            assert _layout.layout(dset, dset.dtype) is not None, name
            # Random order, repeats, neighbours in the caller's order (4, 5, 6) and out of it (8 then 7).
            for rows in (rng.integers(0, dset.shape[0], 50), np.array([5, 5, 2, -1]), np.arange(3, dset.shape[0], 3),
                         np.array([4, 5, 6, 8, 7, 4, 4, dset.shape[0] - 1])):
                assert np.array_equal(h5gds.read(dset, sel=rows), x[rows]), (name, rows)
                out = np.full((len(rows),) + dset.shape[1:], -7, dset.dtype)
                assert h5gds.read(dset, out=out, sel=rows) is out
                assert np.array_equal(out, x[rows]), (name, rows)
            if dset.ndim > 1:
                # Part of each row.
                assert np.array_equal(h5gds.read(dset, sel=([3, 1], slice(0, 1))), x[[3, 1], 0:1]), name


def read_short_way(dset, out, sel):
    """h5gds.read's short way alone, as ``_io.read`` takes it: the entry ``_layout.serving`` keeps, read
    by ``_native.read_remembered``; None where it declines (having read nothing)."""
    from h5gds import _layout, _native

    entry = _layout.serving(dset)
    return None if entry is None else _native.read_remembered(entry, out, sel)


SHORT_WAY = [None, 0, 7, -1, -100, np.int64(42), np.uint8(99), slice(3, 97), slice(10, 11), slice(5, 5),
             slice(-20, None), slice(1, 90, 7), slice(None, None, 40), (7,), (slice(2, 9),), (np.int32(-3),)]


@pytest.mark.parametrize("driver", [None, "gds"])
def test_the_short_way_reads_rows_of_a_known_layout_in_one_native_call(files, driver):
    """h5gds.read's short way (``_native.read_remembered``): once a dataset's layout is known, all
    of it, an index or a slice along the first axis into NumPy are read in one native call; the bytes
    are h5py's, into the caller's array or a new one of the dataset's dtype."""
    with h5py.File(files, "r", driver=driver) as f:
        for name in f:
            dset = f[name]
            # Nothing known before the first read of this DatasetID: the general path resolves it.
            assert read_short_way(dset, None, 0) is None
            h5gds.read(dset, sel=0)
            short_way = SHORT_WAY if dset.shape[0] == 100 else [None, 0, -1, 8, slice(2, 5), (np.int64(-9),)]
            for sel in short_way:
                want = dset[sel] if sel is not None else dset[...]
                got = read_short_way(dset, None, sel)
                assert got is not None, (name, sel)
                assert got.dtype == want.dtype and got.shape == want.shape, (name, sel)
                assert got.tobytes() == want.tobytes(), (name, sel)
                out = np.full(want.shape, 77, dtype=want.dtype)
                assert read_short_way(dset, out, sel) is out
                assert out.tobytes() == want.tobytes(), (name, sel)
                assert h5gds.read(dset, sel=sel).tobytes() == want.tobytes(), (name, sel)


def test_the_short_way_declines_what_it_does_not_serve_and_h5gds_read_says_what_is_wrong(files):
    with h5py.File(files, "r") as f:
        dset = f["chunked"]
        h5gds.read(dset, sel=0)
        row = np.zeros(12, "<f4")

        def declined(out, sel):
            before = None if out is None else out.copy()
            assert read_short_way(dset, out, sel) is None, sel
            if out is not None:
                assert np.array_equal(out, before), sel

        # Selections for the general path, which serves or refuses them as before.
        for sel in [(slice(None), 3), (Ellipsis, 2), Ellipsis, [1, 3], np.array([4]), ()]:
            declined(None, sel)
            assert np.array_equal(h5gds.read(dset, sel=sel), dset[sel]), sel
        for sel, error, message in [
            (True, TypeError, "selection item True"),
            (np.bool_(False), TypeError, "selection item"),
            (100, IndexError, "index 100 is out of range for axis 0 with size 100"),
            (-101, IndexError, "index -101 is out of range"),
            (2.0, TypeError, "selection item 2.0"),
            (slice(None, None, -1), ValueError, "slice step -1 on axis 0"),
            ((1, 2, 3), IndexError, "too many indices"),
        ]:
            declined(row, sel)
            with pytest.raises(error, match=message):
                h5gds.read(dset, row, sel)
        # Arrays it does not write into: the general path's errors, nothing written.
        for out, error, message in [
            (np.zeros(12, "<f8"), TypeError, "out has dtype float64, dataset /chunked has dtype float32"),
            (np.zeros(11, "<f4"), ValueError, r"out has shape \(11,\)"),
            (np.zeros((12, 2), "<f4")[:, 0], ValueError, "C-contiguous"),
            (np.zeros(12, ">f4"), TypeError, "out has dtype >f4"),
        ]:
            declined(out, 5)
            with pytest.raises(error, match=message):
                h5gds.read(dset, out, 5)
            assert not out.any()
        frozen = np.zeros(12, "<f4")
        frozen.flags.writeable = False
        declined(frozen, 5)
        with pytest.raises(ValueError, match="out is read-only"):
            h5gds.read(dset, frozen, 5)
        with pytest.raises(TypeError, match="dset must be an h5py.Dataset"):
            h5gds.read(f, row, 5)
    # Closed with its file: declined, and the general path's ValueError.
    declined(row, 5)
    with pytest.raises(ValueError, match="closed"):
        h5gds.read(dset, row, 5)
    assert not row.any()
