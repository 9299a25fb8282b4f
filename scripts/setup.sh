#!/usr/bin/env bash
# Installs what building and testing h5gds needs into project-local places:
#   .venv/        cmake (HDF5 is built from source by hdf5-metno-sys), h5py with HDF5 2.x, numpy,
#                 hdf5plugin and zstandard (the codec tests' files),
#                 netCDF4, PyTables, xarray and h5netcdf (other HDF5 copies in one process),
#                 maturin with ziglang and auditwheel (the Python package's manylinux_2_28 wheel),
#                 mpi4py (built against Open MPI)
#   Open MPI      Debian's libopenmpi-dev and openmpi-bin (apt-get, only when missing)
#   nginx         Debian's nginx (apt-get, only when missing; never started as a service): the
#                 HTTP server of the remote-file tests (tests/python/test_remote.py)
#   .venv-114/    h5py whose wheel bundles HDF5 1.14, with NumPy 1.x: the package's tests run once
#                 with old HDF5 and old NumPy too
#   target/aarch64/  what the aarch64 wheel's cross build and its smoke test under qemu need
#                 (scripts/setup-aarch64.sh: Debian's Rust 1.96 with its arm64 standard library,
#                 qemu-user-static, an arm64 python3.11 and PyPI's aarch64 wheels for it; Debian's
#                 gcc-aarch64-linux-gnu and libllvm22 with apt-get, only when missing)
# Idempotent: a second run only checks what is there.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
H5PY_NEW=3.16.0   # bundles HDF5 2.0
H5PY_OLD=3.14.0   # bundles HDF5 1.14.6
CUFILE=1.20.0.107 # cufile.h for the bindings check; the real libcufile for the no-hang test
LIBCLANG=18.1.1   # libclang for bindgen (the bindings check)
NVCOMP=6.0.0.12   # nvcomp.h for the nvcomp-sys bindings check (the library needs a GPU)
HDF5PLUGIN=7.1.0  # Zstandard (32015) and LZ4 (32004) filters: test files for the GPU codec path
ZSTANDARD=0.25.0  # Zstandard frames with content checksums (hdf5plugin writes none): test files
# Wheels with HDF5 copies of their own, for the tests of several HDF5 copies in one process:
NETCDF4=1.7.5.1.post1  # HDF5 2.2
TABLES=3.11.1          # HDF5 1.14.6
XARRAY=2026.9.0        # with both netCDF engines, h5netcdf (h5py's HDF5) and netcdf4
H5NETCDF=1.8.2
ZIGLANG=0.17.1    # zig as linker: wheels built against glibc 2.28 (manylinux_2_28) on this Debian 12
AUDITWHEEL=6.8.2  # checks the wheel's platform tag
MOTO=5.2.6        # moto's S3 API server, started on loopback by the remote-file tests

# Open MPI from Debian's archive, for the MPI build of array-io (the `mpi` crate builds against
# it), mpi4py and the MPI tests; installed only when missing.
if ! dpkg-query -W -f='${Status}\n' libopenmpi-dev openmpi-bin 2>/dev/null |
    awk '$3 != "installed" { bad = 1 } END { exit bad || NR != 2 }'; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq libopenmpi-dev openmpi-bin
fi
# nginx from Debian's archive, for the remote-file tests (byte ranges, ETags, If-Match); the tests
# start their own on loopback. Where the package would start the system service, policy-rc.d or
# the missing init refuses, and the tests need none.
if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq nginx
fi

make_venv() {  # dir, requirements...
  local dir=$1; shift
  if [ ! -x "$dir/bin/python" ]; then
    "$PY" -m venv "$dir"
  fi
  # Already satisfied requirements make this a quick local check.
  "$dir/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
}

make_venv .venv "cmake>=3.26" "h5py==$H5PY_NEW" numpy pytest \
  "nvidia-cufile==$CUFILE" "libclang==$LIBCLANG" "maturin>=1.7,<2" \
  "nvidia-libnvcomp-cu12==$NVCOMP" "hdf5plugin==$HDF5PLUGIN" "zstandard==$ZSTANDARD" \
  "netCDF4==$NETCDF4" "tables==$TABLES" "xarray==$XARRAY" "h5netcdf==$H5NETCDF" \
  "ziglang==$ZIGLANG" "auditwheel==$AUDITWHEEL" "moto[server]==$MOTO"
# mpi4py built from source against Open MPI's mpicc (a binary wheel could carry another MPI).
if ! .venv/bin/python -c 'import mpi4py' 2>/dev/null; then
  MPICC=mpicc .venv/bin/python -m pip install --quiet --disable-pip-version-check \
    --no-binary=mpi4py "mpi4py>=4,<5"
fi
make_venv .venv-114 "h5py==$H5PY_OLD" "numpy<2"
scripts/setup-aarch64.sh

# Report what the test suite will run against.
.venv/bin/python -c 'import h5py; print("h5py", h5py.__version__, "HDF5", h5py.version.hdf5_version)'
.venv-114/bin/python -c 'import h5py; print("h5py", h5py.__version__, "HDF5", h5py.version.hdf5_version)'
.venv/bin/cmake --version | head -1
