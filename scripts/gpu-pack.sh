#!/usr/bin/env bash
# Builds and packs into .gpu/ (git-ignored) everything `scripts/gpu-measure.sh all` needs on a GPU
# machine that has the NVIDIA driver, CUDA and Python (3.12, with CuPy, h5py, mpi4py) but no Rust
# and no network; the checkout travels with .gpu/ (64 MiB in all), so .gpu/ is kept under 48 MiB:
#   .gpu/target.tar.xz       stripped builds: target/<profile>/{deps/device_paths-* (built with
#                            H5GDS_TEST_REAL_CUDA=1), examples/{roundtrip, batched_read,
#                            compressed_gpu, bench_device_read}} and target/release/libh5gds.so
#                            (`h5gds info` is the wheel's `python -m h5gds info` there)
#   .gpu/whl/                the h5gds wheel (scripts/build-wheel.sh), KvikIO (cu13, with
#                            cuda-pathfinder, which it needs to load) for the side-by-side
#                            rows, pytest (the machine may lack it), zstandard
#                            (test_gpu_codec.py's frames with content checksums)
#   .gpu/libnvcomp.so.6.xz   nvCOMP 6 from nvidia-libnvcomp-cu13
#   .gpu/hdf5plugin.tar.xz   hdf5plugin with its Zstandard, LZ4 and Blosc filters only
#   .gpu/env.sh              scripts/gpu-env.sh: `source .gpu/env.sh` there, from the checkout's root
#
#   scripts/gpu-pack.sh [--profile release|debug] [--wheel FILE]
#
# --profile debug packs the debug builds (what scripts/test.sh has built: its rehearsal on the
# emulators uses them); --wheel packs that wheel instead of building one. GPU_PYTHON (3.12) is the
# GPU machine's Python version, for the wheels downloaded from PyPI (kept, with what is made of
# them, in target/gpu-pack/). Run after ./scripts/setup.sh.
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
trap 'rm -rf "$stage"' EXIT
downloads=target/gpu-pack
mkdir -p "$downloads"
built=target/$profile
mkdir -p "$stage/$built/deps" "$stage/$built/examples" "$stage/target/release" .gpu/whl
strip -o "$stage/target/release/libh5gds.so" target/release/libh5gds.so
strip -o "$stage/$built/deps/$(basename "$device_tests")" "$device_tests"
for example in roundtrip batched_read compressed_gpu bench_device_read; do
  strip -o "$stage/$built/examples/$example" "$built/examples/$example"
done
tar -cf - -C "$stage" target | xz -T0 -6 >.gpu/target.tar.xz
cp "$wheel" .gpu/whl/

download() {
  .venv/bin/python -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version "${GPU_PYTHON:-3.12}" --implementation cp --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$downloads" "$@"
}
# Exact versions: target/gpu-pack/ keeps every wheel downloaded, and each is found by its version.
wheels=(kvikio-cu13==26.10.0 libkvikio-cu13==26.10.0 rapids-logger==0.3.0 cuda-pathfinder==1.9.1
  pytest==8.4.2 pluggy==1.7.0 iniconfig==2.3.1 packaging==26.4 zstandard==0.25.0)
download nvidia-libnvcomp-cu13==6.0.0.12 hdf5plugin==7.1.0 "${wheels[@]}"
# Made once per downloaded wheel (compressing nvCOMP takes a while), then reused.
nvcomp_wheel=$(ls "$downloads"/nvidia_libnvcomp_cu13-6.0.0.12-*.whl)
if [ ! -f "$nvcomp_wheel.so.xz" ]; then
  rm -rf "$downloads/nvcomp" && (cd "$downloads" && python3 -m zipfile -e "$(basename "$nvcomp_wheel")" nvcomp)
  xz -T0 -6 -c "$(find "$downloads/nvcomp" -name libnvcomp.so.6 | head -n 1)" >"$nvcomp_wheel.so.xz.partial"
  mv "$nvcomp_wheel.so.xz.partial" "$nvcomp_wheel.so.xz" && rm -rf "$downloads/nvcomp"
fi
cp "$nvcomp_wheel.so.xz" .gpu/libnvcomp.so.6.xz
hdf5plugin_wheel=$(ls "$downloads"/hdf5plugin-7.1.0-*.whl)
if [ ! -f "$hdf5plugin_wheel.blosc.tar.xz" ]; then
  rm -rf "$downloads/hdf5plugin" && mkdir "$downloads/hdf5plugin"
  (cd "$downloads/hdf5plugin" && python3 -m zipfile -e "../$(basename "$hdf5plugin_wheel")" . &&
    find hdf5plugin/plugins -type f ! -name 'libh5zstd*' ! -name 'libh5lz4*' ! -name 'libh5blosc.so' -delete &&
    tar -cf - hdf5plugin hdf5plugin-*.dist-info | xz -T0 -6 >"../$(basename "$hdf5plugin_wheel").blosc.tar.xz")
  rm -rf "$downloads/hdf5plugin"
fi
cp "$hdf5plugin_wheel.blosc.tar.xz" .gpu/hdf5plugin.tar.xz
for w in "${wheels[@]}"; do
  name=${w%%==*}
  cp "$downloads/${name//-/_}-${w##*==}"-*.whl .gpu/whl/
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
  echo "gpu-pack.sh: .gpu/ is ${mib} MiB, over the ${limit_mib} MiB that fit beside the checkout" \
    "in the 64 MiB that travel to a GPU machine" >&2
  # Only the release pack travels; the debug pack is scripts/test.sh's rehearsal of the run, whose
  # unoptimized builds are larger (remote files' object_store and TLS took it past the limit).
  [ "$profile" = debug ] || exit 1
fi
