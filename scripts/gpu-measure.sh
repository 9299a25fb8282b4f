#!/usr/bin/env bash
# Every real-GPU check and measurement in one command, sized for one device lease (15 minutes of
# device time in all: this run takes at most MEASURE_SECONDS, default 440, so a second try fits).
# On the GPU machine, from the root of the checkout that carries .gpu/ (scripts/gpu-pack.sh):
#
#   source .gpu/env.sh && scripts/gpu-measure.sh all
#
# `all` runs, in order, each step under its own `timeout` (a hang costs its limit, never the
# rest), every limit also cut to what is left of MEASURE_SECONDS (a step with no time left is
# reported as skipped):
#   identify  machine (GPU, driver, CUDA, nvidia-fs, P2PDMA, cores, file system), info (h5gds info)
#   checks    rust-device-tests, python-device-tests, nvcomp-files (array-io's compressed_gpu),
#             array-io-examples (--device), mpi-2-ranks, damaged-chunks (scripts/gpu_damaged_chunks.py)
#   measure   io (issue 23: scripts/bench_python.py), headline (array-io's from_file against the
#             128 MB staged path), from-file-pair (issue 42: array-io's from_file against
#             h5gds.from_file, host then device memory), codec (issue 24), threads-host,
#             threads-device (issue 26), first-read (issue 22), mpi-1-ranks-write,
#             mpi-2-ranks-write, mpi-4-ranks-write (collective device writes and reads: issue 23)
# then writes $OUT/report.md and $OUT/report.json (scripts/gpu_report.py: the machine, every
# step's outcome, the tests counted, every figure with its comparison, each issue's goal met or
# missed) and $OUT/logs.tar.xz. `identify`, `checks`, `measure` or step names run only those;
# `extra` runs what `all` leaves out: staged-stages (issue 23 item 1), codec-rank2, mpi-mps.
#
# Without a GPU the same run goes to h5gds's emulators where LD_LIBRARY_PATH names them (as
# scripts/test-gpu-measure.sh sets it up, which scripts/test.sh runs): every device figure is then
# labelled EMULATED and the test counts say EMULATED, never "ON THE REAL GPU".
#
# Settings: OUT (default /tmp/gpu-measure), H5GDS_PYTHON (python3), H5GDS_PROFILE (release: the
# builds under target/<profile>), SIZE_MIB (1024: the io, headline and MPI datasets; an eighth for
# codec, a quarter for threads and from-file-pair), REPS (3), DAMAGED_CHUNKS (300 per codec),
# FIRST_READ_SIZES (256M), MEASURE_DIR (where a scratch directory for the data files goes; default
# .gpu, on the working directory's disk, which the cold reads measure), H5GDS_EMULATOR_DIR (the
# emulator's library directory, on the emulators).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${OUT:-/tmp/gpu-measure}
py=${H5GDS_PYTHON:-python3}
profile=${H5GDS_PROFILE:-release}
size=${SIZE_MIB:-1024}
reps=${REPS:-3}
budget=${MEASURE_SECONDS:-440}
[ $# -gt 0 ] || set -- all
mkdir -p "$out" "${MEASURE_DIR:-$root/.gpu}"
data=$(mktemp -d "${MEASURE_DIR:-$root/.gpu}/scratch.XXXXXX")
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-measure.XXXXXX")
trap 'rm -rf "$work" "$data"' EXIT
mkdir -p "$work/logs"
export H5GDS_BENCH_RECORDS=$work/records.jsonl PYTHONUNBUFFERED=1
: >"$H5GDS_BENCH_RECORDS"
: >"$work/steps.tsv"
started=$SECONDS
reserve=15 # seconds kept for the report and the archive

# Which steps this call runs: `all`, a group, or step names.
wanted() {
  local name=$1 group=$2 arg
  for arg in "${selection[@]}"; do
    case "$arg" in
      all) [ "$group" != extra ] && return 0 ;;
      "$group" | "$name") return 0 ;;
    esac
  done
  return 1
}
selection=("$@")

# step NAME GROUP LIMIT COMMAND...: COMMAND under `timeout`, its output in logs/NAME.log; one line
# per step in steps.tsv (name, group, outcome, seconds, limit).
step() {
  local name=$1 group=$2 limit=$3
  shift 3
  wanted "$name" "$group" || return 0
  local left=$((budget - (SECONDS - started) - reserve))
  [ "$left" -lt "$limit" ] && limit=$left
  local log="$work/logs/$name.log"
  if [ "$limit" -lt 5 ]; then
    echo "skipped: out of time (MEASURE_SECONDS=$budget)" >"$log"
    printf '%s\t%s\tskipped\t0\t0\n' "$name" "$group" >>"$work/steps.tsv"
    echo "== $name: skipped, out of time"
    return 0
  fi
  echo "== $name (limit ${limit}s): $*"
  local begun=$SECONDS
  # Through bash, so that a step may be one of the functions below (exported); `timeout` signals
  # the whole process group (mpirun's ranks too).
  timeout --kill-after=5 "$limit" bash -c '"$@"' "$name" "$@" >"$log" 2>&1
  local status=$? outcome=passed
  case "$status" in
    0) ;;
    124 | 137) outcome="timed out" ;;
    *) outcome="failed (exit $status)" ;;
  esac
  tail -n 8 "$log"
  echo "== $name: $outcome after $((SECONDS - begun))s"
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$group" "$outcome" "$((SECONDS - begun))" "$limit" >>"$work/steps.tsv"
}

