"""h5gds's collective calls (comm=) with device tiles: mpi/device_program.py under `mpirun -np N
--oversubscribe` for N = 1 to 4, inside `timeout`, with h5gds's CPU emulator as libcuda/libcufile
(two devices, ranks on device rank % 2), through the gds driver and with H5GDS_USE_VFD_GDS=0; its
files then checked here, in another process, with h5py.

scripts/test.sh runs this file with the emulator on LD_LIBRARY_PATH (with test_device.py); without
a CUDA driver it skips. On a GPU machine it runs against the real driver and real CuPy."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

pytest.importorskip("mpi4py", reason="scripts/test.sh installs mpi4py for these tests")

from device_arrays import cuda  # noqa: E402

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE / "mpi"))
from patterns import pattern  # noqa: E402

PROGRAM = HERE / "mpi" / "device_program.py"
LIMIT = 120  # seconds per job; a healthy one takes a few


def _cuda():
    try:
        found = cuda()
    except (OSError, RuntimeError) as exc:
        if os.environ.get("H5GDS_REQUIRE_DEVICE_TESTS") == "1":
            raise
        pytest.skip(f"no CUDA driver in this process ({exc}): scripts/test.sh runs this file with the emulator "
                    "on LD_LIBRARY_PATH", allow_module_level=True)
    if not found.emulated:
        pytest.importorskip("cupy", reason="device tiles on a real GPU are read back as CuPy arrays")
    return found


CUDA = _cuda()


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_device_tiles_under_mpirun_through_gds_and_staged_are_read_by_h5py(tmp_path, ranks):
    assert shutil.which("mpirun"), "mpirun is missing: scripts/setup.sh installs openmpi-bin"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("H5GDS_", "HDF5_"))}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if CUDA.emulated:
        # Two emulated devices; async copies deferred until their stream is synchronised.
        env.update(H5GDS_EMU_DEVICES="2", H5GDS_EMU_DEFER_ASYNC="1")
    job = subprocess.run(
        ["timeout", "-k", "5", str(LIMIT), "mpirun", "-np", str(ranks), "--oversubscribe",
         sys.executable, str(PROGRAM), str(tmp_path)],
        capture_output=True, text=True, env=env)
    assert job.returncode == 0, (f"exit {job.returncode} (124: timed out, a hang)\n"
                                 f"{job.stdout}\n{job.stderr}")
    for rank in range(ranks):
        assert f"rank {rank}: device {rank % CUDA.device_count}" in job.stdout, job.stdout + job.stderr
        assert f"rank {rank}: ALL OK" in job.stdout, job.stdout + job.stderr
    checked = set()
    for line in (tmp_path / "manifest.txt").read_text().splitlines():
        name, dataset, dtype, shape = line.split("\t")
        shape = tuple(int(d) for d in shape.split(",") if d)
        want = pattern(dtype, shape)
        with h5py.File(tmp_path / name, "r") as f:
            got = f[dataset][()]
            assert f[dataset].id.get_create_plist().get_layout() == h5py.h5d.CONTIGUOUS
        assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape)
        assert got.tobytes() == want.tobytes(), name
        checked.add(name)
    assert len(checked) == 2 * 7 and {n.split("_")[0] for n in checked} == {"gds", "staged"}, checked
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial") or "refused" in p.name]
