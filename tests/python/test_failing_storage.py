"""Failing storage under h5py: the shim of tests/shims/failing_io.c makes the N-th pread or pwrite
fail (EIO, ENOSPC), return short or fail with EINTR, and the same program runs under sec2 and
gds. Every read returns the right bytes or raises an error naming the file (the driver's parallel
split forced by a small task size, strided windows, a block of rows); transient failures (EINTR,
short transfers, both legal POSIX) never reach the caller; a write reported as done is there when
read back; after a failed write the file holds what sec2 leaves in the same scenario."""

import subprocess
from pathlib import Path

import pytest

import failing_storage_scenarios as scenarios
from support import ROOT, assert_ran, run_child

SCENARIOS = Path(__file__).with_name("failing_storage_scenarios.py")
#: The driver's parallel split forced: 768 x 1024 x 8 bytes in tasks of 256 KiB on 4 threads.
SPLIT = {"H5GDS_TASK_SIZE": "256K", "H5GDS_NTHREADS": "4"}
#: Raw data moves in calls of at least 64 KiB; HDF5's metadata in smaller ones.
RAW = "65536"


@pytest.fixture(scope="module")
def shim(tmp_path_factory):
    out = tmp_path_factory.mktemp("shim") / "failing_io.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(out), str(ROOT / "tests/shims/failing_io.c"), "-ldl"],
                   check=True)
    return out


def run(driver, mode, path, env=None):
    return run_child(SCENARIOS, [mode, path], driver, extra_env=env, timeout=300, log=None)


def lines(proc):
    """{step: (status, rest)} of a scenario's output."""
    assert_ran(proc, "scenario")
    out = {}
    for line in proc.stdout.splitlines():
        name, status, rest = (line.split(" ", 2) + [""])[:3]
        out[name] = (status, rest)
    return out


def faulty(shim, tmp_path, what, fault):
    """The environment of a child whose calls on files under `tmp_path` fail as `fault` says; the
    log records each call made to fail."""
    log = tmp_path / f"faults-{what}.log"
    env = {"LD_PRELOAD": str(shim), "H5GDS_FAULT_PATH": str(tmp_path), "H5GDS_FAULT_LOG": str(log), **SPLIT}
    env.update({f"H5GDS_FAULT_{k}": v for k, v in fault.items()})
    return env, log


def faults_made(log):
    return len(log.read_text().splitlines()) if log.exists() else 0


READ_FAULTS = {
    "EIO once, inside the split": ({"OP": "pread", "KIND": "eio", "AT": "3", "MIN_BYTES": RAW}, False),
    "EIO from then on": ({"OP": "pread", "KIND": "eio", "AT": "3", "TIMES": "all", "MIN_BYTES": RAW}, False),
    "every read short": ({"OP": "pread", "KIND": "short", "TIMES": "all"}, True),
    "EINTR, three calls": ({"OP": "pread", "KIND": "eintr", "TIMES": "3"}, True),
}


@pytest.mark.parametrize("fault", list(READ_FAULTS))
def test_a_read_on_failing_storage_returns_the_right_bytes_or_names_the_file(tmp_path, shim, fault):
    path = tmp_path / "data.h5"
    scenarios.make(path)
    expected = scenarios.expected()
    spec, transient = READ_FAULTS[fault]
    outcomes = {}
    for driver in ("sec2", "gds"):
        env, log = faulty(shim, tmp_path, driver, spec)
        outcomes[driver] = lines(run(driver, "read", path, env))
        assert faults_made(log) > 0, f"{driver}: the shim made no call fail"
        for step, (status, rest) in outcomes[driver].items():
            if status == "ok":
                assert rest == expected[step], f"{driver}, {fault}: {step} returned wrong bytes"
            else:
                assert not transient, f"{driver}, {fault}: {step} failed on a transient fault: {rest}"
                if driver == "gds":
                    assert str(path) in rest, f"{fault}: {step}'s error does not name the file: {rest}"
    if transient:
        assert all(s == "ok" for s, _ in outcomes["gds"].values()), outcomes
    else:
        # The fault reached a read: the driver did not swallow it.
        assert any(s == "ERROR" for s, _ in outcomes["gds"].values()), outcomes


WRITE_FAULTS = {
    "EIO once, on the raw data": {"OP": "pwrite", "KIND": "eio", "MIN_BYTES": RAW},
    "EIO on every raw data write": {"OP": "pwrite", "KIND": "eio", "TIMES": "all", "MIN_BYTES": RAW},
    "ENOSPC from the first write": {"OP": "pwrite", "KIND": "enospc", "TIMES": "all"},
    "every write short": {"OP": "pwrite", "KIND": "short", "TIMES": "all"},
    "EINTR, three calls": {"OP": "pwrite", "KIND": "eintr", "TIMES": "3"},
    "fsync fails": {"OP": "fsync", "KIND": "eio", "TIMES": "all"},
}


@pytest.mark.parametrize("fault", list(WRITE_FAULTS))
def test_a_write_on_failing_storage_is_there_or_leaves_what_sec2_leaves(tmp_path, shim, fault):
    spec = WRITE_FAULTS[fault]
    seen, made = {}, {}
    for driver in ("sec2", "gds"):
        path = tmp_path / driver / "new.h5"
        path.parent.mkdir()
        env, log = faulty(shim, tmp_path / driver, driver, spec)
        (status, rest), = lines(run(driver, "write", path, env)).values()
        made[driver] = faults_made(log)
        after = scenarios.state(path)
        if status == "ok":
            assert after == ["y as written", "x as written"], f"{driver}, {fault}: a write reported done is not there"
        elif driver == "gds":
            assert str(path) in rest, f"{fault}: the error does not name the file: {rest}"
        seen[driver] = (status, after)
    if spec["OP"] == "fsync":
        # Neither driver calls fsync (sec2 does not; h5gds's flush has nothing to flush).
        assert made == {"sec2": 0, "gds": 0}, made
    else:
        assert made["gds"] > 0 and made["sec2"] > 0, made
    assert seen["gds"] == seen["sec2"], f"{fault}: gds {seen['gds']}, sec2 {seen['sec2']}"
