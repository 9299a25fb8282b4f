"""The aarch64 wheel's smoke set, run by scripts/test-aarch64-wheel.sh under qemu-user with Debian's
arm64 CPython and PyPI's aarch64 wheels of h5py, NumPy and hdf5plugin (not a pytest module: one
interpreter start under emulation costs seconds, and qemu-user cannot start a child interpreter).

``python aarch64_smoke.py write DIR [MACHINE]``: h5py and hdf5plugin write DIR/compressed.h5 (deflate with
shuffle and Fletcher-32, Zstandard, LZ4, in many chunks), and a round trip through
``driver="gds"`` is checked byte for byte, read back through the driver and through sec2.
``python aarch64_smoke.py read DIR``: in a process without hdf5plugin, where h5py's HDF5 has no
Zstandard or LZ4 filter (checked), ``h5gds.read`` returns the exact data of every compressed
dataset: the wheel's own decoders (its aarch64 C code: libdeflate, zstd, lz4) decoded them.
"""

import os
import platform
import sys

import numpy as np


def data(shape, dtype):
    values = np.arange(np.prod(shape), dtype=np.int64).reshape(shape)
    return (np.round(np.sin(values * 0.001) * 1000) + values % 13).astype(dtype)


#: name -> (shape, chunks, dtype); each dataset spans many chunks, so h5gds.read decodes them
#: itself on the driver's threads rather than leaving one chunk to HDF5.
COMPRESSED = {
    "gzip_shuffle_fletcher32": ((300, 200), (32, 50), "<f4"),
    "zstd": ((400, 150), (50, 64), "<i8"),
    "lz4": ((100_000,), (4096,), "<u2"),
}


def pipeline(name):
    import hdf5plugin

    return {
        "gzip_shuffle_fletcher32": {"compression": "gzip", "shuffle": True, "fletcher32": True},
        "zstd": dict(hdf5plugin.Zstd(clevel=5)),
        "lz4": dict(hdf5plugin.LZ4()),
    }[name]


def write(directory, machine="aarch64"):
    import h5py
    import hdf5plugin  # noqa: F401 (the Zstandard and LZ4 filters for the writes)

    import h5gds

    assert platform.machine() == machine, platform.machine()
    assert h5gds._native.__file__.endswith("_native.abi3.so"), h5gds._native.__file__
    with h5py.File(os.path.join(directory, "compressed.h5"), "w") as f:
        for name, (shape, chunks, dtype) in COMPRESSED.items():
            f.create_dataset(name, data=data(shape, dtype), chunks=chunks, **pipeline(name))

    # A round trip through the driver: a contiguous dataset larger than the driver's task size
    # (4 MiB: split over its threads), a chunked one, an attribute, h5gds.write and h5gds.read.
    path = os.path.join(directory, "gds.h5")
    big = data((3, 1 << 20), "<f8")
    chunked = data((500, 70), "<i4")
    with h5py.File(path, "w", driver="gds") as f:
        # (h5py names its own drivers only; a plugin driver such as gds is "unknown" to it)
        assert f.driver == "unknown", f.driver
        f["big"] = big
        f.create_dataset("chunked", data=chunked, chunks=(64, 16))
        f["big"].attrs["note"] = "aarch64"
        out = f.create_dataset("written", shape=(1000, 33), dtype="<u4")
        h5gds.write(out, data((1000, 33), "<u4"))
    for driver in ("gds", None):
        with h5py.File(path, "r", driver=driver) as f:
            assert f["big"][...].tobytes() == big.tobytes(), driver
            assert f["chunked"][...].tobytes() == chunked.tobytes(), driver
            assert f["big"].attrs["note"] == "aarch64", driver
            assert f["written"][...].tobytes() == data((1000, 33), "<u4").tobytes(), driver
            assert h5gds.read(f["big"]).tobytes() == big.tobytes(), driver
            part = h5gds.read(f["chunked"], sel=(slice(7, 480, 3), slice(2, 61)))
            assert part.tobytes() == chunked[7:480:3, 2:61].tobytes(), driver
    print("aarch64 smoke: round trip through driver='gds' exact;", len(COMPRESSED), "compressed datasets written")


def read(directory, machine="aarch64"):
    import h5py

    import h5gds

    assert platform.machine() == machine, platform.machine()
    assert "hdf5plugin" not in sys.modules
    with h5py.File(os.path.join(directory, "compressed.h5"), "r") as f:
        # Without hdf5plugin, h5py's HDF5 cannot decode Zstandard or LZ4 itself ...
        for name in ("zstd", "lz4"):
            try:
                f[name][0:1]
            except OSError:
                pass  # (HDF5 looked for the filter's plugin and found none)
            else:
                raise AssertionError(f"h5py read {name} without hdf5plugin: the check below would prove nothing")
        # ... so every exact array here was decoded by the wheel's own decoders.
        for name, (shape, chunks, dtype) in COMPRESSED.items():
            want = data(shape, dtype)
            got = h5gds.read(f[name])
            assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape)
            assert got.tobytes() == want.tobytes(), name
            sel = (slice(5, None, 7),) + (slice(1, -1),) * (len(shape) - 1)
            assert h5gds.read(f[name], sel=sel).tobytes() == want[sel].tobytes(), name
    print("aarch64 smoke: compressed reads exact:", ", ".join(COMPRESSED))


if __name__ == "__main__":
    # (a third argument names another machine: the same checks run on x86-64 while editing them)
    {"write": write, "read": read}[sys.argv[1]](*sys.argv[2:])
