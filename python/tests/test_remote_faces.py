"""Remote files in every face of the package (docs/remote.md): ``h5gds.read`` of a dataset h5py opened
by URL through the gds driver, ``from_file``, ``from_file_batched``, ``batches``, ``LazyDataset`` with
Dask (threaded and a 2-process distributed cluster) and ``xr.open_dataset(url, engine="h5gds")``, over
``http://`` (nginx) and ``s3://`` (moto's S3 server), both started here on loopback
(tests/python/remote_servers.py). Every read is compared with h5py reading the local file. The
reads need no local file: the read with no HDF5 call takes the driver's remote file (found from its
handle) as its source of bytes, chunks fetched by concurrent ranged GETs (counted from nginx's log).
The device cases (test_device_*) read into device memory on the emulator
(test_the_device_cases_on_the_emulator runs them there where this process has no CUDA driver)."""

import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

import h5gds
from remote_servers import Moto, Nginx
from support import ROOT, clean_env

HERE = Path(__file__).resolve().parent
EMULATOR_LIBS = ROOT / "target" / "emulator-lib-python"
BUCKET = "h5gds-faces"
KEY = "data/faces.h5"
DATASETS = ("contig", "gzip", "zstd", "group/ints")


def _write(path):
    """The local file every remote read is compared with: contiguous, gzip and Zstd chunks, a small
    dataset in a group."""
    import hdf5plugin

    rng = np.random.default_rng(52)
    with h5py.File(path, "w") as f:
        f["contig"] = rng.standard_normal((300, 50))
        f.create_dataset("gzip", data=np.arange(400 * 30, dtype="<i4").reshape(400, 30) // 7,
                         chunks=(32, 30), compression="gzip")
        f.create_dataset("zstd", data=rng.standard_normal((400, 30)).astype("<f4"), chunks=(25, 30),
                         **hdf5plugin.Zstd())
        f["group/ints"] = np.arange(7, dtype="<u2")


def local(name):
    with h5py.File(SOURCE, "r") as f:
        return f[name][()]


SOURCE = None


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    global SOURCE
    tmp = tmp_path_factory.mktemp("faces-source")
    SOURCE = tmp / "faces.h5"
    _write(SOURCE)
    # The same data as xarray writes it (netCDF-4 through h5netcdf), for the engine.
    xr = pytest.importorskip("xarray", reason="scripts/test.sh installs the [xarray] extra's packages")
    ds = xr.Dataset({"t": (("time", "x"), np.arange(240, dtype="f4").reshape(40, 6) / 3)},
                    coords={"time": np.arange(40), "x": np.arange(6) * 10})
    ds.to_netcdf(tmp / "faces.nc", engine="h5netcdf", encoding={"t": {"zlib": True, "chunksizes": (8, 6)}})
    return tmp


@pytest.fixture(scope="module")
def nginx(tmp_path_factory, source):
    server = Nginx(tmp_path_factory.mktemp("faces-nginx"))
    (server.root / "data").mkdir()
    for name in ("faces.h5", "faces.nc"):
        (server.root / "data" / name).write_bytes((source / name).read_bytes())
    yield server
    server.stop()


@pytest.fixture(scope="module")
def moto(source):
    server = Moto()
    server.s3.create_bucket(Bucket=BUCKET)
    server.s3.put_object(Bucket=BUCKET, Key=KEY, Body=(source / "faces.h5").read_bytes())
    yield server
    server.stop()


@pytest.fixture(params=["http", "s3"])
def url(request, nginx, monkeypatch):
    """The file's URL on each server; for s3:// the AWS variables of moto's client (read at each open)."""
    if request.param == "http":
        return nginx.url("data/faces.h5")
    server = request.getfixturevalue("moto")
    for key, value in server.env().items():
        monkeypatch.setenv(key, value)
    return f"s3://{BUCKET}/{KEY}"


def settled_log(nginx):
    """nginx's access log once no line has been added for 50 ms: nginx writes a request's line
    after sending its answer, so a client that has its bytes may look before the line is there."""
    import time

    text = nginx.access_log.read_text()
    while True:
        time.sleep(0.05)
        again = nginx.access_log.read_text()
        if again == text:
            return text
        text = again


def gets(nginx, name="data/faces.h5"):
    """The ranged GETs nginx has answered for ``name``."""
    return settled_log(nginx).count(f'"GET /{name} HTTP/1.1" 206')


