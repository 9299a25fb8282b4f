"""h5gds.LazyDataset: a dataset as a lazy, picklable array for Dask. Indexing matches h5py's; the array
pickles without its file, and is read after unpickling in another process and in a forked child (each
opening the file itself); ``da.from_array`` over it computes with a lambda in the graph on the threaded
scheduler and on a 2-process ``distributed`` LocalCluster; with ``like="cupy"`` its chunks are device
arrays (on h5gds's CPU emulator of CUDA with the CuPy stand-in mpi/emulated/cupy.py, in a child)."""

import os
import pickle
import subprocess
import sys

import h5py
import numpy as np
import pytest

import h5gds

da = pytest.importorskip("dask.array", reason="scripts/test.sh installs dask")

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPE = (45, 12)


def reference():
    return (np.arange(np.prod(SHAPE), dtype="<f4").reshape(SHAPE) * 0.5 - 3).astype("<f4")


@pytest.fixture
def path(tmp_path):
    import hdf5plugin

    p = tmp_path / "lazy.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("zstd", data=reference(), chunks=(8, 5), **hdf5plugin.Zstd())
        f.create_dataset("group/plain", data=reference())
        f.create_dataset("big", data=reference().astype(">f8"))
    return p


KEYS = [(), (slice(None),), (3,), (slice(2, 40, 3), slice(1, 11, 2)), (Ellipsis, 4), (slice(50, 60),),
        ([7, 2, 2, 40],), (np.array([44, 0, 9]), slice(3, 9))]


@pytest.mark.parametrize("name", ["zstd", "group/plain", "/big"])
@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_indexing_matches_h5py(path, name, key):
    lazy = h5gds.LazyDataset(path, name)
    with h5py.File(path, "r") as f:
        dset = f[name]
        assert (lazy.shape, lazy.dtype, lazy.ndim, lazy.chunks) == (dset.shape, dset.dtype, dset.ndim, dset.chunks)
        rows = key[0] if key and isinstance(key[0], (list, np.ndarray)) else None
        if rows is None:
            expected = dset[key]
        else:  # h5py reads increasing rows only: NumPy puts them in the caller's order
            expected = dset[()][(np.asarray(rows),) + key[1:]]
    got = lazy[key]
    assert isinstance(got, np.ndarray) and got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


def test_bad_arguments_are_named(path):
    with pytest.raises(ValueError, match="has no dataset '/nope'"):
        h5gds.LazyDataset(path, "nope")
    with pytest.raises(ValueError, match="like='jax'"):
        h5gds.LazyDataset(path, "zstd", like="jax")
    with pytest.raises(ValueError, match="device=0 needs a device result type"):
        h5gds.LazyDataset(path, "zstd", device=0)
    with pytest.raises(IndexError, match="out of range for axis 0"):
        h5gds.LazyDataset(path, "zstd")[[0, 45]]


