#!/usr/bin/env bash
# The aarch64 wheel (Grace machines), checked on this x86-64 machine: what its files say (aarch64,
# manylinux_2_28 by auditwheel, no libhdf5, its C code by gcc at -O3), then a smoke set under
# emulation: qemu-aarch64 running Debian's arm64 CPython with PyPI's aarch64 h5py, NumPy and
# hdf5plugin (scripts/setup-aarch64.sh, run by scripts/setup.sh): import, `h5gds info`, a round trip
# through driver="gds", compressed reads decoded by the wheel's own code (python/tests/aarch64_smoke.py).
# Usage: scripts/test-aarch64-wheel.sh WHEEL (run by scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
wheel=${1:?usage: scripts/test-aarch64-wheel.sh WHEEL}
toolchain=$PWD/target/aarch64
[ -f "$toolchain/setup.done" ] || { echo "no aarch64 toolchain in $toolchain: run scripts/setup.sh" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
.venv/bin/auditwheel show "$wheel" | tr -s '\n ' ' ' |
  grep -q 'consistent with the following platform tag: "manylinux_2_28_aarch64"' || {
  .venv/bin/auditwheel show "$wheel" >&2
  echo "$wheel is not a manylinux_2_28 aarch64 wheel" >&2
  exit 1
}
.venv/bin/python -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for name in ("h5gds/_native.abi3.so", "h5gds/libhdf5_vfd_gds.so.1"):
    z.extract(name, sys.argv[2])' "$wheel" "$work"
for lib in _native.abi3.so libhdf5_vfd_gds.so.1; do
  machine=$(readelf -h "$work/h5gds/$lib" | awk -F: '/Machine:/ { gsub(/^ +/, "", $2); print $2 }')
  [ "$machine" = AArch64 ] || { echo "$wheel: h5gds/$lib is built for '$machine', not AArch64" >&2; exit 1; }
  # As on x86-64: no libhdf5 linked, no HDF5 symbol referred to (the driver joins h5py's HDF5).
  if readelf -d "$work/h5gds/$lib" | grep -q 'NEEDED.*libhdf5' ||
    aarch64-linux-gnu-nm -D --undefined-only "$work/h5gds/$lib" | grep -q ' H5'; then
    echo "$wheel: h5gds/$lib must not link libhdf5 nor refer to HDF5's symbols" >&2
    exit 1
  fi
done
switches=$(readelf -p .GCC.command.line "$work/h5gds/_native.abi3.so" 2>/dev/null)
.venv/bin/python scripts/check-c-optimization.py "$wheel" <<<"$switches"
grep -q 'GNU C.*-mabi=lp64' <<<"$switches" || {
  echo "$wheel: its C code was not compiled by an aarch64 gcc (no -mabi=lp64 recorded)" >&2
  exit 1
}

# The wheel installed as pip installs it on an aarch64 machine (its dependencies are in
# target/aarch64/site), then run under qemu-user: no binfmt registration, Debian's arm64 root as -L.
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --target "$work/pkg" \
  --platform manylinux_2_28_aarch64 --python-version 3.11 --implementation cp --only-binary=:all: "$wheel"
py_a64() {
  env -u LD_LIBRARY_PATH PYTHONPATH="$work/pkg:$toolchain/site" PYTHONDONTWRITEBYTECODE=1 \
    "$toolchain/qemu/usr/bin/qemu-aarch64-static" -L "$toolchain/root" "$toolchain/root/usr/bin/python3.11" "$@"
}
py_a64 -m h5gds info >"$work/info.txt"
grep -q "^plugin: *$work/pkg/h5gds/_native.abi3.so$" "$work/info.txt" &&
  grep -q '^host buffers: *POSIX pread/pwrite' "$work/info.txt" &&
  grep -q '^CUDA: *not usable' "$work/info.txt" || {
  cat "$work/info.txt" >&2
  echo "h5gds info under qemu-aarch64: not the report expected of the installed wheel without CUDA" >&2
  exit 1
}
py_a64 python/tests/aarch64_smoke.py write "$work"
py_a64 python/tests/aarch64_smoke.py read "$work"
echo "aarch64 wheel $(basename "$wheel"): manylinux_2_28_aarch64, C code at -O3 by aarch64 gcc, smoke set passed under qemu"
