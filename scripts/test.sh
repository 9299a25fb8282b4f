#!/usr/bin/env bash
# The test command (README, .ci/run): installs what the tests need, builds the plugin, runs the
# Rust tests (unit, property, ABI layout, C-API HDF5 program), the h5py tests, and the Python
# package's tests (python/tests) against its wheel installed into a fresh environment.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || . "$HOME/.cargo/env"

./scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"   # cmake, for HDF5 built from source by hdf5-metno-sys
# libclang for the checks of the cufile-sys and nvcomp-sys bindings against their headers
export LIBCLANG_PATH="$(.venv/bin/python -c 'import clang, os; print(os.path.join(os.path.dirname(clang.__file__), "native"))')"
# ... and the C compiler's own headers (stddef.h) for bindgen runs that add none, such as the
# mpi crate's bindings of Open MPI's mpi.h: a libclang from PyPI ships no resource headers.
export BINDGEN_EXTRA_CLANG_ARGS="-isystem $(gcc -print-file-name=include)"

cargo build --release -p h5gds-vfd -p h5gds-vfd-gds-compat
# Nor do they refer to an HDF5 symbol: every HDF5 call goes through h5gds_runtime::hdf5's tables,
# filled from the calling HDF5 at run time (an undefined H5* would bind to whichever HDF5 is global).
for lib in libh5gds.so libhdf5_vfd_gds.so; do
  if readelf -d "target/release/$lib" | grep -q 'NEEDED.*libhdf5' ||
    nm -D --undefined-only "target/release/$lib" | grep -q ' H5'; then
    echo "target/release/$lib must not link libhdf5 nor refer to HDF5's symbols" >&2
    exit 1
  fi
done
readelf -d target/release/libhdf5_vfd_gds.so | grep -q 'SONAME.*\[libhdf5_vfd_gds.so.1\]' || {
  echo "target/release/libhdf5_vfd_gds.so must have vfd-gds's soname, libhdf5_vfd_gds.so.1" >&2
  exit 1
}
# The CPU stand-ins for libcuda/libcufile and libnvcomp used by device tests
cargo build -p h5gds-cuda-emulator -p h5gds-nvcomp-emulator
cargo test --workspace
# Collective I/O over MPI (array-io's feature `mpi`): a test program under
# `mpirun -np N --oversubscribe` for N = 1..4, each job inside `timeout`, files checked by h5py.
cargo test -p h5gds-tests --features mpi --test mpi
# The real-GPU test set (what scripts/test-gpu.sh runs on a GPU: the tests that need the emulator
# compiled as ignored) on the emulator configured as the first real-GPU machine, an H200 VM
# without nvidia-fs whose cuFile registered no file handle (5027): a test that assumes GDS
# where the machine gives the staged path fails here.
H5GDS_TEST_REAL_CUDA=1 H5GDS_TEST_EMULATED_MACHINE=h200-vm cargo test -p h5gds-tests --test device_paths
.venv/bin/python -m pytest -q tests/python
# The face-parity test (python/tests/test_face_parity.py) runs each scenario through array-io too
# (its collective rows under mpirun: the probe built with the feature `mpi`).
cargo build -p array-io --features mpi --example face_probe

# The Python package as a user gets it: the wheel (maturin, pyproject.toml) installed into fresh
# environments with h5py and numpy from PyPI, so a file missing from the wheel fails here; once
# with .venv's h5py (HDF5 2.x), once with .venv-114's (HDF5 1.14). netCDF4 brings another private
# HDF5 (1.14.2) into the same process, for the tests of h5gds next to another HDF5 wheel.
rm -rf target/wheels .venv-wheel .venv-wheel-114
# The emulator under the names of the libraries it stands in for (as tests/support/emulator.rs links them).
emulator_libs="$PWD/target/emulator-lib-python"
mkdir -p "$emulator_libs"
for name in libcuda.so.1 libcuda.so libcufile.so.0 libcufile.so; do
  ln -sf "$PWD/target/debug/libh5gds_emu.so" "$emulator_libs/$name"
done
# nvCOMP's emulator as libnvcomp.so.6 (as tests/support/nvcomp_emulator.rs links it): h5gds.read
# decodes compressed chunks on the emulated GPU (test_gpu_codec.py).
ln -sf "$PWD/target/debug/libh5gds_emu_nvcomp.so" "$emulator_libs/libnvcomp.so.6"
# A wheel clusters accept: glibc 2.28 symbols only (zig as linker), abi3, checked by auditwheel.
scripts/build-wheel.sh target/wheels
wheel=$(ls target/wheels/h5gds-*-cp39-abi3-manylinux_2_28_x86_64.whl)
# The extension module, like the driver, links no libhdf5 and refers to no HDF5 symbol.
module_dir=$(mktemp -d)
.venv/bin/python -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("h5gds/_native.abi3.so", sys.argv[2])' \
  "$wheel" "$module_dir"
