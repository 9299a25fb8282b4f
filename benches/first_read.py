"""The first read in a fresh process: wall time of `python -c 'import h5gds; h5gds.from_file(...)'`
against h5py's own first read of the same dataset (and the bare interpreter and imports, to show
where the time goes). Runs the alternatives interleaved, several times each, files in the page
cache; prints medians and ratios. Run with the interpreter of an environment where the h5gds wheel
is installed (scripts/test.sh makes .venv-wheel):

    .venv-wheel/bin/python benches/first_read.py [--repeat 11] [--dir DIR]
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np


def alternatives(path):
    p = repr(str(path))
    return {
        "python -c pass": "pass",
        "import h5py": "import h5py",
        "import h5gds": "import h5gds",
        "h5py: File(p)['x'][()]": f"import h5py\nwith h5py.File({p}, 'r') as f: f['x'][()]",
        "h5py: File(p, driver='gds')['x'][()]":
            f"import h5gds, h5py\nwith h5py.File({p}, 'r', driver='gds') as f: f['x'][()]",
        "h5gds.from_file(p, 'x')": f"import h5gds\nh5gds.from_file({p}, 'x')",
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=11)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for label, n in (("4 KiB", 1 << 10), ("256 MiB", 64 << 20)):
            path = Path(tmp) / f"first-{n}.h5"
            with h5py.File(path, "w") as f:
                f["x"] = np.arange(n, dtype="<f4")
            path.read_bytes()  # into the page cache
            cases = alternatives(path)
            times = {name: [] for name in cases}
            for _ in range(args.repeat):
                for name, code in cases.items():  # interleaved: load drifts hit every case alike
                    start = time.perf_counter()
                    subprocess.run([sys.executable, "-c", code], check=True)
                    times[name].append(time.perf_counter() - start)
            reference = statistics.median(times["h5py: File(p)['x'][()]"])
            print(f"\nfirst read of a {label} float32 dataset, fresh process each, median of {args.repeat}:")
            print(f"| {'case':40} | wall time | vs h5py's first read |")
            for name, samples in times.items():
                median = statistics.median(samples)
                spread = f"{min(samples) * 1e3:.0f}-{max(samples) * 1e3:.0f}"
                print(f"| {name:40} | {median * 1e3:6.0f} ms ({spread}) | {median / reference:.2f}x |")


if __name__ == "__main__":
    main()
