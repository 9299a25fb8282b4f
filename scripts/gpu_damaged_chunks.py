#!/usr/bin/env python3
"""Damaged chunks through the GPU decoder (a check, not a benchmark): for each codec (deflate,
Zstandard, LZ4) h5py + hdf5plugin write a float32 dataset of ``--chunks`` chunks, then every
stored chunk is damaged in its own way (bytes flipped, the chunk cut short, or a run of bytes
zeroed, at places drawn from a fixed seed) and written back with ``write_direct_chunk``. Each
chunk is then read alone into device memory with ``h5gds.read`` (``H5GDS_GPU_CODEC=1``: decoded
by nvCOMP) and the outcome judged against HDF5's own filters (the host decoder) on the same chunk:

* refused with an error naming the chunk (``chunk at [offset]``): right;
* read, and equal to what the host decoder gives: right (the damage still decodes);
* read where the host decoder refuses, and equal to the chunk before damage: right (the damage hit
  only what neither path decodes, such as a Zstandard frame's unused bytes);
* anything else (an error not naming the chunk, bytes that differ, and so any chunk the host
  decoder refuses read with other bytes) is a failure: the GPU path checks the checksums the
  chunks carry (deflate's Adler-32) by default, so it must refuse every such chunk. A crash or a
  hang fails the caller's time limit (scripts/gpu-measure.sh runs this under ``timeout``).

Deflate chunks refused by the Adler-32 check are read once more with ``H5GDS_VERIFY_CHECKSUMS=0``
(the opt-out) and counted apart when they then read as wrong bytes: what opting out would have
returned as a success.

nvCOMP 6's documentation says its Zstandard and Deflate decoders "can only operate on valid input":
this is what finds out how the real one behaves. On h5gds's emulators (libnvcomp.so.6 the nvCOMP
emulator, CuPy the tests' stand-in) the same reads go through the emulated decoder.

    python3 scripts/gpu_damaged_chunks.py --chunks 300 --summary damaged.json

Prints one line per failure and per codec, then ``DAMAGED CHUNKS: ...``; exits 1 if any read
failed, 2 if no device is usable.
"""

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import h5py
import hdf5plugin
import numpy as np

import h5gds

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_python import device_cupy, size_arg  # noqa: E402

CODECS = {
    "deflate": {"compression": "gzip", "compression_opts": 4},
    "zstd": dict(hdf5plugin.Zstd()),
    "lz4": dict(hdf5plugin.LZ4()),
}
DAMAGES = ("flipped", "cut short", "zeroed")


