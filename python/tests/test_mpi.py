"""h5gds's collective calls (comm=) with real MPI processes: collective_program.py under
`mpirun -np N --oversubscribe` for N = 1 to 4, inside `timeout` (a deadlock fails instead of
hanging), its files then checked here, in another process, with h5py."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

mpi4py = pytest.importorskip("mpi4py", reason="scripts/test.sh installs mpi4py for these tests")

PROGRAM = Path(__file__).parent / "mpi" / "collective_program.py"
sys.path.insert(0, str(PROGRAM.parent))
from patterns import pattern  # noqa: E402
LIMIT = 120  # seconds per job; a healthy one takes a few


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_collective_calls_under_mpirun_write_files_h5py_reads(tmp_path, ranks):
    assert shutil.which("mpirun"), "mpirun is missing: scripts/setup.sh installs openmpi-bin"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("H5GDS_", "HDF5_"))}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    job = subprocess.run(
        ["timeout", "-k", "5", str(LIMIT), "mpirun", "-np", str(ranks), "--oversubscribe",
         sys.executable, str(PROGRAM), str(tmp_path)],
        capture_output=True, text=True, env=env)
    assert job.returncode == 0, (f"exit {job.returncode} (124: timed out, a hang)\n"
                                 f"{job.stdout}\n{job.stderr}")
    for rank in range(ranks):
        assert f"rank {rank}: ALL OK" in job.stdout, job.stdout + job.stderr
    checked = 0
    for line in (tmp_path / "manifest.txt").read_text().splitlines():
        name, dataset, dtype, shape = line.split("\t")
        shape = tuple(int(d) for d in shape.split(",") if d)
        want = np.full(3, 42.0) if dataset == "/old" else pattern(dtype, shape)
        with h5py.File(tmp_path / name, "r") as f:
            got = f[dataset][()]
            if dataset != "/old":
                assert f[dataset].id.get_create_plist().get_layout() == h5py.h5d.CONTIGUOUS
        assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape)
        assert got.tobytes() == want.tobytes(), name
        checked += 1
    assert checked == 13 * 3 + 5
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]
