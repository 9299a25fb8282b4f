#!/usr/bin/env python3
"""The host codecs of two builds of the package side by side (issue 50 goal 2): the manylinux wheel
(scripts/build-wheel.sh: maturin with zig) against the wheel pip builds from the sdist with the
system's compiler (scripts/test.sh puts it in target/sdist-wheel), each installed in its own
environment. For every host codec (deflate, Zstandard, LZ4, shuffle, Fletcher-32), decoding
(``h5gds.read`` of a chunked dataset into NumPy) and encoding (``h5gds.to_file(..., compression=...)``)
are timed on one thread (``H5GDS_NTHREADS=1``: the codecs' own speed, not the pool's).

Each build runs in a worker process of its own interpreter (two builds of ``h5gds`` cannot share a
process); the parent sends the same case to both in turn, alternating which goes first, ``--reps``
rounds, and prints medians, GB/s of array bytes and the ratio zig/sdist (above 1: the zig wheel is
faster). Files stay in the page cache (this measures codecs, not storage). Every decoded array and
every written file is checked against the array the case started from. The parent needs only the
standard library::

    python3 -m venv .venv-wheel-sdist
    .venv-wheel-sdist/bin/pip install h5py numpy target/sdist-wheel/h5gds-*.whl
    python3 benches/wheel_codecs.py --zig .venv-wheel/bin/python --sdist .venv-wheel-sdist/bin/python

On a shared or busy machine the figures are noisy: the load average is printed before and after.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# (name, to_file keywords): each codec alone, as the stored formats HDF5 files carry.
CODECS = {
    "deflate": {"compression": "gzip", "compression_opts": 4},
    "zstd": {"compression": "zstd"},
    "lz4": {"compression": "lz4"},
    "shuffle": {"shuffle": True},
    "fletcher32": {"fletcher32": True},
}


def size_arg(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


# ---- the worker: one interpreter, one installed h5gds ------------------------------------------

def worker(directory, nbytes, chunk_bytes, role):
    import h5py
    import numpy as np

    import h5gds

    n = nbytes // 4
    k = np.arange(n, dtype=np.float64)
    # A smooth signal quantised to 1/64 (as benches/compressed_read.py): compressible, not trivial.
    array = (np.round((np.sin(k / 5000.0) * 100 + (k % 7)) * 64) / 64).astype("<f4")
    chunks = (max(1, min(n, chunk_bytes // 4)),)
    out = np.empty_like(array)
    source = Path(directory)
    own = source / role
    own.mkdir(exist_ok=True)
    files = {}

    def reply(**fields):
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()

    reply(ready=True, module=h5gds._native.__file__)
    for line in sys.stdin:
        command, codec = line.split()
        if command == "prepare":
            # The files both builds decode, written once (by the first worker) with this build.
            h5gds.to_file(array, source / f"{codec}.h5", "x", chunks=chunks, **CODECS[codec])
            reply(done=True)
        elif command == "decode":
            if codec not in files:
                files[codec] = h5py.File(source / f"{codec}.h5", "r")
            d = files[codec]["x"]
            out.fill(0)
            t = time.perf_counter()
            h5gds.read(d, out=out)
            seconds = time.perf_counter() - t
            if not np.array_equal(out, array):
                reply(error=f"{role}: decoding {codec} gave other values than were written")
                return
            reply(seconds=seconds)
        elif command == "encode":
            path = own / f"{codec}.h5"
            t = time.perf_counter()
            h5gds.to_file(array, path, "x", chunks=chunks, **CODECS[codec])
            seconds = time.perf_counter() - t
            with h5py.File(path, "r") as f:
                d = f["x"]
                wrong = d.chunks != chunks or not np.array_equal(h5gds.read(d), array)
            if wrong:
                reply(error=f"{role}: the {codec} file written does not read back as the array")
                return
            reply(seconds=seconds)
        else:
            reply(error=f"unknown command {command!r}")
            return


# ---- the parent ---------------------------------------------------------------------------------

class Worker:
    def __init__(self, python, directory, nbytes, chunk_bytes, role):
        env = dict(os.environ, H5GDS_NTHREADS="1")
        # From the temporary directory: `import h5gds` can only find the environment's package.
        self.role = role
        self.proc = subprocess.Popen(
            [python, os.path.abspath(__file__), "--worker", directory, str(nbytes), str(chunk_bytes), role],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=directory, env=env)
        self.hello = self.answer()

    def answer(self):
        line = self.proc.stdout.readline()
        if not line:
            sys.exit(f"the {self.role} worker ended (exit status {self.proc.wait()})")
        reply = json.loads(line)
        if "error" in reply:
            sys.exit(reply["error"])
        return reply

    def ask(self, command, codec):
        self.proc.stdin.write(f"{command} {codec}\n")
        self.proc.stdin.flush()
        return self.answer()

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def load():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zig", help="the interpreter of the environment holding the zig wheel")
    parser.add_argument("--sdist", help="the interpreter of the environment holding the sdist's wheel")
    parser.add_argument("--size", type=size_arg, default=size_arg("64M"), help="array bytes (default 64M)")
    parser.add_argument("--chunk", type=size_arg, default=size_arg("4M"), help="chunk bytes (default 4M)")
    parser.add_argument("--codecs", default=",".join(CODECS), help=f"of {', '.join(CODECS)}")
    parser.add_argument("--modes", default="decode,encode")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--dir", default=None, help="where the files go (default: a temporary directory)")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        directory, nbytes, chunk, role = args.worker
        worker(directory, int(nbytes), int(chunk), role)
        return
    if not args.zig or not args.sdist:
        parser.error("--zig and --sdist are both needed")
    codecs = args.codecs.split(",")
    modes = args.modes.split(",")
    for name in codecs:
        if name not in CODECS:
            sys.exit(f"--codecs: unknown codec {name!r} (of {', '.join(CODECS)})")
    for mode in modes:
        if mode not in ("decode", "encode"):
            sys.exit(f"--modes: unknown mode {mode!r} (decode, encode)")
    print(f"Host codecs, the zig wheel against the sdist's wheel: float32, {args.size} array bytes in "
          f"chunks of {args.chunk}, one thread, {args.reps} alternated rounds; load average {load()}")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        workers = {"zig": Worker(args.zig, tmp, args.size, args.chunk, "zig"),
                   "sdist": Worker(args.sdist, tmp, args.size, args.chunk, "sdist")}
        for role, w in workers.items():
            print(f"  {role:<5} {w.hello['module']}")
        if "decode" in modes:
            for codec in codecs:
                workers["zig"].ask("prepare", codec)
        cases = [(mode, codec) for mode in modes for codec in codecs]
        times = {(case, role): [] for case in cases for role in workers}
        order = list(workers)
        for rep in range(args.reps):
            for case in cases:
                for role in order:
                    times[(case, role)].append(workers[role].ask(*case)["seconds"])
            order.reverse()  # each build goes first in every other round
        for w in workers.values():
            w.close()
    print(f"\n  {'case':<20} {'zig wheel':>18} {'sdist wheel':>18}   zig/sdist")
    worst = None
    for case in cases:
        zig = statistics.median(times[(case, "zig")])
        sdist = statistics.median(times[(case, "sdist")])
        ratio = sdist / zig
        worst = ratio if worst is None else min(worst, ratio)
        print(f"  {case[0] + ' ' + case[1]:<20} {zig * 1e3:8.1f} ms {args.size / zig / 1e9:5.2f} GB/s "
              f"{sdist * 1e3:8.1f} ms {args.size / sdist / 1e9:5.2f} GB/s   x{ratio:5.3f}"
              f"{'' if ratio >= 0.95 else '  (below 0.95)'}")
    print(f"\n  lowest ratio x{worst:.3f}; load average {load()}")


if __name__ == "__main__":
    main()
