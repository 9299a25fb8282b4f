"""Legate's HDF5 I/O with LEGATE_IO_USE_VFD_GDS=1 on h5gds's vfd-gds compatibility library
(run by scripts/test-legate.sh, which installs Legate and sets the environment).

Legate's liblegate.so links the vfd-gds its wheel bundles and calls H5Pset_fapl_gds itself; on a
machine where cuFile cannot work (here: a libcuda whose cuInit reports no device) that aborts the
process. With h5gds's libhdf5_vfd_gds.so.1 preloaded, to_file, from_file and from_file_batched
must round-trip exactly, every file (the top-level file and each tile file of its virtual
dataset) must be opened by h5gds, and h5py must read the same values.

    python legate_vfd_gds.py COMPAT_LIBRARY WORK_DIR
"""

import os
import subprocess
import sys

import numpy as np

SHAPES = [(8, 8), (1024, 1024)]
BATCH = (300, 500)


def workload(work_dir):
    """The child: Legate's write, read and batched read of each shape, checked against NumPy."""
    import h5py
    from legate.core import LogicalArray, Type, get_legate_runtime
    from legate.io.hdf5 import from_file, from_file_batched, to_file

    runtime = get_legate_runtime()
    for shape in SHAPES:
        x = np.random.default_rng(len(shape) * shape[0]).standard_normal(shape)
        path = os.path.join(work_dir, f"x{shape[0]}.h5")
        store = runtime.create_store_from_buffer(Type.from_numpy_dtype(x.dtype), x.shape, x, False)
        to_file(LogicalArray.from_store(store), path, "data")
        runtime.issue_execution_fence(block=True)
        with h5py.File(path, "r") as f:
            assert np.array_equal(f["data"][...], x), f"h5py reads other values from {path}"
        back = np.asarray(from_file(path, "data").get_physical_array())
        assert np.array_equal(back, x), f"from_file of {path} differs"
        seen = np.zeros(shape, dtype=bool)
        for chunk, offsets in from_file_batched(path, "data", BATCH[: len(shape)]):
            c = np.asarray(chunk.get_physical_array())
            where = tuple(slice(o, o + n) for o, n in zip(offsets, c.shape))
            assert np.array_equal(c, x[where]), f"from_file_batched of {path} differs at {offsets}"
            seen[where] = True
        assert seen.all(), f"from_file_batched of {path} left parts unread"
        print(f"ROUND TRIP OK {shape}", flush=True)


def run(env_extra, work_dir):
    env = dict(os.environ, LEGATE_IO_USE_VFD_GDS="1", **env_extra)
    return subprocess.run([sys.executable, __file__, "--child", work_dir], env=env,
                          capture_output=True, text=True, timeout=600)


def main(compat_library, work_dir):
    os.makedirs(work_dir, exist_ok=True)
    own = run({}, os.path.join(work_dir, "legate-own"))
    print(f"Legate's own vfd-gds: exit {own.returncode}")
    assert own.returncode != 0 and "ROUND TRIP OK" not in own.stdout, (
        "Legate's own vfd-gds worked here: this machine does not show the failure", own.stdout)

    ours_dir = os.path.join(work_dir, "h5gds")
    ours = run({"LD_PRELOAD": compat_library, "H5GDS_LOG": "info", "NO_COLOR": "1"}, ours_dir)
    log = ours.stdout + ours.stderr
    assert ours.returncode == 0, f"exit {ours.returncode}:\n{log[-6000:]}"
    for shape in SHAPES:
        assert f"ROUND TRIP OK {shape}" in ours.stdout, log[-6000:]
    opened = [line for line in log.splitlines() if "h5gds::plugin: opened" in line]
    files = []
    for root, _, names in os.walk(ours_dir):
        files += [os.path.join(root, n) for n in names if n.endswith(".h5")]
    assert files, "Legate wrote no files"
    for path in files:
        lines = [line for line in opened if f'opened "{path}"' in line]
        assert lines, f"h5gds never opened {path}:\n" + "\n".join(opened)
        assert all("(argument of H5Pset_fapl_gds)" in line for line in lines), lines
    print(f"LEGATE OK: {len(files)} files, {len(opened)} opens through h5gds")


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        workload(sys.argv[2])
    else:
        main(sys.argv[1], sys.argv[2])