def test_pickled_without_its_file_and_read_in_another_process(path, tmp_path):
    lazy = h5gds.LazyDataset(path, "zstd")
    lazy[0]  # opened here: the open file must not travel
    blob = pickle.dumps(lazy)
    assert b"h5py" not in blob and len(blob) < 2000
    program = ("import pickle, sys, numpy as np\n"
               "lazy = pickle.loads(open(sys.argv[1], 'rb').read())\n"
               "np.save(sys.argv[2], np.concatenate([lazy[5:30:2].ravel(), lazy[[44, 3, 3]].ravel()]))\n")
    (tmp_path / "lazy.pickle").write_bytes(blob)
    child = subprocess.run([sys.executable, "-c", program, str(tmp_path / "lazy.pickle"), str(tmp_path / "got.npy")],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    data = reference()
    np.testing.assert_array_equal(np.load(tmp_path / "got.npy"),
                                  np.concatenate([data[5:30:2].ravel(), data[[44, 3, 3]].ravel()]))


def test_read_in_a_forked_child_which_opens_the_file_itself(path):
    lazy = h5gds.LazyDataset(path, "zstd")
    np.testing.assert_array_equal(lazy[:9], reference()[:9])
    parent_open = lazy._opened
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave without running the parent's cleanup
        ok = False
        try:
            ok = np.array_equal(lazy[[40, 1, 17]], reference()[[40, 1, 17]]) and lazy._opened[0] == os.getpid()
        finally:
            os.write(write_end, b"ok" if ok else b"no")
            os._exit(0)
    os.close(write_end)
    try:
        reply = os.read(read_end, 2)
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    assert reply == b"ok"
    # The parent's open file is untouched by the child's.
    assert lazy._opened is parent_open
    np.testing.assert_array_equal(lazy[-3:], reference()[-3:])


def test_from_array_on_the_threaded_scheduler_with_a_lambda(path):
    lazy = h5gds.LazyDataset(path, "zstd")
    darr = da.from_array(lazy, chunks=(7, 6))
    assert type(darr._meta) is np.ndarray and darr.dtype == np.dtype("<f4")
    got = darr.map_blocks(lambda block: block * 2 + 1).compute(scheduler="threads")
    np.testing.assert_array_equal(got, reference() * 2 + 1)
    # Rows picked by Dask from the chunks read.
    np.testing.assert_array_equal(darr[[30, 2, 11]].compute(scheduler="threads"), reference()[[30, 2, 11]])


def test_from_array_on_a_two_process_local_cluster_with_a_lambda(path):
    distributed = pytest.importorskip("distributed", reason="scripts/test.sh installs distributed")
    lazy = h5gds.LazyDataset(path, "zstd")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        darr = da.from_array(lazy, chunks=(8, 12))
        # The workers' processes read the blocks (the graph and its lambda pickled to them).
        pids = darr.map_blocks(lambda block: np.full((1, 1), os.getpid()), chunks=(1, 1)).compute()
        got = client.compute(darr.map_blocks(lambda block: block - 1)).result()
    np.testing.assert_array_equal(got, reference() - 1)
    assert os.getpid() not in set(pids.ravel().tolist()), pids


DEVICE_CHILD = """
import os, sys
from pathlib import Path
sys.path.insert(0, str(Path.cwd() / "mpi" / "emulated"))  # the CuPy stand-in over the emulator
import cupy
import dask.array as da, distributed, numpy as np, h5gds

path, expected = sys.argv[1], np.load(sys.argv[2])
lazy = h5gds.LazyDataset(path, "zstd", like="cupy", device=1)
darr = da.from_array(lazy, chunks=(8, 12))
assert isinstance(darr._meta, cupy.ndarray), type(darr._meta)
assert isinstance(lazy[[3, 1]], cupy.ndarray) and lazy[[3, 1]].device.id == 1

def on_host(block):
    assert isinstance(block, cupy.ndarray) and block.device.id == 1, type(block)
    return block.get() * 3

threaded = darr.map_blocks(lambda b: on_host(b), meta=np.empty((0, 0), "f4")).compute(scheduler="threads")
assert np.array_equal(threaded, expected * 3)
with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \\
        distributed.Client(cluster) as client:
    spread = client.compute(darr.map_blocks(lambda b: on_host(b), meta=np.empty((0, 0), "f4"))).result()
assert np.array_equal(spread, expected * 3)
# The big-endian dataset: converted on the host, device chunks of native order.
big = da.from_array(h5gds.LazyDataset(path, "big", like="cupy"), chunks=(20, 12))
assert big.dtype == np.dtype("=f8")
assert np.array_equal(big.map_blocks(lambda b: b.get(), meta=np.empty((0, 0))).compute(scheduler="threads"), expected)
print("ok")
"""


def test_device_chunks_on_the_emulator_threaded_and_on_a_local_cluster(path, tmp_path):
    pytest.importorskip("distributed", reason="scripts/test.sh installs distributed")
    from support import clean_env, emulator_library
    libs = tmp_path / "emulator"
    libs.mkdir()
    for name in ("libcuda.so.1", "libcufile.so.0"):
        (libs / name).symlink_to(emulator_library())
    np.save(tmp_path / "expected.npy", reference())
    run = subprocess.run([sys.executable, "-c", DEVICE_CHILD, str(path), str(tmp_path / "expected.npy")], cwd=HERE,
                         capture_output=True, text=True, timeout=300,
                         env=clean_env({"LD_LIBRARY_PATH": str(libs), "H5GDS_EMU_DEVICES": "2", "PYTHONPATH": f"{HERE}/mpi/emulated:{HERE}"}))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    assert run.stdout.strip().splitlines()[-1] == "ok"
