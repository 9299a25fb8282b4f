#!/usr/bin/env python3
"""Benchmark of gathers (not a test): ``h5gds.read(dset, sel=rows)`` against h5py's fancy indexing
``dset[np.sort(rows)]`` of the same random rows (issue 26's goal: at least 5x h5py), host memory.

A float32 dataset of shape (N, row/4) (``--size``, default 1 GiB; ``--row``, default 4 KiB) is
written once, contiguous and chunked (``--chunk-rows`` rows per chunk, unfiltered); each round draws
``--rows`` distinct random rows (default 4096) and times, interleaved:

* h5py's fancy indexing of the sorted rows (h5py takes increasing indices only), file opened with
  HDF5's default driver (sec2) and with ``driver="gds"``;
* ``h5gds.read`` of the same sorted rows and of the rows in their random order (``driver="gds"``);
* ``h5gds.read`` of the sorted rows with sec2, which tells the call's share from the driver's;
* for the chunked dataset, both again with the chunk cache off (``rdcc_nbytes=0``): HDF5 then reads
  the selected rows of each chunk, where with the cache it reads every chunk touched whole.

Every result is checked against NumPy's gather of the data written. Medians of ``--reps`` rounds and
the ratio to h5py (sec2) are printed; the page cache is warm (the file was just written, and each
alternative reads the same rows in a round). Run it with the wheel's interpreter::

    .venv-wheel/bin/python benches/gathers.py --size 1G

``--compressed`` measures gathers and partial reads of compressed datasets instead (issue 40): a smooth
float32 array of ``--shape`` (default 16384x16384, 1 GiB; 2-4x compressible) in each of ``--chunkings``
(rows x columns; ``full`` is the whole axis) and ``--codecs`` (gzip, zstd, lz4 through hdf5plugin, none),
read per round as ``--rows`` random rows (h5gds in random order; h5py's fancy indexing of them sorted;
Zarr v3's ``oindex``, where ``zarr`` is importable, on the same data and chunks with its codec of the
same name: gzip, zstd, Blosc-LZ4 without shuffle), 64 alternate rows of one chunk, and a strided
partial hyperslab (``[::97, 3::5]``); each read is checked against the data, with ratios h5gds/h5py
and h5gds/zarr (above 1: h5gds faster)::

    .venv-bench/bin/python benches/gathers.py --compressed --shape 4096x16384 --reps 5
"""

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

import h5gds


