"""Files rewritten in place by another program (``cp``, ``shutil.copy``, ``rsync --inplace``: the
same inode, no HDF5 lock) while this process holds them open with ``driver="gds"``: every read
afterwards returns the file's new bytes, as sec2's do, through the File kept open, a second File on
the same path, ``h5gds.read`` and h5py's own reads, small datasets and large."""

import os
import shutil

import h5py
import numpy as np
import pytest

import h5gds

NAMES = ("small", "large", "chunked", "gzip")

#: Each kind of read, of a dataset opened anew (h5py's ``f[name]``).
READS = {
    "small": lambda f: f["small"][...],
    "small[3:5]": lambda f: f["small"][3:5],
    "large[0]": lambda f: f["large"][0],
    "large[0, :3]": lambda f: f["large"][0, :3],
    "large[-1]": lambda f: f["large"][-1],
    "chunked[5]": lambda f: f["chunked"][5],
    "gzip[5]": lambda f: f["gzip"][5],
    "h5gds.read small": lambda f: h5gds.read(f["small"]),
    "h5gds.read large[0]": lambda f: h5gds.read(f["large"], sel=0),
    "h5gds.read large rows": lambda f: h5gds.read(f["large"], sel=np.array([0, 999])),
    "h5gds.read chunked[5]": lambda f: h5gds.read(f["chunked"], sel=5),
    "h5gds.read gzip[5]": lambda f: h5gds.read(f["gzip"], sel=5),
    "h5gds.read gzip rows": lambda f: h5gds.read(f["gzip"], sel=np.array([1, 40])),
}


@pytest.fixture
def versions(tmp_path):
    """The file (1.0s) and two versions of it with other values at the same addresses."""
    path = tmp_path / "data.h5"
    with h5py.File(path, "w", driver="gds") as f:
        f.create_dataset("small", data=np.full(50, 1.0, "f4"))  # 200 bytes
        f.create_dataset("large", data=np.full((1000, 1000), 1.0, "f4"))  # 4 MB
        f.create_dataset("chunked", data=np.full((64, 64), 1.0, "f4"), chunks=(8, 64))
        f.create_dataset("gzip", data=np.full((64, 64), 1.0, "f4"), chunks=(8, 64), compression="gzip")
    others = {}
    for value in (2.0, 3.0):
        others[value] = tmp_path / f"{value}.h5"
        shutil.copyfile(path, others[value])
        with h5py.File(others[value], "r+") as f:
            for name in NAMES:
                f[name][...] = value
    return path, others


def rewrite(path, source):
    inode = os.stat(path).st_ino
    shutil.copyfile(source, path)
    assert os.stat(path).st_ino == inode, "an in-place rewrite keeps the inode"


def assert_each_read_is_fresh(f, path, others):
    """For each kind of read: small reads of every dataset first (whatever a driver might keep
    from them), then the file rewritten, then the read, which must see the new values."""
    stale = {}
    for i, (what, read) in enumerate(READS.items()):
        for name in NAMES:
            f[name][:2] if f[name].ndim == 1 else f[name][0, :2]
        value = (2.0, 3.0)[i % 2]
        rewrite(path, others[value])
        got = sorted(set(np.asarray(read(f)).ravel().tolist()))
        if got != [value]:
            stale[what] = (got, value)
    assert not stale, f"reads returned bytes the file no longer holds (got, expected): {stale}"


def test_reads_through_the_file_kept_open_return_the_new_bytes(versions):
    path, others = versions
    with h5py.File(path, "r", driver="gds") as f:
        assert_each_read_is_fresh(f, path, others)


def test_reads_through_a_second_file_on_the_same_path_return_the_new_bytes(versions):
    path, others = versions
    with h5py.File(path, "r", driver="gds") as f:
        f["small"][...]
        with h5py.File(path, "r", driver="gds") as second:
            assert_each_read_is_fresh(second, path, others)


def test_reads_after_this_process_writes_the_bytes_without_hdf5(versions):
    # The same process writes the file through plain POSIX I/O (no HDF5, so no lock and no
    # driver call that could empty a cache) between two reads of a dataset opened anew.
    path, _ = versions
    with h5py.File(path, "r", driver="gds") as f:
        assert f["small"][...].tolist() == [1.0] * 50
        offset = f["small"].id.get_offset()
        with open(path, "r+b") as raw:
            raw.seek(offset + 4 * 10)
            raw.write(np.float32(7.0).tobytes())
        got = f["small"][...]
        assert got[10] == 7.0 and got[9] == 1.0, got[8:12]
