"""The first read in a fresh process: wall time of `python -c 'import h5gds; h5gds.from_file(...)'`
against h5py's own first read of the same dataset (and the bare interpreter and imports, to show
where the time goes). Runs the alternatives interleaved, several times each, files in the page
cache; prints medians and ratios. Run with the interpreter of an environment where the h5gds wheel
is installed (scripts/test.sh makes .venv-wheel):

    .venv-wheel/bin/python benches/first_read.py [--repeat 11] [--dir DIR]
"""

import argparse
import importlib.util
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


def device_alternatives(path):
    """The same first read into GPU memory, where CuPy is importable (a real GPU): what h5py users
    do today (read into NumPy, then `cp.asarray`) against `from_file(like="cupy")`. CUDA is brought
    up first in both, so the difference is the read itself (for h5gds under compat_mode=auto: no
    cuFile open where there is no nvidia-fs and P2PDMA is off, issue 22)."""
    p = repr(str(path))
    up = "import cupy as cp\ncp.zeros(1).sum()\n"
    return {
        "cupy: import and bring up CUDA": up,
        "h5py: File(p)['x'][()] -> cp.asarray": f"{up}import h5py\nwith h5py.File({p}, 'r') as f: cp.asarray(f['x'][()])",
        "h5gds.from_file(p, 'x', like='cupy')": f"{up}import h5gds\nh5gds.from_file({p}, 'x', like='cupy')",
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
            if importlib.util.find_spec("cupy") is not None:
                cases.update(device_alternatives(path))
            times = {name: [] for name in cases}
            for _ in range(args.repeat):
                for name, code in cases.items():  # interleaved: load drifts hit every case alike
                    start = time.perf_counter()
                    subprocess.run([sys.executable, "-c", code], check=True)
                    times[name].append(time.perf_counter() - start)
            host_reference = statistics.median(times["h5py: File(p)['x'][()]"])
            device_name = "h5py: File(p)['x'][()] -> cp.asarray"
            device_reference = statistics.median(times[device_name]) if device_name in times else None
            print(f"\nfirst read of a {label} float32 dataset, fresh process each, median of {args.repeat}:")
            print(f"| {'case':40} | wall time | vs h5py's first read (into the same memory) |")
            for name, samples in times.items():
                median = statistics.median(samples)
                spread = f"{min(samples) * 1e3:.0f}-{max(samples) * 1e3:.0f}"
                reference = device_reference if "cupy" in name or "cp." in name else host_reference
                print(f"| {name:40} | {median * 1e3:6.0f} ms ({spread}) | {median / reference:.2f}x |")


if __name__ == "__main__":
    main()
