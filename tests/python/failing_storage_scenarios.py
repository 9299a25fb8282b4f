"""Programs run under sec2 and under gds (HDF5_DRIVER) with the failing-storage shim preloaded
(tests/shims/failing_io.c): each prints one line per step, `NAME ok DIGEST` or `NAME ERROR
CLASS: MESSAGE`, so the test can compare outcomes without sharing a process with the faults. The
test itself imports the rest (the data, the file to read, what a file holds after a write)."""

import hashlib
import sys

import h5py
import numpy as np

#: Large enough to be split over the driver's threads (the test sets a small task size).
BIG = (768, 1024)
SMALL = (1000,)


def big():
    return np.arange(np.prod(BIG), dtype="<i8").reshape(BIG) * 7 + 3


def small():
    return np.arange(SMALL[0], dtype="<i4") - 500


def digest(array):
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:16]


def step(name, work):
    try:
        print(name, "ok", digest(work()), flush=True)
    except Exception as exc:  # the outcome is the output
        print(name, "ERROR", f"{type(exc).__name__}: {' '.join(str(exc).split())}", flush=True)


def make(path):
    """The file the reads read (written with no fault)."""
    with h5py.File(path, "w") as f:
        f.create_dataset("y", data=small())
        f.create_dataset("x", data=big())


def read(path):
    with h5py.File(path, "r") as f:
        step("whole", lambda: f["x"][...])
        step("strided", lambda: f["x"][1::3, ::2])
        step("rows", lambda: f["x"][100:400])


def write(path):
    def work():
        with h5py.File(path, "w") as f:
            f.create_dataset("y", data=small())
            f.create_dataset("x", data=big())
        return np.zeros(1)

    step("write", work)


def expected():
    """The digests of the reads and of the write, with no fault."""
    x = big()
    return {"whole": digest(x), "strided": digest(x[1::3, ::2]), "rows": digest(x[100:400]),
            "write": digest(np.zeros(1))}


def state(path):
    """What a file holds after a write: whether it opens, and each dataset as written or not."""
    try:
        with h5py.File(path, "r") as f:
            out = []
            for name, data in (("y", small()), ("x", big())):
                if name not in f:
                    out.append(f"{name} missing")
                    continue
                try:
                    got = f[name][...]
                except Exception as exc:
                    out.append(f"{name} unreadable {type(exc).__name__}")
                    continue
                out.append(f"{name} as written" if np.array_equal(got, data) else f"{name} other bytes")
            return out
    except Exception as exc:
        return [f"open ERROR {type(exc).__name__}"]


if __name__ == "__main__":
    {"read": read, "write": write}[sys.argv[1]](sys.argv[2])
