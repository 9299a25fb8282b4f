"""Programs the h5py tests run in child interpreters, one per driver setting.

Usage: python h5py_scenarios.py COMMAND FILE

  write    writes every kind of object the tests cover (the same program runs under sec2 and gds)
  dump     prints one canonical line per object: path, kind, dtype, shape, a digest of the data
           and of the attributes, so files can be compared across drivers and HDF5 versions
  big      writes a sparse dataset that makes the file larger than 4 GiB and reads it back
  past-eof reads allocated but never written storage (EOA beyond EOF) and expects zeros
  many     writes and scans thousands of small datasets
"""

import hashlib
import sys

import h5py
import numpy as np


def write(path):
    rng = np.random.default_rng(1234)
    with h5py.File(path, "w") as f:
        f["contiguous"] = np.arange(1_500_000, dtype="f4") * 0.25
        f.create_dataset("chunked", data=rng.integers(-30000, 30000, size=(1000, 777), dtype="i2"), chunks=(128, 100))
        f.create_dataset("gzip", data=np.sin(np.arange(200_000, dtype="f8")), chunks=(10_000,), compression="gzip",
                         compression_opts=4, shuffle=True)
        resizable = f.create_dataset("resizable", shape=(0, 16), maxshape=(None, 16), dtype="i8", chunks=(64, 16))
        for step in range(5):
            start = resizable.shape[0]
            resizable.resize((start + 100 + step, 16))
            resizable[start:] = np.arange((100 + step) * 16, dtype="i8").reshape(-1, 16) + step * 1_000_000
        space = h5py.h5s.create_simple((12,))
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        compact = h5py.h5d.create(f.id, b"compact", h5py.h5t.NATIVE_INT32, space, dcpl=dcpl)
        compact.write(h5py.h5s.ALL, h5py.h5s.ALL, np.arange(12, dtype="i4") ** 2)
        f.attrs["title"] = "h5gds test file"
        f.attrs["vector"] = np.linspace(0, 1, 7)
        group = f.create_group("nested/deeper/still")
        group.attrs["count"] = np.int64(3)
        group["strings"] = np.array([b"alpha", b"beta", b"gamma"])
        group.create_dataset("vlen", data=["one", "two", "three"], dtype=h5py.string_dtype())
        f.create_dataset("empty", shape=(0,), dtype="f4")
        f.create_dataset("scalar", data=np.float64(2.5))
        f["matrix"] = np.arange(512 * 512, dtype="f4").reshape(512, 512)
    print("WRITE OK")


def digest(array):
    data = np.ascontiguousarray(array)
    if data.dtype.kind == "O":
        return hashlib.sha256(repr(data.tolist()).encode()).hexdigest()[:16]
    return hashlib.sha256(data.tobytes()).hexdigest()[:16]


def attrs_digest(obj):
    parts = []
    for name in sorted(obj.attrs):
        value = obj.attrs[name]
        parts.append(f"{name}={digest(np.asarray(value))}")
    return ";".join(parts)


def dump(path):
    lines = []
    with h5py.File(path, "r") as f:
        lines.append(f"/ group attrs[{attrs_digest(f)}]")

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                data = obj[()]
                lines.append(f"/{name} dataset {obj.dtype} {obj.shape} {digest(data)} attrs[{attrs_digest(obj)}]")
            else:
                lines.append(f"/{name} group attrs[{attrs_digest(obj)}]")

        f.visititems(visit)
        if "matrix" not in f:
            print("\n".join(sorted(lines)))
            return
        # Strided selections: a column and every 4th row of the matrix.
        m = f["matrix"]
        expected = np.arange(512 * 512, dtype="f4").reshape(512, 512)
        assert np.array_equal(m[:, 5], expected[:, 5]), "column read differs"
        assert np.array_equal(m[::4, :], expected[::4, :]), "every-4th-row read differs"
        assert np.array_equal(m[3:300:7, 11:400:13], expected[3:300:7, 11:400:13]), "2-D strided read differs"
    print("\n".join(sorted(lines)))


def big(path):
    # 1.5e9 float32 = 6 GB of contiguous storage; only both ends are written, so the file is sparse.
    n = 1_500_000_000
    tail = np.arange(1000, dtype="f4") + 7
    with h5py.File(path, "w") as f:
        d = f.create_dataset("huge", shape=(n,), dtype="f4")
        d[:1000] = tail
        d[n - 1000:] = tail
    with h5py.File(path, "r") as f:
        d = f["huge"]
        assert np.array_equal(d[n - 1000:], tail), "data beyond 4 GiB differs"
        assert np.array_equal(d[:1000], tail)
        assert not d[700_000_000:700_001_000].any(), "hole did not read as zeros"
    import os
    size = os.path.getsize(path)
    assert size > 4 << 30, f"file is only {size} bytes"
    print(f"BIG OK {size}")


def past_eof(path):
    with h5py.File(path, "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
        dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
        space = h5py.h5s.create_simple((2_000_000,))
        h5py.h5d.create(f.id, b"unwritten", h5py.h5t.NATIVE_FLOAT, space, dcpl=dcpl)
        # Storage is allocated (EOA moved) but nothing was written: the bytes lie past EOF.
        data = f["unwritten"][()]
        assert data.shape == (2_000_000,) and not data.any(), "reading past EOF must give zeros"
        data = f["unwritten"][1_999_000:]
        assert not data.any()
    print("PAST-EOF OK")


def many(path):
    count = 3000
    with h5py.File(path, "w") as f:
        for i in range(count):
            g = f.require_group(f"g{i % 50}")
            g.create_dataset(f"d{i}", data=np.full(4, i, dtype="i4"))
    with h5py.File(path, "r") as f:
        seen = 0
        for gname in f:
            for dname in f[gname]:
                i = int(dname[1:])
                assert np.array_equal(f[gname][dname][()], np.full(4, i, dtype="i4"))
                seen += 1
        assert seen == count, seen
    print(f"MANY OK {count}")


def fork(path):
    """The I/O pool is started in the parent, then used by forked children (which must build their
    own, since the parent's threads do not exist in them) while the parent keeps using its own."""
    import os
    expected = np.arange(8 << 20, dtype="f4")  # 32 MiB: split across the pool
    with h5py.File(path, "w") as f:
        f["data"] = expected
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["data"][()], expected)
    children = []
    for _ in range(3):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                with h5py.File(path, "r") as f:
                    code = 0 if np.array_equal(f["data"][()], expected) else 3
            finally:
                os._exit(code)
        children.append(pid)
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["data"][()], expected), "parent read after fork differs"
    for pid in children:
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child {pid} status {status}"
    print("FORK OK")


def exit_busy(path):
    """Leaves a file open with the pool warm and exits; HDF5 closes the file and unloads the
    plugin at exit, which must not crash."""
    f = h5py.File(path, "w")
    f["data"] = np.ones(16 << 20, dtype="f4")  # 64 MiB through the pool
    f["data"][()]
    globals()["still_open"] = f
    print("EXIT OK")


if __name__ == "__main__":
    command, target = sys.argv[1], sys.argv[2]
    commands = {"write": write, "dump": dump, "big": big, "past-eof": past_eof, "many": many, "fork": fork,
                "exit": exit_busy}
    commands[command](target)
