#!/usr/bin/env bash
# The main job (README): installs what it needs, builds the plugin and the h5gds tool, and runs
# `h5gds bench` on default data: host benchmarks, then device benchmarks. Without a real CUDA
# driver on this machine the device benchmarks run on h5gds's CPU emulator of CUDA and cuFile
# and are labelled EMULATED. Extra arguments go to `h5gds bench` (e.g. --size 256M --reps 3,
# --json out.json, --plot out.svg).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || . "$HOME/.cargo/env"

./scripts/setup.sh >/dev/null
export PATH="$PWD/.venv/bin:$PATH"   # cmake, for HDF5 built from source by hdf5-metno-sys

cargo build --release -p h5gds-vfd -p h5gds-cli -p h5gds-cuda-emulator
# The aarch64 wheel (Grace machines), cross-compiled here (docs/python.md, "aarch64"), about ten
# minutes on two cores the first time; cargo rebuilds only what changed, so scripts/test.sh, which
# tests it, finds only h5gds-vfd and the five workspace crates above it to rebuild after this.
scripts/build-wheel.sh target/wheels-aarch64 aarch64

if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then
  emu=target/emulator-lib
  mkdir -p "$emu"
  for name in libcuda.so.1 libcuda.so libcufile.so.0; do
    ln -sf "$PWD/target/release/libh5gds_emu.so" "$emu/$name"
  done
  export LD_LIBRARY_PATH="$PWD/$emu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export H5GDS_EMU_POISON=off   # poisoning fresh device memory is for tests, not timing
fi
exec target/release/h5gds bench "$@"
