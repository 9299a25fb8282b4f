#!/usr/bin/env python3
"""Benchmark of the Python package (not a test): a float32 dataset read

* into NumPy: ``h5gds.read`` (file opened with driver="gds") vs h5py's ``read_direct`` under sec2 and
  under the gds driver;
* into device memory: ``h5gds.read`` straight through the gds driver vs the staged path
  (``H5GDS_USE_VFD_GDS=0``, 128 MiB pinned buffer), the file evicted from the page cache before
  each read. Without a GPU this runs on h5gds's CPU emulator
  of CUDA and cuFile and every device figure is labelled EMULATED;
* and the time of the first ``h5gds.read`` in a fresh process.

Alternatives are interleaved, each repeated; medians and ratios are printed. Run it with the wheel's
interpreter (it imports the test-only device arrays of tests/python/package), the emulator on
LD_LIBRARY_PATH when there is no GPU (scripts/test.sh creates the wheel environment and the links)::

    LD_LIBRARY_PATH=$PWD/target/emulator-lib-python H5GDS_EMU_POISON=off \\
        .venv-wheel/bin/python scripts/bench_python.py --size 1G
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

import h5gds

# The test-only device arrays (tests/python/package/device_arrays.py).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "python" / "package"))


def size_arg(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def interleave(alternatives, reps, before=None):
    """Runs each alternative once per round, `reps` rounds, `before` (untimed) ahead of each run;
    median seconds per alternative."""
    times = {name: [] for name in alternatives}
    for _ in range(reps):
        for name, fn in alternatives.items():
            if before is not None:
                before()
            times[name].append(timed(fn))
    return {name: statistics.median(ts) for name, ts in times.items()}


def drop_from_page_cache(path):
    """Evicts the file's pages, so a read comes from storage: the gds route bypasses the page cache
    (O_DIRECT, as nvidia-fs does), and timing the staged route on cached pages would compare memory
    with disk (as `h5gds bench` does for its device rows)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def report(title, medians, nbytes, baseline, label=""):
    print(f"\n{title}{label}")
    for name, seconds in medians.items():
        print(f"  {name:<34} {seconds * 1e3:9.1f} ms  {nbytes / seconds / 1e9:6.2f} GB/s  "
              f"x{medians[baseline] / seconds:5.2f} vs {baseline}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=size_arg, default=size_arg("1G"), help="dataset bytes (default 1G)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where the file goes (default: a temporary directory)")
    args = parser.parse_args()
    n = args.size // 4
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "bench.h5"
        with h5py.File(path, "w") as f:
            f.create_dataset("x", data=np.arange(n, dtype="<f4"))
        nbytes = n * 4
        print(f"h5gds Python benchmark: float32 dataset of {nbytes} bytes, {args.reps} interleaved rounds, "
              f"{os.cpu_count()} CPUs")

        out = np.empty(n, dtype="<f4")
        with h5py.File(path, "r") as sec2, h5py.File(path, "r", driver="gds") as gds:
            host = interleave({
                "h5py read_direct (sec2)": lambda: sec2["x"].read_direct(out),
                "h5py read_direct (gds)": lambda: gds["x"].read_direct(out),
                "h5gds.read into NumPy (gds)": lambda: h5gds.read(gds["x"], out=out),
            }, args.reps)
            assert out[-1] == np.float32(n - 1)
        report("host memory (page cache warm):", host, nbytes, "h5py read_direct (sec2)")

        try:
            from device_arrays import DeviceArray, cuda
            emulated = cuda().emulated
        except Exception as exc:  # no CUDA driver in this process
            print(f"\ndevice memory: skipped ({exc})")
            DeviceArray = None
        if DeviceArray is not None:
            label = " [EMULATED: CPU emulator of CUDA and cuFile, not GPU figures]" if emulated else ""
            dev = DeviceArray((n,), "<f4")

            def staged():
                os.environ["H5GDS_USE_VFD_GDS"] = "0"
                try:
                    h5gds.read(f["x"], out=dev)
                finally:
                    del os.environ["H5GDS_USE_VFD_GDS"]

            with h5py.File(path, "r", driver="gds") as f:
                device = interleave({
                    "staged, 128 MiB pinned buffer": staged,
                    "gds (straight to device memory)": lambda: h5gds.read(f["x"], out=dev),
                }, args.reps, before=lambda: drop_from_page_cache(path))
            assert dev.to_host()[-1] == np.float32(n - 1)
            report("device memory (file evicted from the page cache before each read):", device, nbytes,
                   "staged, 128 MiB pinned buffer", label)
            dev.free()

        with h5py.File(path, "r") as f:  # the file back in the page cache, as for the host rows
            f["x"].read_direct(out)
        print(f"\nfresh processes, alternating, medians of {args.reps} (page cache warm; a new array's first "
              "touch, its page faults, included):")
        firsts = {"h5gds.read(f['x'])": [], "h5py f['x'][...]": []}
        for _ in range(args.reps):
            for what in firsts:
                read = what.replace("h5py ", "")
                code = ("import time; t0 = time.perf_counter(); import h5py, h5gds; t1 = time.perf_counter()\n"
                        f"with h5py.File({str(path)!r}, 'r', driver='gds') as f: a = {read}\n"
                        "print(t1 - t0, time.perf_counter() - t1)")
                firsts[what].append(tuple(map(float, subprocess.run(
                    [sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())))
        for what, runs in firsts.items():
            imports = statistics.median(r[0] for r in runs)
            first = statistics.median(r[1] for r in runs)
            print(f"  import h5py, h5gds {imports * 1e3:5.0f} ms, then the first {what} (open included) "
                  f"{first * 1e3:5.0f} ms")


if __name__ == "__main__":
    main()
