"""The package on failing storage (the shim of tests/shims/failing_io.c preloaded into a child
interpreter): ``h5gds.read`` (a read-only file read with no HDF5 call, contiguous and compressed,
split over the driver's threads) returns the right bytes or raises an error naming the file, and
transient failures (EINTR, short reads) never reach the caller; ``h5gds.to_file`` replacing a
file, killed (SIGKILL) before any of its writes or its rename, leaves the old file or the complete
new one, and a failed write raises naming the file and leaves the old one, nothing beside it."""

import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
RAW = "65536"  # raw data moves in calls of at least 64 KiB; HDF5's metadata in smaller ones


@pytest.fixture(scope="module")
def shim(tmp_path_factory):
    out = tmp_path_factory.mktemp("shim") / "failing_io.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(out), str(ROOT / "tests/shims/failing_io.c"), "-ldl"],
                   check=True)
    return out


def child(shim, directory, program, args, fault):
    """Runs `program` (Python source) with `args` in a child whose calls on files in `directory`
    fail as `fault` says; returns the completed process and how many calls the shim failed."""
    log = directory / "faults.log"
    if log.exists():
        log.unlink()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HDF5_", "H5GDS_"))}
    env.update({"LD_PRELOAD": str(shim), "H5GDS_FAULT_PATH": str(directory), "H5GDS_FAULT_LOG": str(log),
                "H5GDS_TASK_SIZE": "256K", "H5GDS_NTHREADS": "4"})
    env.update({f"H5GDS_FAULT_{k}": v for k, v in fault.items()})
    proc = subprocess.run([sys.executable, "-c", program, *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=300)
    made = len(log.read_text().splitlines()) if log.exists() else 0
    return proc, made


def old_array():
    return np.arange(300 * 200, dtype="<i8").reshape(300, 200)


def new_array():
    return -np.arange(400 * 300, dtype="<i8").reshape(400, 300) - 1


READER = """
import sys, h5py, h5gds, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    for name in ("contiguous", "gzip", "zstd_like_lz4"):
        if name not in f:
            continue
        try:
            got = h5gds.read(f[name])
            print(name, "ok", int(np.asarray(got, dtype="<i8").sum()), got.shape)
        except Exception as exc:
            print(name, "ERROR", type(exc).__name__, " ".join(str(exc).split()))
"""


def make_read_file(path):
    data = np.arange(768 * 1024, dtype="<i8").reshape(768, 1024) * 3
    with h5py.File(path, "w") as f:
        f.create_dataset("contiguous", data=data)
        f.create_dataset("gzip", data=data, chunks=(64, 1024), compression="gzip", shuffle=True)
    return {name: f"ok {int(data.sum())} {data.shape}" for name in ("contiguous", "gzip")}


READ_FAULTS = {
    "EIO once, inside the split": ({"OP": "pread", "KIND": "eio", "AT": "2", "MIN_BYTES": RAW}, False),
    "EIO from then on": ({"OP": "pread", "KIND": "eio", "AT": "2", "TIMES": "all", "MIN_BYTES": RAW}, False),
    "EIO on the chunks": ({"OP": "pread", "KIND": "eio", "AT": "1", "TIMES": "all", "MIN_BYTES": "4096"}, False),
    "every read short": ({"OP": "pread", "KIND": "short", "TIMES": "all"}, True),
    "EINTR, five calls": ({"OP": "pread", "KIND": "eintr", "TIMES": "5"}, True),
}


@pytest.mark.parametrize("fault", list(READ_FAULTS))
def test_h5gds_read_on_failing_storage_returns_the_right_bytes_or_names_the_file(tmp_path, shim, fault):
    path = tmp_path / "data.h5"
    expected = make_read_file(path)
    spec, transient = READ_FAULTS[fault]
    proc, made = child(shim, tmp_path, READER, [path], spec)
    assert proc.returncode == 0, proc.stderr
    assert made > 0, f"{fault}: the shim made no call fail"
    outcomes = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert set(outcomes) == set(expected), proc.stdout
    for name, outcome in outcomes.items():
        if outcome.startswith("ok"):
            assert outcome == expected[name], f"{fault}: {name} returned wrong bytes: {outcome}"
        else:
            assert not transient, f"{fault}: {name} failed on a transient fault: {outcome}"
            assert str(path) in outcome, f"{fault}: {name}'s error does not name the file: {outcome}"
    if not transient:
        assert any(o.startswith("ERROR") for o in outcomes.values()), f"{fault}: no read saw the fault"


WRITER = """
import sys, h5gds, numpy as np
array = -np.arange(400 * 300, dtype="<i8").reshape(400, 300) - 1
kwargs = {"chunks": (50, 300), "compression": "gzip"} if sys.argv[2] == "gzip" else {}
try:
    h5gds.to_file(array, sys.argv[1], "x", **kwargs)
    print("WROTE")
except Exception as exc:
    print("ERROR", type(exc).__name__, " ".join(str(exc).split()))
"""


def holds(path):
    """'old' or 'new': which array the file at `path` holds (it must hold one of them whole)."""
    with h5py.File(path, "r") as f:
        got = f["x"][...]
    if np.array_equal(got, old_array()):
        return "old"
    assert np.array_equal(got, new_array()), "the file holds neither the old array nor the new one"
    return "new"


def leftovers(directory, path):
    return sorted(p.name for p in directory.iterdir() if p != path and p.name != "faults.log")


@pytest.mark.parametrize("layout", ["contiguous", "gzip"])
def test_to_file_killed_at_any_write_leaves_the_old_file_or_the_new_one(tmp_path, shim, layout):
    path = tmp_path / "replaced.h5"
    h5py.File(path, "w").close()

    def old():
        with h5py.File(path, "w") as f:
            f.create_dataset("x", data=old_array())

    old()
    proc, writes = child(shim, tmp_path, WRITER, [path, layout], {"OP": "pwrite", "KIND": "count", "TIMES": "all"})
    assert proc.stdout.strip() == "WROTE", proc.stdout + proc.stderr
    assert writes > 2 and holds(path) == "new"
    # Killed before writes spread over the whole (the first, the last and 4 between; the Rust
    # test of array-io's to_file kills before every one), and before the rename.
    points = sorted({1 + (writes - 1) * k // 5 for k in range(6)})
    kills = [{"OP": "pwrite", "AT": str(n)} for n in points] + [{"OP": "rename"}]
    for kill in kills:
        old()
        proc, made = child(shim, tmp_path, WRITER, [path, layout], {"KIND": "kill", **kill})
        assert proc.returncode == -9 and made == 1, (kill, proc.stdout, proc.stderr)
        assert holds(path) == "old", kill
        # At most the killed writer's hidden, partly written file is left beside it.
        for name in leftovers(tmp_path, path):
            assert name.startswith(".replaced.h5.") and name.endswith(".h5gds-tmp"), name
            (tmp_path / name).unlink()


@pytest.mark.parametrize("fault", [
    {"KIND": "enospc", "TIMES": "all", "MIN_BYTES": RAW},
    {"KIND": "eio", "AT": "1", "MIN_BYTES": RAW},
])
def test_a_failed_to_file_names_the_file_and_keeps_the_old_one(tmp_path, shim, fault):
    path = tmp_path / "kept.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=old_array())
    proc, made = child(shim, tmp_path, WRITER, [path, "contiguous"], {"OP": "pwrite", **fault})
    assert made > 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("ERROR"), proc.stdout + proc.stderr
    assert "kept.h5" in proc.stdout, f"the error does not name the file: {proc.stdout}"
    assert holds(path) == "old"
    assert leftovers(tmp_path, path) == []


@pytest.mark.parametrize("kind,times", [("short", "all"), ("eintr", "3")])
def test_transient_write_failures_never_reach_to_file(tmp_path, shim, kind, times):
    path = tmp_path / "written.h5"
    proc, made = child(shim, tmp_path, WRITER, [path, "gzip"], {"OP": "pwrite", "KIND": kind, "TIMES": times})
    assert made > 0 and proc.stdout.strip() == "WROTE", proc.stdout + proc.stderr
    assert holds(path) == "new"