if readelf -d "$module_dir/h5gds/_native.abi3.so" | grep -q 'NEEDED.*libhdf5' ||
  nm -D --undefined-only "$module_dir/h5gds/_native.abi3.so" | grep -q ' H5'; then
  echo "$wheel: h5gds/_native.abi3.so must not link libhdf5 nor refer to HDF5's symbols" >&2
  exit 1
fi
# Its C code (the host codecs) compiled by gcc at the -O3 cargo's release profile asks for, which
# `zig cc` would turn into clang's -O2 (scripts/check-c-optimization.py says how it is checked).
readelf -p .GCC.command.line "$module_dir/h5gds/_native.abi3.so" 2>/dev/null |
  .venv/bin/python scripts/check-c-optimization.py "$wheel"
rm -rf "$module_dir"
# The sdist builds a wheel where Rust is present (pip's own build, maturin fetched from PyPI),
# from scratch: the sdist's files carry one fixed timestamp, so a reused build directory could
# take its stale objects for fresh ones. That build (the whole release graph again, with gcc as
# linker: several minutes of both cores) runs in the background at the lowest priority while the
# Python tests below run, which mostly keep one core busy; its wheel is checked after them, and
# its output is shown if it failed. Its own process group, stopped if this script stops first.
.venv/bin/maturin sdist -o target/wheels >/dev/null
rm -rf target/sdist-wheel target/sdist-build
sdist_log=target/sdist-build.log
CARGO_TARGET_DIR="$PWD/target/sdist-build" setsid nice -n 19 .venv/bin/python -m pip wheel --quiet \
  --disable-pip-version-check --no-deps -w target/sdist-wheel target/wheels/h5gds-*.tar.gz >"$sdist_log" 2>&1 &
