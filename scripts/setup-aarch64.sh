#!/usr/bin/env bash
# What the aarch64 wheel (scripts/build-wheel.sh OUT_DIR aarch64) and its smoke test under
# emulation (scripts/test-aarch64-wheel.sh) need, on this x86-64 machine, from Debian's archive and
# PyPI only (rustup's servers are out of reach, so `rustup target add` is not a way), run by
# scripts/setup.sh. Into target/aarch64/:
#   rust/         Debian 12's rustc-web for amd64 with its standard library for both amd64 (build
#                 scripts, proc macros) and arm64 (the wheel): one Debian build, so the two match;
#                 rustup's rustc cannot use an arm64 std built by another rustc.
#   qemu/         qemu-aarch64-static (Debian's qemu-user-static, unpacked: no binfmt registration)
#   root/         Debian's python3.11 for arm64 and the libraries it and the wheels load, unpacked
#                 (qemu's -L root)
#   site/         PyPI's aarch64 wheels of h5py, NumPy, hdf5plugin and cuda-pathfinder for it
# The .debs are fetched by apt-get with a private state (target/aarch64/apt/: amd64 and arm64
# lists), so the system's dpkg gains no foreign architecture. System-wide (apt-get, only when
# missing): Debian's gcc-aarch64-linux-gnu (the wheel's C code at the -O3 cargo asks for, as gcc
# builds it for x86-64; its libgcc_s.so.1 is the unwinder the module links) and libllvm22 (which
# rustc-web loads). Idempotent: a second run checks a stamp.
set -euo pipefail
cd "$(dirname "$0")/.."

RUST_WEB=1.96     # Debian's rustc-web series (bookworm-security); the arm64 std must be the same build
PY_A64=3.11       # Debian 12's python3
# The smoke set's Python packages, as scripts/setup.sh pins them for x86-64
H5PY=3.16.0 NUMPY=2.4.6 HDF5PLUGIN=7.1.0 CUDA_PATHFINDER=1.9.0

dir=$PWD/target/aarch64
stamp="$dir/setup.done"
want="rust-web=$RUST_WEB python=$PY_A64 h5py=$H5PY numpy=$NUMPY hdf5plugin=$HDF5PLUGIN cuda-pathfinder=$CUDA_PATHFINDER"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo

missing=()
command -v aarch64-linux-gnu-gcc >/dev/null || missing+=(gcc-aarch64-linux-gnu)
dpkg-query -W -f='${Status}\n' libllvm22 2>/dev/null | grep -q 'ok installed' || missing+=(libllvm22)
if [ ${#missing[@]} -gt 0 ]; then
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi

rm -rf "$dir/apt" "$dir/debs" "$dir/rust" "$dir/qemu" "$dir/root" "$dir/site"
mkdir -p "$dir/apt/lists/partial" "$dir/apt/cache/archives/partial" "$dir/debs"
: >"$dir/apt/status"
cat >"$dir/apt/sources.list" <<'EOF'
deb [arch=amd64,arm64] http://deb.debian.org/debian bookworm main
deb [arch=amd64,arm64] http://deb.debian.org/debian bookworm-updates main
deb [arch=amd64,arm64] http://deb.debian.org/debian-security bookworm-security main
EOF
apt_private() {  # apt-get or apt-cache, then its arguments
  local tool=$1; shift
  "$tool" -qq -o Dir::State="$dir/apt" -o Dir::State::Lists="$dir/apt/lists" \
    -o Dir::State::status="$dir/apt/status" -o Dir::Cache="$dir/apt/cache" \
    -o Dir::Etc::SourceList="$dir/apt/sources.list" -o Dir::Etc::SourceParts=/nonexistent \
    -o APT::Architecture=amd64 -o APT::Architectures::=amd64 -o APT::Architectures::=arm64 \
    -o APT::Sandbox::User=root -o Debug::NoLocking=1 "$@"
}
apt_private apt-get update
version_of() {  # package[:arch] -> the candidate version in the private lists
  apt_private apt-cache policy "$1" | awk '/Candidate:/ { print $2 }'
}
rust_version=$(version_of "libstd-rust-web-$RUST_WEB")
[ -n "$rust_version" ] && [ "$rust_version" != "(none)" ] || {
  echo "setup-aarch64: Debian's archive has no libstd-rust-web-$RUST_WEB" >&2
  exit 1
}
(
  cd "$dir/debs"
  # rustc and both standard libraries at one version (apt-get refuses a mismatch)
  apt_private apt-get download "rustc-web=$rust_version" "libstd-rust-web-$RUST_WEB=$rust_version" \
    "libstd-rust-web-dev=$rust_version" "libstd-rust-web-dev:arm64=$rust_version" \
    qemu-user-static \
    "python$PY_A64-minimal:arm64" "libpython$PY_A64-minimal:arm64" "libpython$PY_A64-stdlib:arm64" \
    libc6:arm64 libgcc-s1:arm64 libstdc++6:arm64 zlib1g:arm64 libexpat1:arm64 libffi8:arm64 \
    libssl3:arm64 libbz2-1.0:arm64 liblzma5:arm64 libcrypt1:arm64 libuuid1:arm64
)
for deb in "$dir"/debs/*.deb; do
  case $deb in
    */rustc-web_*|*/libstd-rust-web-*_amd64.deb|*/libstd-rust-web-dev_*_arm64.deb) dpkg-deb -x "$deb" "$dir/rust" ;;
    */qemu-user-static_*) dpkg-deb -x "$deb" "$dir/qemu" ;;
    *_arm64.deb) dpkg-deb -x "$deb" "$dir/root" ;;
    *) echo "setup-aarch64: unexpected $deb" >&2; exit 1 ;;
  esac
done
rm -rf "$dir/debs" "$dir/apt/cache"
# qemu for aarch64 only (the package holds every architecture's, 370 MB)
find "$dir/qemu/usr/bin" -name 'qemu-*' ! -name qemu-aarch64-static -delete
# rustc-web's binary carries no run path to its librustc_driver (Debian installs it system-wide);
# its sysroot is found from the binary's place, so both standard libraries above are used.
cat >"$dir/rustc" <<EOF
#!/bin/sh
LD_LIBRARY_PATH="$dir/rust/usr/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$dir/rust/usr/bin/rustc" "\$@"
EOF
chmod +x "$dir/rustc"
[ -d "$dir/rust/usr/lib/rustlib/aarch64-unknown-linux-gnu/lib" ] || {
  echo "setup-aarch64: libstd-rust-web-dev:arm64 brought no aarch64-unknown-linux-gnu standard library" >&2
  exit 1
}
[[ $("$dir/rustc" -vV) == *"release: $RUST_WEB."* ]] || {
  echo "setup-aarch64: $dir/rustc is not rustc $RUST_WEB" >&2
  exit 1
}
"$dir/qemu/usr/bin/qemu-aarch64-static" -L "$dir/root" "$dir/root/usr/bin/python$PY_A64" -c 'import ssl, lzma, bz2, ctypes'

# PyPI's aarch64 wheels for Debian's CPython 3.11 (pip picks by the tags given, not by this machine)
.venv/bin/python -m pip install --quiet --disable-pip-version-check --target "$dir/site" \
  --platform manylinux_2_28_aarch64 --python-version "$PY_A64" --implementation cp \
  --only-binary=:all: "h5py==$H5PY" "numpy==$NUMPY" "hdf5plugin==$HDF5PLUGIN" \
  "cuda-pathfinder==$CUDA_PATHFINDER"
echo "$want" >"$stamp"
