#!/usr/bin/env bash
# The device tests on a machine with an NVIDIA GPU (docs/verifying-on-a-gpu.md): the test
# programs read into and write from real device memory through the machine's libcuda and
# libcufile. Tests that need the CPU emulator (its switches, fault injection, exit report) are
# compiled as ignored (H5GDS_TEST_REAL_CUDA=1 sets the `real_cuda` cfg): they are listed as
# ignored, never counted as passed. The last line counts what ran on the GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || . "$HOME/.cargo/env"

./scripts/setup.sh >/dev/null
export PATH="$PWD/.venv/bin:$PATH"   # cmake, for HDF5 built from source by hdf5-metno-sys

cargo build --release -p h5gds-vfd -p h5gds-cli
target/release/h5gds info
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
H5GDS_TEST_REAL_CUDA=1 cargo test -p h5gds-tests --test device_paths 2>&1 | tee "$log" || status=$?
summary=$(grep -E '^test result: ' "$log" | tail -n 1 || true)
passed=$(sed -nE 's/.* ([0-9]+) passed.*/\1/p' <<<"$summary")
failed=$(sed -nE 's/.* ([0-9]+) failed.*/\1/p' <<<"$summary")
ignored=$(sed -nE 's/.* ([0-9]+) ignored.*/\1/p' <<<"$summary")
echo "ON THE REAL GPU: ${passed:-0} device tests passed, ${failed:-?} failed;" \
  "${ignored:-?} need the emulator and were not run"
exit "$status"