def damage(stored, kind, rng):
    """`stored` (bytes of one compressed chunk) damaged as `kind` says."""
    out = bytearray(stored)
    if kind == "flipped":
        for at in rng.integers(0, len(out), int(rng.integers(1, 9))):
            out[at] ^= int(rng.integers(1, 256))
    elif kind == "cut short":
        out = out[: int(rng.integers(1, len(out)))]
    else:
        start = int(rng.integers(0, len(out)))
        end = min(len(out), start + int(rng.integers(1, max(2, len(out) // 4))))
        out[start:end] = bytes(end - start)
    return bytes(out)


def write(path, codec, chunks, chunk_elements):
    """The intact data and the file, every chunk then damaged; (data, the damage of each chunk)."""
    n = chunks * chunk_elements
    k = np.arange(n, dtype=np.float64)
    data = (np.round((np.sin(k / 3000.0) * 100 + (k % 13)) * 16) / 16).astype("<f4")
    kinds = []
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", data=data, chunks=(chunk_elements,), **CODECS[codec])
        for i in range(chunks):
            rng = np.random.default_rng([38, i])
            kind = DAMAGES[i % len(DAMAGES)]
            mask, stored = d.id.read_direct_chunk((i * chunk_elements,))
            d.id.write_direct_chunk((i * chunk_elements,), damage(stored, kind, rng), filter_mask=mask)
            kinds.append(kind)
    return data, kinds


def check_codec(path, codec, chunks, chunk_elements, cupy):
    """Reads each damaged chunk on the host and into device memory; (outcome counts, failures)."""
    data, kinds = write(path, codec, chunks, chunk_elements)
    counts = {"refused naming the chunk": 0, "decoded, equal to the host decoder": 0,
              "decoded the intact chunk the host decoder refuses": 0,
              "FAILED": 0}
    opted_out = 0
    failures = []
    out = cupy.empty((chunk_elements,), dtype="<f4")
    with h5py.File(path, "r", driver="gds", rdcc_nbytes=0) as f:
        d = f["x"]
        for i, kind in enumerate(kinds):
            a, b = i * chunk_elements, (i + 1) * chunk_elements
            try:
                host = d[a:b].tobytes()
            except OSError:
                host = None
            where = f"{codec} chunk at [{a}] ({kind}, host decoder {'refuses' if host is None else 'reads'})"
            # Before the read, so that a crash or a hang leaves the chunk's name as the log's last line.
            print(f"{where}: ", end="")
            outcome = judge(d, out, a, b, codec, host, data, cupy)
            print(outcome)
            counts[outcome if outcome in counts else "FAILED"] += 1
            if outcome not in counts:
                failures.append(f"{where}: {outcome}")
            elif codec == "deflate" and host is None and wrong_when_opted_out(d, out, a, b, data, cupy):
                opted_out += 1
    counts["of them read as wrong bytes with H5GDS_VERIFY_CHECKSUMS=0"] = opted_out
    return counts, failures


def judge(d, out, a, b, codec, host, data, cupy):
    """The outcome of reading elements a..b (one damaged chunk) into device memory: one of
    check_codec's counts, or why it failed."""
    try:
        h5gds.read(d, out=out, sel=(slice(a, b),))
    except OSError as exc:
        return "refused naming the chunk" if f"chunk at [{a}]" in str(exc) else f"refused without naming it: {exc}"
    got = cupy.asnumpy(out).tobytes()
    if host is not None and got == host:
        return "decoded, equal to the host decoder"
    if host is None and got == data[a:b].tobytes():
        return "decoded the intact chunk the host decoder refuses"
    why = "differ from the host decoder's" if host is not None else "were read where the host decoder refuses"
    return f"FAILED: read as a success, but its bytes {why}"


def wrong_when_opted_out(dset, out, a, b, data, cupy):
    """Whether reading elements a..b again with the checksums unchecked (H5GDS_VERIFY_CHECKSUMS=0)
    returns bytes other than the intact chunk's, as a success."""
    os.environ["H5GDS_VERIFY_CHECKSUMS"] = "0"
    try:
        h5gds.read(dset, out=out, sel=(slice(a, b),))
    except OSError:
        return False
    finally:
        del os.environ["H5GDS_VERIFY_CHECKSUMS"]
    return cupy.asnumpy(out).tobytes() != data[a:b].tobytes()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=300, help="damaged chunks per codec (default 300)")
    parser.add_argument("--chunk-bytes", type=size_arg, default=size_arg("64K"), help="decoded bytes per chunk")
    parser.add_argument("--codecs", default=",".join(CODECS), help=f"of {', '.join(CODECS)}")
    parser.add_argument("--dir", default=None, help="where the files go (default: a temporary directory)")
    parser.add_argument("--summary", default=None, help="also write the outcomes to this JSON file")
    args = parser.parse_args()
    cupy, label = device_cupy()
    if cupy is None:
        print(f"DAMAGED CHUNKS: not run: {label}")
        sys.exit(2)
    os.environ["H5GDS_GPU_CODEC"] = "1"  # nvCOMP wherever it can, which is what this checks
    os.environ.pop("H5GDS_VERIFY_CHECKSUMS", None)  # the default: checksums checked
    summary = {"label": label.strip(), "codecs": {}, "failures": []}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for codec in args.codecs.split(","):
            counts, failures = check_codec(Path(tmp) / f"{codec}.h5", codec, args.chunks,
                                           args.chunk_bytes // 4, cupy)
            print(f"{codec}: {args.chunks} damaged chunks: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
            summary["codecs"][codec] = counts
            summary["failures"] += failures[:20]
    failed = sum(c["FAILED"] for c in summary["codecs"].values())
    total = args.chunks * len(summary["codecs"])
    print(f"DAMAGED CHUNKS{label}: {total} reads, {total - failed} right, {failed} failed")
    if args.summary:
        Path(args.summary).write_text(json.dumps(summary, indent=1))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
