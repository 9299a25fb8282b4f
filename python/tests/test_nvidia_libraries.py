"""NVIDIA's libraries found without LD_LIBRARY_PATH: cuFile by NVIDIA's cuda-pathfinder (pip wheels,
the system's loader, $CUDA_HOME), nvCOMP in its pip wheels (``pip install h5gds[cu12]`` / ``[cu13]``);
and ``python -m h5gds info``. scripts/test.sh runs this file in every wheel environment, and once
more in one whose h5gds was installed with the ``cu12`` extra (H5GDS_EXPECT_NVIDIA_WHEELS=cu12),
where the libraries must come from that environment's site-packages (both load without a GPU).
The cuFile cases stand h5gds's CUDA emulator (``libh5gds_emu.so``, which also serves as libcufile)
in for libcufile.so.0, each in a child process."""

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import numpy as np
import pytest

import h5gds
from h5gds import _nvidia
from support import clean_env, emulator_library  # tests/python, on the path by conftest.py


def touch(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def test_nvcomps_wheel_directories_are_searched_cuda_13_first(tmp_path):
    first, second = tmp_path / "site-a", tmp_path / "site-b"
    cu12_nvcomp = touch(second / "nvidia/libnvcomp/lib/libnvcomp.so.6")
    assert _nvidia.wheel_file("nvcomp", [str(first), str(second)]) == str(cu12_nvcomp)
    cu13_nvcomp = touch(first / "nvidia/libnvcomp/lib64/libnvcomp.so.6")
    assert _nvidia.wheel_file("nvcomp", [str(second), str(first)]) == str(cu13_nvcomp)
    (first / "nvidia/libnvcomp/lib64/libnvcomp.so.6").unlink()
    assert _nvidia.wheel_file("nvcomp", [str(first), str(second)]) == str(cu12_nvcomp)


def test_without_nvcomps_wheel_nothing_is_found(tmp_path):
    touch(tmp_path / "nvidia/libnvcomp/lib64/libnvcomp.so.5")  # not the soname h5gds loads
    assert _nvidia.wheel_file("nvcomp", [str(tmp_path), ""]) is None


def test_without_cuda_pathfinder_cufile_is_left_to_its_soname_with_a_warning(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.pathfinder", None)  # `import cuda.pathfinder` fails
    with pytest.warns(RuntimeWarning, match="h5gds needs cuda-pathfinder to find cuFile"):
        assert _nvidia.cufile() is None


CUFILE_CHILD = """
    import json
    import h5gds
    from h5gds import _native, _nvidia
    report = h5gds.info()["cufile"]
    print(json.dumps([_nvidia.find()["cufile"], report["library_file"], report["library_problem"],
                      _native.info_text(_native.__file__)]))
    """


def cufile_child(tmp_path, **env):
    """What a child finds for libcufile: (cuda-pathfinder's file, ``h5gds.info()``'s file and
    problem, ``h5gds info``'s text), with ``env`` and no LD_LIBRARY_PATH, CUDA_PATH, CUDA_HOME,
    CONDA_PREFIX of this process's."""
    base = {k: v for k, v in clean_env().items() if k not in ("LD_LIBRARY_PATH", "CUDA_PATH", "CUDA_HOME", "CONDA_PREFIX")}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(CUFILE_CHILD)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={**base, **env})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def machine_cufile():
    """Why a libcufile.so.0 of this machine or environment would be found before a stand-in, or
    None: NVIDIA's wheels in site-packages (the cu12 environment), or one the loader finds."""
    if any(Path(p, "nvidia").is_dir() for p in sysconfig.get_paths().values()):
        return "NVIDIA's wheels are installed here"
    probe = subprocess.run([sys.executable, "-c", "import ctypes; ctypes.CDLL('libcufile.so.0')"], capture_output=True,
                           env={k: v for k, v in clean_env().items() if k != "LD_LIBRARY_PATH"}, timeout=60)
    return "this machine has a libcufile.so.0 of its own" if probe.returncode == 0 else None


def stand_in_cufile(directory):
    if machine_cufile():
        pytest.skip(machine_cufile())
    directory.mkdir(parents=True)
    (directory / "libcufile.so.0").symlink_to(emulator_library())
    return directory.resolve() / "libcufile.so.0"


def test_cufile_under_cuda_home_is_found_without_ld_library_path(tmp_path):
    expected = stand_in_cufile(tmp_path / "cuda-13.0" / "lib64")
    found, library_file, problem, text = cufile_child(tmp_path, CUDA_HOME=str(tmp_path / "cuda-13.0"))
    assert found == str(expected) and problem is None
    assert Path(library_file) == expected, library_file
    assert f"libcufile: {library_file}" in text, text


def test_cufile_on_the_loaders_path_is_found_there(tmp_path):
    expected = stand_in_cufile(tmp_path / "ld")
    found, library_file, problem, text = cufile_child(tmp_path, LD_LIBRARY_PATH=str(tmp_path / "ld"),
                                                      CUDA_HOME=str(tmp_path / "no-such-cuda"))
    assert Path(found).resolve() == expected.resolve() and problem is None
    assert Path(library_file).resolve() == expected.resolve(), library_file
    assert f"libcufile: {library_file}" in text, text


def test_without_cufile_anywhere_info_says_it_does_not_load(tmp_path):
    if machine_cufile():
        pytest.skip(machine_cufile())
    found, library_file, problem, text = cufile_child(tmp_path)
    assert found is None and library_file is None
    assert "libcufile.so.0 cannot be loaded" in problem, problem
    assert f"libcufile: {problem}" in text, text


def test_python_m_h5gds_info_prints_what_h5gds_info_prints():
    proc = subprocess.run([sys.executable, "-m", "h5gds", "info"], env=clean_env({"H5GDS_NTHREADS": "5"}),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for needle in ("CUDA:", "libcufile:", "nvCOMP:", "host buffers:", "device buffers:", "settings:"):
        assert needle in out, f"{needle!r} in:\n{out}"
    for key in h5gds.SETTING_KEYS:
        assert key in out, f"{key} in:\n{out}"
    nthreads = next(line.split() for line in out.splitlines() if line.split()[:1] == ["nthreads"])
    assert nthreads[:2] == ["nthreads", "5"] and "(H5GDS_NTHREADS)" in " ".join(nthreads), out
    as_json = subprocess.run([sys.executable, "-m", "h5gds", "info", "--json"], env=clean_env(),
                             capture_output=True, text=True, timeout=120)
    assert as_json.returncode == 0, as_json.stderr
    report = json.loads(as_json.stdout)
    assert {"cuda", "cufile", "nvcomp", "settings", "verdict"} <= set(report)
    bad = subprocess.run([sys.executable, "-m", "h5gds", "nonsense"], env=clean_env(), capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and "invalid choice: 'nonsense'" in bad.stderr, bad.stderr


@pytest.mark.skipif(os.environ.get("H5GDS_EXPECT_NVIDIA_WHEELS") != "cu12",
                    reason="only in the environment scripts/test.sh installs with h5gds[cu12]")
def test_the_cu12_extras_libraries_load_from_site_packages_without_ld_library_path():
    assert not os.environ.get("LD_LIBRARY_PATH"), "the test must run without LD_LIBRARY_PATH"
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    report = h5gds.info()
    cufile, nvcomp = report["cufile"], report["nvcomp"]
    assert cufile["library_problem"] is None, cufile
    assert Path(cufile["library_file"]).resolve() == site / "nvidia/cufile/lib/libcufile.so.0", cufile
    assert nvcomp["loaded"] and nvcomp["problem"] is None, nvcomp
    assert Path(nvcomp["file"]).resolve() == site / "nvidia/libnvcomp/lib64/libnvcomp.so.6", nvcomp
    text = h5gds._native.info_text(h5gds._native.__file__)
    assert f"libcufile: {cufile['library_file']}" in text, text
    assert f"(from {nvcomp['file']})" in text, text


# --- the lookup is lazy: `import h5gds` and host I/O leave libcufile alone -------------------------------

HOST_ONLY_CHILD = """
    import json, sys
    import h5py
    import numpy as np
    import h5gds
    imported = {"pathfinder": "cuda.pathfinder" in sys.modules, "pending": h5gds._nvidia.pending}
    with h5py.File("host.h5", "w", driver="gds") as f:
        dset = f.create_dataset("x", shape=(40, 5), dtype="<f8")
        h5gds.write(dset, np.arange(200.0).reshape(40, 5) * 3)
    with h5py.File("host.h5", "r", driver="gds") as f:
        whole = h5gds.read(f["x"])
        rows = h5gds.read(f["x"], sel=slice(10, 12))  # after the first read: the remembered layout's way
        into = h5gds.read(f["x"], out=np.empty((1, 5)), sel=slice(39, 40))
    cufile_maps = [line for line in open("/proc/self/maps") if "libcufile" in line]
    print(json.dumps({"imported": imported, "whole": whole.tolist(), "rows": rows.tolist(),
                      "into": into.tolist(), "cufile_maps": cufile_maps,
                      "pathfinder": "cuda.pathfinder" in sys.modules, "pending": h5gds._nvidia.pending}))
    """


def run_child(tmp_path, script, env):
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_import_and_host_io_through_gds_load_no_libcufile_nor_cuda_pathfinder(tmp_path):
    """With CUDA (the emulator as libcuda) and a libcufile.so.0 both on the loader's path and under
    CUDA_HOME (copies, so that /proc/self/maps would name either), host reads and writes through
    driver="gds" look for no library: cuda-pathfinder is not imported, nothing named libcufile is
    mapped."""
    ld, cuda_home = tmp_path / "ld", tmp_path / "cuda" / "lib64"
    ld.mkdir()
    cuda_home.mkdir(parents=True)
    (ld / "libcuda.so.1").symlink_to(emulator_library())
    for directory in (ld, cuda_home):
        (directory / "libcufile.so.0").write_bytes(emulator_library().read_bytes())
    env = {**clean_env(), "LD_LIBRARY_PATH": str(ld), "CUDA_HOME": str(tmp_path / "cuda")}
    report = run_child(tmp_path, HOST_ONLY_CHILD, env)
    expected = (np.arange(200.0).reshape(40, 5) * 3)
    assert report["whole"] == expected.tolist() and report["rows"] == expected[10:12].tolist()
    assert report["into"] == expected[39:40].tolist()
    assert report["imported"] == {"pathfinder": False, "pending": True}, report["imported"]
    assert report["cufile_maps"] == [], report["cufile_maps"]
    assert not report["pathfinder"] and report["pending"], report


DEVICE_CHILD = """
    import json, sys
    import h5py
    import numpy as np
    import h5gds
    from device_arrays import DeviceArray
    first = sys.argv[1]
    expected = np.arange(60.0).reshape(6, 10) - 7
    with h5py.File("dev.h5", "w") as f:
        f.create_dataset("x", data=expected)
    with h5py.File("dev.h5", "r", driver="gds", **({"compat_mode": "off"} if first == "off" else {})) as f:
        dset = f["x"]
        if first == "host":  # the layout is remembered: the device read takes read_remembered's way
            assert h5gds.read(dset).tolist() == expected.tolist()
            assert h5gds._layout.serving(dset) is not None
        before = {"pathfinder": "cuda.pathfinder" in sys.modules, "pending": h5gds._nvidia.pending}
        out = DeviceArray((6, 10), "<f8", fill=0.0)
        h5gds.read(dset, out=out)
        after = {"pathfinder": "cuda.pathfinder" in sys.modules, "pending": h5gds._nvidia.pending}
    report = h5gds.info()["cufile"]
    print(json.dumps({"before": before, "after": after, "read": out.to_host().tolist(), "expected": expected.tolist(),
                      "library_file": report["library_file"], "problem": report["library_problem"]}))
    """


@pytest.mark.parametrize("first", ["device", "host", "off"])
def test_the_first_device_read_looks_for_cufile_before_the_driver_loads_it(tmp_path, first):
    """A device read (the emulator's CUDA; a stand-in libcufile under CUDA_HOME, which only
    cuda-pathfinder finds) does the lookup before the driver loads libcufile, so that the driver loads
    the file cuda-pathfinder found: also where the read takes read_remembered's way (a host read came
    first). With compat_mode="off" the driver opens cuFile at the file's open: the open does it."""
    expected_cufile = stand_in_cufile(tmp_path / "cuda" / "lib64")
    ld = tmp_path / "ld"
    ld.mkdir()
    if first == "off":  # cuFile is opened, so libcuda must be the same file (a stand-in found by soname it is not)
        (ld / "libcuda.so.1").symlink_to(emulator_library())
    else:  # the emulator's CUDA as a copy, so that dladdr names the stand-in for libcufile's symbols
        (ld / "libcuda.so.1").write_bytes(emulator_library().read_bytes())
    tests = Path(__file__).resolve().parent
    env = {**clean_env(), "LD_LIBRARY_PATH": str(ld), "CUDA_HOME": str(tmp_path / "cuda"),
           "PYTHONPATH": os.pathsep.join([str(tests), str(tests.parents[1] / "tests" / "python")])}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(DEVICE_CHILD), first], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.splitlines()[-1])
    assert report["read"] == report["expected"]
    at_open = first == "off"
    assert report["before"] == {"pathfinder": at_open, "pending": not at_open}, report["before"]
    assert report["after"] == {"pathfinder": True, "pending": False}, report["after"]
    assert report["problem"] is None, report
    # (With one file serving both, dladdr names whichever path loaded it first.)
    assert Path(report["library_file"]) == expected_cufile or at_open, report
