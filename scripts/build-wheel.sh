#!/usr/bin/env bash
# The wheel clusters accept: abi3 for CPython 3.9+, glibc 2.28 symbols only (manylinux_2_28: RHEL/
# Rocky 8 and 9, Ubuntu 20.04 and later), linked with zig (ziglang from PyPI, scripts/setup.sh) on
# this newer system. Usage: scripts/build-wheel.sh OUT_DIR (after scripts/setup.sh).
#
# Rust's unwinder comes from the system's libgcc_s.so.1, the one glibc's own forced unwinding
# (pthread_exit, which CPython before 3.14 calls in daemon threads at interpreter exit) uses. Left
# to itself, zig links LLVM's libunwind into the module, and a forced unwind through the module's
# frames then mixes two unwinders and crashes the process (test_package.py's exit test).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/build-wheel.sh OUT_DIR}
libgcc_s=$(gcc -print-file-name=libgcc_s.so.1)
[ -f "$libgcc_s" ] || { echo "no libgcc_s.so.1 ($libgcc_s)" >&2; exit 1; }
RUSTFLAGS="-C link-arg=$libgcc_s" PATH="$PWD/.venv/bin:$PATH" \
  .venv/bin/maturin build --release --quiet --zig --compatibility manylinux_2_28 -o "$out"
