"""Checks the files the MPI test program wrote, from a separate process, with h5py: every
dataset listed in <dir>/manifest.txt must hold, byte for byte, the pattern the program's ranks
wrote (computed here again with numpy), with h5py's own element type. Prints
`VERIFIED <n> datasets` on success; exits non-zero naming the first difference otherwise."""

import sys
from pathlib import Path

import h5py
import numpy as np

TYPES = {
    "i8": "<i1", "i16": "<i2", "i32": "<i4", "i64": "<i8", "isize": "<i8",
    "u8": "<u1", "u16": "<u2", "u32": "<u4", "u64": "<u8", "usize": "<u8",
    "f16": "<f2", "f32": "<f4", "f64": "<f8", "bool": "bool",
}


def pattern(type_name, shape):
    """The values of h5mpiprog's `Pattern`, by row-major index."""
    i = np.arange(int(np.prod(shape)), dtype=np.uint64)
    if type_name in ("f32", "f64"):
        values = (i.astype(np.float64) * 0.5 - 3.0).astype(TYPES[type_name])
    elif type_name == "f16":
        values = ((i % 2048).astype(np.float64) * 0.25).astype("<f2")
    elif type_name == "bool":
        values = i % 3 == 0
    else:
        values = ((i * np.uint64(2654435761)) >> np.uint64(7)).astype(TYPES[type_name])
    return values.reshape(shape)


def main(directory):
    directory = Path(directory)
    checked = 0
    for line in (directory / "manifest.txt").read_text().splitlines():
        name, dataset, type_name, shape = line.split("\t")
        shape = tuple(int(d) for d in shape.split(",") if d)
        with h5py.File(directory / name, "r") as f:
            dset = f[dataset]
            got = dset[()]
            layout = dset.id.get_create_plist().get_layout()
        if dataset == "/old":  # the file a failed collective write must have left alone
            want = np.full(3, 42.0)
        else:
            want = pattern(type_name, shape)
            assert layout == h5py.h5d.CONTIGUOUS, f"{name}: layout {layout}"
        assert got.dtype == want.dtype, f"{name}{dataset}: dtype {got.dtype}, want {want.dtype}"
        assert got.shape == want.shape, f"{name}{dataset}: shape {got.shape}, want {want.shape}"
        if got.tobytes() != want.tobytes():
            bad = np.argwhere(got != want)[:5].tolist()
            sys.exit(f"{name}{dataset}: bytes differ, first at {bad}")
        checked += 1
    leftovers = [p.name for p in directory.iterdir() if p.name.endswith(".partial")]
    assert not leftovers, f"temporary files left: {leftovers}"
    print(f"VERIFIED {checked} datasets")


if __name__ == "__main__":
    main(sys.argv[1])
