#!/usr/bin/env bash
# The main job (README): installs what it needs, builds the plugin and the h5gds tool, and runs
# `h5gds bench` on default data. Extra arguments go to `h5gds bench`.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || . "$HOME/.cargo/env"

./scripts/setup.sh >/dev/null
export PATH="$PWD/.venv/bin:$PATH"   # cmake, for HDF5 built from source by hdf5-metno-sys

cargo build --release -p h5gds-vfd -p h5gds-cli
exec target/release/h5gds bench "$@"
