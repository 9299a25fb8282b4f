"""The MPI test jobs as both sides see them: the MPI programs of this folder (each rank) and the
pytest process that runs them under mpirun and checks their files with h5py.

* `pattern`: the global arrays, the same values in the programs (each rank's tile) and in the
  pytest process (the whole array h5py must read);
* `Manifest`: the files a program wrote (rank 0 lists them in manifest.txt) and the end of a job
  (`rank R: ALL OK` from every rank); `manifest` reads the list back;
* `expect`: an error every rank must raise (a program's refusal checks);
* `mpirun`: a program under `mpirun -np N --oversubscribe`, inside `timeout` (a deadlock fails
  instead of hanging), and `assert_h5py_reads`, the check of one of its files.

Nothing here imports mpi4py.MPI (which would start MPI in the pytest process): the programs pass
their communicator."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np

HERE = Path(__file__).resolve().parent
LIMIT = 120  # seconds per job; a healthy one takes a few


def pattern(dtype, shape):
    i = np.arange(int(np.prod(shape)), dtype=np.uint64)
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        values = (i % 2048).astype(np.float64) * 0.25
    elif dtype.kind == "b":
        values = i % 3 == 0
    else:
        values = (i * np.uint64(2654435761)) >> np.uint64(7)
    return values.astype(dtype).reshape(shape)


# --- in the programs ---------------------------------------------------------------------------------------

class Manifest:
    """The files a program wrote into `directory` for the h5py check: one line per file (file, dataset,
    dtype, shape), kept by rank 0."""

    def __init__(self, comm, directory):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.directory = directory
        self.lines = []

    def add(self, file, dataset, dtype, shape):
        if self.rank == 0:
            self.lines.append(f"{file}\t{dataset}\t{np.dtype(dtype).str}\t{','.join(map(str, shape))}")

    def finish(self):
        """The end of the job, once every rank got here: rank 0 writes manifest.txt, each rank prints
        `rank R: ALL OK`."""
        self.comm.Barrier()
        if self.rank == 0:
            with open(os.path.join(self.directory, "manifest.txt"), "w") as f:
                f.write("\n".join(self.lines) + "\n")
        print(f"rank {self.rank}: ALL OK", flush=True)


def expect(comm, what, fn, cls, *needles):
    """`fn()` raises `cls` on this rank with every needle in its message."""
    rank = comm.Get_rank()
    try:
        fn()
    except cls as err:
        text = str(err)
        for needle in needles:
            assert needle in text, f"rank {rank}: {what}: {needle!r} not in {text!r}"
        print(f"rank {rank}: expected error, {what}: {type(err).__name__}: {text}", flush=True)
        return
    raise AssertionError(f"rank {rank}: {what}: no {cls.__name__} raised")


# --- in the pytest process ---------------------------------------------------------------------------------

def mpirun(program, directory, ranks, extra_env=None):
    """Runs `program` (a file of this folder) on `ranks` ranks, writing into `directory`, in this
    process's environment less its H5GDS_ and HDF5_ variables, plus `extra_env`; checks that it
    exited 0 and that every rank printed `rank R: ALL OK`. Returns the finished process."""
    assert shutil.which("mpirun"), "mpirun is missing: scripts/setup.sh installs openmpi-bin"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("H5GDS_", "HDF5_"))}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **(extra_env or {}))
    job = subprocess.run(
        ["timeout", "-k", "5", str(LIMIT), "mpirun", "-np", str(ranks), "--oversubscribe",
         sys.executable, str(HERE / program), str(directory)],
        capture_output=True, text=True, env=env)
    assert job.returncode == 0, (f"exit {job.returncode} (124: timed out, a hang)\n"
                                 f"{job.stdout}\n{job.stderr}")
    for rank in range(ranks):
        assert f"rank {rank}: ALL OK" in job.stdout, job.stdout + job.stderr
    return job


def manifest(directory):
    """(file, dataset, dtype, shape) of each file a job's manifest.txt in `directory` lists."""
    for line in (Path(directory) / "manifest.txt").read_text().splitlines():
        name, dataset, dtype, shape = line.split("\t")
        yield name, dataset, dtype, tuple(int(d) for d in shape.split(",") if d)


def assert_h5py_reads(path, dataset, want, contiguous=True):
    """h5py reads `want` from `dataset` of the file at `path`: dtype, shape and bytes; with `contiguous`,
    the dataset is stored contiguous (as the collective writes store them)."""
    with h5py.File(path, "r") as f:
        got = f[dataset][()]
        if contiguous:
            assert f[dataset].id.get_create_plist().get_layout() == h5py.h5d.CONTIGUOUS, (path, dataset)
    assert got.dtype == want.dtype and got.shape == want.shape, (path, dataset, got.dtype, got.shape)
    assert got.tobytes() == want.tobytes(), (path, dataset)
