"""Selections through the gds driver compared with sec2 byte for byte (issue 13): strided 1-D and
2-D hyperslabs, sorted and unsorted points, partial reads of chunked datasets (unfiltered and
gzip), strided and point writes, and 1, 2 and 8 threads reading one file. Each scenario also
checks its data against NumPy itself (selection_scenarios.py), under HDF5 2.0 (h5py 3.16) and 1.14
(h5py 3.14)."""

from pathlib import Path

import pytest

from support import NEW_PYTHON, OLD_PYTHON, assert_ran, run_child

SCENARIOS = Path(__file__).with_name("selection_scenarios.py")
PYTHONS = {"hdf5-2": NEW_PYTHON, "hdf5-1.14": OLD_PYTHON}


def run(python, driver, *args):
    """Runs one scenario in a child interpreter under `driver`; returns its stdout."""
    proc = run_child(SCENARIOS, args, driver, python)
    return assert_ran(proc, f"{args} under {driver}", args[1], driver).stdout


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
