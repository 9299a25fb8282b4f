"""What the h5py tests share: where the plugin, the Python environments and the CUDA/cuFile
emulator are, and an environment that makes a child see a CUDA driver without devices."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_DIR = Path(os.environ.get("H5GDS_PLUGIN_DIR", ROOT / "target" / "release"))
NEW_PYTHON = Path(os.environ.get("H5GDS_PYTHON", ROOT / ".venv" / "bin" / "python"))
OLD_PYTHON = Path(os.environ.get("H5GDS_PYTHON_114", ROOT / ".venv-114" / "bin" / "python"))


def site_packages(python):
    """The site-packages directory of `python`, asked of the interpreter."""
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def cufile_lib_dir():
    """The directory of the real libcufile 1.20 from PyPI's nvidia-cufile wheel (scripts/setup.sh installs it):
    <site-packages>/nvidia/<package>/lib, whatever the Python version and the package's CUDA major."""
    found = sorted(site_packages(NEW_PYTHON).glob("nvidia/*/lib/libcufile.so.0"))
    assert found, f"no nvidia/*/lib/libcufile.so.0 in {site_packages(NEW_PYTHON)}: run scripts/setup.sh"
    return found[-1].parent


def emulator_library():
    """The CUDA/cuFile emulator (`cargo build -p h5gds-cuda-emulator`): H5GDS_EMULATOR_LIB, else the newest of
    target/{debug,release}/libh5gds_emu.so."""
    if "H5GDS_EMULATOR_LIB" in os.environ:
        return Path(os.environ["H5GDS_EMULATOR_LIB"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    built = [p for p in (target / "debug" / "libh5gds_emu.so", target / "release" / "libh5gds_emu.so") if p.is_file()]
    assert built, "build the emulator first: cargo build -p h5gds-cuda-emulator"
    return max(built, key=lambda p: p.stat().st_mtime)


def without_gpu(tmp_path):
    """LD_LIBRARY_PATH and switch for a CUDA driver without devices (the emulator as libcuda only,
    H5GDS_EMU_DEVICES=0) in front of the real libcufile: holds on any machine, also one with an NVIDIA driver
    that the system's library cache would find."""
    cuda = tmp_path / "no-gpu-libcuda"
    cuda.mkdir()
    for name in ("libcuda.so.1", "libcuda.so"):
        (cuda / name).symlink_to(emulator_library())
    return {"LD_LIBRARY_PATH": f"{cuda}:{cufile_lib_dir()}", "H5GDS_EMU_DEVICES": "0"}


def clean_env(extra_env=None):
    """This process's environment without any HDF5 or h5gds variable, plus `extra_env`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HDF5_", "H5GDS_", "H5_GDS_"))}
    env.update(extra_env or {})
    return env


def driver_env(driver, extra_env=None, log="info"):
    """The environment of a child run under `driver` ('sec2' or 'gds'): this process's HDF5 and
    h5gds variables removed, the plugin directory on HDF5's plugin path, the driver's open log on."""
    assert (PLUGIN_DIR / "libh5gds.so").is_file(), f"build the plugin first: {PLUGIN_DIR}/libh5gds.so"
    env = clean_env()
    env["HDF5_PLUGIN_PATH"] = str(PLUGIN_DIR)
    if log:
        env["H5GDS_LOG"] = log
    if driver == "gds":
        env["HDF5_DRIVER"] = "gds"
    env.update(extra_env or {})
    return env


def run_child(script, args, driver, python=None, extra_env=None, timeout=600, log="info"):
    """Runs `script` with `args` in a child interpreter under `driver`; returns the completed process."""
    return subprocess.run([str(python or sys.executable), str(script), *map(str, args)],
                          env=driver_env(driver, extra_env, log), capture_output=True, text=True, timeout=timeout)


def assert_ran(proc, what, path=None, driver=None):
    """`proc` succeeded; with `path`, the gds open log line names it exactly when `driver` is gds."""
    assert proc.returncode == 0, f"{what} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    if path is not None:
        gds_opened = f'opened "{path}"' in proc.stderr
        assert gds_opened == (driver == "gds"), f"gds {'not ' if driver == 'gds' else ''}used:\n{proc.stderr}"
    return proc
