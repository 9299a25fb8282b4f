#!/usr/bin/env python3
"""array-io's ``from_file`` against the Python package's ``h5gds.from_file`` on the same dataset,
side by side in one run (issue 42: the mission's own crate must keep up with the Python path).

A float32 dataset of ``--size`` bytes is written contiguous and chunked (4 MiB chunks); each round
reads it ``--batch`` times with array-io (``array-io/examples/from_file_timed.rs``, a process of its
own that times each read after one untimed first read) and ``--batch`` times with
``h5gds.from_file`` in this process, alternately, for ``--rounds`` rounds. Files are in the page
cache. Prints medians (GB/s) and the ratio array-io / h5gds per layout. Run with a wheel's
interpreter::

    cargo build --release -p array-io --example from_file_timed
    .venv-wheel/bin/python benches/from_file_pair.py --size 256M

``--device``: into device memory (``from_file_to_device`` against ``like="cupy"``). With real CuPy
these are GPU figures; over h5gds's emulators (the package tests' CuPy stand-in, LD_LIBRARY_PATH as
scripts/test.sh sets it; ``H5GDS_EMU_LINK_GBPS`` models the link) they are labelled EMULATED.
``--runner`` names another build of the example and ``--label`` a name for the run, so two builds
(before and after a change) can be compared, each with its own wheel.
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


def rust_reads(runner, path, target, batch):
    """Seconds of each of ``batch`` array-io reads, timed inside the runner's process."""
    done = subprocess.run([runner, path, "/data", target, str(batch)], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{runner} failed ({done.returncode}): {done.stderr.strip()}")
    return [float(line) for line in done.stdout.split()]


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
    parser.add_argument("--runner", default=str(ROOT / "target/release/examples/from_file_timed"))
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
        for layout, path in files.items():
            rust, python = [], []
            for _ in range(args.rounds):
                rust += rust_reads(args.runner, path, target, args.batch)
                python += python_reads(path, like, args.batch, sync)
            rust_s, python_s = statistics.median(rust), statistics.median(python)
            for alternative, seconds in (("array-io from_file", rust_s), ("h5gds.from_file", python_s)):
                record("from_file_pair", alternative, seconds, nbytes, label, layout=layout, target=target)
            print(f"  {layout:10}  array-io {nbytes / rust_s / 1e9:7.2f} GB/s   h5gds.from_file "
                  f"{nbytes / python_s / 1e9:7.2f} GB/s   array-io / h5gds {python_s / rust_s:5.2f}x")


if __name__ == "__main__":
    main()
