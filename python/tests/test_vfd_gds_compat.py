"""The vfd-gds compatibility library the wheel carries (h5gds.vfd_gds_compat_library(),
libhdf5_vfd_gds.so.1: vfd-gds's H5Pset_fapl_gds on h5gds's driver): where it is, what it exports,
and vfd-gds's API called on one of h5py's file access lists; and the driver's settings carried by
the file access list to the files HDF5 opens from it."""

import subprocess
import sys
from pathlib import Path

import h5gds
from support import clean_env  # tests/python, on the path by conftest.py


def test_the_wheel_carries_the_library_with_vfd_gds_soname_and_api():
    path = Path(h5gds.vfd_gds_compat_library())
    assert path.name == "libhdf5_vfd_gds.so.1"
    assert path.parent == Path(h5gds.__file__).parent
    dynamic = subprocess.run(["readelf", "-d", "--dyn-syms", str(path)], capture_output=True, text=True,
                             check=True).stdout
    assert "Library soname: [libhdf5_vfd_gds.so.1]" in dynamic
    assert "libhdf5" not in dynamic.replace("libhdf5_vfd_gds.so.1", "")
    for symbol in ("H5Pset_fapl_gds", "H5Pget_fapl_gds", "H5FD_gds_init"):
        assert f" {symbol}\n" in dynamic, symbol


def test_h5pset_fapl_gds_on_an_h5py_access_list_writes_through_h5gds(tmp_path):
    path = tmp_path / "compat.h5"
    code = f"""
import ctypes, h5py, numpy as np
lib = ctypes.CDLL({h5gds.vfd_gds_compat_library()!r})
lib.H5Pset_fapl_gds.argtypes = [ctypes.c_int64] + [ctypes.c_size_t] * 3
lib.H5Pget_fapl_gds.argtypes = [ctypes.c_int64] + [ctypes.POINTER(ctypes.c_size_t)] * 3
fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
assert lib.H5Pset_fapl_gds(fapl.id, 4096, 4096, 4095) < 0   # vfd-gds's rule: a multiple of the block
assert lib.H5Pset_fapl_gds(fapl.id, 0, 0, 8 << 20) == 0
sizes = [ctypes.c_size_t() for _ in range(3)]
assert lib.H5Pget_fapl_gds(fapl.id, *[ctypes.byref(s) for s in sizes]) == 0
assert [s.value for s in sizes] == [4096, 4096, 8 << 20], [s.value for s in sizes]
with h5py.File(h5py.h5f.create({str(path).encode()!r}, fapl=fapl)) as f:
    f["x"] = np.arange(100_000, dtype="i8")
print("WRITTEN")
"""
    proc = subprocess.run([sys.executable, "-c", code], env=clean_env({"H5GDS_LOG": "info"}), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "WRITTEN" in proc.stdout, proc.stderr
    opened = [line for line in proc.stderr.splitlines() if f'opened "{path}"' in line]
    assert opened and all("bounce_buffer_size=8M (argument of H5Pset_fapl_gds)" in line for line in opened), \
        proc.stderr
    assert "copy buffer size (4095) must be a multiple of the block size (4096)" in proc.stderr
    import h5py
    import numpy as np
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["x"][...], np.arange(100_000, dtype="i8"))


def test_keywords_reach_a_virtual_datasets_source_and_an_external_links_target(tmp_path):
    """h5py.File(..., driver="gds", nthreads=3): the files HDF5 opens from the file's access list get
    the setting too, each open line saying it came from the config string."""
    import h5py
    import numpy as np
    for name, scale in (("src.h5", 1), ("ext.h5", 2)):
        with h5py.File(tmp_path / name, "w") as f:
            f["d"] = np.arange(1000.0) * scale
    layout = h5py.VirtualLayout(shape=(1000,), dtype="f8")
    layout[:] = h5py.VirtualSource("src.h5", "d", shape=(1000,))
    with h5py.File(tmp_path / "main.h5", "w") as f:
        f.create_virtual_dataset("vds", layout)
        f["ext"] = h5py.ExternalLink("ext.h5", "d")
    code = f"""
import h5gds, h5py, numpy as np
with h5py.File({str(tmp_path / "main.h5")!r}, "r", driver="gds", nthreads=3) as f:
    assert np.array_equal(f["vds"][...], np.arange(1000.0))
    assert np.array_equal(f["ext"][...], np.arange(1000.0) * 2)
print("READ")
"""
    proc = subprocess.run([sys.executable, "-c", code], env=clean_env({"H5GDS_LOG": "info"}), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "READ" in proc.stdout, proc.stderr
    for name in ("main.h5", "src.h5", "ext.h5"):
        opened = [line for line in proc.stderr.splitlines() if f'opened "{tmp_path / name}"' in line]
        assert opened and all("nthreads=3 (config string)" in line for line in opened), (name, proc.stderr)
