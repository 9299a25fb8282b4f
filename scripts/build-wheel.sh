#!/usr/bin/env bash
# The wheel clusters accept: abi3 for CPython 3.9+, glibc 2.28 symbols only (manylinux_2_28: RHEL/
# Rocky 8 and 9, Ubuntu 20.04 and later), linked with zig (ziglang from PyPI, scripts/setup.sh) on
# this newer system. Usage: scripts/build-wheel.sh OUT_DIR [x86_64|aarch64] (after scripts/setup.sh;
# default x86_64). aarch64 (Grace machines: GH200, GB200) is cross-compiled here, from Debian's
# archive and PyPI only (docs/python.md, "aarch64"): Debian's rustc-web with its arm64 standard
# library (scripts/setup-aarch64.sh unpacks them into target/aarch64/; rustup's servers are out of
# reach), Debian's gcc-aarch64-linux-gnu for the C code, zig linking against glibc 2.28, in a
# target directory of its own (target/aarch64/build: another rustc's artifacts).
#
# Rust's unwinder comes from the system's libgcc_s.so.1, the one glibc's own forced unwinding
# (pthread_exit, which CPython before 3.14 calls in daemon threads at interpreter exit) uses. Left
# to itself, zig links LLVM's libunwind into the module, and a forced unwind through the module's
# frames then mixes two unwinders and crashes the process (test_package.py's exit test).
#
# The C code inside (zstd-sys, lz4-sys, libdeflate-sys: the host codecs) is compiled by the
# system's gcc (aarch64-linux-gnu-gcc for aarch64), as pip's build from the sdist compiles it, at the release profile's optimization
# (the cc crate passes -O3); zig still links, against glibc 2.28. Through `zig cc`, which maturin's
# --zig makes every crate's C compiler, -O3 becomes clang's -O2 (zig maps each -O level to a mode
# of its own): the wheel decoded Zstandard at 0.87x and gzip at 0.95x the sdist's build (issue 50).
# maturin sets CC_<target> only where it is unset. -frecord-gcc-switches keeps each compilation's
# options in the module (.GCC.command.line), which scripts/test.sh checks.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/build-wheel.sh OUT_DIR [x86_64|aarch64]}
arch=${2:-x86_64}
case $arch in
  x86_64) gcc=gcc strip=strip ;;
  aarch64)
    gcc=aarch64-linux-gnu-gcc strip=aarch64-linux-gnu-strip
    toolchain="$PWD/target/aarch64"
    [ -f "$toolchain/setup.done" ] && command -v "$gcc" >/dev/null || {
      echo "build-wheel.sh: no aarch64 toolchain in $toolchain: run scripts/setup.sh first" >&2
      exit 1
    }
    export RUSTC="$toolchain/rustc" CARGO_TARGET_DIR="$toolchain/build"
    export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar ;;
  *) echo "build-wheel.sh: unknown architecture '$arch' (x86_64 or aarch64)" >&2; exit 1 ;;
esac
triple=$arch-unknown-linux-gnu
target_env=${triple//-/_}
libgcc_s=$($gcc -print-file-name=libgcc_s.so.1)
[ -f "$libgcc_s" ] || { echo "no libgcc_s.so.1 for $arch ($libgcc_s)" >&2; exit 1; }
export "CC_$target_env=$gcc" "CFLAGS_$target_env=-frecord-gcc-switches"
# The vfd-gds compatibility library (docs/legate-and-vfd-gds.md) goes into the package as
# h5gds/libhdf5_vfd_gds.so.1 (h5gds.vfd_gds_compat_library()), linked as the module is: glibc 2.28
# symbols through maturin's zig wrapper (for the target only, as maturin does: hence --target), the
# system's libgcc_s. The aarch64 build leaves there what it found (the x86-64 copy, or none).
zigcc="$PWD/target/zig-cc-$arch-linux-gnu.2.28.sh"
mkdir -p target
printf '#!/bin/sh\nexec "%s/.venv/bin/maturin" zig cc -- -target %s-linux-gnu.2.28 "$@"\n' "$PWD" "$arch" >"$zigcc"
chmod +x "$zigcc"
compat=python/h5gds/libhdf5_vfd_gds.so.1
if [ "$arch" != x86_64 ]; then
  if [ -f "$compat" ]; then
    saved=$(mktemp)
    cp -p "$compat" "$saved"
    trap 'mv -f "$saved" "$compat"' EXIT
  else
    # (none to put back: none left either, or `pip install .` would pack the aarch64 one)
    trap 'rm -f "$compat"' EXIT
  fi
fi
# One build of the shared dependency graph per architecture (the library and the module share all
# but one of the library's 169 crates): cargo's fingerprints include the target's linker, for every
# crate of that target and, where host and target are one (x86_64), for the build scripts and proc
# macros too, so the two steps link with the one wrapper above (maturin's own, in its cache, is
# another file: `--config` outranks the CARGO_TARGET_<triple>_LINKER maturin sets); otherwise maturin's
# step rebuilt the graph the library's step had just built, and the next run's library step
# rebuilt it again. Each architecture builds in a target directory of its own: the x86-64 one
# apart from target/release, whose plain builds (the plugin, scripts/test.sh and gpu-pack.sh) link
# their build scripts and proc macros with cc, where sharing would rebuild everything that uses a
# proc macro at each switch; the aarch64 one has another rustc (target/aarch64/build).
# Maturin (cargo-zigbuild) also sets, for its step only, CXX_, RANLIB_ (and AR_) for the target
# where they are unset, whose change reruns the build scripts that read them (aws-lc-sys reads
# CXX_, cc's RANLIB_ and AR_) and rebuilds everything above them: they are set here for both
# (no crate of the graph compiles C++: CXX_ only has to be the same at both steps).
# Where host and target are one, maturin makes cargo link the build scripts and proc macros
# without the target's linker (target-applies-to-host=false), where the library's plain cargo step
# links them with it (cargo's default, true): `--config target-applies-to-host=true` keeps
# maturin's step to the default.
applies_to_host=()
case $arch in
  x86_64) target_dir=${CARGO_TARGET_DIR:-$PWD/target}/wheel-x86_64
    export AR_x86_64_unknown_linux_gnu=ar RANLIB_x86_64_unknown_linux_gnu=ranlib CXX_x86_64_unknown_linux_gnu=g++
    applies_to_host=(--config target-applies-to-host=true) ;;
  aarch64) target_dir=$CARGO_TARGET_DIR
    export RANLIB_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ranlib CXX_aarch64_unknown_linux_gnu=aarch64-linux-gnu-g++ ;;
esac
export CARGO_TARGET_DIR=$target_dir
RUSTFLAGS="-C link-arg=$libgcc_s" env "CARGO_TARGET_${target_env^^}_LINKER=$zigcc" \
  PATH="$PWD/.venv/bin:$PATH" cargo build --release --quiet --target "$triple" -p h5gds-vfd-gds-compat
$strip --strip-debug -o "$compat" "$target_dir/$triple/release/libhdf5_vfd_gds.so"
RUSTFLAGS="-C link-arg=$libgcc_s" PATH="$PWD/.venv/bin:$PATH" \
  .venv/bin/maturin build --release --quiet --zig --target "$triple" --config "target.$triple.linker=\"$zigcc\"" \
  "${applies_to_host[@]}" --compatibility manylinux_2_28 -o "$out"
