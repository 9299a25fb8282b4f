"""The h5py side of array-io's GPU codec tests (run by tests/gpu_codec.rs).

    gpu_codec_files.py DIR   writes DIR/h5py.h5 with chunked datasets compressed by h5py's
                             gzip (deflate) and hdf5plugin's Zstd (32015) and LZ4 (32004): ranks
                             1 to 3 with edge chunks, chunks never written (fill value), chunks
                             stored unfiltered, LZ4 chunks of several blocks, filter chains,
                             Zstandard frames with content checksums (zstandard); then
                             DIR/manifest.tsv ("name<TAB>dtype<TAB>shape", bytes h5py reads in
                             DIR/<n>.bin), and DIR/corrupt.tsv ("name<TAB>chunk offset<TAB>how")
                             for datasets with one chunk damaged on purpose.

    gpu_codec_files.py check DIR
                             reads DIR/manifest.tsv written by the Rust side ("file<TAB>name
                             <TAB>dtype<TAB>shape<TAB>filter id", bytes in DIR/<n>.bin) and
                             checks that h5py with hdf5plugin reads each dataset with those bytes
                             and that its one filter is that id.

Prints "OK <count>" and exits 0 (check: or prints what differs and exits 1).
"""

import os
import sys

import h5py
import hdf5plugin
import numpy as np
import zstandard

CODECS = {
    "gzip": lambda: {"compression": "gzip"},
    "zstd": lambda: dict(hdf5plugin.Zstd()),
    "lz4": lambda: dict(hdf5plugin.LZ4()),
}


