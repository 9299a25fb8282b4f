"""h5py programs run through the gds driver (HDF5_PLUGIN_PATH + HDF5_DRIVER=gds) in child
interpreters, compared with the same programs under sec2; h5py 3.16 bundles HDF5 2.0, and a
second environment's h5py bundles HDF5 1.14."""

import os
import subprocess
from pathlib import Path

import pytest

from support import NEW_PYTHON, OLD_PYTHON, assert_ran, driver_env, run_child, site_packages, without_gpu

SCENARIOS = Path(__file__).with_name("h5py_scenarios.py")


def run(command, path, driver, python=NEW_PYTHON, extra_env=None, timeout=600):
    """Runs one scenario in a child interpreter; returns (stdout, stderr) or fails the test."""
    proc = run_child(SCENARIOS, [command, path], driver, python, extra_env, timeout)
    assert_ran(proc, f"{command} under {driver}", path, driver)
    return proc.stdout, proc.stderr


def hdf5_version(python):
    out = subprocess.run([str(python), "-c", "import h5py; print(h5py.version.hdf5_version)"], capture_output=True,
                         text=True, check=True)
    return out.stdout.strip()


def test_h5py_bundles_hdf5_2():
    assert hdf5_version(NEW_PYTHON).startswith("2."), hdf5_version(NEW_PYTHON)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """The same program's files, written under each driver."""
    tmp = tmp_path_factory.mktemp("written")
    files = {}
    for driver in ("sec2", "gds"):
        files[driver] = tmp / f"{driver}.h5"
        out, _ = run("write", files[driver], driver)
        assert "WRITE OK" in out
    return files


@pytest.mark.parametrize("writer", ["sec2", "gds"])
def test_each_driver_reads_each_file_identically(written, writer):
    dumps = {reader: run("dump", written[writer], reader)[0] for reader in ("sec2", "gds")}
    assert dumps["sec2"] == dumps["gds"]
    assert "/gzip dataset float64 (200000,)" in dumps["gds"]
    assert "/resizable dataset int64 (510, 16)" in dumps["gds"]
    assert "/compact dataset int32 (12,)" in dumps["gds"]


def test_files_from_both_drivers_hold_the_same_content(written):
    assert run("dump", written["sec2"], "sec2")[0] == run("dump", written["gds"], "sec2")[0]


def test_thousands_of_small_objects(tmp_path):
    out, _ = run("many", tmp_path / "many.h5", "gds")
    assert "MANY OK 3000" in out


def test_file_over_4_gib_sparse(tmp_path):
    out, _ = run("big", tmp_path / "big.h5", "gds")
    size = int(out.split("BIG OK ")[1])
    assert size > 4 << 30
    stat = os.stat(tmp_path / "big.h5")
    assert stat.st_blocks * 512 < 1 << 30, "the file should be sparse"


def test_reads_past_eof_zero_fill(tmp_path):
    out, err = run("past-eof", tmp_path / "eof.h5", "gds", extra_env={"H5GDS_LOG": "debug"})
    assert "PAST-EOF OK" in out
    assert "extends past EOF" in err, "the scenario did not read past end of file"


def test_pool_survives_fork(tmp_path):
    out, _ = run("fork", tmp_path / "fork.h5", "gds", timeout=120)
    assert "FORK OK" in out


@pytest.mark.parametrize("python", [NEW_PYTHON, OLD_PYTHON], ids=["hdf5-2", "hdf5-1.14"])
def test_exit_with_open_file_and_warm_pool(tmp_path, python):
    # run() fails on any non-zero exit status, including death by a signal at exit.
    out, _ = run("exit", tmp_path / "exit.h5", "gds", python=python, timeout=120)
    assert "EXIT OK" in out
    assert run("dump", tmp_path / "exit.h5", "sec2")[0].count("/data dataset float32 (16777216,)") == 1


def test_config_string_from_environment(tmp_path):
    _, err = run("write", tmp_path / "cfg.h5", "gds", extra_env={"HDF5_DRIVER_CONFIG": "nthreads=3,task_size=256K"})
    assert "nthreads=3 (config string)" in err and "task_size=256K (config string)" in err
    assert run("dump", tmp_path / "cfg.h5", "sec2")[0] == run("dump", tmp_path / "cfg.h5", "gds")[0]


