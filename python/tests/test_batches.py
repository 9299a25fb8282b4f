"""h5gds.batches (issue 26 item 3): shuffled batches of rows for training loops, every row once per call,
the next batch read while the current one is used; arguments checked before anything is read; importing
h5gds imports no GPU library."""

import os
import subprocess
import sys

import h5py
import hdf5plugin
import numpy as np
import pytest

import h5gds


@pytest.fixture
def rows(tmp_path):
    """A file whose row i holds the value i everywhere: contiguous, chunked+Zstandard, big-endian."""
    path = tmp_path / "rows.h5"
    x = np.repeat(np.arange(103, dtype="<f4")[:, None], 7, axis=1)
    with h5py.File(path, "w") as f:
        f.create_dataset("contiguous", data=x)
        f.create_dataset("zstd", data=x, chunks=(10, 7), **hdf5plugin.Zstd())
        f.create_dataset("big_endian", data=x.astype(">f8"))
    return path


def test_shuffled_batches_of_compressed_rows_decode_each_chunk_once_per_batch(tmp_path):
    """Chunks of 1.28 MB (above the 1 MiB h5gds keeps decoded between reads): each batch's gather
    decodes every chunk its rows touch once, whatever number of runs they form in it."""
    path = tmp_path / "big.h5"
    x = np.repeat(np.arange(96, dtype="<f4")[:, None], 20000, axis=1)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=x, chunks=(16, 20000), **hdf5plugin.Zstd())
    order = np.random.default_rng(9).permutation(96)
    with h5py.File(path, "r") as f:
        before = h5gds._native.chunks_decoded()
        got = list(h5gds.batches(f["x"], 24, seed=9))
        decoded = h5gds._native.chunks_decoded() - before
    touched = sum(len(set(order[k:k + 24] // 16)) for k in range(0, 96, 24))
    assert decoded == touched, (decoded, touched)
    assert np.concatenate([b[:, 0] for b in got]).tolist() == order.astype(float).tolist()
    assert all((b == b[:, :1]).all() for b in got)


@pytest.mark.parametrize("name", ["contiguous", "zstd", "big_endian"])
def test_every_row_once_in_batches_of_the_size(rows, name):
    with h5py.File(rows, "r") as f:
        dset = f[name]
        seen = []
        sizes = []
        for batch in h5gds.batches(dset, 16, seed=3):
            assert isinstance(batch, np.ndarray) and batch.dtype == dset.dtype and batch.shape[1:] == (7,)
            assert (batch == batch[:, :1]).all()  # each row whole
            sizes.append(len(batch))
            seen.extend(batch[:, 0].astype(int))
        assert sizes == [16] * 6 + [7]
        assert sorted(seen) == list(range(103))
        assert seen != list(range(103))  # shuffled


def test_seed_order_drop_last_and_no_shuffle(rows):
    with h5py.File(rows, "r") as f:
        dset = f["zstd"]
        first = [b[:, 0].tolist() for b in h5gds.batches(dset, 10, seed=1)]
        again = [b[:, 0].tolist() for b in h5gds.batches(dset, 10, seed=1)]
        other = [b[:, 0].tolist() for b in h5gds.batches(dset, 10, seed=2)]
        assert first == again and first != other
        permutation = np.random.default_rng(1).permutation(103)
        assert sum(first, []) == permutation.astype(float).tolist()
        kept = list(h5gds.batches(dset, 10, seed=1, drop_last=True))
        assert [len(b) for b in kept] == [10] * 10
        plain = np.concatenate(list(h5gds.batches(dset, 25, shuffle=False)))
        assert np.array_equal(plain, dset[...])
        assert len(list(h5gds.batches(dset, 500, drop_last=True))) == 0
        # Batches that divide the rows: drop_last drops nothing.
        assert [len(b) for b in h5gds.batches(dset, 103, drop_last=True)] == [103]
        ones = list(h5gds.batches(dset, 1, shuffle=False, drop_last=True))
        assert np.array_equal(np.concatenate(ones), dset[...])
        assert [len(b) for b in h5gds.batches(dset, 500)] == [103]


def test_bad_arguments_are_refused_before_reading(rows):
    with h5py.File(rows, "r") as f:
        dset = f["zstd"]
        with pytest.raises(ValueError, match="batch_size must be 1 or more, not 0"):
            h5gds.batches(dset, 0)
        with pytest.raises(TypeError, match="batch_size must be an int, not float"):
            h5gds.batches(dset, 2.5)
        with pytest.raises(TypeError, match="batch_size must be an int, not bool"):
            h5gds.batches(dset, True)
        with pytest.raises(ValueError, match="like='tensorflow'"):
            h5gds.batches(dset, 4, like="tensorflow")
        with pytest.raises(TypeError, match="must be an h5py.Dataset"):
            h5gds.batches(np.zeros(4), 4)


def test_a_read_that_fails_raises_when_its_batch_is_due(rows):
    f = h5py.File(rows, "r")
    it = h5gds.batches(f["zstd"], 50, seed=0)
    first = next(it)
    assert len(first) == 50
    f.close()
    with pytest.raises(ValueError, match="closed"):
        for _ in it:
            pass


def test_importing_h5gds_and_batching_into_numpy_imports_no_gpu_library(rows):
    program = (
        "import sys, h5py, h5gds\n"
        "f = h5py.File(sys.argv[1], 'r')\n"
        "assert sum(len(b) for b in h5gds.batches(f['zstd'], 8)) == 103\n"
        "print(sorted(m for m in ('torch', 'cupy', 'jax') if m in sys.modules))\n"
    )
    run = subprocess.run([sys.executable, "-c", program, str(rows)], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ))
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_like_torch_without_torch_says_how_to_install_it(rows):
    if "torch" in sys.modules or __import__("importlib").util.find_spec("torch") is not None:
        pytest.skip("PyTorch is installed here")
    with h5py.File(rows, "r") as f:
        with pytest.raises(ModuleNotFoundError, match="pip install torch"):
            h5gds.batches(f["zstd"], 8, like="torch")


DEVICE_CHILD = """
import sys
from pathlib import Path
sys.path.insert(0, str(Path.cwd() / "mpi" / "emulated"))  # the CuPy stand-in over the emulator
import cupy
import h5py, numpy as np, h5gds
with h5py.File(sys.argv[1], "r") as f:
    dset = f["big_endian"]
    got = [b for b in h5gds.batches(dset, 40, seed=5, like="cupy")]
    assert all(isinstance(b, cupy.ndarray) for b in got), [type(b) for b in got]
    rows = np.concatenate([b.get() for b in got])
    assert rows.dtype == np.dtype("=f8") and sorted(rows[:, 0].tolist()) == list(range(103))
    assert rows[:, 0].tolist() == np.random.default_rng(5).permutation(103).astype(float).tolist()
    # A native dtype: gathered straight into CuPy arrays (through pinned memory: the file is read-only).
    for name in ("contiguous", "zstd"):
        native = [b for b in h5gds.batches(f[name], 16, seed=6, like="cupy")]
        assert all(isinstance(b, cupy.ndarray) and b.dtype == np.dtype("<f4") for b in native), name
        values = np.concatenate([b.get() for b in native])
        assert (values == values[:, :1]).all(), name
        assert values[:, 0].tolist() == np.random.default_rng(6).permutation(103).astype(float).tolist(), name
print("ok", len(got))
"""


def test_batches_into_cupy_on_the_emulator_are_device_arrays_in_native_byte_order(rows, tmp_path):
    from support import clean_env, emulator_library
    libs = tmp_path / "emulator"
    libs.mkdir()
    for name in ("libcuda.so.1", "libcufile.so.0"):
        (libs / name).symlink_to(emulator_library())
    here = os.path.dirname(os.path.abspath(__file__))
    run = subprocess.run([sys.executable, "-c", DEVICE_CHILD, str(rows)], cwd=here, capture_output=True, text=True,
                         timeout=120, env=clean_env({"LD_LIBRARY_PATH": str(libs), "H5GDS_EMU_DEVICES": "1",
                                                     "PYTHONPATH": here}))
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ok 3"
