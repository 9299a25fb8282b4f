#!/usr/bin/env bash
# Legate (legate.io.hdf5 with LEGATE_IO_USE_VFD_GDS=1) on h5gds's vfd-gds compatibility library:
# to_file, from_file and from_file_batched round-trip exactly with libhdf5_vfd_gds.so.1 preloaded,
# where Legate's own vfd-gds aborts the process. Kept out of scripts/test.sh: Legate and the CUDA
# runtime it needs to import are about 600 MB from PyPI. libcuda is the project's CUDA emulator
# with no device (cuInit: CUDA_ERROR_NO_DEVICE), as on a machine without a GPU.
# Usage: scripts/test-legate.sh (after scripts/setup.sh; installs into .venv-legate/).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || . "$HOME/.cargo/env"

cargo build --release -p h5gds-vfd-gds-compat
cargo build -p h5gds-cuda-emulator
[ -x .venv-legate/bin/python ] || "${PYTHON:-python3}" -m venv .venv-legate
.venv-legate/bin/python -m pip install --quiet --disable-pip-version-check \
  legate==26.6.1 "nvidia-cuda-runtime==13.*"

libs=$(mktemp -d)
trap 'rm -rf "$libs"' EXIT
ln -s "$PWD/target/debug/libh5gds_emu.so" "$libs/libcuda.so.1"
cudart=$(.venv-legate/bin/python -c 'import nvidia, os; print(next(os.path.join(p, "cu13", "lib") for p in nvidia.__path__ if os.path.isdir(os.path.join(p, "cu13", "lib"))))')
work=$(mktemp -d)
LD_LIBRARY_PATH="$libs:$cudart" H5GDS_EMU_DEVICES=0 LEGATE_AUTO_CONFIG=0 \
  LEGATE_CONFIG="--cpus 1 --gpus 0 --sysmem 1024 --utility 1" \
  .venv-legate/bin/python tests/legate/legate_vfd_gds.py "$PWD/target/release/libhdf5_vfd_gds.so" "$work"
rm -rf "$work"