# A step that cannot run on this machine: reported as skipped, with why.
unavailable() {
  local name=$1 group=$2 why=$3
  wanted "$name" "$group" || return 0
  echo "skipped: $why" >"$work/logs/$name.log"
  printf '%s\t%s\tskipped\t0\t0\n' "$name" "$group" >>"$work/steps.tsv"
  echo "== $name: skipped ($why)"
}

machine() {
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -srm), $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  echo "cores: $(nproc), memory: $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
  if command -v nvidia-smi >/dev/null; then
    echo "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -n 1)"
    echo "cuda: $(nvidia-smi | sed -nE 's/.*CUDA Version: ([0-9.]+).*/\1/p' | head -n 1)"
  else
    echo "gpu: none (no nvidia-smi)"
  fi
  if [ -e /proc/driver/nvidia-fs ]; then
    echo "nvidia-fs: $(tr '\n' ' ' </proc/driver/nvidia-fs/version 2>/dev/null)"
  else
    echo "nvidia-fs: absent"
  fi
  local p2pdma
  p2pdma=$(grep -hoE '"use_pci_p2pdma"[^,]*' "${CUFILE_ENV_PATH_JSON:-/etc/cufile.json}" 2>/dev/null | head -n 1)
  echo "p2pdma: ${p2pdma:-not asked for (no use_pci_p2pdma in ${CUFILE_ENV_PATH_JSON:-/etc/cufile.json})}"
  echo "working directory: $root on $(findmnt -no FSTYPE,SOURCE -T "$root" 2>/dev/null | head -n 1)"
  echo "data directory: $data on $(findmnt -no FSTYPE,SOURCE -T "$data" 2>/dev/null | head -n 1)"
  echo "python: $("$py" -c 'import sys; print(sys.version.split()[0])')"
  # (stderr dropped: the trimmed hdf5plugin warns about each filter it was packed without)
  "$py" - 2>/dev/null <<'EOF'
import importlib
import importlib.metadata
for name in ("numpy", "h5py", "hdf5plugin", "h5gds", "cupy", "torch", "jax", "kvikio", "mpi4py", "xarray"):
    try:
        module = importlib.import_module(name)
    except Exception as exc:  # absent or broken: say which
        print(f"{name}: not importable ({type(exc).__name__}: {exc})")
        continue
    version = getattr(module, "__version__", None) or getattr(module, "version", None)
    try:
        version = version or importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        version = "?"
    print(f"{name}: {version} ({getattr(module, '__file__', '?')})")
EOF
  # Whether libcuda here is h5gds's emulator: the report's labels follow it.
  (cd python/tests && "$py" -c 'from device_arrays import cuda; print("emulated:", cuda().emulated)') 2>&1 | tail -n 1
}

mpi_tiles() {
  mpirun --oversubscribe -np "$1" -x LD_LIBRARY_PATH -x PYTHONPATH -x H5GDS_BENCH_RECORDS \
    "$py" benches/mpi_tiles.py --size "${size}M" --reps "$reps" --device --dir "$data"
}
# Several processes on one GPU are time-sliced between their contexts unless MPS shares one.
mps_tiles() {
  nvidia-cuda-mps-control -d || return 1
  local status=0
  for ranks in 1 4; do mpi_tiles "$ranks" || status=1; done
  echo quit | nvidia-cuda-mps-control
  return "$status"
}
# Issue 42: array-io's from_file against h5gds.from_file on the same datasets, into host memory,
# then device memory; array-io's reads made by RUNNER (bench_device_read --timed, already packed).
# The device half runs even where the host half fails.
from_file_pair() {
  local runner=$1 status=0
  local args=(--size "$((size / 4))M" --rounds 3 --batch "$reps" --runner "$runner" --dir "$data")
  "$py" benches/from_file_pair.py "${args[@]}" || status=1
  "$py" benches/from_file_pair.py --device "${args[@]}" || status=1
  return "$status"
}
export -f machine mpi_tiles mps_tiles from_file_pair
export py size reps data root

bin=target/$profile
tests=$(ls "$bin"/deps/device_paths-* 2>/dev/null | grep -v '\.d$' | head -n 1)
plugins=$("$py" -c 'import hdf5plugin; print(hdf5plugin.PLUGIN_PATH)' 2>/dev/null)

step machine identify 30 machine
# The installed package's `h5gds info` (the same report as the command-line tool's).
step info identify 30 bash -c '"$0" -m h5gds info && "$0" -m h5gds info --json >"$1"' "$py" "$work/info.json"

if [ -n "$tests" ]; then
  step rust-device-tests checks 150 "$tests" --test-threads=4
