#!/usr/bin/env bash
# Builds and packs into .gpu/ (git-ignored) everything `scripts/gpu-measure.sh all` needs on a GPU
# machine that has the NVIDIA driver, CUDA and Python (3.12, with CuPy, h5py, mpi4py) but no Rust
# and no network; the checkout travels with .gpu/ (64 MiB in all), so .gpu/ is kept under 48 MiB:
#   .gpu/target.tar.xz       stripped builds: target/<profile>/{h5gds, device_paths-* (built with
#                            H5GDS_TEST_REAL_CUDA=1), examples/{roundtrip, batched_read,
#                            compressed_gpu, bench_device_read}} and target/release/libh5gds.so
#   .gpu/whl/                the h5gds wheel (scripts/build-wheel.sh), KvikIO (cu13) for the
#                            side-by-side rows, pytest (the machine may lack it)
#   .gpu/libnvcomp.so.6.xz   nvCOMP 6 from nvidia-libnvcomp-cu13
#   .gpu/hdf5plugin.tar.gz   hdf5plugin with its Zstandard, LZ4 and Blosc filters only
#   .gpu/env.sh              scripts/gpu-env.sh: `source .gpu/env.sh` there, from the checkout's root
#
#   scripts/gpu-pack.sh [--profile release|debug] [--wheel FILE]
#
# --profile debug packs the debug builds (what scripts/test.sh has built: its rehearsal on the
# emulators uses them); --wheel packs that wheel instead of building one. GPU_PYTHON (3.12) is the
# GPU machine's Python version, for the wheels downloaded from PyPI. Run after ./scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
profile=release
wheel=
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile=$2; shift 2 ;;
    --wheel) wheel=$2; shift 2 ;;
    *) echo "usage: scripts/gpu-pack.sh [--profile release|debug] [--wheel FILE]" >&2; exit 2 ;;
  esac
done
case "$profile" in
  release) cargo_profile=--release ;;
  debug) cargo_profile= ;;
  *) echo "gpu-pack.sh: --profile is release or debug, not $profile" >&2; exit 2 ;;
esac
command -v cargo >/dev/null || . "$HOME/.cargo/env"
export PATH="$root/.venv/bin:$PATH" # cmake, for HDF5 built from source by hdf5-metno-sys
limit_mib=48

cargo build --release -p h5gds-vfd
# The workspace's binaries and examples at once: the same features as `cargo test --workspace`,
# so a debug pack reuses the test command's builds.
cargo build $cargo_profile --workspace --bins --examples
# The device tests against the real libcuda/libcufile (emulator-only tests compiled as ignored),
# built as scripts/test.sh builds them.
device_tests=$(H5GDS_TEST_REAL_CUDA=1 cargo test $cargo_profile -p h5gds-tests --test device_paths --no-run \
  --message-format=json | python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "device_paths":
        print(m["executable"])')
[ -n "$device_tests" ] || { echo "gpu-pack.sh: no device_paths test binary was built" >&2; exit 1; }
if [ -z "$wheel" ]; then
  rm -rf target/wheels-gpu
  scripts/build-wheel.sh target/wheels-gpu
  wheel=$(ls target/wheels-gpu/h5gds-*.whl)
fi

rm -rf .gpu
stage=$(mktemp -d)
downloads=$(mktemp -d)
trap 'rm -rf "$stage" "$downloads"' EXIT
built=target/$profile
mkdir -p "$stage/$built/deps" "$stage/$built/examples" "$stage/target/release" .gpu/whl
strip -o "$stage/target/release/libh5gds.so" target/release/libh5gds.so
strip -o "$stage/$built/h5gds" "$built/h5gds"
strip -o "$stage/$built/deps/$(basename "$device_tests")" "$device_tests"
for example in roundtrip batched_read compressed_gpu bench_device_read; do
  strip -o "$stage/$built/examples/$example" "$built/examples/$example"
done
tar -cf - -C "$stage" target | xz -T0 -6 >.gpu/target.tar.xz
cp "$wheel" .gpu/whl/

download() {
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version "${GPU_PYTHON:-3.12}" --implementation cp --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$downloads" "$@"
}
download "nvidia-libnvcomp-cu13==6.0.0.12" "hdf5plugin==7.1.0" "kvikio-cu13==26.10.*" \
  "libkvikio-cu13==26.10.*" "rapids-logger==0.3.*" "pytest==8.*" "pluggy==1.*" "iniconfig==2.*" "packaging"
(cd "$downloads" && python3 -m zipfile -e nvidia_libnvcomp_cu13-*.whl nvcomp)
xz -T0 -6 -c "$(find "$downloads/nvcomp" -name libnvcomp.so.6 | head -n 1)" >.gpu/libnvcomp.so.6.xz
mkdir "$downloads/hdf5plugin"
(cd "$downloads/hdf5plugin" && python3 -m zipfile -e ../hdf5plugin-*.whl . &&
  find hdf5plugin/plugins -type f ! -name 'libh5zstd*' ! -name 'libh5lz4*' ! -name 'libh5blosc.so' -delete &&
  tar -czf "$root/.gpu/hdf5plugin.tar.gz" hdf5plugin hdf5plugin-*.dist-info)
for w in kvikio_cu13 libkvikio_cu13 rapids_logger pytest pluggy iniconfig packaging; do
  cp "$downloads"/"$w"-*.whl .gpu/whl/
done
cp scripts/gpu-env.sh .gpu/env.sh
echo "$root" >.gpu/build-root
echo "$profile" >.gpu/profile
# What env.sh compares, to unpack a new pack over an old one.
echo "$(git rev-parse HEAD) $(date -u +%Y-%m-%dT%H:%M:%SZ) $profile" >.gpu/stamp
mib=$(du -sm .gpu | cut -f1)
echo "gpu-pack.sh: .gpu/ holds ${mib} MiB ($profile builds)"
if [ "$mib" -ge "$limit_mib" ]; then
  du -sh .gpu/* >&2
  echo "gpu-pack.sh: .gpu/ is ${mib} MiB, over the ${limit_mib} MiB that fit the GPU machine's 64 MiB with the checkout" >&2
  exit 1
fi
