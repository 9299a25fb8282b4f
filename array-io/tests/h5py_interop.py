"""The h5py side of array-io's interoperability tests (run by tests/interop.rs).

    h5py_interop.py write DIR   writes DIR/h5py.h5 with datasets of every element type, rank and
                                storage layout, and DIR/manifest.tsv: one line per dataset,
                                "name<TAB>dtype<TAB>shape", with the bytes h5py reads for it in
                                DIR/<n>.bin (n = line number, from 0), as native-endian values.
    h5py_interop.py check DIR   reads DIR/manifest.tsv written by the Rust side ("file<TAB>name
                                <TAB>dtype<TAB>shape", bytes in DIR/<n>.bin) and checks that h5py
                                reads each dataset with that dtype, shape and those bytes.

Prints "OK <count>" and exits 0, or prints what differs and exits 1.
"""

import os
import sys

import h5py
import numpy as np

DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "bool"]
SHAPES = [(), (7,), (3, 5), (2, 3, 4), (2, 3, 2, 3)]


def shape_text(shape):
    return ",".join(str(d) for d in shape) if shape else "scalar"


def parse_shape(text):
    return () if text == "scalar" else tuple(int(d) for d in text.split(","))


def values(dtype, shape, seed):
    """Deterministic values of every kind: negatives, large magnitudes, fractions."""
    n = int(np.prod(shape, dtype=np.int64))
    k = np.arange(n, dtype=np.int64) * 7919 + seed * 104729
    if dtype == "bool":
        data = (k % 3) == 1
    elif dtype.startswith("float"):
        data = ((k % 2001) - 1000) / 8.0
    else:
        # Wrapping 64-bit products, truncated to the type: every bit pattern can occur.
        data = k.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    return np.asarray(data).astype(dtype).reshape(shape)


def write(directory):
    path = os.path.join(directory, "h5py.h5")
    manifest = []
    with h5py.File(path, "w") as f:
        def add(name, dataset):
            manifest.append((name, dataset))

        for dtype in DTYPES:
            for rank, shape in enumerate(SHAPES):
                name = f"/contiguous/{dtype}/rank{rank}"
                add(name, f.create_dataset(name, data=values(dtype, shape, rank)))
        add("/chunked", f.create_dataset(
            "chunked", data=values("float32", (20, 30), 1), chunks=(6, 7)))
        add("/chunked_exact", f.create_dataset(
            "chunked_exact", data=values("int64", (8, 12), 2), chunks=(4, 4)))
        add("/gzip", f.create_dataset(
            "gzip", data=values("float64", (50, 40), 3), chunks=(16, 16),
            compression="gzip", compression_opts=4, shuffle=True))
        add("/gzip_bool", f.create_dataset(
            "gzip_bool", data=values("bool", (33, 17), 4), chunks=(8, 8), compression="gzip"))
        sparse = f.create_dataset("sparse", shape=(10, 12), chunks=(4, 5), dtype="float32",
                                  fillvalue=-1.5)
        sparse[2:5, 3:9] = values("float32", (3, 6), 5)
        add("/sparse", sparse)
        sparse0 = f.create_dataset("sparse_default_fill", shape=(9, 9), chunks=(3, 3),
                                   dtype="int16")
        sparse0[0:3, 0:3] = values("int16", (3, 3), 6)
        add("/sparse_default_fill", sparse0)
        add("/unwritten", f.create_dataset("unwritten", shape=(100,), dtype="int32",
                                           fillvalue=7))
        add("/big_endian", f.create_dataset("big_endian", data=values("float64", (4, 6), 7),
                                            dtype=">f8"))
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        compact = f.create_dataset("compact", shape=(10,), dtype="uint16", dcpl=dcpl)
        compact[...] = values("uint16", (10,), 8)
        add("/compact", compact)
        external = os.path.join(directory, "external.raw")
        ext = f.create_dataset("external", shape=(16,), dtype="int32",
                               external=[(external, 0, 64)])
        ext[...] = values("int32", (16,), 9)
        add("/external", ext)
        add("/empty", f.create_dataset("empty", shape=(0,), dtype="float32"))
        add("/empty2", f.create_dataset("empty2", shape=(3, 0), dtype="int8"))
        add("/big", f.create_dataset("big", data=values("float32", (300_000,), 10)))
        bigchunk = f.create_dataset("big_chunked", shape=(600, 500), chunks=(64, 100),
                                    dtype="float32", fillvalue=2.5)
        bigchunk[:, :300] = values("float32", (600, 300), 11)
        add("/big_chunked", bigchunk)
        lines = []
        for n, (name, dataset) in enumerate(manifest):
            data = dataset[()]
            native = data.dtype.newbyteorder("=")
            data = np.asarray(data).astype(native)
            with open(os.path.join(directory, f"{n}.bin"), "wb") as out:
                out.write(data.tobytes())
            lines.append(f"{name}\t{native.name}\t{shape_text(dataset.shape)}\n")
    with open(os.path.join(directory, "manifest.tsv"), "w") as out:
        out.writelines(lines)
    print(f"OK {len(lines)}")


def check(directory):
    failures = []
    count = 0
    with open(os.path.join(directory, "manifest.tsv")) as lines:
        for n, line in enumerate(lines):
            file, name, dtype, shape = line.rstrip("\n").split("\t")
            with open(os.path.join(directory, f"{n}.bin"), "rb") as raw:
                want = raw.read()
            with h5py.File(os.path.join(directory, file), "r") as f:
                dataset = f[name]
                if dataset.dtype != np.dtype(dtype):
                    failures.append(f"{file}:{name}: dtype {dataset.dtype}, expected {dtype}")
                    continue
                if dataset.shape != parse_shape(shape):
                    failures.append(f"{file}:{name}: shape {dataset.shape}, expected {shape}")
                    continue
                got = np.asarray(dataset[()]).tobytes()
                if got != want:
                    failures.append(f"{file}:{name}: bytes differ")
                    continue
            count += 1
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print(f"OK {count}")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "check"):
        print(__doc__)
        sys.exit(2)
    {"write": write, "check": check}[sys.argv[1]](sys.argv[2])