sdist_pid=$!
trap '[ -z "${sdist_pid:-}" ] || kill -- "-$sdist_pid" 2>/dev/null || true' EXIT
.venv/bin/auditwheel show "$wheel" | tr -s '\n ' ' ' | grep -q 'consistent with the following platform tag: "manylinux_2_28_x86_64"' || {
  .venv/bin/auditwheel show "$wheel" >&2
  echo "$wheel is not a manylinux_2_28 wheel" >&2
  exit 1
}
# The wheels hold the package (python/h5gds/: pyproject.toml's python-source and module-name), its
# metadata and the xarray start-up hook for site-packages (python/h5gds.data/purelib/: the .pth file
# and its module), not the package's tests beside it (python/tests/).
check_wheel_files() {
  .venv/bin/python -c 'import re, sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
data = [n for n in names if re.match(r"h5gds-[^/]*\.data/", n)]
hook = sorted(n.split("/", 1)[1] for n in data)
extra = [n for n in names if not n.startswith(("h5gds/", "h5gds-"))]
if extra or hook != ["purelib/_h5gds_xarray_hook.py", "purelib/h5gds_xarray.pth"]:
    sys.exit(f"{sys.argv[1]}: outside the h5gds package {extra}; .data files {hook}, expected the two of the xarray hook")' "$1"
}
check_wheel_files "$wheel"
for env in .venv .venv-114; do
  wheel_env=.venv-wheel${env#.venv}
  "${PYTHON:-python3}" -m venv "$wheel_env"
  pins=$("$env/bin/python" -c 'import h5py, numpy; print(f"h5py=={h5py.__version__} numpy=={numpy.__version__}")')
  # shellcheck disable=SC2086 # two requirements
  "$wheel_env/bin/python" -m pip install --quiet --disable-pip-version-check $pins pytest netCDF4==1.7.2 hdf5plugin==7.1.0 zstandard==0.25.0 \
    xarray==2026.9.0 h5netcdf==1.8.2 dask==2026.8.0 distributed==2026.8.0 cuda-pathfinder==1.9.0 "moto[server]==5.2.6" "$wheel[xarray]"
  # (distributed: test_dask.py's 2-process LocalCluster, with the release of the same date as dask;
  # moto: the S3 server test_remote_faces.py starts on loopback.)
  # mpi4py for the collective calls' tests (python/tests/test_mpi.py), built against Open
  # MPI as in .venv (pip reuses the wheel it built there).
  MPICC=mpicc "$wheel_env/bin/python" -m pip install --quiet --disable-pip-version-check \
    --no-binary=mpi4py "mpi4py>=4,<5"
  # From python/tests, so `import h5gds` can only find the installed package (python/, which holds
  # the package's sources, is never on the path; conftest.py refuses to run if it were).
  (cd python/tests && "../../$wheel_env/bin/python" -m pytest -q -p no:cacheprovider --ignore=test_xarray_suite.py .)
  # xarray's own h5netcdf test classes as engine="h5gds", in a process that imports xarray alone
  # (engine="h5gds" writes through the wheel's start-up hook, as in a user's process).
  (cd python/tests && "../../$wheel_env/bin/python" -m pytest -q -p no:cacheprovider test_xarray_suite.py)
  # The device-array tests, in a process whose libcuda and libcufile are the emulator (test_device.py
  # and test_mpi_device.py skip in the run above, which has no CUDA driver; here they must run), with
  # two emulated devices; test_mpi_device.py's MPI ranks inherit the emulator from this environment.
  (cd python/tests && LD_LIBRARY_PATH="$emulator_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    H5GDS_REQUIRE_DEVICE_TESTS=1 H5GDS_EMU_DEVICES=2 "../../$wheel_env/bin/python" -m pytest -q -p no:cacheprovider \
    test_device.py test_gpu_codec.py test_mpi_device.py)
  # The face-parity test's device rows (its host rows ran above), both faces over the emulator.
  (cd python/tests && LD_LIBRARY_PATH="$emulator_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    H5GDS_REQUIRE_DEVICE_TESTS=1 H5GDS_EMU_DEVICES=2 "../../$wheel_env/bin/python" -m pytest -q -p no:cacheprovider \
    test_face_parity.py -k test_device_)
done
# The sdist's wheel (built in the background since the sdist was made), checked as the other.
status=0
wait "$sdist_pid" || status=$?
sdist_pid=
if [ "$status" -ne 0 ]; then
  cat "$sdist_log" >&2
  echo "the wheel built from the sdist failed (exit status $status)" >&2
  exit 1
fi
ls target/sdist-wheel/h5gds-*-cp39-abi3-*.whl >/dev/null
check_wheel_files target/sdist-wheel/h5gds-*-cp39-abi3-*.whl
# `pip install h5gds[cu12]`: cuFile and nvCOMP from NVIDIA's wheels, found in site-packages with
# LD_LIBRARY_PATH unset (both load without a GPU).
rm -rf .venv-wheel-cu12
"${PYTHON:-python3}" -m venv .venv-wheel-cu12
pins=$(.venv/bin/python -c 'import h5py, numpy; print(f"h5py=={h5py.__version__} numpy=={numpy.__version__}")')
# shellcheck disable=SC2086 # two requirements
.venv-wheel-cu12/bin/python -m pip install --quiet --disable-pip-version-check $pins pytest cuda-pathfinder==1.9.0 \
  "$wheel[cu12]"
(cd python/tests && env -u LD_LIBRARY_PATH H5GDS_EXPECT_NVIDIA_WHEELS=cu12 \
  ../../.venv-wheel-cu12/bin/python -m pytest -q -p no:cacheprovider test_nvidia_libraries.py)
# The aarch64 wheel (Grace machines): cross-compiled here, checked as the x86-64 one is (auditwheel's
# manylinux_2_28, its C code at -O3), and a smoke set of it run under qemu-aarch64
# (scripts/test-aarch64-wheel.sh). scripts/bench.sh builds it: cargo then rebuilds h5gds-vfd and the
# five workspace crates above it (docs/python.md, "aarch64": vfd's dependencies' features differ
# between the library's and the module's graphs), not the dependency graph.
rm -rf target/wheels-aarch64
scripts/build-wheel.sh target/wheels-aarch64 aarch64
scripts/test-aarch64-wheel.sh target/wheels-aarch64/h5gds-*-cp39-abi3-manylinux_2_28_aarch64.whl
# The one-command GPU run (`scripts/gpu-measure.sh all`, packed by scripts/gpu-pack.sh as for a GPU
# machine) rehearsed at small sizes on the emulators, so it cannot rot between GPU sessions
# (about 2 minutes on two cores: the pack, then the run).
scripts/test-gpu-measure.sh .venv-wheel/bin/python
