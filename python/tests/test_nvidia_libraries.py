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
