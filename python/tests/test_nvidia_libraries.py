"""NVIDIA's libraries from their pip wheels (``pip install h5gds[cu12]`` / ``[cu13]``), found in
site-packages without LD_LIBRARY_PATH, and ``python -m h5gds info``. scripts/test.sh runs this file
in every wheel environment, and once more in one whose h5gds was installed with the ``cu12`` extra
(H5GDS_EXPECT_NVIDIA_WHEELS=cu12), where the libraries must come from that environment's
site-packages (both load without a GPU)."""

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import h5gds
from h5gds import _nvidia
from support import clean_env  # tests/python, on the path by conftest.py


def touch(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def test_each_wheels_library_directory_is_searched_cuda_13_first(tmp_path):
    first, second = tmp_path / "site-a", tmp_path / "site-b"
    cu12_cufile = touch(first / "nvidia/cufile/lib/libcufile.so.0")
    cu13_cufile = touch(second / "nvidia/cu13/lib/libcufile.so.0")
    cu12_nvcomp = touch(second / "nvidia/libnvcomp/lib/libnvcomp.so.6")
    assert _nvidia.find([str(first), str(second)]) == {"cufile": str(cu13_cufile), "nvcomp": str(cu12_nvcomp)}
    cu13_nvcomp = touch(first / "nvidia/libnvcomp/lib64/libnvcomp.so.6")
    found = _nvidia.find([str(first), str(second)])
    assert found == {"cufile": str(cu13_cufile), "nvcomp": str(cu13_nvcomp)}
    (second / "nvidia/cu13/lib/libcufile.so.0").unlink()
    assert _nvidia.find([str(first), str(second)])["cufile"] == str(cu12_cufile)


def test_without_nvidia_wheels_nothing_is_found(tmp_path):
    touch(tmp_path / "nvidia/cu13/lib/libcufile.so.1")  # not the soname h5gds loads
    assert _nvidia.find([str(tmp_path), ""]) == {"cufile": None, "nvcomp": None}


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
