"""Selections read and written through h5py, for tests/python/test_selections.py.

Run as `python selection_scenarios.py <command> <file> [arg]` under the driver chosen by the
environment. Every command checks its data against NumPy itself (and exits non-zero on a mismatch)
and prints one digest line per case, so the test can also compare gds with sec2 byte for byte.
"""

import hashlib
import sys
import threading

import h5py
import numpy as np

N = 1 << 20
ROWS, COLS = 512, 384


def x_values():
    return (np.arange(N, dtype=np.uint64) * 2654435761 % (1 << 32)).astype(np.uint32)


def m_values():
    return np.arange(ROWS * COLS, dtype=np.float64).reshape(ROWS, COLS) * 0.5 - 7


def c_values():
    return np.arange(N, dtype=np.int64) * 3 - 11


def make(path):
    """The input file, always written by sec2."""
    with h5py.File(path, "w", driver="sec2") as f:
        f["x"] = x_values()
        f["m"] = m_values()
        # Chunks larger than the 1 MiB chunk cache go to the driver as selections; small chunks
        # are cached (and copied by HDF5); gzip chunks are always read whole.
        f.create_dataset("big_chunks", data=c_values(), chunks=(300_000,))
        f.create_dataset("small_chunks", data=c_values(), chunks=(10_000,))
        f.create_dataset("gzip", data=c_values(), chunks=(65_536,), compression="gzip")
        f.create_dataset("cube", data=np.arange(40 * 30 * 20, dtype=np.int16).reshape(40, 30, 20))
    print("MADE")


def rng_points(n, size, sort, seed):
    idx = np.random.default_rng(seed).choice(size, n, replace=False)
    return np.sort(idx) if sort else idx


def low_level_read(dset, fspace, mspace, out):
    dset.id.read(mspace, fspace, out)
    return out


def points_read(dset, coords):
    """A point selection in the order given (h5py's fancy indexing insists on sorted indices)."""
    coords = np.asarray(coords, dtype=np.uint64)
    if coords.ndim == 1:
        coords = coords[:, None]
    fspace = dset.id.get_space()
    fspace.select_elements(coords)
    out = np.empty(len(coords), dtype=dset.dtype)
    mspace = h5py.h5s.create_simple((len(coords),))
    return low_level_read(dset, fspace, mspace, out)


def read_cases(f):
    """(name, result, expected) for every read selection."""
    x, m, c = x_values(), m_values(), c_values()
    cases = []
    for step in (2, 7, 64, 1024):
        cases.append((f"x[::{step}]", f["x"][::step], x[::step]))
    cases.append(("x[3:-5:7]", f["x"][3:-5:7], x[3:-5:7]))
    cases.append(("x[5:5]", f["x"][5:5], x[5:5]))
    cases.append(("x[:]", f["x"][:], x))
    cases.append(("m[:, 5] column", f["m"][:, 5], m[:, 5]))
    cases.append(("m[::4, :] every 4th row", f["m"][::4, :], m[::4, :]))
    cases.append(("m[100:140, 50:90] block", f["m"][100:140, 50:90], m[100:140, 50:90]))
    cases.append(("m[::3, 7::5]", f["m"][::3, 7::5], m[::3, 7::5]))
    cube = np.arange(40 * 30 * 20, dtype=np.int16).reshape(40, 30, 20)
    cases.append(("cube[::2, 3:20:4, ::3]", f["cube"][::2, 3:20:4, ::3], cube[::2, 3:20:4, ::3]))
    idx = rng_points(10_000, N, True, 1)
    cases.append(("x[sorted points]", f["x"][idx], x[idx]))
    idx = rng_points(10_000, N, False, 2)
    cases.append(("x[unsorted points]", points_read(f["x"], idx), x[idx]))
    pts = np.stack([rng_points(300, ROWS, False, 3), rng_points(300, COLS, False, 4)], axis=1)
    cases.append(("m[unsorted 2-D points]", points_read(f["m"], pts), m[pts[:, 0], pts[:, 1]]))
    for name in ("big_chunks", "small_chunks", "gzip"):
        cases.append((f"{name}[1000:700000:3]", f[name][1000:700000:3], c[1000:700000:3]))
        cases.append((f"{name}[12345:23456]", f[name][12345:23456], c[12345:23456]))
        idx = rng_points(3000, N, True, 5)
        cases.append((f"{name}[sorted points]", f[name][idx], c[idx]))
    # A union of two hyperslabs (an irregular selection) into every other element of memory.
    fspace = f["x"].id.get_space()
    fspace.select_hyperslab((10,), (100,), stride=(9,))
    fspace.select_hyperslab((50_000,), (300,), stride=(2,), op=h5py.h5s.SELECT_OR)
    out = np.zeros(800, dtype=np.uint32)
    mspace = h5py.h5s.create_simple((800,))
    mspace.select_hyperslab((0,), (400,), stride=(2,))
    got = low_level_read(f["x"], fspace, mspace, out)
    want = np.zeros(800, dtype=np.uint32)
    want[::2] = np.concatenate([x[10:10 + 9 * 100:9], x[50_000:50_000 + 600:2]])
    cases.append(("union of hyperslabs into strided memory", got, want))
    # A strided file selection into a strided memory selection.
    fspace = f["m"].id.get_space()
    fspace.select_hyperslab((1, 2), (60, 30), stride=(8, 12))
    out = np.zeros((120, 30), dtype=np.float64)
    mspace = h5py.h5s.create_simple((120, 30))
    mspace.select_hyperslab((1, 0), (60, 30), stride=(2, 1))
    got = low_level_read(f["m"], fspace, mspace, out)
    want = np.zeros((120, 30))
    want[1::2] = m[1:1 + 8 * 60:8, 2:2 + 12 * 30:12]
    cases.append(("strided file into strided memory", got, want))
    return cases


