"""h5gds's collective calls (comm=) with device tiles: mpi/device_program.py under `mpirun -np N
--oversubscribe` for N = 1 to 4, inside `timeout`, with h5gds's CPU emulator as libcuda/libcufile
(two devices, ranks on device rank % 2), through the gds driver and with H5GDS_USE_VFD_GDS=0; its
files then checked here, in another process, with h5py.

scripts/test.sh runs this file with the emulator on LD_LIBRARY_PATH (with test_device.py); without
a CUDA driver it skips. On a GPU machine it runs against the real driver and real CuPy."""

import sys
from pathlib import Path

import pytest

pytest.importorskip("mpi4py", reason="scripts/test.sh installs mpi4py for these tests")

from device_arrays import cuda_or_skip  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent / "mpi"))
from jobs import assert_h5py_reads, manifest, mpirun, pattern  # noqa: E402

CUDA = cuda_or_skip()
if not CUDA.emulated:
    pytest.importorskip("cupy", reason="device tiles on a real GPU are read back as CuPy arrays")


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_device_tiles_under_mpirun_through_gds_and_staged_are_read_by_h5py(tmp_path, ranks):
    # Two emulated devices; async copies deferred until their stream is synchronised.
    emulated = {"H5GDS_EMU_DEVICES": "2", "H5GDS_EMU_DEFER_ASYNC": "1"} if CUDA.emulated else {}
    job = mpirun("device_program.py", tmp_path, ranks, emulated)
    for rank in range(ranks):
        assert f"rank {rank}: device {rank % CUDA.device_count}" in job.stdout, job.stdout + job.stderr
    checked = set()
    for name, dataset, dtype, shape in manifest(tmp_path):
        assert_h5py_reads(tmp_path / name, dataset, pattern(dtype, shape))
        checked.add(name)
    assert len(checked) == 2 * 7 and {n.split("_")[0] for n in checked} == {"gds", "staged"}, checked
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial") or "refused" in p.name]
