"""h5gds's collective calls (comm=) with real MPI processes: collective_program.py under
`mpirun -np N --oversubscribe` for N = 1 to 4, inside `timeout` (a deadlock fails instead of
hanging), its files then checked here, in another process, with h5py."""

import sys
from pathlib import Path

import numpy as np
import pytest

mpi4py = pytest.importorskip("mpi4py", reason="scripts/test.sh installs mpi4py for these tests")

sys.path.insert(0, str(Path(__file__).parent / "mpi"))
from jobs import assert_h5py_reads, manifest, mpirun, pattern  # noqa: E402


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_collective_calls_under_mpirun_write_files_h5py_reads(tmp_path, ranks):
    mpirun("collective_program.py", tmp_path, ranks)
    checked = 0
    for name, dataset, dtype, shape in manifest(tmp_path):
        if dataset == "/old":  # the file a failed write left as it was
            assert_h5py_reads(tmp_path / name, dataset, np.full(3, 42.0), contiguous=False)
        else:
            assert_h5py_reads(tmp_path / name, dataset, pattern(dtype, shape))
        checked += 1
    assert checked == 13 * 3 + 5
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]
