#!/usr/bin/env python3
"""array-io's ``from_file`` against the Python package's ``h5gds.from_file`` on the same dataset,
side by side in one run (issue 42: the mission's own crate must keep up with the Python path).

A float32 dataset of ``--size`` bytes is written contiguous and chunked (4 MiB chunks); each round
reads it ``--batch`` times with array-io and ``--batch`` times with ``h5gds.from_file`` in this
process, in turns, for ``--rounds`` rounds, each side's batch after one untimed read. array-io's
reads are made by ``bench_device_read --timed`` (``benches/examples/bench_device_read.rs``, the
binary scripts/gpu-pack.sh already packs), one process for the whole run that times each read
itself. Files are in the page cache. Prints medians (GB/s) and the ratio array-io / h5gds per
layout. Run with a wheel's interpreter::

    cargo build --release -p h5gds-bench --example bench_device_read
    .venv-wheel/bin/python benches/from_file_pair.py --size 256M

``--device``: into device memory (``from_file_to_device`` against ``like="cupy"``). With real CuPy
these are GPU figures; over h5gds's emulators (the package tests' CuPy stand-in, LD_LIBRARY_PATH as
scripts/test.sh sets it; ``H5GDS_EMU_LINK_GBPS`` models the link) they are labelled EMULATED.
``--runner`` names another build of the example and ``--label`` a name for the run, so two builds
(before and after a change) can be compared, each with its own wheel. Where ``H5GDS_BENCH_RECORDS``
names a file, each median goes to it as a JSON line (scripts/gpu_report.py: issue 42's goal).
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from bench_python import device_cupy, record, size_arg  # noqa: E402


def write_files(directory, nbytes):
    cols = 1024
    rows = max(1, nbytes // (4 * cols))
    data = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    chunk_rows = max(1, (4 << 20) // (4 * cols))
    files = {}
    for layout, options in (("contiguous", {}), ("chunked", {"chunks": (min(rows, chunk_rows), cols)})):
        path = os.path.join(directory, f"{layout}.h5")
        with h5py.File(path, "w") as f:
            f.create_dataset("data", data=data, **options)
        files[layout] = path
    return files, data.nbytes


class Runner:
    """array-io's side: one ``bench_device_read --timed`` process, asked for a batch of reads at a time."""

    def __init__(self, runner, target):
        self.runner = runner
        # Its errors go straight to this process's standard error (the step's log).
        self.process = subprocess.Popen([runner, "--timed", target], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)

    def reads(self, path, batch):
        """Seconds of each of ``batch`` reads of ``path``'s /data, timed inside the runner."""
        try:
            self.process.stdin.write(f"{path}\t/data\t{batch}\n")
            self.process.stdin.flush()
            answer = self.process.stdout.readline()
        except BrokenPipeError:  # it had already stopped
            answer = ""
        if not answer.endswith("\n"):
            sys.exit(f"{self.runner} --timed stopped (exit {self.process.wait()}) reading {path}")
        return [float(x) for x in answer.split()]

    def close(self):
        self.process.stdin.close()
        if self.process.wait() != 0:
            sys.exit(f"{self.runner} --timed failed (exit {self.process.returncode})")


def python_reads(path, like, batch, sync):
    h5gds.from_file(path, "data", like=like)  # first read untimed, as the runner's
    times = []
    for _ in range(batch):
        start = time.perf_counter()
        h5gds.from_file(path, "data", like=like)
        sync()
        times.append(time.perf_counter() - start)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=size_arg, default=size_arg("256M"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=3)
    parser.add_argument("--device", action="store_true")
    parser.add_argument("--runner", default=str(ROOT / "target/release/examples/bench_device_read"))
    parser.add_argument("--label", default="")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()

    label = ""
    like, target, sync = "numpy", "host", lambda: None
    if args.device:
        cupy, label = device_cupy()
        if cupy is None:
            sys.exit(f"--device: {label}")
        like, target = "cupy", "device"
        sync = cupy.cuda.Device().synchronize if hasattr(cupy.cuda, "Device") else lambda: None
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        files, nbytes = write_files(directory, args.size)
        print(f"from_file, {nbytes / 2**20:.0f} MiB float32 into {target} memory, {args.rounds} rounds of "
              f"{args.batch} reads each way{label}{' ' + args.label if args.label else ''}")
        runner = Runner(args.runner, target)
        for layout, path in files.items():
            rust, python = [], []
            for _ in range(args.rounds):
                rust += runner.reads(path, args.batch)
                python += python_reads(path, like, args.batch, sync)
            rust_s, python_s = statistics.median(rust), statistics.median(python)
            for alternative, seconds in (("array-io from_file", rust_s), ("h5gds.from_file", python_s)):
                record("from_file_pair", alternative, seconds, nbytes, label, case=f"{layout}, {target} memory",
                       layout=layout, memory=target, runner=args.runner)
            print(f"  {layout:10}  array-io {nbytes / rust_s / 1e9:7.2f} GB/s   h5gds.from_file "
                  f"{nbytes / python_s / 1e9:7.2f} GB/s   array-io / h5gds {python_s / rust_s:5.2f}x")
        runner.close()


if __name__ == "__main__":
    main()
