#!/usr/bin/env bash
# The wheel clusters accept: abi3 for CPython 3.9+, glibc 2.28 symbols only (manylinux_2_28: RHEL/
# Rocky 8 and 9, Ubuntu 20.04 and later), linked with zig (ziglang from PyPI, scripts/setup.sh) on
# this newer system. Usage: scripts/build-wheel.sh OUT_DIR (after scripts/setup.sh). x86-64 only:
# no aarch64 build yet (docs/python.md, "aarch64", says what one needs).
#
# Rust's unwinder comes from the system's libgcc_s.so.1, the one glibc's own forced unwinding
# (pthread_exit, which CPython before 3.14 calls in daemon threads at interpreter exit) uses. Left
# to itself, zig links LLVM's libunwind into the module, and a forced unwind through the module's
# frames then mixes two unwinders and crashes the process (test_package.py's exit test).
#
# The C code inside (zstd-sys, lz4-sys, libdeflate-sys: the host codecs) is compiled by the
# system's gcc, as pip's build from the sdist compiles it, at the release profile's optimization
# (the cc crate passes -O3); zig still links, against glibc 2.28. Through `zig cc`, which maturin's
# --zig makes every crate's C compiler, -O3 becomes clang's -O2 (zig maps each -O level to a mode
# of its own): the wheel decoded Zstandard at 0.87x and gzip at 0.95x the sdist's build (issue 50).
# maturin sets CC_<target> only where it is unset. -frecord-gcc-switches keeps each compilation's
# options in the module (.GCC.command.line), which scripts/test.sh checks.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/build-wheel.sh OUT_DIR}
libgcc_s=$(gcc -print-file-name=libgcc_s.so.1)
[ -f "$libgcc_s" ] || { echo "no libgcc_s.so.1 ($libgcc_s)" >&2; exit 1; }
export CC_x86_64_unknown_linux_gnu=gcc CFLAGS_x86_64_unknown_linux_gnu=-frecord-gcc-switches
# The vfd-gds compatibility library (docs/legate-and-vfd-gds.md) goes into the package as
# h5gds/libhdf5_vfd_gds.so.1 (h5gds.vfd_gds_compat_library()), linked as the module is: glibc 2.28
# symbols through maturin's zig wrapper (for the target only, as maturin does: hence --target), the
# system's libgcc_s.
zigcc="$PWD/target/zig-cc-x86_64-linux-gnu.2.28.sh"
mkdir -p target
printf '#!/bin/sh\nexec "%s/.venv/bin/maturin" zig cc -- -target x86_64-linux-gnu.2.28 "$@"\n' "$PWD" >"$zigcc"
chmod +x "$zigcc"
RUSTFLAGS="-C link-arg=$libgcc_s" CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER="$zigcc" \
  PATH="$PWD/.venv/bin:$PATH" cargo build --release --quiet --target x86_64-unknown-linux-gnu \
  -p h5gds-vfd-gds-compat
strip --strip-debug -o python/h5gds/libhdf5_vfd_gds.so.1 \
  target/x86_64-unknown-linux-gnu/release/libhdf5_vfd_gds.so
RUSTFLAGS="-C link-arg=$libgcc_s" PATH="$PWD/.venv/bin:$PATH" \
  .venv/bin/maturin build --release --quiet --zig --compatibility manylinux_2_28 -o "$out"
