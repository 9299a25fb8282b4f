"""Where users can tell gds from sec2: the exception class and errno h5py raises for each failed
open, refusals that must leave the file system exactly as they found it, and settings that must
fail rather than be ignored. Each program runs in a child interpreter under both drivers."""

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from support import ROOT, assert_ran, emulator_library, run_child, without_gpu

SCENARIOS = Path(__file__).with_name("sec2_parity_scenarios.py")


def run(driver, *args, env=None, timeout=300):
    """Runs a scenario under `driver` ('sec2' or 'gds'); returns the completed process."""
    return run_child(SCENARIOS, args, driver, extra_env=env, timeout=timeout, log=None)


def ok(proc):
    return assert_ran(proc, "scenario").stdout


EXPECTED = {
    "missing file, r": "FileNotFoundError errno=2",
    "a dangling symbolic link, w": "OPENED",
    "a symbolic link into a missing directory, w": "FileNotFoundError errno=2",
    "a FIFO, w": "OSError errno=29",
    "/dev/null, w": "RuntimeError errno=None",
    "the dangling link's target created": "True",
    "missing directory, w": "FileNotFoundError errno=2",
    "existing file, x": "FileExistsError errno=17",
    "existing file, w-": "FileExistsError errno=17",
    "a directory, r": "IsADirectoryError errno=21",
    "a directory, w": "IsADirectoryError errno=21",
    "locked file, r": "BlockingIOError errno=11",
    "locked file, r+": "BlockingIOError errno=11",
}


def test_failed_opens_raise_what_sec2_raises(tmp_path):
    seen, printed = {}, {}
    for driver in ("sec2", "gds"):
        directory = tmp_path / driver
        directory.mkdir()
        proc = run(driver, "errors", directory)
        seen[driver] = dict(line.split(": ", 1) for line in ok(proc).splitlines())
        printed[driver] = proc.stderr
    assert seen["sec2"] == EXPECTED, "sec2 itself changed; update the expectations"
    assert seen["gds"] == seen["sec2"]
    # Programs catch these as control flow: the driver prints no more than sec2 does (nothing).
    assert printed["sec2"] == "", printed["sec2"]
    assert printed["gds"] == printed["sec2"]


def test_a_reader_sees_another_processs_writes_as_under_sec2(tmp_path):
    # File locking off, so that a writer may open the file the reader has open: the reader must
    # not keep the old bytes.
    seen = {}
    for driver in ("sec2", "gds"):
        directory = tmp_path / driver
        directory.mkdir()
        seen[driver] = ok(run(driver, "other_writer", directory, env={"HDF5_USE_FILE_LOCKING": "FALSE"}))
    assert seen["sec2"] == "before: [0, 0, 0, 0, 0]\nafter, opened anew: [0, 1, 2, 3, 4] 7\n", seen["sec2"]
    assert seen["gds"] == seen["sec2"]


def test_a_file_rewritten_in_place_reads_its_new_bytes_as_under_sec2(tmp_path):
    # Another program rewrites the file while this process holds it open and locked (cp, rsync
    # --inplace: same inode, no HDF5 lock): small reads must not come from bytes read before.
    seen = {}
    for driver in ("sec2", "gds"):
        directory = tmp_path / driver
        directory.mkdir()
        seen[driver] = ok(run(driver, "rewritten_in_place", directory))
    assert seen["sec2"] == ("before: [1.0, 1.0] [1.0, 1.0]\n"
                            "after, same File: [2.0] [2.0] [2.0, 2.0, 2.0] [2.0]\n"
                            "again: [2.0, 2.0] [2.0, 2.0]\n"
                            "after, second File: [3.0] [3.0] [3.0, 3.0, 3.0] [3.0]\n"), seen["sec2"]
    assert seen["gds"] == seen["sec2"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give up privileges in a child")
def test_permission_denied_raises_permission_error(tmp_path):
    seen = {}
    for driver in ("sec2", "gds"):
        directory = tmp_path / driver
        directory.mkdir()
        seen[driver] = ok(run(driver, "permission", directory)).strip()
    assert seen["sec2"] == "unreadable file, r: PermissionError errno=13"
    assert seen["gds"] == seen["sec2"]


@pytest.fixture(scope="module")
def refuse_o_direct(tmp_path_factory):
    """The LD_PRELOAD shim (tests/shims) that makes open() refuse O_DIRECT, as some file systems do."""
    out = tmp_path_factory.mktemp("shim") / "refuse_o_direct.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(out), str(ROOT / "tests/shims/refuse_o_direct.c"),
                    "-ldl"], check=True)
    return out


