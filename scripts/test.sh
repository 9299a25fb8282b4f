#!/usr/bin/env bash
# The test command (README, .ci/run): installs what the tests need, builds the plugin, runs the
# Rust tests (unit, property, ABI layout, C-API HDF5 program) and the h5py tests.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || . "$HOME/.cargo/env"

./scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"   # cmake, for HDF5 built from source by hdf5-metno-sys
# libclang for the check of the cufile-sys bindings against cufile.h
export LIBCLANG_PATH="$(.venv/bin/python -c 'import clang, os; print(os.path.join(os.path.dirname(clang.__file__), "native"))')"

cargo build --release -p h5gds-vfd
readelf -d target/release/libh5gds.so | grep -q 'NEEDED.*libhdf5' && {
  echo "target/release/libh5gds.so must not link libhdf5" >&2
  exit 1
}
cargo build -p h5gds-cuda-emulator   # the CPU stand-in for libcuda/libcufile used by device tests
cargo test --workspace
.venv/bin/python -m pytest -q tests/python
