"""Selections through the gds driver compared with sec2 byte for byte (issue 13): strided 1-D and
2-D hyperslabs, sorted and unsorted points, partial reads of chunked datasets (unfiltered and
gzip), strided and point writes, and 1, 2 and 8 threads reading one file. Each scenario also
checks its data against NumPy itself (selection_scenarios.py), under HDF5 2.0 (h5py 3.16) and 1.14
(h5py 3.14)."""

import os
import subprocess
from pathlib import Path

import pytest

from support import NEW_PYTHON, OLD_PYTHON, PLUGIN_DIR

SCENARIOS = Path(__file__).with_name("selection_scenarios.py")
PYTHONS = {"hdf5-2": NEW_PYTHON, "hdf5-1.14": OLD_PYTHON}


def run(python, driver, *args):
    """Runs one scenario in a child interpreter under `driver`; returns its stdout."""
    assert (PLUGIN_DIR / "libh5gds.so").is_file(), f"build the plugin first: {PLUGIN_DIR}/libh5gds.so"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HDF5_", "H5GDS_", "H5_GDS_"))}
    env["HDF5_PLUGIN_PATH"] = str(PLUGIN_DIR)
    env["H5GDS_LOG"] = "info"
    if driver == "gds":
        env["HDF5_DRIVER"] = "gds"
    proc = subprocess.run([str(python), str(SCENARIOS), *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"{args} under {driver} failed:\n{proc.stdout}\n{proc.stderr}"
    gds_opened = f'opened "{args[1]}"' in proc.stderr
    assert gds_opened == (driver == "gds"), f"gds {'not ' if driver == 'gds' else ''}used:\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module", params=sorted(PYTHONS))
def source(request, tmp_path_factory):
    python = PYTHONS[request.param]
    path = tmp_path_factory.mktemp("selections") / "source.h5"
    assert "MADE" in run(python, "sec2", "make", path)
    return python, path


def test_reads_match_sec2(source):
    python, path = source
    outputs = {driver: run(python, driver, "read", path) for driver in ("sec2", "gds")}
    assert "READ OK" in outputs["gds"]
    assert "x[unsorted points]" in outputs["gds"] and "gzip[1000:700000:3]" in outputs["gds"]
    assert outputs["gds"] == outputs["sec2"]


def test_strided_and_point_writes_match_sec2(source, tmp_path):
    python, _ = source
    outputs = {driver: run(python, driver, "write", tmp_path / f"{driver}.h5") for driver in ("sec2", "gds")}
    assert "WRITE OK" in outputs["gds"]
    # Each file is read back under sec2 and digested per dataset: the same bytes.
    assert outputs["gds"] == outputs["sec2"]


@pytest.mark.parametrize("threads", [1, 2, 8])
def test_threads_reading_one_file(source, threads):
    python, path = source
    assert f"THREADS OK {threads}" in run(python, "gds", "threads", path, threads)