def digest(a):
    a = np.ascontiguousarray(a)
    return f"{a.dtype} {a.shape} {hashlib.sha256(a.tobytes()).hexdigest()}"


def check(cases):
    bad = [name for name, got, want in cases if got.dtype != want.dtype or not np.array_equal(got, want)]
    for name, got, _ in cases:
        print(f"{name}: {digest(got)}")
    if bad:
        sys.exit(f"wrong data: {bad}")


def read(path):
    with h5py.File(path, "r") as f:
        check(read_cases(f))
    print("READ OK")


def write(path):
    """Strided and point writes into a fresh file under the driver being tested, then checked."""
    x, m, c = x_values(), m_values(), c_values()
    want = {"x": np.zeros(N, np.uint32), "m": np.zeros((ROWS, COLS)), "big_chunks": np.zeros(N, np.int64),
            "small_chunks": np.zeros(N, np.int64), "gzip": np.zeros(N, np.int64)}
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=want["x"])
        f.create_dataset("m", data=want["m"])
        f.create_dataset("big_chunks", data=want["big_chunks"], chunks=(300_000,))
        f.create_dataset("small_chunks", data=want["small_chunks"], chunks=(10_000,))
        f.create_dataset("gzip", data=want["gzip"], chunks=(65_536,), compression="gzip")
        f.flush()
        f["x"][::3] = x[::3]
        want["x"][::3] = x[::3]
        f["x"][5::1000] = x[:N // 1000 + 1][: len(range(5, N, 1000))]
        want["x"][5::1000] = x[:N // 1000 + 1][: len(range(5, N, 1000))]
        f["m"][::4, 2:300:7] = m[::4, 2:300:7]
        want["m"][::4, 2:300:7] = m[::4, 2:300:7]
        f["m"][:, 9] = m[:, 1]
        want["m"][:, 9] = m[:, 1]
        # Point writes in the order given, with a repeated point (the last value wins).
        idx = rng_points(5000, N, False, 6)
        idx = np.concatenate([idx, idx[:3]])
        vals = np.arange(len(idx), dtype=np.uint32) + 17
        fspace = f["x"].id.get_space()
        fspace.select_elements(idx.astype(np.uint64)[:, None])
        f["x"].id.write(h5py.h5s.create_simple((len(idx),)), fspace, vals)
        want["x"][idx] = vals
        for name in ("big_chunks", "small_chunks", "gzip"):
            f[name][::3] = c[::3]
            want[name][::3] = c[::3]
            f[name][1001:2000:7] = -c[1001:2000:7]
            want[name][1001:2000:7] = -c[1001:2000:7]
    with h5py.File(path, "r", driver="sec2") as f:
        check([(name, f[name][...], want[name]) for name in want])
    print("WRITE OK")


def threads(path, count):
    """`count` threads read mixed selections of one open file, each checking every result."""
    x, m, c = x_values(), m_values(), c_values()
    errors = []
    with h5py.File(path, "r") as f:
        def work(seed):
            rng = np.random.default_rng(seed)
            try:
                for _ in range(6):
                    step = int(rng.integers(2, 50))
                    start = int(rng.integers(0, 1000))
                    assert np.array_equal(f["x"][start::step], x[start::step]), ("x", start, step)
                    col = int(rng.integers(0, COLS))
                    assert np.array_equal(f["m"][:, col], m[:, col]), ("m", col)
                    assert np.array_equal(f["m"][start % 4::4, :], m[start % 4::4, :]), ("rows", start)
                    idx = np.sort(rng.choice(N, 500, replace=False))
                    assert np.array_equal(f["x"][idx], x[idx]), "points"
                    assert np.array_equal(f["big_chunks"][start::3], c[start::3]), ("chunks", start)
                    assert np.array_equal(f["gzip"][start:start + 70_000], c[start:start + 70_000]), "gzip"
            except AssertionError as err:
                errors.append(repr(err))

        workers = [threading.Thread(target=work, args=(seed,)) for seed in range(count)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    if errors:
        sys.exit(f"wrong data in threads: {errors}")
    print(f"THREADS OK {count}")


if __name__ == "__main__":
    command, target = sys.argv[1], sys.argv[2]
    if command == "make":
        make(target)
    elif command == "read":
        read(target)
    elif command == "write":
        write(target)
    elif command == "threads":
        threads(target, int(sys.argv[3]))
    else:
        sys.exit(f"unknown command {command}")