@pytest.fixture(scope="module")
def emulator_dir(tmp_path_factory):
    """A directory that makes a child load the CUDA/cuFile emulator as libcuda and libcufile."""
    directory = tmp_path_factory.mktemp("emulator")
    for name in ("libcuda.so.1", "libcuda.so", "libcufile.so.0", "libcufile.so"):
        (directory / name).symlink_to(emulator_library())
    return directory


def refusals(shim, emulator, no_gpu):
    """Each way the driver refuses an open, as environment settings."""
    return {
        "direct_io=on, O_DIRECT refused": {"H5GDS_DIRECT_IO": "on", "LD_PRELOAD": str(shim)},
        "compat_mode=off, no CUDA": {"H5GDS_COMPAT_MODE": "off", **no_gpu},
        "compat_mode=off, cuFile refuses the file": {
            "H5GDS_COMPAT_MODE": "off", "LD_PRELOAD": str(shim), "LD_LIBRARY_PATH": str(emulator)},
        "invalid setting": {"H5GDS_NTHREADS": "0"},
        "setting not UTF-8": {"H5GDS_TASK_SIZE": os.fsdecode(b"4M\xff")},
    }


def snapshot(directory):
    """Every file below `directory` with its size and digest."""
    return {p.relative_to(directory): (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("mode", ["w", "a", "x", "r+"])
@pytest.mark.parametrize("refusal", ["direct_io=on, O_DIRECT refused", "compat_mode=off, no CUDA",
                                     "compat_mode=off, cuFile refuses the file", "invalid setting",
                                     "setting not UTF-8"])
def test_a_refused_open_leaves_the_file_system_as_it_found_it(tmp_path, refuse_o_direct, emulator_dir, refusal,
                                                              mode):
    env = refusals(refuse_o_direct, emulator_dir, without_gpu(tmp_path))[refusal]
    files = tmp_path / "files"
    files.mkdir()
    existing = files / "existing.h5"
    ok(run("sec2", "open", existing, "w"))  # an HDF5 file with its superblock
    existing.write_bytes(existing.read_bytes() + b"user data that must survive" * 100)
    before = snapshot(files)
    for target in (existing, files / "new.h5"):
        out = ok(run("gds", "open", target, mode, env=env))
        assert not out.startswith("OPENED"), f"{refusal}, mode {mode}, {target.name}: opened"
        assert snapshot(files) == before, f"{refusal}, mode {mode}, {target.name}: {out}"


def test_settings_that_are_not_utf8_fail_the_open(tmp_path):
    out = ok(run("gds", "open", tmp_path / "f.h5", "w", env={"H5GDS_NTHREADS": os.fsdecode(b"\xff")}))
    assert "H5GDS_NTHREADS" in out and "\\xff" in out and "1 to 256" in out, out
    assert not (tmp_path / "f.h5").exists()


def test_an_enormous_config_string_gives_a_bounded_message(tmp_path):
    proc = run("gds", "open", tmp_path / "f.h5", "w", env={"HDF5_DRIVER_CONFIG": "nthreads=" + "7" * 100_000})
    out = ok(proc)
    assert "nthreads" in out and "100000 bytes in all" in out, out[:500]
    assert len(out) < 2000, len(out)
    assert len(proc.stderr) < 5000, len(proc.stderr)
