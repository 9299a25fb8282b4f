#!/usr/bin/env python3
"""Writes of compressed datasets, side by side in one run (issue 24 item 4): for each codec and chunk
size, a float32 array like `compressed_read.py`'s (a smooth signal quantised to 1/64) written whole as a
new file

* by h5py: ``create_dataset(..., data=array, compression=...)`` (HDF5's filters, one core, under
  HDF5's lock; hdf5plugin's Zstandard and LZ4);
* by ``h5gds.to_file(..., compression=...)``: chunks encoded on the driver's I/O threads (all cores,
  ``H5GDS_NTHREADS``) and written raw, and on one thread (the encoders' own speed).

Alternatives are interleaved, each repeated; medians, GB/s of array bytes and ratios to h5py are
printed, with the stored size of each. Files go to the page cache (this measures encoding, not
storage). Run it with the wheel's interpreter (hdf5plugin installed)::

    .venv-wheel/bin/python benches/compressed_write.py --size 256M --chunks 256K,1M,4M
"""

import argparse
import os
import sys
import tempfile
from pathlib import Path

import h5py
import hdf5plugin
import numpy as np

import h5gds

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from bench_python import interleave, size_arg, with_env  # noqa: E402

# (h5py's keywords, h5gds.to_file's): the same pipeline.
CODECS = {
    "gzip": ({"compression": "gzip", "compression_opts": 4}, {"compression": "gzip"}),
    "gzip+shuffle": ({"compression": "gzip", "compression_opts": 4, "shuffle": True},
                     {"compression": "gzip", "shuffle": True}),
    "zstd": (dict(hdf5plugin.Zstd()), {"compression": "zstd"}),
    "lz4": (dict(hdf5plugin.LZ4()), {"compression": "lz4"}),
}


def signal(n):
    k = np.arange(n, dtype=np.float64)
    return (np.round((np.sin(k / 5000.0) * 100 + (k % 7)) * 64) / 64).astype("<f4")


def stored_bytes(path):
    with h5py.File(path, "r") as f:
        return f["x"].id.get_storage_size()


def row(name, seconds, nbytes, baseline, stored):
    print(f"    {name:<40} {seconds * 1e3:9.1f} ms  {nbytes / seconds / 1e9:6.2f} GB/s  "
          f"x{baseline / seconds:5.2f}  stored {100 * stored / nbytes:5.1f}%")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=size_arg, default=size_arg("256M"), help="array bytes (default 256M)")
    parser.add_argument("--chunks", default="256K,1M,4M", help="chunk sizes in bytes (default 256K,1M,4M)")
    parser.add_argument("--codecs", default=",".join(CODECS), help=f"of {', '.join(CODECS)}")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where the files go (default: a temporary directory)")
    args = parser.parse_args()
    n = args.size // 4
    cores = os.cpu_count()
    threads = os.environ.get("H5GDS_NTHREADS", str(min(cores, 16)))
    array = signal(n)
    print(f"Compressed writes: float32, {n * 4} array bytes, {args.reps} interleaved rounds, {cores} CPUs; "
          f"ratios against h5py (HDF5's filters)")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for codec in args.codecs.split(","):
            h5py_kw, h5gds_kw = CODECS[codec]
            for chunk in args.chunks.split(","):
                chunks = (min(n, size_arg(chunk) // 4),)
                paths = {name: Path(tmp) / f"{name}.h5" for name in ("h5py", "h5gds", "h5gds1")}

                def by_h5py():
                    with h5py.File(paths["h5py"], "w") as f:
                        f.create_dataset("x", data=array, chunks=chunks, **h5py_kw)

                def by_h5gds(key):
                    return lambda: h5gds.to_file(array, paths[key], "x", chunks=chunks, **h5gds_kw)

                times = interleave({
                    "h5py create_dataset": by_h5py,
                    f"h5gds.to_file, {threads} threads": by_h5gds("h5gds"),
                    "h5gds.to_file, 1 thread": with_env("H5GDS_NTHREADS", "1", by_h5gds("h5gds1")),
                }, args.reps)
                print(f"\n  {codec}, chunks of {chunk}")
                base = times["h5py create_dataset"]
                for (name, seconds), key in zip(times.items(), paths):
                    with h5py.File(paths[key], "r") as f:
                        assert np.array_equal(f["x"][...], array), (codec, chunk, key)
                    row(name, seconds, n * 4, base, stored_bytes(paths[key]))
                for path in paths.values():
                    path.unlink()


if __name__ == "__main__":
    main()