# --- host faces ---------------------------------------------------------------------------------------------

def test_read_of_a_dataset_opened_by_url_holds_the_local_bytes(url):
    with h5py.File(url, "r", driver="gds") as f:
        for name in DATASETS:
            np.testing.assert_array_equal(h5gds.read(f[name]), local(name), err_msg=name)
        # Selections: a box, steps, rows in any order; and into a caller's buffer.
        np.testing.assert_array_equal(h5gds.read(f["zstd"], sel=np.s_[33:77, 3:9]), local("zstd")[33:77, 3:9])
        np.testing.assert_array_equal(h5gds.read(f["contig"], sel=np.s_[::7, 1::3]), local("contig")[::7, 1::3])
        rows = [399, 0, 120, 121, 5]
        np.testing.assert_array_equal(h5gds.read(f["gzip"], sel=rows), local("gzip")[rows])
        out = np.empty((300, 50))
        assert h5gds.read(f["contig"], out=out) is out
        np.testing.assert_array_equal(out, local("contig"))


def test_from_file_and_from_file_batched_take_a_url(url):
    for name in DATASETS:
        np.testing.assert_array_equal(h5gds.from_file(url, name), local(name), err_msg=name)
    parts = list(h5gds.from_file_batched(url, "zstd", (64, 30)))
    assert [offsets for _, offsets in parts] == [(r, 0) for r in range(0, 400, 64)]
    np.testing.assert_array_equal(np.concatenate([chunk for chunk, _ in parts]), local("zstd"))


def test_batches_of_a_remote_dataset_cover_every_row_once(url):
    with h5py.File(url, "r", driver="gds") as f:
        seen = list(h5gds.batches(f["gzip"], 48, seed=3))
    rows = np.concatenate(seen)
    assert [len(b) for b in seen] == [48] * 8 + [16]
    # Every row once, in a shuffled order: sorted by their first value (increasing down the rows).
    np.testing.assert_array_equal(rows[np.argsort(rows[:, 0], kind="stable")], local("gzip"))


def test_a_lazy_dataset_of_a_url_pickles_and_reads_threaded_and_on_a_cluster(url, monkeypatch):
    da = pytest.importorskip("dask.array", reason="scripts/test.sh installs dask")
    distributed = pytest.importorskip("distributed", reason="scripts/test.sh installs distributed")
    lazy = h5gds.LazyDataset(url, "zstd")
    assert lazy.path == url and lazy.shape == (400, 30) and lazy.chunks == (25, 30)
    again = pickle.loads(pickle.dumps(lazy))
    np.testing.assert_array_equal(again[10:20], local("zstd")[10:20])
    darr = da.from_array(lazy, chunks=(50, 30))
    np.testing.assert_array_equal(darr.map_blocks(lambda b: b * 2).compute(scheduler="threads"), local("zstd") * 2)
    # The workers inherit this process's environment (moto's AWS variables) when they start.
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        pids = darr.map_blocks(lambda block: np.full((1, 1), os.getpid()), chunks=(1, 1)).compute()
        got = client.compute(darr.map_blocks(lambda b: b - 1)).result()
    np.testing.assert_array_equal(got, local("zstd") - 1)
    assert os.getpid() not in set(pids.ravel().tolist()), pids


def test_xarray_opens_a_url_through_the_gds_driver(nginx, source):
    xr = pytest.importorskip("xarray", reason="scripts/test.sh installs the [xarray] extra's packages")
    url = nginx.url("data/faces.nc")
    before = gets(nginx, "data/faces.nc")
    with xr.open_dataset(url, engine="h5gds") as ds, xr.open_dataset(source / "faces.nc", engine="h5netcdf") as want:
        xr.testing.assert_identical(ds.load(), want.load())
    # Read by the driver's ranged GETs (fsspec is never asked: no driver keyword reaches h5netcdf).
    assert gets(nginx, "data/faces.nc") > before


