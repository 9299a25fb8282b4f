#!/usr/bin/env bash
# The test command (README, .ci/run): installs what the tests need, builds the plugin, runs the
# Rust tests (unit, property, ABI layout, C-API HDF5 program), the h5py tests, and the Python
# package's tests against its wheel installed into a fresh environment.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || . "$HOME/.cargo/env"

./scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"   # cmake, for HDF5 built from source by hdf5-metno-sys
# libclang for the checks of the cufile-sys and nvcomp-sys bindings against their headers
export LIBCLANG_PATH="$(.venv/bin/python -c 'import clang, os; print(os.path.join(os.path.dirname(clang.__file__), "native"))')"

cargo build --release -p h5gds-vfd
readelf -d target/release/libh5gds.so | grep -q 'NEEDED.*libhdf5' && {
  echo "target/release/libh5gds.so must not link libhdf5" >&2
  exit 1
}
# The CPU stand-ins for libcuda/libcufile and libnvcomp used by device tests
cargo build -p h5gds-cuda-emulator -p h5gds-nvcomp-emulator
cargo test --workspace
.venv/bin/python -m pytest -q tests/python --ignore=tests/python/package

# The Python package as a user gets it: the wheel (maturin, pyproject.toml) installed into fresh
# environments with h5py and numpy from PyPI, so a file missing from the wheel fails here; once
# with .venv's h5py (HDF5 2.x), once with .venv-114's (HDF5 1.14).
rm -rf target/wheels .venv-wheel .venv-wheel-114
.venv/bin/maturin build --release --quiet -o target/wheels
for env in .venv .venv-114; do
  wheel_env=.venv-wheel${env#.venv}
  "${PYTHON:-python3}" -m venv "$wheel_env"
  pins=$("$env/bin/python" -c 'import h5py, numpy; print(f"h5py=={h5py.__version__} numpy=={numpy.__version__}")')
  # shellcheck disable=SC2086 # two requirements
  "$wheel_env/bin/python" -m pip install --quiet --disable-pip-version-check $pins pytest target/wheels/h5gds-*.whl
  # From tests/python/package, so `import h5gds` can only find the installed package.
  (cd tests/python/package && "../../../$wheel_env/bin/python" -m pytest -q -p no:cacheprovider .)
done
