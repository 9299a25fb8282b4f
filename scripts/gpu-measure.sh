#!/usr/bin/env bash
# The measurements the open issues wait on, for a GPU machine reached through ../shared/gpu (no
# Rust there: `source .gpu/env.sh` first, from the project root). One stage per call, each small
# enough for one 10-minute command; every step runs under its own time limit, so one that hangs
# costs its limit, not the stage, and writes its output to $OUT/<stage>-<step>.log (OUT defaults to
# /tmp/gpu-measure). The last lines of each log are printed as the step ends.
#
#   scripts/gpu-measure.sh checks    h5gds info, the Rust device tests, the package's device tests
#   scripts/gpu-measure.sh io        issue 23: device reads and writes against the pinned-copy limit,
#                                    what users do and KvikIO (scripts/bench_python.py)
#   scripts/gpu-measure.sh stages    issue 23 item 1: each staged path timed whole and by stage (file
#                                    side, link), and the overlap (benches/staged_stages.py)
#   scripts/gpu-measure.sh threads   issue 26: threads and worker processes, host and device rows
#   scripts/gpu-measure.sh codec     issue 24: h5py, the host's threads and nvCOMP side by side
#   scripts/gpu-measure.sh codec2    the same for 2-D datasets in chunks a quarter row wide, which
#                                    the GPU path places with one strided copy each
#   scripts/gpu-measure.sh first     issue 22: the first read in a fresh process
#   scripts/gpu-measure.sh mpi       issue 23 item 3: collective device writes with 1, 2, 4 ranks on
#                                    one GPU, then again under MPS where nvidia-cuda-mps-control is
#
# Without a GPU the same stages run on h5gds's emulators where LD_LIBRARY_PATH names them (as
# scripts/test.sh sets it up); the benchmarks then label their device figures EMULATED. SIZE_MIB
# (default 1024) sizes every dataset (4x that for io, half for codec, whose files h5py compresses
# on one core), for a quick run of the commands themselves.
set -uo pipefail
cd "$(dirname "$0")/.."
stage=${1:?usage: scripts/gpu-measure.sh checks|io|stages|threads|codec|codec2|first|mpi}
out=${OUT:-/tmp/gpu-measure}
mkdir -p "$out"
py=${H5GDS_PYTHON:-python3}
size_mib=${SIZE_MIB:-1024}
failed=0

# step NAME SECONDS COMMAND...: runs COMMAND under `timeout`, its output to the step's log.
step() {
  local name=$1 limit=$2
  shift 2
  local log="$out/$stage-$name.log"
  local started=$SECONDS
  echo "== $stage/$name (limit ${limit}s): $*"
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  local status=$?
  tail -n 25 "$log"
  echo "== $stage/$name: exit $status after $((SECONDS - started))s, log $log"
  [ "$status" -eq 0 ] || failed=1
}

case "$stage" in
  checks)
    step info 60 target/release/h5gds info
    tests=$(ls target/release/deps/device_paths-* 2>/dev/null | grep -v '\.d$' | head -n 1)
    if [ -n "$tests" ]; then
      step device-tests 240 "$tests" --test-threads=2
    else
      echo "== checks/device-tests: no target/release/deps/device_paths-* (pack.sh builds it)"
      failed=1
    fi
    # From python/tests, as scripts/test.sh runs them (the installed package, not python/'s sources).
    step package-device-tests 240 bash -c 'cd python/tests && H5GDS_REQUIRE_DEVICE_TESTS=1 \
      "$0" -m pytest -q -p no:cacheprovider test_device.py test_gpu_codec.py' "$py"
    ;;
  io)
    step bench-python 540 "$py" scripts/bench_python.py --size "$(( ${size_mib} * 4 ))M" --reps 3
    ;;
  stages)
    step staged-stages 540 "$py" benches/staged_stages.py --size "${size_mib}M" --reps 3
    ;;
  threads)
    step host 270 "$py" benches/threads.py --size "${size_mib}M" --rows 64K,1M,4M --reads 256M --reps 3
    step device 270 "$py" benches/threads.py --device --size "${size_mib}M" --rows 64K,1M --reads 256M --reps 3
    ;;
  codec)
    step compressed-read 540 "$py" benches/compressed_read.py --size "$(( size_mib / 2 ))M" --chunks 256K,1M,4M,16M --reps 3
    ;;
  codec2)
    step compressed-read-rank2 540 "$py" benches/compressed_read.py --rank 2 --size "$(( size_mib / 2 ))M" \
      --codecs zstd,lz4,gzip --chunks 256K,1M,4M --reps 3
    ;;
  first)
    step first-read 300 "$py" benches/first_read.py --repeat 7
    ;;
  mpi)
    for ranks in 1 2 4; do
      step "ranks-$ranks" 150 mpirun --oversubscribe -np "$ranks" -x LD_LIBRARY_PATH -x PYTHONPATH \
        "$py" benches/mpi_tiles.py --size "${size_mib}M" --reps 3 --device
    done
    # Several processes on one GPU are time-sliced between their contexts unless MPS shares one.
    if command -v nvidia-cuda-mps-control >/dev/null && nvidia-cuda-mps-control -d; then
      trap 'echo quit | nvidia-cuda-mps-control' EXIT
      for ranks in 1 4; do
        step "ranks-$ranks-mps" 150 mpirun --oversubscribe -np "$ranks" -x LD_LIBRARY_PATH -x PYTHONPATH \
          "$py" benches/mpi_tiles.py --size "${size_mib}M" --reps 3 --device
      done
    else
      echo "== mpi: no MPS here (nvidia-cuda-mps-control missing or refused)"
    fi
    ;;
  *)
    echo "unknown stage $stage (checks, io, threads, codec, codec2, first, mpi)" >&2
    exit 2
    ;;
esac
exit "$failed"