def test_invalid_setting_fails_with_a_clear_error(tmp_path):
    env = driver_env("gds", {"H5GDS_TASK_SIZE": "huge"}, log=None)
    code = "import h5py\ntry:\n    h5py.File(%r, 'w')\nexcept OSError as e:\n    print('ERR', e)\n" % str(
        tmp_path / "x.h5")
    proc = subprocess.run([str(NEW_PYTHON), "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    # The message reaches the caller in the exception, and, as under sec2, nothing is printed.
    assert proc.stdout.startswith("ERR"), proc.stdout
    assert 'invalid value "huge" for H5GDS_TASK_SIZE' in proc.stdout
    assert "4K to 1G" in proc.stdout
    assert proc.stderr == ""
    assert not (tmp_path / "x.h5").exists()


def test_hdf5_1_14_program(tmp_path):
    assert hdf5_version(OLD_PYTHON).startswith("1.14."), hdf5_version(OLD_PYTHON)
    path = tmp_path / "old.h5"
    out, _ = run("write", path, "gds", python=OLD_PYTHON)
    assert "WRITE OK" in out
    # Read under 1.14 with gds and with sec2, and under HDF5 2.0 with sec2: all identical.
    old_gds = run("dump", path, "gds", python=OLD_PYTHON)[0]
    assert old_gds == run("dump", path, "sec2", python=OLD_PYTHON)[0]
    assert old_gds == run("dump", path, "sec2")[0]


@pytest.mark.parametrize("mode", ["auto", "on"])
def test_real_libcufile_without_nvidia_driver_does_not_hang(tmp_path, mode):
    # With libcufile loadable and no usable CUDA device, cuFileDriverOpen would spin forever: the
    # driver must not touch libcufile when CUDA does not work. A hang fails on the timeout.
    env = {**without_gpu(tmp_path), "H5GDS_COMPAT_MODE": mode}
    out, err = run("write", tmp_path / "nohang.h5", "gds", extra_env=env, timeout=60)
    assert "WRITE OK" in out
    assert "device buffers: not possible: no usable CUDA" in err
    assert run("dump", tmp_path / "nohang.h5", "gds", extra_env=env, timeout=60)[0]


def test_real_libcufile_with_compat_mode_off_fails_promptly(tmp_path):
    env = driver_env("gds", {"H5GDS_COMPAT_MODE": "off", **without_gpu(tmp_path)}, log=None)
    code = "import h5py\ntry:\n    h5py.File(%r, 'w')\nexcept OSError as e:\n    print('ERR', e)\n" % str(
        tmp_path / "off.h5")
    proc = subprocess.run([str(NEW_PYTHON), "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ERR"), proc.stdout
    assert "compat_mode=off requires cuFile, but CUDA is not available" in proc.stdout
    assert proc.stderr == ""


def test_second_hdf5_library_loaded_first_does_not_capture_the_driver(tmp_path):
    # Another wheel's private HDF5 (here h5py 3.14's 1.14.6), loaded before h5py's own: the
    # driver must still talk to the HDF5 that calls it (it reads the config string through it).
    libs = site_packages(OLD_PYTHON) / "h5py.libs"
    # Its dependencies first (the wheel finds them through the extension modules' RPATH).
    other = sorted(libs.glob("libaec-*.so*")) + sorted(libs.glob("libsz-*.so*")) + sorted(libs.glob("libhdf5-*.so*"))
    assert len(other) == 3, f"unexpected h5py.libs content: {other}"
    env = driver_env("gds", {"HDF5_DRIVER_CONFIG": "nthreads=3"})
    code = (f"import ctypes\nfor lib in {[str(p) for p in other]!r}:\n    ctypes.CDLL(lib)\n"
            "import h5py, numpy as np\n"
            f"with h5py.File({str(tmp_path / 'two.h5')!r}, 'w') as f:\n"
            "    f['x'] = np.arange(10)\n"
            "print('OK')\n")
    proc = subprocess.run([str(NEW_PYTHON), "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr
    assert "nthreads=3 (config string)" in proc.stderr, proc.stderr