def test_writes_to_a_url_are_refused_and_nothing_is_sent(nginx, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = nginx.url("data/new.h5")
    before = nginx.access_log.read_text()
    with pytest.raises(OSError, match="read-only") as raised:
        h5gds.to_file(np.zeros(4), url, "x")
    assert raised.value.errno == 30 and url in str(raised.value)
    xr = pytest.importorskip("xarray", reason="scripts/test.sh installs the [xarray] extra's packages")
    with pytest.raises(OSError, match="read-only"):
        xr.Dataset({"v": ("x", np.zeros(3))}).to_netcdf(url, engine="h5gds")
    assert nginx.access_log.read_text() == before
    assert list(tmp_path.iterdir()) == []  # no local directory named like the URL
    assert sorted(p.name for p in (nginx.root / "data").iterdir()) == ["faces.h5", "faces.nc"]


def test_a_missing_object_or_dataset_is_named(nginx, moto, monkeypatch):
    missing = nginx.url("data/absent.h5")
    with pytest.raises(FileNotFoundError, match=re.escape(missing)):
        h5gds.from_file(missing, "x")
    for key, value in moto.env().items():
        monkeypatch.setenv(key, value)
    with pytest.raises(FileNotFoundError, match=re.escape(f"s3://{BUCKET}/absent.h5")):
        h5gds.LazyDataset(f"s3://{BUCKET}/absent.h5", "x")
    with pytest.raises(ValueError, match="has no dataset '/nope'.*/contig"):
        h5gds.from_file(nginx.url("data/faces.h5"), "nope")


def test_a_compressed_read_of_a_url_takes_the_way_with_no_hdf5_call(nginx):
    """The chunk index is listed once through HDF5 (the driver's block cache), then the chunks' byte
    ranges are fetched by the driver's remote file with no HDF5 call: the 16 Zstd chunks lie next to
    one another, so one coalesced GET holds them all; a second read costs that one GET again (no
    HDF5 call, no block cache: the index is kept, the chunks fetched anew)."""
    url = nginx.url("data/faces.h5")
    before = gets(nginx)
    with h5py.File(url, "r", driver="gds") as f:
        dset = f["zstd"]
        opened = gets(nginx)
        np.testing.assert_array_equal(h5gds.read(dset), local("zstd"))
        first = gets(nginx) - opened
        np.testing.assert_array_equal(h5gds.read(dset), local("zstd"))
        second = gets(nginx) - opened - first
        np.testing.assert_array_equal(h5gds.read(f["gzip"], sel=[399, 0, 120, 5]), local("gzip")[[399, 0, 120, 5]])
    assert opened - before >= 1  # the superblock and root group, through the block cache
    assert 1 <= first <= 3 and second == 1, (opened - before, first, second)


def _node_gets(nginx, name, since):
    """The sizes of the ranged GETs nginx answered for ``name`` after line ``since`` of its log."""
    lines = settled_log(nginx).splitlines()[since:]
    return [int(line.split('" 206 ')[1].split()[0]) for line in lines if f'"GET /{name} HTTP/1.1" 206 ' in line]


def test_a_chunk_index_of_many_nodes_is_fetched_a_level_at_a_time(nginx):
    """600 Zstd chunks of random floats (8 KiB each, incompressible): the dataset's chunk index, a
    version 1 B-tree, has leaves about 300 KiB apart, so HDF5's walk of it (depth first, one node
    after another) would miss the block cache at each. While the engine lists the index, the driver
    fetches every child of the root at once, as exactly the nodes' bytes (GETs of a node's size),
    and HDF5 finds each leaf there; the close line counts them. The read holds the local bytes. A
    second listing (a new dataset id of the same open file) asks the server for the chunks only."""
    import hdf5plugin

    name = "data/many-nodes.h5"
    data = np.random.default_rng(7).standard_normal((600 * 8, 256)).astype("<f4")
    with h5py.File(nginx.root / name, "w") as f:
        f.create_dataset("x", data=data, chunks=(8, 256), **hdf5plugin.Zstd())
    url = nginx.url(name)
    # Rank 2: keys of 4 + 4 + 3 * 8 bytes, 64 children and 65 keys a node, a 24-byte header.
    node = 24 + 64 * 8 + 65 * 32
    since = len(settled_log(nginx).splitlines())
    with h5py.File(url, "r", driver="gds") as f:
        opened = len(_node_gets(nginx, name, since))
        np.testing.assert_array_equal(h5gds.read(f["x"]), data)
        first = _node_gets(nginx, name, since)[opened:]
        np.testing.assert_array_equal(h5gds.read(f["x"]), data)
        second = _node_gets(nginx, name, since)[opened + len(first):]
    leaves = first.count(node)
    assert leaves >= 5, first
    # Nothing else of the node's size or the block cache's: the leaves came only as nodes.
    assert all(size > 4 * node for size in first if size != node) and 262144 not in first, first
    # The chunks (8 KiB each, leaves between them within 64 KiB): one coalesced GET each time.
    assert len(first) == leaves + 1 and len(second) == 1, (first, second)
    # The close line counts them (a process of its own, logging at info).
    program = ("import sys, h5py, h5gds\n"
               "with h5py.File(sys.argv[1], 'r', driver='gds') as f:\n"
               "    h5gds.read(f['x'])\n")
    run = subprocess.run([sys.executable, "-c", program, url], env=clean_env({"H5GDS_LOG": "info"}),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert f" reads served by the block cache, {leaves} chunk index nodes fetched ahead" in run.stderr, \
        run.stderr[-3000:]


def _read_gets(nginx, url, name, dataset, data):
    """The sizes of the ranged GETs nginx answered for ``name`` while ``dataset`` of the file at
    ``url`` was read whole (after the open), the read checked against ``data``."""
    since = len(settled_log(nginx).splitlines())
    with h5py.File(url, "r", driver="gds") as f:
        dset = f[dataset]
        opened = len(_node_gets(nginx, name, since))
        np.testing.assert_array_equal(h5gds.read(dset), data)
        return _node_gets(nginx, name, since)[opened:]


def test_chunk_indexes_of_latest_format_files_take_few_round_trips(nginx):
    """libver="latest": a chunked dataset of fixed size is indexed by a fixed array (its blocks made
    with the dataset, next to its header: the block cache's GETs hold them); one of one unlimited
    axis by an extensible array, of two by a version 2 B-tree, whose blocks (data blocks and super
    blocks; leaves) lie between the chunks (600 Zstd chunks of 8 KiB, incompressible), a block-cache
    miss and a round trip each, one after another, were HDF5 to walk them unaided. While the engine
    lists such an index, the driver reads its header and fetches the blocks below a level at a
    time, as exactly their bytes (the tree's nodes: GETs of the node size, 2 KiB); the close line
    counts them. Each read holds the local bytes."""
    import hdf5plugin

    name = "data/latest.h5"
    data = np.random.default_rng(8).standard_normal((600 * 8, 256)).astype("<f4")
    with h5py.File(nginx.root / name, "w", libver="latest") as f:
        for dataset, maxshape in (("fixed", None), ("one_unlimited", (None, 256)),
                                  ("two_unlimited", (None, None))):
            f.create_dataset(dataset, data=data, chunks=(8, 256), maxshape=maxshape, **hdf5plugin.Zstd())
    url = nginx.url(name)
    # The fixed array: the chunks' GET (4.9 MB, coalesced), and at most one block of the cache.
    fixed = _read_gets(nginx, url, name, "fixed", data)
    assert len(fixed) <= 2 and fixed.count(262144) <= 1, fixed
    for dataset in ("one_unlimited", "two_unlimited"):
        got = _read_gets(nginx, url, name, dataset, data)
        ahead = _ahead_at_close(url, dataset)
        # The blocks fetched ahead, the chunks' GET, at most one block of the cache (where HDF5
        # had read the header before the listing, the first block below it).
        assert ahead >= 8 and got.count(262144) <= 1 and len(got) <= ahead + 2, (dataset, ahead, got)
        if dataset == "two_unlimited":
            assert got.count(2048) == ahead, got


def _ahead_at_close(url, dataset):
    """The chunk index nodes the driver fetched ahead while a process of its own read ``dataset`` of
    ``url`` whole (the close line at H5GDS_LOG=info)."""
    program = ("import sys, h5py, h5gds\n"
               "with h5py.File(sys.argv[1], 'r', driver='gds') as f:\n"
               "    h5gds.read(f[sys.argv[2]])\n")
    run = subprocess.run([sys.executable, "-c", program, url, dataset], env=clean_env({"H5GDS_LOG": "info"}),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    ahead = re.search(r", (\d+) chunk index nodes fetched ahead", run.stderr)
    assert ahead, run.stderr[-3000:]
    return int(ahead.group(1))


def test_a_paged_fixed_array_is_fetched_ahead_in_one_round(nginx):
    """libver="latest", a fixed-size dataset of 60,000 gzip chunks: its fixed array's data block holds
    the chunks' addresses in 59 pages of 1,024 (20 bytes each: 1.2 MB, next to the header), which
    HDF5 reads a page at a time, so its listing would miss the block cache once per 256 KiB, one
    miss after another. While the engine lists the index, the driver reads the array's header,
    and fetches the pages no cached block holds at once, as GETs of whole pages (1 MiB at most),
    all in flight together; HDF5 finds them there. The read holds the local bytes, no GET is a
    block of the cache, and the close line counts the GETs fetched ahead."""
    name = "data/paged-fixed.h5"
    n = 60_000
    data = (np.arange(n * 16, dtype="<i4").reshape(n, 16) // 3) % 1000
    with h5py.File(nginx.root / name, "w", libver="latest") as f:
        f.create_dataset("x", data=data, chunks=(1, 16), compression="gzip")
    raw = (nginx.root / name).read_bytes()
    header = raw.find(b"FAHD")
    assert header > 0 and raw[header + 7] == 10, "a fixed array of pages of 1,024 elements"
    block = int.from_bytes(raw[header + 16:header + 24], "little")
    block_len = 19 + 8 + n * raw[header + 6] + 59 * 4
    assert raw[block:block + 4] == b"FADB" and (block + block_len) // 262144 >= 3  # 4 blocks or more
    url = nginx.url(name)
    got = _read_gets(nginx, url, name, "x", data)
    ahead = _ahead_at_close(url, "x")
    # The pages past the first block, 1.0 MB: GETs of 1 MiB at most (1 or 2), then the chunks'
    # coalesced GET; none a block of the cache (unaided: 4 of them, one after another).
    assert 1 <= ahead <= 2 and 262144 not in got, (ahead, got)
    assert sum(got[:ahead]) <= block_len and all(size <= 1 << 20 for size in got[:ahead]), got
    # Then the chunks' GETs: the first chunks, written before the array's data block was made,
    # lie in front of it, the rest after it (one coalesced GET).
    assert len(got) <= ahead + 5 and max(got[ahead:]) > block_len, (ahead, got)


def test_files_of_4_byte_addresses_read_their_bytes(nginx):
    """A file made with 4-byte addresses and lengths (a file creation property list's sizes (4, 4)),
    Zstd chunks indexed by a version 1 B-tree and (libver="latest") by a fixed array (HDF5 1.14
    cannot open a dataset of unlimited axes in such a file, even locally: "didn't find unlimited
    dimension"): the driver's index readers read 8-byte addresses only, so the superblock's sizes
    leave these indexes to HDF5's own reads (nothing fetched ahead), and every read, whole and of
    rows, holds the local file's bytes."""
    import hdf5plugin

    name = "data/four-byte.h5"
    data = np.random.default_rng(4).standard_normal((64 * 8, 64)).astype("<f4")
    for libver in ("earliest", "latest"):
        fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
        fapl.set_libver_bounds(*(h5py.h5f.LIBVER_LATEST,) * 2 if libver == "latest" else
                               (h5py.h5f.LIBVER_EARLIEST, h5py.h5f.LIBVER_LATEST))
        fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
        fcpl.set_sizes(4, 4)
        fid = h5py.h5f.create(str(nginx.root / name).encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl)
        with h5py.File(fid) as f:
            dataset = "btree" if libver == "earliest" else "fixed"
            f.create_dataset(dataset, data=data, chunks=(8, 64), **hdf5plugin.Zstd())
        raw = (nginx.root / name).read_bytes()
        assert raw[:8] == b"\x89HDF\r\n\x1a\n"
        assert (raw[13], raw[14]) == (4, 4) if raw[8] < 2 else (raw[9], raw[10]) == (4, 4), raw[:16]
        url = nginx.url(name)
        rows = [500, 3, 77, 78, 256]
        with h5py.File(url, "r", driver="gds") as f:
            np.testing.assert_array_equal(h5gds.read(f[dataset]), data)
            np.testing.assert_array_equal(h5gds.read(f[dataset], sel=rows), data[rows])
            np.testing.assert_array_equal(f[dataset][100:200:3], data[100:200:3])
        np.testing.assert_array_equal(h5gds.from_file(url, dataset), data)
        assert _ahead_at_close(url, dataset) == 0, (libver, dataset)


def test_the_verdict_of_a_url_read_is_the_stored_way(nginx):
    """At H5GDS_LOG=debug the engine's verdict names the way: the read with no HDF5 call, its chunks
    fetched ahead of the decoder from the URL."""
    url = nginx.url("data/faces.h5")
    program = ("import sys, h5py, h5gds, numpy as np\n"
               "f = h5py.File(sys.argv[1], 'r', driver='gds')\n"
               "np.save(sys.stdout.buffer, h5gds.read(f['zstd']))\n")
    run = subprocess.run([sys.executable, "-c", program, url], env=clean_env({"H5GDS_LOG": "debug"}),
                         capture_output=True, timeout=120)
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    import io
    np.testing.assert_array_equal(np.load(io.BytesIO(run.stdout)), local("zstd"))
    log = run.stderr.decode()
    assert "host read: way=stored: /zstd: 48000 bytes, 16 chunks, on " in log, log[-3000:]
    assert f"/zstd: 16 chunks decoded on 1 threads (fetched ahead of them from the source: {url}), with no " \
        "HDF5 call" in log, log[-3000:]


def test_an_object_rewritten_before_the_chunks_are_fetched_fails_naming_it(nginx, source):
    """The chunk index is listed (a read inside one chunk resolves the dataset's storage), the object
    is rewritten, then the read with no HDF5 call fetches the chunks: every GET carries the ETag seen
    at open, so it fails with the driver's error, never mixing old and new bytes."""
    target = nginx.root / "data" / "rewritten.h5"
    target.write_bytes((source / "faces.h5").read_bytes())
    os.utime(target, (1_600_000_000, 1_600_000_000))
    url = nginx.url("data/rewritten.h5")
    with h5py.File(url, "r", driver="gds") as f:
        dset = f["zstd"]
        np.testing.assert_array_equal(h5gds.read(dset, sel=np.s_[0:2, :]), local("zstd")[0:2])
        staged = target.with_suffix(".new")
        staged.write_bytes((source / "faces.h5").read_bytes() + b"\0" * 4096)  # another size: another ETag
        os.replace(staged, target)
        with pytest.raises(OSError, match="changed since it was opened") as failed:
            h5gds.read(dset)
        assert url in str(failed.value), failed.value


# --- device faces (emulated where no GPU) ---------------------------------------------------------------------

def test_device_reads_of_a_url_hold_the_local_bytes(nginx):
    try:
        from device_arrays import DeviceArray, cuda
        found = cuda()
    except (OSError, RuntimeError) as exc:
        if os.environ.get("H5GDS_REQUIRE_DEVICE_TESTS") == "1":
            raise
        pytest.skip(f"no CUDA driver in this process ({exc}); test_the_device_cases_on_the_emulator runs it")
    url = nginx.url("data/faces.h5")
    with h5py.File(url, "r", driver="gds") as f:
        for name in DATASETS:
            want = local(name)
            out = DeviceArray(want.shape, want.dtype)
            h5gds.read(f[name], out=out)
            np.testing.assert_array_equal(out.to_host(), want, err_msg=name)
    if found.emulated:
        sys.path.insert(0, str(HERE / "mpi" / "emulated"))  # the CuPy stand-in over the emulator
    cupy = pytest.importorskip("cupy", reason="like='cupy' needs CuPy")
    for name in ("contig", "zstd"):
        got = h5gds.from_file(url, name, like="cupy")
        assert isinstance(got, cupy.ndarray), type(got)
        np.testing.assert_array_equal(got.get(), local(name), err_msg=name)


def test_the_device_cases_on_the_emulator(request):
    """scripts/test.sh's host run has no CUDA driver: the device cases then run here, in a child whose
    libcuda and libcufile are h5gds's emulator."""
    try:
        from device_arrays import cuda
        cuda()
        pytest.skip("this process has a CUDA driver: the device cases ran in it")
    except (OSError, RuntimeError):
        pass
    if not (EMULATOR_LIBS / "libcuda.so.1").exists():
        pytest.skip(f"no emulator libraries in {EMULATOR_LIBS} (scripts/test.sh links them there)")
    env = clean_env({"LD_LIBRARY_PATH": f"{EMULATOR_LIBS}:{os.environ.get('LD_LIBRARY_PATH', '')}",
                     "H5GDS_REQUIRE_DEVICE_TESTS": "1"})
    child = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "test_device_",
                            Path(__file__).name], cwd=HERE, env=env, capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stdout[-6000:] + child.stderr[-3000:]
    assert re.search(r"\b1 passed, \d+ deselected in ", child.stdout), child.stdout[-2000:]
    assert "EMULATED (h5gds's CPU emulators, no GPU used)" in child.stdout, child.stdout[-2000:]
