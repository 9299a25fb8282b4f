"""The first read in a fresh process: wall time of `python -c 'import h5gds; h5gds.from_file(...)'`
against h5py's own first read of the same dataset (and the bare interpreter and imports, to show
where the time goes). Runs the alternatives interleaved, several times each, files in the page
cache; prints medians and ratios. Run with the interpreter of an environment where the h5gds wheel
is installed (scripts/test.sh makes .venv-wheel):

    .venv-wheel/bin/python benches/first_read.py [--repeat 11] [--dir DIR]

Device cases (reads into GPU memory) run where CuPy imports. Without a GPU they run on h5gds's CPU
emulator of CUDA and cuFile with `--emulator DIR` (a directory where libcuda.so.1 and
libcufile.so.0 are the emulator, as scripts/test.sh links target/emulator-lib-python) and the
test suite's CuPy stand-in (python/tests/mpi/emulated/cupy.py over python/tests/device_arrays.py:
device memory is the emulator's, `cp.asarray` one host-to-device copy); every row is then
labelled EMULATED. `--cufile-open-ms` gives the emulated `cuFileDriverOpen` a cost (default 470,
what it took on the first real-GPU machine), on an emulated machine where cuFile can give GDS, so
that h5gds opens it in the background.
"""

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY / "scripts"))
from bench_python import record  # noqa: E402


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


#: The device case every other device case is compared with: what h5py users do today.
DEVICE_REFERENCE = "h5py: File(p)['x'][()] -> cp.asarray"


def device_alternatives(path, emulated):
    """The same first read into GPU memory: what h5py users do today (read into NumPy, then
    `cp.asarray`) against `from_file(like="cupy")`. CUDA is brought up first in both, so the
    difference is the read itself (for h5gds under compat_mode=auto: no cuFile open where there is
    no nvidia-fs and P2PDMA is off; where there is, the open runs in the background while the first
    transfers are staged, issue 22). Each prints the time of the read call itself (`CALL s`).
    On the emulator, also `compat_mode=off`, which opens cuFile before the file, as every first
    read did before the background open (real machines without GDS refuse it)."""
    p = repr(str(path))
    up = "import cupy as cp, time\ncp.zeros(1).sum()\n"
    timed = "start = time.perf_counter()\n{read}\nprint('CALL', time.perf_counter() - start)\n"
    h5py_read = f"with h5py.File({p}, 'r') as f: cp.asarray(f['x'][()])"
    h5gds_read = f"h5gds.from_file({p}, 'x', like='cupy')"
    cases = {
        "cupy: import and bring up CUDA": (up, {}),
        DEVICE_REFERENCE: (f"{up}import h5py\n" + timed.format(read=h5py_read), {}),
        "h5gds.from_file(p, 'x', like='cupy')": (f"{up}import h5gds\n" + timed.format(read=h5gds_read), {}),
    }
    if emulated:
        cases["  same, compat_mode=off (cuFile opened first)"] = (
            f"{up}import h5gds\n" + timed.format(read=h5gds_read), {"H5GDS_COMPAT_MODE": "off"})
    return cases


def emulated_environment(emulator, open_ms):
    """The environment of device cases on the emulator: its libraries first on LD_LIBRARY_PATH, the
    CuPy stand-in importable, an emulated machine where cuFile can give GDS (nvidia-fs, the
    emulator's default) whose cuFileDriverOpen costs `open_ms`."""
    env = dict(os.environ)
    stand_in = [REPOSITORY / "python/tests/mpi/emulated", REPOSITORY / "python/tests"]
    env["PYTHONPATH"] = os.pathsep.join([*map(str, stand_in), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["LD_LIBRARY_PATH"] = os.pathsep.join([str(emulator), env.get("LD_LIBRARY_PATH", "")]).rstrip(os.pathsep)
    env.setdefault("H5GDS_EMU_GDS", "1")
    env["H5GDS_EMU_CUFILE_OPEN_MS"] = str(open_ms)
    return env


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=11)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--emulator", type=Path, default=None,
                        help="run the device cases on h5gds's CUDA/cuFile emulator linked in this directory")
    parser.add_argument("--cufile-open-ms", type=int, default=470,
                        help="what the emulated cuFileDriverOpen costs (with --emulator)")
    parser.add_argument("--sizes", default="4K,256M", help="dataset sizes: 4K and/or 256M")
    args = parser.parse_args()
    emulated = args.emulator is not None
    if emulated and not (args.emulator / "libcuda.so.1").exists():
        parser.error(f"{args.emulator} holds no libcuda.so.1")
    device_env = emulated_environment(args.emulator, args.cufile_open_ms) if emulated else dict(os.environ)
    devices = emulated or importlib.util.find_spec("cupy") is not None
    sizes = {"4K": ("4 KiB", 1 << 10), "256M": ("256 MiB", 64 << 20)}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for key in args.sizes.split(","):
            label, n = sizes[key]
            path = Path(tmp) / f"first-{n}.h5"
            with h5py.File(path, "w") as f:
                f["x"] = np.arange(n, dtype="<f4")
            path.read_bytes()  # into the page cache
            cases = {name: (code, None) for name, code in alternatives(path).items()}
            if devices:
                for name, (code, extra) in device_alternatives(path, emulated).items():
                    cases[name] = (code, {**device_env, **extra})
            times = {name: [] for name in cases}
            calls = {name: [] for name in cases}
            for _ in range(args.repeat):
                for name, (code, env) in cases.items():  # interleaved: load drifts hit every case alike
                    start = time.perf_counter()
                    out = subprocess.run([sys.executable, "-c", code], check=True, env=env,
                                         capture_output=True, text=True).stdout
                    times[name].append(time.perf_counter() - start)
                    call = [float(line.split()[1]) for line in out.splitlines() if line.startswith("CALL ")]
                    calls[name].extend(call)
            host_reference = statistics.median(times["h5py: File(p)['x'][()]"])
            device_reference = statistics.median(times[DEVICE_REFERENCE]) if devices else None
            call_reference = statistics.median(calls[DEVICE_REFERENCE]) if devices else None
            where = " (device rows EMULATED: h5gds's CPU emulator of CUDA and cuFile, no GPU)" if emulated else ""
            print(f"\nfirst read of a {label} float32 dataset, fresh process each, median of {args.repeat}{where}:")
            print(f"| {'case':46} | process wall time | vs h5py's (into the same memory) "
                  f"| the read call itself | vs h5py's |")
            for name, samples in times.items():
                median = statistics.median(samples)
                spread = f"{min(samples) * 1e3:.0f}-{max(samples) * 1e3:.0f}"
                device = name in device_alternatives(path, emulated)
                reference = device_reference if device else host_reference
                shown = f"EMULATED {name}" if device and emulated else name
                call = "  |  "
                record("first_read", name, median, n * 4, "EMULATED" if device and emulated else "",
                       size=key, device=device, reference=name in (DEVICE_REFERENCE, "h5py: File(p)['x'][()]"),
                       call_seconds=statistics.median(calls[name]) if calls[name] else None)
                if calls[name]:
                    c = statistics.median(calls[name])
                    call = f" {c * 1e3:6.0f} ms | {c / call_reference:.2f}x"
                print(f"| {shown:46} | {median * 1e3:6.0f} ms ({spread}) | {median / reference:.2f}x |{call} |")


if __name__ == "__main__":
    main()