def size_arg(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def write_file(path, n_rows, row_elements, chunk_rows):
    """The dataset, contiguous and chunked: row i holds i, i+1, ... (float32), written in slabs."""
    with h5py.File(path, "w") as f:
        contiguous = f.create_dataset("contiguous", shape=(n_rows, row_elements), dtype="<f4")
        chunked = f.create_dataset("chunked", shape=(n_rows, row_elements), dtype="<f4",
                                   chunks=(chunk_rows, row_elements))
        slab = max(1, (64 << 20) // (row_elements * 4))
        for first in range(0, n_rows, slab):
            rows = np.arange(first, min(first + slab, n_rows), dtype=np.float32)[:, None]
            values = rows + np.arange(row_elements, dtype=np.float32)[None, :]
            contiguous[first:first + len(values)] = values
            chunked[first:first + len(values)] = values


def expected(rows, row_elements):
    return rows.astype(np.float32)[:, None] + np.arange(row_elements, dtype=np.float32)[None, :]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=size_arg, default=size_arg("1G"), help="dataset bytes (default 1G)")
    parser.add_argument("--row", type=size_arg, default=size_arg("4K"), help="bytes per row (default 4K)")
    parser.add_argument("--rows", type=int, default=4096, help="rows per gather (default 4096)")
    parser.add_argument("--chunk-rows", type=int, default=16, help="rows per chunk of the chunked dataset")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--dir", default=None, help="where the file goes (default: a temporary directory)")
    parser.add_argument("--layouts", default="contiguous,chunked")
    parser.add_argument("--compressed", action="store_true", help="gathers of compressed datasets (issue 40)")
    parser.add_argument("--shape", default="16384x16384", help="--compressed: the array's shape")
    parser.add_argument("--chunkings", default="512xfull,256x256", help="--compressed: chunk shapes")
    parser.add_argument("--codecs", default="zstd,lz4,gzip,none", help="--compressed: codecs")
    args = parser.parse_args()
    if args.compressed:
        compressed(args)
        return
    row_elements = args.row // 4
    n_rows = args.size // (row_elements * 4)
    if args.rows > n_rows:
        parser.error(f"--rows {args.rows} is more than the dataset's {n_rows} rows")
    rng = np.random.default_rng(26)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "gathers.h5"
        write_file(path, n_rows, row_elements, args.chunk_rows)
        print(f"gathers of {args.rows} random rows of {row_elements * 4} bytes from a float32 dataset of shape "
              f"({n_rows}, {row_elements}) ({n_rows * row_elements * 4 / 2**30:.2f} GiB), page cache warm, "
              f"{args.reps} interleaved rounds, {os.cpu_count()} CPUs, host memory (NumPy)")
        with h5py.File(path, "r") as sec2, h5py.File(path, "r", driver="gds") as gds, \
                h5py.File(path, "r", driver="gds", rdcc_nbytes=0) as uncached:
            for layout in args.layouts.split(","):
                alternatives = {
                    "h5py dset[sorted] (sec2)": lambda s, u: sec2[layout][s],
                    "h5py dset[sorted] (gds)": lambda s, u: gds[layout][s],
                    "h5gds.read sorted (sec2)": lambda s, u: h5gds.read(sec2[layout], sel=s),
                    "h5gds.read sorted (gds)": lambda s, u: h5gds.read(gds[layout], sel=s),
                    "h5gds.read random order (gds)": lambda s, u: h5gds.read(gds[layout], sel=u),
                }
                if layout == "chunked":
                    alternatives["h5py dset[sorted] (gds, no cache)"] = lambda s, u: uncached[layout][s]
                    alternatives["h5gds.read random (gds, no cache)"] = (
                        lambda s, u: h5gds.read(uncached[layout], sel=u))
                times = {name: [] for name in alternatives}
                for _ in range(args.reps):
                    unsorted = rng.choice(n_rows, args.rows, replace=False)
                    ordered = np.sort(unsorted)
                    for name, fn in alternatives.items():
                        t = time.perf_counter()
                        got = fn(ordered, unsorted)
                        times[name].append(time.perf_counter() - t)
                        want = expected(unsorted if "random" in name else ordered, row_elements)
                        assert np.array_equal(got, want), f"{name} read wrong data"
                medians = {name: statistics.median(ts) for name, ts in times.items()}
                baseline = medians["h5py dset[sorted] (sec2)"]
                nbytes = args.rows * row_elements * 4
                chunks = f", {args.chunk_rows} rows per chunk" if layout == "chunked" else ""
                print(f"\n{layout}{chunks}:")
                for name, seconds in medians.items():
                    print(f"  {name:<32} {seconds * 1e3:8.2f} ms  {nbytes / seconds / 1e9:6.2f} GB/s  "
                          f"x{baseline / seconds:6.2f} vs h5py (sec2)")


# --- compressed datasets (--compressed) ----------------------------------------------------------------------

def smooth(first, rows, columns):
    """Rows ``first:first+rows`` of the smooth test array: quantised sines, 2-4x compressible."""
    r = np.arange(first, first + rows, dtype=np.float32)[:, None]
    c = np.arange(columns, dtype=np.float32)[None, :]
    return np.round((np.sin(r / 300) + np.cos(c / 500)) * 256 + np.sin((r + c) / 7) * 4) / 16


def write_compressed(tmp, data, chunks, codec, with_zarr):
    """The array as an HDF5 dataset (and a Zarr v3 array where ``with_zarr``) of ``chunks`` and
    ``codec``; returns their paths."""
    import hdf5plugin

    options = {"gzip": {"compression": "gzip"}, "zstd": hdf5plugin.Zstd(), "lz4": hdf5plugin.LZ4(),
               "none": {}}[codec]
    h5 = Path(tmp) / f"{codec}-{chunks[0]}x{chunks[1]}.h5"
    z, shape = None, data.shape
    slab = max(chunks[0], (64 << 20) // (shape[1] * 4) // chunks[0] * chunks[0])
    with h5py.File(h5, "w") as f:
        dset = f.create_dataset("x", shape=shape, dtype="<f4", chunks=chunks, **options)
        array = None
        if with_zarr:
            import zarr
            from zarr import codecs

            z = Path(tmp) / f"{codec}-{chunks[0]}x{chunks[1]}.zarr"
            compressors = {"gzip": [codecs.GzipCodec()], "zstd": [codecs.ZstdCodec()],
                           "lz4": [codecs.BloscCodec(cname="lz4", shuffle="noshuffle")], "none": None}[codec]
            array = zarr.create_array(z, shape=shape, chunks=chunks, dtype="<f4", compressors=compressors)
        for first in range(0, shape[0], slab):
            values = data[first:first + slab]
            dset[first:first + len(values)] = values
            if array is not None:
                array[first:first + len(values)] = values
    return h5, z


def compressed(args):
    shape = tuple(int(n) for n in args.shape.lower().split("x"))
    try:
        import zarr
    except ImportError:
        zarr = None
    rng = np.random.default_rng(40)
    data = smooth(0, shape[0], shape[1])
    print(f"compressed float32 array of shape {shape} ({np.prod(shape) * 4 / 2**30:.2f} GiB), page cache warm, "
          f"{args.reps} interleaved rounds, {os.cpu_count()} CPUs, host memory (NumPy); h5py {h5py.__version__}, "
          f"zarr {zarr.__version__ if zarr else 'not installed'}; medians in ms")
    print(f"{'chunks, codec':<22} {'read':<26} {'h5py':>9} {'h5gds':>9} {'zarr':>9} {'x h5py':>7} {'x zarr':>7}")
    for chunking in args.chunkings.split(","):
        rows_text, columns_text = chunking.lower().split("x")
        chunks = (shape[0] if rows_text == "full" else int(rows_text),
                  shape[1] if columns_text == "full" else int(columns_text))
        for codec in args.codecs.split(","):
            with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
                h5, z = write_compressed(tmp, data, chunks, codec, zarr is not None)
                zarray = zarr.open_array(z, mode="r") if z is not None else None
                with h5py.File(h5, "r") as f:
                    dset = f["x"]
                    times = {}
                    for _ in range(args.reps):
                        rows = rng.choice(shape[0], args.rows, replace=False)
                        base = int(rng.integers(0, shape[0] // chunks[0])) * chunks[0]
                        alternate = np.arange(base, base + min(chunks[0], 2 * 64), 2)
                        reads = {
                            f"{args.rows} random rows": (rows, np.sort(rows), data[rows]),
                            "alternate rows, 1 chunk": (alternate, alternate, data[alternate]),
                            "[::97, 3::5]": ((slice(None, None, 97), slice(3, None, 5)),) * 2 + (None,),
                        }
                        for name, (ours, theirs, want) in reads.items():
                            if want is None:
                                want = data[::97, 3::5]
                            runs = {
                                "h5py": lambda: dset[theirs] if isinstance(theirs, tuple) else dset[theirs, :],
                                "h5gds": lambda: h5gds.read(dset, sel=ours),
                            }
                            if zarray is not None:
                                runs["zarr"] = lambda: zarray.oindex[theirs] if isinstance(theirs, tuple) \
                                    else zarray.oindex[theirs, :]
                            for who, run in runs.items():
                                t = time.perf_counter()
                                got = run()
                                times.setdefault((name, who), []).append(time.perf_counter() - t)
                                expect = want if who == "h5gds" or isinstance(theirs, tuple) else \
                                    want[np.argsort(ours, kind="stable")] if name.endswith("random rows") else want
                                assert np.array_equal(got, expect), f"{who} read wrong data: {name}"
                    for name in reads:
                        ms = {who: statistics.median(times[(name, who)]) * 1e3
                              for who in ("h5py", "h5gds", "zarr") if (name, who) in times}
                        zr = f"{ms['zarr'] / ms['h5gds']:7.2f}" if "zarr" in ms else f"{'-':>7}"
                        zt = f"{ms['zarr']:9.1f}" if "zarr" in ms else f"{'-':>9}"
                        print(f"{f'{chunks[0]}x{chunks[1]}, {codec}':<22} {name:<26} {ms['h5py']:9.1f} "
                              f"{ms['h5gds']:9.1f} {zt} {ms['h5py'] / ms['h5gds']:7.2f} {zr}", flush=True)


if __name__ == "__main__":
    main()