def values(dtype, shape, seed):
    n = int(np.prod(shape))
    k = np.arange(n, dtype=np.int64) * 7919 + seed * 104729
    if np.dtype(dtype).kind == "f":
        data = ((k % 2001) - 1000) / 8.0
    else:
        # Smooth enough to compress, every value of the type's low bits occurring.
        data = (k // 13) % 120 - 60
    return data.astype(dtype).reshape(shape)


def main(directory):
    path = os.path.join(directory, "h5py.h5")
    corrupt = []
    rng = np.random.default_rng(15)
    with h5py.File(path, "w") as f:
        for codec, opts in CODECS.items():
            g = f.create_group(codec)
            g.create_dataset("rank1", data=values("float32", (1000,), 1), chunks=(128,), **opts())
            g.create_dataset("rank2", data=values("int16", (37, 50), 2), chunks=(8, 16), **opts())
            g.create_dataset("rank3", data=values("float64", (9, 10, 11), 3), chunks=(4, 4, 4),
                             **opts())
            sparse = g.create_dataset("sparse", shape=(40, 30), dtype="int32", chunks=(10, 10),
                                      fillvalue=-7, **opts())
            sparse[0:10, 0:10] = values("int32", (10, 10), 4)
            sparse[20:40, 10:20] = values("int32", (20, 10), 5)
            # Random bytes do not compress: LZ4 stores such blocks as they are. Chunk (0, 0) is
            # then stored unfiltered (filter mask 1), as HDF5 does when a filter fails to help.
            noise = g.create_dataset("raw", data=rng.integers(0, 256, (64, 64), dtype=np.uint8),
                                     chunks=(16, 16), **opts())
            plain = rng.integers(0, 256, (16, 16), dtype=np.uint8)
            noise.id.write_direct_chunk((0, 0), plain.tobytes(), filter_mask=1)
            # One chunk damaged: its stored bytes cut in half.
            bad = g.create_dataset("corrupt", data=values("float32", (100,), 6), chunks=(25,),
                                   **opts())
            _, stored = bad.id.read_direct_chunk((25,))
            bad.id.write_direct_chunk((25,), stored[: len(stored) // 2], filter_mask=0)
            corrupt.append((f"/{codec}/corrupt", "25", "truncated"))
            # More chunks than one batch of the GPU pipeline holds (512): three batches over its
            # two slots, decoded in place (1-D) and through scratch (chunks of part rows).
            g.create_dataset("many", data=values("float32", (1300 * 64,), 11), chunks=(64,),
                             **opts())
            g.create_dataset("many_rows", data=values("int16", (66, 1280), 12), chunks=(2, 40),
                             **opts())
            # Damaged chunks in the second and third batches: the first in chunk order is named.
            late = g.create_dataset("many_corrupt", data=values("float32", (1300 * 64,), 13),
                                    chunks=(64,), **opts())
            for at in (700 * 64, 1200 * 64):
                _, stored = late.id.read_direct_chunk((at,))
                late.id.write_direct_chunk((at,), stored[: len(stored) // 2], filter_mask=0)
            corrupt.append((f"/{codec}/many_corrupt", str(700 * 64), "truncated"))
        # Unfiltered chunks, edge chunks and chunks never written among them (h5gds reads these
        # from the file itself on the host, as it decodes compressed ones).
        f.create_dataset("plain/cube", data=values("float64", (9, 10, 11), 14), chunks=(4, 4, 4))
        holes = f.create_dataset("plain/holes", shape=(40, 30), dtype="int32", chunks=(10, 10),
                                 fillvalue=-7)
        holes[0:10, 0:10] = values("int32", (10, 10), 15)
        holes[20:40, 10:20] = values("int32", (20, 10), 16)
        # LZ4 chunks of several blocks; 302-byte blocks leave later blocks unaligned.
        steps = (np.arange(1000) // 50).astype("int32")
        f.create_dataset("lz4/blocks", data=steps, chunks=(500,),
                         **dict(hdf5plugin.LZ4(nbytes=302)))
        # Chains and checksums stay on HDF5's CPU filters.
        f.create_dataset("chain/shuffle_gzip", data=values("float32", (300,), 8), chunks=(64,),
                         shuffle=True, compression="gzip")
        f.create_dataset("chain/fletcher_gzip", data=values("int32", (300,), 9), chunks=(64,),
                         fletcher32=True, compression="gzip")
        # A deflate chunk whose Adler-32 trailer is wrong but whose Deflate data is intact.
        adler = f.create_dataset("checksum/deflate", data=values("float32", (200,), 10),
                                 chunks=(50,), compression="gzip")
        _, stored = adler.id.read_direct_chunk((50,))
        broken = stored[:-4] + bytes(b ^ 0xFF for b in stored[-4:])
        adler.id.write_direct_chunk((50,), broken, filter_mask=0)
        corrupt.append(("/checksum/deflate", "50", "adler32"))
        # Deflate data behind a wrong Fletcher-32 (HDF5's filter 3): only the checksum catches it.
        fletcher = f.create_dataset("checksum/fletcher", data=values("float32", (200,), 16),
                                    chunks=(50,), compression="gzip", fletcher32=True)
        _, stored = fletcher.id.read_direct_chunk((50,))
        fletcher.id.write_direct_chunk((50,), stored[:-4] + bytes(b ^ 0xFF for b in stored[-4:]),
                                       filter_mask=0)
        corrupt.append(("/checksum/fletcher", "50", "fletcher32"))
        # Zstandard frames with a content checksum (hdf5plugin writes none; zstd's tool and other
        # writers do): all intact in one dataset; in the other, the chunk at [50] with its stored
        # checksum wrong behind intact data, which only the checksum catches.
        checked = zstandard.ZstdCompressor(level=3, write_checksum=True)
        for name, damaged_at in (("zstd", None), ("zstd_wrong", 50)):
            data = values("float32", (200,), 17)
            dset = f.create_dataset(f"checksum/{name}", shape=(200,), dtype="float32", chunks=(50,),
                                    **CODECS["zstd"]())
            for at in range(0, 200, 50):
                frame = checked.compress(data[at:at + 50].tobytes())
                if at == damaged_at:
                    frame = frame[:-4] + bytes(b ^ 0xFF for b in frame[-4:])
                dset.id.write_direct_chunk((at,), frame, filter_mask=0)
        corrupt.append(("/checksum/zstd_wrong", "50", "zstd checksum"))

    damaged = {name for name, _, _ in corrupt}
    lines = []
    with h5py.File(path, "r") as f:
        names = []
        f.visititems(lambda n, o: names.append("/" + n) if isinstance(o, h5py.Dataset) else None)
        for name in sorted(n for n in names if n not in damaged):
            data = f[name][()]
            shape = ",".join(str(d) for d in data.shape)
            with open(os.path.join(directory, f"{len(lines)}.bin"), "wb") as out:
                out.write(np.ascontiguousarray(data).tobytes())
            lines.append(f"{name}\t{data.dtype.name}\t{shape}\n")
    with open(os.path.join(directory, "manifest.tsv"), "w") as out:
        out.writelines(lines)
    with open(os.path.join(directory, "corrupt.tsv"), "w") as out:
        out.writelines(f"{n}\t{c}\t{how}\n" for n, c, how in corrupt)
    print("OK", len(lines))


def check(directory):
    bad = []
    count = 0
    with open(os.path.join(directory, "manifest.tsv")) as manifest:
        for n, line in enumerate(manifest):
            file, name, dtype, shape, filter_id = line.rstrip("\n").split("\t")
            shape = tuple(int(d) for d in shape.split(","))
            with h5py.File(os.path.join(directory, file), "r") as f:
                dset = f[name]
                filters = list(dset._filters)
                data = dset[()]
            want = np.fromfile(os.path.join(directory, f"{n}.bin"), dtype=dtype).reshape(shape)
            if filters not in ([filter_id], ["gzip"] if filter_id == "1" else None):
                bad.append(f"{file}:{name}: filters {filters}, expected {filter_id}")
            elif data.dtype != np.dtype(dtype) or data.shape != shape:
                bad.append(f"{file}:{name}: {data.dtype} {data.shape}, expected {dtype} {shape}")
            elif data.tobytes() != want.tobytes():
                bad.append(f"{file}:{name}: bytes differ")
            count += 1
    if bad:
        print("\n".join(bad))
        sys.exit(1)
    print("OK", count)


if __name__ == "__main__":
    if sys.argv[1] == "check":
        check(sys.argv[2])
    else:
        main(sys.argv[1])
