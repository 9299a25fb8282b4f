"""What the installed package costs a fresh interpreter, as medians of alternated runs (each run a
new process of the interpreter running this script, so run it with a wheel environment's Python):

* start: ``python -c pass`` with the wheel's ``h5gds_xarray.pth`` in site-packages, and without it
  (renamed aside for those runs, put back at the end: run this in a scratch environment);
* import: ``import h5gds`` as installed (which looks for no NVIDIA library), and followed by
  ``h5gds._nvidia.prepare()``: what the libraries' lookup (cuda-pathfinder imported, libcufile found
  by loading it, nvCOMP's wheels) adds once, at a process's first device transfer or ``info()``.

Usage: python benches/python_start.py [--runs 31]"""

import argparse
import os
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path


def seconds(code, env=None):
    start = time.perf_counter()
    subprocess.run([sys.executable, "-W", "ignore", "-c", code], check=True, env=env, cwd="/")
    return time.perf_counter() - start


def compare(name, first, second, runs):
    a, b = [], []
    for _ in range(runs):  # alternated: the machine's drift falls on both alike
        a.append(first())
        b.append(second())
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"{name}: {ma * 1e3:8.2f} ms vs {mb * 1e3:8.2f} ms  (x {ma / mb:.3f}, +{(ma - mb) * 1e3:.2f} ms)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=31)
    runs = parser.parse_args().runs
    pth = Path(sysconfig.get_paths()["purelib"]) / "h5gds_xarray.pth"
    aside = pth.with_suffix(".pth-aside")
    if not pth.is_file():
        sys.exit(f"{pth} is missing: run this with the Python of an environment the wheel is installed in")

    def without_hook():
        pth.rename(aside)
        try:
            return seconds("pass")
        finally:
            aside.rename(pth)

    env = {k: v for k, v in os.environ.items() if not k.startswith(("H5GDS_", "HDF5_"))}
    print(f"{sys.executable}, {runs} alternated runs each, medians")
    compare("start, with h5gds_xarray.pth | without", lambda: seconds("pass"), without_hook, runs)
    compare("import h5gds, then the libraries' lookup | import h5gds alone",
            lambda: seconds("import h5gds; h5gds._nvidia.prepare()", env),
            lambda: seconds("import h5gds", env), runs)


if __name__ == "__main__":
    main()