else
  unavailable rust-device-tests checks "no $bin/deps/device_paths-* (scripts/gpu-pack.sh builds it)"
fi
# From python/tests, as scripts/test.sh runs them (the installed package, not python/'s sources).
step python-device-tests checks 150 bash -c 'cd python/tests && H5GDS_REQUIRE_DEVICE_TESTS=1 \
  "$0" -m pytest -q -p no:cacheprovider test_device.py test_gpu_codec.py' "$py"
step nvcomp-files checks 60 env HDF5_PLUGIN_PATH="$plugins" H5GDS_PYTHON="$py" \
  "$bin/examples/compressed_gpu" --dir "$data/compressed_gpu"
# 180 s: batched_read's [333, 1] blocks of a contiguous dataset move one element per pread (about
# 930,000), 65-90 s on the emulators of a 2-core machine; seconds on a GPU machine.
step array-io-examples checks 180 bash -c '"$0/examples/roundtrip" --device && "$0/examples/batched_read" --device' "$bin"
if command -v mpirun >/dev/null; then
  step mpi-2-ranks checks 90 bash -c 'cd python/tests && H5GDS_REQUIRE_DEVICE_TESTS=1 "$0" -m pytest -q -p no:cacheprovider \
    "test_mpi_device.py::test_device_tiles_under_mpirun_through_gds_and_staged_are_read_by_h5py[2]"' "$py"
else
  unavailable mpi-2-ranks checks "no mpirun"
fi
step damaged-chunks checks 120 "$py" scripts/gpu_damaged_chunks.py --chunks "${DAMAGED_CHUNKS:-300}" \
  --dir "$data" --summary "$work/damaged.json"

step io measure 120 "$py" scripts/bench_python.py --size "${size}M" --xarray-size "$((size / 8))M" --reps "$reps" \
  --dir "$data"
step headline measure 60 "$bin/examples/bench_device_read" --sizes "${size}M" --reps "$reps" --dir "$data"
# About 10 s on a 16-core H100/H200 (at most 30): per memory, two 256 MiB files written (~1 s), Python,
# CuPy and the runner started (~2 s), 48 reads of 256 MiB (2 layouts x 2 sides x 3 rounds x 4) at
# the H200's 4-43 GB/s (docs/performance.md; 0.3-3 s); where cuFile opens, the runner's exit may
# wait for the open (at most 10 s, once). The host half took 5.5 s on 2 busy cores, debug runner.
step from-file-pair measure 60 from_file_pair "$bin/examples/bench_device_read"
step codec measure 150 "$py" benches/compressed_read.py --size "$((size / 8))M" --codecs zstd,lz4,gzip \
  --chunks 256K,1M,4M,16M --reps "$reps" --dir "$data"
step threads-host measure 60 "$py" benches/threads.py --size "$((size / 4))M" --rows 64K,1M \
  --reads "$((size / 16))M" --threads 1,2,8,16 --reps "$reps" --dir "$data"
step threads-device measure 60 "$py" benches/threads.py --device --size "$((size / 4))M" --rows 64K,1M \
  --reads "$((size / 16))M" --threads 1,2,8,16 --reps "$reps" --dir "$data"
first_read_args=(--repeat "$reps" --sizes "${FIRST_READ_SIZES:-256M}" --dir "$data")
[ -n "${H5GDS_EMULATOR_DIR:-}" ] && first_read_args+=(--emulator "$H5GDS_EMULATOR_DIR")
step first-read measure 60 "$py" benches/first_read.py "${first_read_args[@]}"
if command -v mpirun >/dev/null; then
  for ranks in 1 2 4; do
    step "mpi-$ranks-ranks-write" measure 45 mpi_tiles "$ranks"
  done
else
  unavailable mpi-ranks-write measure "no mpirun"
fi

step staged-stages extra 120 "$py" benches/staged_stages.py --size "${size}M" --reps "$reps" --dir "$data"
step codec-rank2 extra 120 "$py" benches/compressed_read.py --rank 2 --size "$((size / 4))M" \
  --codecs zstd,lz4,gzip --chunks 256K,1M,4M --reps "$reps" --dir "$data"
if command -v nvidia-cuda-mps-control >/dev/null && command -v mpirun >/dev/null; then
  step mpi-mps extra 120 mps_tiles
else
  unavailable mpi-mps extra "no nvidia-cuda-mps-control or mpirun"
fi

echo "== report (after $((SECONDS - started))s)"
"$py" scripts/gpu_report.py --work "$work" --out "$out" --seconds "$((SECONDS - started))" --budget "$budget"
report_status=$?
tar -C "$work" -cJf "$out/logs.tar.xz" logs steps.tsv records.jsonl $(cd "$work" && ls info.json damaged.json 2>/dev/null)
ls -la "$out"
# The exit status: 0 only when every step that ran passed (skipped steps are in the report).
[ "$report_status" -eq 0 ] && ! cut -f3 "$work/steps.tsv" | grep -qvE '^(passed|skipped)$'
