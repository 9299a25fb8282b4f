#!/usr/bin/env python3
"""Benchmark of the Python package (not a test): a float32 dataset read

* into NumPy: ``h5gds.read`` (file opened with driver="gds") vs h5py's ``read_direct`` under sec2 and
  under the gds driver;
* into device memory: ``h5gds.read`` straight through the gds driver vs the staged path
  (``H5GDS_USE_VFD_GDS=0``, 128 MiB pinned buffer), the file evicted from the page cache before
  each read. Without a GPU this runs on h5gds's CPU emulator
  of CUDA and cuFile and every device figure is labelled EMULATED;
* the time of the first ``h5gds.read`` in a fresh process;
* device memory as users compare it (CuPy, real or the emulators' stand-in): reads against the pinned
  host-to-device copy (their limit), h5py + ``cupy.asarray`` and KvikIO's raw read where kvikio imports,
  warm and cold (cold beside the disk's own O_DIRECT read, ``dd``); writes against ``cupy.asnumpy`` +
  h5py and KvikIO's raw write;
* xarray: ``open_dataset`` + ``load`` of a compressed (deflate) float32 variable, the h5netcdf engine
  against ``engine="h5gds"``, into NumPy (whole, and in dask chunks read by dask's threads) and into
  CuPy (h5netcdf then ``cupy.asarray``, against ``device=``), and ``to_netcdf`` of it with either engine (deflate and contiguous from NumPy;
  contiguous from CuPy: ``as_numpy`` then h5netcdf against h5gds as is), side by side
  (``--xarray-size``; 0 skips it). Without a GPU the CuPy rows use the
  CuPy stand-in of the package tests over the emulators (nvCOMP's too) and are labelled EMULATED.

Alternatives are interleaved, each repeated; medians and ratios are printed (and, where
H5GDS_BENCH_RECORDS names a file, appended to it as JSON lines: see ``record``). Run it with the wheel's
interpreter (it imports the test-only device arrays of python/tests), the emulator on
LD_LIBRARY_PATH when there is no GPU (scripts/test.sh creates the wheel environment and the links)::

    LD_LIBRARY_PATH=$PWD/target/emulator-lib-python H5GDS_EMU_POISON=off \\
        .venv-wheel/bin/python scripts/bench_python.py --size 1G --xarray-size 1G
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

import h5py
import numpy as np

import h5gds

# The test-only device arrays (python/tests/device_arrays.py; python/tests holds no h5gds, so the
# import above stays the installed package's).
TESTS = Path(__file__).resolve().parent.parent / "python" / "tests"
sys.path.insert(0, str(TESTS))


def size_arg(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def record(bench, alternative, seconds, nbytes, label="", **fields):
    """Appends one figure as a JSON line to the file H5GDS_BENCH_RECORDS names, where set (what
    scripts/gpu_report.py reads to mark each issue's goal met or missed); nothing otherwise.
    `fields` say what the figure is (its case, its role among the alternatives, threads, ...)."""
    target = os.environ.get("H5GDS_BENCH_RECORDS")
    if not target:
        return
    line = {"bench": bench, "alternative": alternative.strip(), "seconds": seconds,
            "gbps": nbytes / seconds / 1e9 if seconds > 0 else None, "bytes": nbytes,
            "emulated": "EMULATED" in label, **fields}
    with open(target, "a") as f:
        f.write(json.dumps(line) + "\n")


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def with_env(name, value, fn):
    """``fn`` as a call made with the environment variable ``name`` set to ``value`` (restored after)."""
    def run():
        old = os.environ.get(name)
        os.environ[name] = value
        try:
            fn()
        finally:
            if old is None:
                del os.environ[name]
            else:
                os.environ[name] = old
    return run


def interleave(alternatives, reps, before=None):
    """Runs each alternative once per round, `reps` rounds, `before` (untimed) ahead of each run;
    median seconds per alternative."""
    times = {name: [] for name in alternatives}
    for _ in range(reps):
        for name, fn in alternatives.items():
            if before is not None:
                before()
            times[name].append(timed(fn))
    return {name: statistics.median(ts) for name, ts in times.items()}


def drop_from_page_cache(path):
    """Evicts the file's pages, so a read comes from storage: the gds route bypasses the page cache
    (O_DIRECT, as nvidia-fs does), and timing the staged route on cached pages would compare memory
    with disk (as `h5gds bench` does for its device rows)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def report(title, medians, nbytes, baseline, label="", case=None, roles=None):
    """Prints the medians with their ratios to `baseline`; records each (`case`, and its role from
    `roles`, a name -> role map, for scripts/gpu_report.py) where `case` is given."""
    print(f"\n{title}{label}")
    for name, seconds in medians.items():
        if case is not None:
            record("bench_python", name, seconds, nbytes, label, case=case, role=(roles or {}).get(name))
        print(f"  {name:<34} {seconds * 1e3:9.1f} ms  {nbytes / seconds / 1e9:6.2f} GB/s  "
              f"x{medians[baseline] / seconds:5.2f} vs {baseline}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=size_arg, default=size_arg("1G"), help="dataset bytes (default 1G)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where the file goes (default: a temporary directory)")
    parser.add_argument("--xarray-size", type=size_arg, default=size_arg("64M"),
                        help="bytes of the xarray case's variable, uncompressed (default 64M; 0 skips it)")
    args = parser.parse_args()
    n = args.size // 4
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "bench.h5"
        with h5py.File(path, "w") as f:
            f.create_dataset("x", data=np.arange(n, dtype="<f4"))
        nbytes = n * 4
        print(f"h5gds Python benchmark: float32 dataset of {nbytes} bytes, {args.reps} interleaved rounds, "
              f"{os.cpu_count()} CPUs")

        out = np.empty(n, dtype="<f4")
        with h5py.File(path, "r") as sec2, h5py.File(path, "r", driver="gds") as gds:
            host = interleave({
                "h5py read_direct (sec2)": lambda: sec2["x"].read_direct(out),
                "h5py read_direct (gds)": lambda: gds["x"].read_direct(out),
                "h5gds.read into NumPy (gds)": lambda: h5gds.read(gds["x"], out=out),
            }, args.reps)
            assert out[-1] == np.float32(n - 1)
        report("host memory (page cache warm):", host, nbytes, "h5py read_direct (sec2)", case="host reads")

        try:
            from device_arrays import DeviceArray, cuda
            emulated = cuda().emulated
        except Exception as exc:  # no CUDA driver in this process
            print(f"\ndevice memory: skipped ({exc})")
            DeviceArray = None
        if DeviceArray is not None:
            label = " [EMULATED: CPU emulator of CUDA and cuFile, not GPU figures]" if emulated else ""
            dev = DeviceArray((n,), "<f4")

            def staged():
                os.environ["H5GDS_USE_VFD_GDS"] = "0"
                try:
                    h5gds.read(f["x"], out=dev)
                finally:
                    del os.environ["H5GDS_USE_VFD_GDS"]

            with h5py.File(path, "r", driver="gds") as f:
                device = interleave({
                    "staged, 128 MiB pinned buffer": staged,
                    "gds (straight to device memory)": lambda: h5gds.read(f["x"], out=dev),
                }, args.reps, before=lambda: drop_from_page_cache(path))
            assert dev.to_host()[-1] == np.float32(n - 1)
            report("device memory (file evicted from the page cache before each read):", device, nbytes,
                   "staged, 128 MiB pinned buffer", label, case="gds vs staged, cold",
                   roles={"staged, 128 MiB pinned buffer": "staged", "gds (straight to device memory)": "h5gds"})
            dev.free()

        with h5py.File(path, "r") as f:  # the file back in the page cache, as for the host rows
            f["x"].read_direct(out)
        print(f"\nfresh processes, alternating, medians of {args.reps} (page cache warm; a new array's first "
              "touch, its page faults, included):")
        firsts = {"h5gds.read(f['x'])": [], "h5py f['x'][...]": []}
        for _ in range(args.reps):
            for what in firsts:
                read = what.replace("h5py ", "")
                code = ("import time; t0 = time.perf_counter(); import h5py, h5gds; t1 = time.perf_counter()\n"
                        f"with h5py.File({str(path)!r}, 'r', driver='gds') as f: a = {read}\n"
                        "print(t1 - t0, time.perf_counter() - t1)")
                firsts[what].append(tuple(map(float, subprocess.run(
                    [sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())))
        for what, runs in firsts.items():
            imports = statistics.median(r[0] for r in runs)
            first = statistics.median(r[1] for r in runs)
            print(f"  import h5py, h5gds {imports * 1e3:5.0f} ms, then the first {what} (open included) "
                  f"{first * 1e3:5.0f} ms")

        bench_device_alternatives(path, n, args.reps)
        if args.xarray_size:
            bench_xarray(Path(tmp) / "bench.nc", args.xarray_size, args.reps)


def device_cupy():
    """(cupy, label) for the device rows: real CuPy on a GPU, the package tests' CuPy stand-in over
    the emulators (EMULATED); (None, why) where neither can run."""
    try:
        from device_arrays import cuda
        emulated = cuda().emulated
    except Exception as exc:  # no CUDA driver in this process
        return None, f"no CUDA driver ({exc})"
    if emulated:
        sys.path.insert(0, str(TESTS / "mpi" / "emulated"))
    try:
        import cupy
    except ImportError as exc:
        return None, f"CuPy is not installed ({exc})"
    return cupy, " [EMULATED: CPU emulators of CUDA, cuFile and nvCOMP, not GPU figures]" if emulated else ""


def pinned_copy(cupy, nbytes):
    """The limit of a host-to-device read: one copy from pinned host memory into a CuPy array (None
    where this CuPy cannot pin memory, as the emulators' stand-in cannot)."""
    alloc = getattr(cupy.cuda, "alloc_pinned_memory", None)
    if alloc is None:
        return None
    pinned = np.frombuffer(alloc(nbytes), dtype=np.uint8, count=nbytes)
    pinned[:] = 1
    target = cupy.empty((nbytes,), dtype=np.uint8)
    return lambda: target.set(pinned)


def direct_read(path):
    """(a call reading the whole file with `dd` and O_DIRECT, its row name): the storage's own read
    rate, page cache bypassed, which bounds a cold read; (None, why) where the file system refuses
    O_DIRECT (tmpfs) or there is no dd."""
    command = ["dd", f"if={path}", "of=/dev/null", "bs=16M", "iflag=direct", "status=none"]
    try:
        probe = subprocess.run(command[:3] + ["count=1"] + command[4:], capture_output=True, text=True)
    except OSError as exc:
        return None, f"dd cannot run ({exc})"
    if probe.returncode != 0:
        return None, f"dd with O_DIRECT refused here: {probe.stderr.strip()}"

    def run():
        subprocess.run(command, check=True)
    return run, "limit: the disk's O_DIRECT read (dd bs=16M)"


def kvikio_file(path, cupy):
    """KvikIO's ``CuFile`` class where the kvikio package imports and reads the head of `path` into a
    CuPy array, else None and why (no KvikIO rows then: on h5gds's emulators it finds a CUDA call
    the emulator lacks)."""
    # KvikIO's own thread pool (one thread unless told) as wide as h5gds's I/O threads: the same threads.
    threads = next(s["value"] for s in h5gds.info()["settings"] if s["key"] == "nthreads")
    os.environ.setdefault("KVIKIO_NTHREADS", threads)
    try:
        import kvikio

        probe = cupy.empty((min(4096, os.path.getsize(path)),), dtype=np.uint8)
        with kvikio.CuFile(str(path), "r") as k:
            k.read(probe, probe.nbytes, 0)
    except Exception as exc:  # absent, or unable to run here
        return None, f"KvikIO cannot read here ({type(exc).__name__}: {exc})"
    return kvikio.CuFile, f"KvikIO {getattr(kvikio, '__version__', '?')} ({os.environ['KVIKIO_NTHREADS']} threads)"


def bench_device_alternatives(path, n, reps):
    """Device reads and writes of the dataset against what bounds them and what users do instead, side
    by side (issue 23): the pinned host-to-device copy (the read's limit), h5py + ``cupy.asarray`` and
    ``cupy.asnumpy`` + h5py (what users do), ``h5gds.read``/``write`` with a CuPy array, and KvikIO's
    raw ``CuFile`` read/write of the dataset's bytes where kvikio imports; warm (page cache) and cold
    (file evicted before each read). EMULATED where CuPy is the emulators' stand-in."""
    cupy, label = device_cupy()
    if cupy is None:
        print(f"\ndevice memory, as users compare it: skipped ({label})")
        return
    nbytes = n * 4
    sync = cupy.cuda.Device().synchronize
    dev = cupy.empty((n,), dtype="<f4")
    cufile, kvikio_note = kvikio_file(path, cupy)
    with h5py.File(path, "r") as f:
        offset = f["x"].id.get_offset()

    def settled(fn):
        def run():
            fn()
            sync()
        return run

    def kvikio_read():
        with cufile(str(path), "r") as k:
            k.read(dev, nbytes, offset)

    roles = {"what users do: h5py read + cupy.asarray": "users", "h5gds.read(out=cupy array)": "h5gds",
             "limit: pinned host -> device copy": "limit", f"{kvikio_note} CuFile.read (no HDF5)": "kvikio"}
    with h5py.File(path, "r") as plain, h5py.File(path, "r", driver="gds") as gds:
        reads = {
            "what users do: h5py read + cupy.asarray": settled(lambda: cupy.asarray(plain["x"][...])),
            "h5gds.read(out=cupy array)": settled(lambda: h5gds.read(gds["x"], out=dev)),
        }
        limit = pinned_copy(cupy, nbytes)
        if limit is not None:
            reads["limit: pinned host -> device copy"] = settled(limit)
        if cufile is not None and offset is not None:
            reads[f"{kvikio_note} CuFile.read (no HDF5)"] = settled(kvikio_read)
        warm = interleave(reads, reps)
        cold_reads = {k: v for k, v in reads.items() if not k.startswith("limit")}
        disk, disk_note = direct_read(path)
        if disk is not None:
            cold_reads[disk_note] = disk
            roles[disk_note] = "disk"
        cold = interleave(cold_reads, reps, before=lambda: drop_from_page_cache(path))
    assert float(cupy.asnumpy(dev)[-1]) == float(np.float32(n - 1))
    base = "what users do: h5py read + cupy.asarray"
    report("device reads, page cache warm:", warm, nbytes, base, label, case="device reads, warm", roles=roles)
    report("device reads, file evicted before each read:", cold, nbytes, base, label,
           case="device reads, cold", roles=roles)
    if disk is None:
        print(f"  (no row of the disk's own rate: {disk_note})")
    if cufile is None:
        print(f"  (no KvikIO rows: {kvikio_note})")
    if limit is None:
        print("  (no pinned-copy row: this CuPy cannot allocate pinned memory)")

    source = cupy.asarray(np.arange(n, dtype="<f4"))
    target = Path(path).with_name("written.h5")
    with h5py.File(target, "w") as f:
        f.create_dataset("x", shape=(n,), dtype="<f4")
    with h5py.File(target, "r") as f:
        write_offset = f["x"].id.get_offset()

    def users_write():
        with h5py.File(target, "r+") as f:
            f["x"][...] = cupy.asnumpy(source)

    def h5gds_write():
        with h5py.File(target, "r+", driver="gds") as f:
            h5gds.write(f["x"], source)

    def kvikio_write():
        with cufile(str(target), "r+") as k:
            k.write(source, nbytes, write_offset)

    host_source = np.arange(n, dtype="<f4")

    def host_write():
        with h5py.File(target, "r+", driver="gds") as f:
            h5gds.write(f["x"], host_source)

    writes = {
        "what users do: cupy.asnumpy + h5py write": settled(users_write),
        "h5gds.write(cupy array)": settled(h5gds_write),
        # Issue 23's yardstick: the same bytes from host memory through gds, to the same file.
        "h5gds.write(NumPy array), same file": host_write,
    }
    if cufile is not None and write_offset is not None:
        writes[f"{kvikio_note} CuFile.write (no HDF5)"] = settled(kvikio_write)
    # Dirty pages written back (untimed) before each run, as `h5gds bench` does before its host
    # writes: otherwise each write is throttled by the writeback of the one before it, and on a
    # disk-backed file system every alternative measures the disk.
    timed_writes = interleave(writes, reps, before=os.sync)
    with h5py.File(target, "r") as f:
        assert float(f["x"][-1]) == float(np.float32(n - 1))
    report("device writes (page cache, no fsync):", timed_writes, nbytes,
           "what users do: cupy.asnumpy + h5py write", label, case="device writes",
           roles={"what users do: cupy.asnumpy + h5py write": "users", "h5gds.write(cupy array)": "h5gds",
                  "h5gds.write(NumPy array), same file": "host", f"{kvikio_note} CuFile.write (no HDF5)": "kvikio"})
    target.unlink()


def bench_xarray(path, size, reps):
    """xarray's open_dataset + load of one deflate-compressed float32 variable, and to_netcdf of it: the
    h5netcdf engine against engine="h5gds", from and into NumPy and CuPy, ratios side by side."""
    try:
        import xarray as xr
    except ImportError as exc:
        print(f"\nxarray: skipped ({exc}; pip install h5gds[xarray])")
        return
    width = 1024
    rows = max(1, size // (4 * width))
    # A smooth field at 1/16 precision: deflate shrinks it, as it does measured data.
    values = (np.round(np.sin(np.arange(rows * width, dtype="<f8") / 5000.0) * 4096) / 16).astype("<f4")
    chunk = (min(rows, 1024), width)  # 4 MiB chunks
    import h5gds.xarray  # noqa: F401  (to_netcdf's engine="h5gds")

    dataset = xr.Dataset({"v": (("y", "x"), values.reshape(rows, width))})
    compressed = {"v": {"zlib": True, "complevel": 1, "shuffle": False, "chunksizes": chunk}}
    dataset.to_netcdf(path, engine="h5netcdf", encoding=compressed)
    del values
    nbytes = rows * width * 4
    written = Path(path).with_name("written.nc")

    def save(engine, data, encoding):
        data.to_netcdf(written, engine=engine, encoding=encoding)

    # Dirty pages written back (untimed) before each write, as for the device writes.
    saves = {
        "compressed": interleave({"h5netcdf": lambda: save("h5netcdf", dataset, compressed),
                                  "h5gds": lambda: save("h5gds", dataset, compressed)}, reps, before=os.sync),
        "plain": interleave({"h5netcdf": lambda: save("h5netcdf", dataset, None),
                             "h5gds": lambda: save("h5gds", dataset, None)}, reps, before=os.sync),
    }

    def load(engine, **kwargs):
        with xr.open_dataset(path, engine=engine, **kwargs) as ds:
            return ds["v"].load().data

    host = interleave({"h5netcdf": lambda: load("h5netcdf"), "h5gds": lambda: load("h5gds")}, reps)
    chunked = None
    try:
        import dask  # noqa: F401
    except ImportError:
        pass
    else:
        # One chunk of the file's per dask chunk, read by dask's threads: h5netcdf's reads take
        # xarray's HDF5 lock, h5gds's (no HDF5 call) do not.
        def load_chunks(engine):
            with xr.open_dataset(path, engine=engine, chunks={"y": chunk[0]}) as ds:
                return ds["v"].compute(scheduler="threads").data

        chunked = interleave({"h5netcdf": lambda: load_chunks("h5netcdf"), "h5gds": lambda: load_chunks("h5gds")},
                             reps)
    cupy, label = device_cupy()
    device = None
    if cupy is not None:
        def settled(fn):
            def run():
                fn()
                cupy.cuda.Device().synchronize()
            return run

        ordinal = cupy.cuda.runtime.getDevice()
        device = interleave({
            "h5netcdf": settled(lambda: cupy.asarray(load("h5netcdf"))),
            "h5gds": settled(lambda: load("h5gds", device=ordinal)),
        }, reps, before=lambda: drop_from_page_cache(path))
        assert type(load("h5gds", device=ordinal)) is cupy.ndarray
        on_device = dataset.copy(data={"v": cupy.asarray(dataset["v"].values)})
        saves["device"] = interleave({
            "h5netcdf": settled(lambda: save("h5netcdf", on_device.as_numpy(), None)),
            "h5gds": settled(lambda: save("h5gds", on_device, None)),
        }, reps, before=os.sync)
    written.unlink(missing_ok=True)
    print(f"\nxarray open_dataset + load, and to_netcdf, of a float32 variable, {nbytes} bytes "
          f"({os.path.getsize(path)} in the "
          f"file: deflate level 1, {chunk[0]}x{chunk[1]} chunks), medians of {reps} interleaved rounds:")
    heads = ("h5netcdf engine", 'engine="h5gds"')
    print(f"  {'':<44} {heads[0]:>22}   {heads[1]:>22}   h5gds vs h5netcdf")

    def row(name, medians):
        theirs, ours = medians["h5netcdf"], medians["h5gds"]
        print(f"  {name:<44} {theirs * 1e3:9.1f} ms {nbytes / theirs / 1e9:6.2f} GB/s   "
              f"{ours * 1e3:9.1f} ms {nbytes / ours / 1e9:6.2f} GB/s   x{theirs / ours:5.2f}")

    row("into NumPy (page cache warm)", host)
    if chunked is None:
        print("  into NumPy, dask chunks: skipped (dask is not installed)")
    else:
        row("into NumPy, dask chunks, threads (warm)", chunked)
    if device is None:
        print(f"  into CuPy: skipped ({label})")
    else:
        row("into CuPy: cupy.asarray | device= (evicted)", device)
    row("to_netcdf from NumPy, deflate level 1", saves["compressed"])
    row("to_netcdf from NumPy, contiguous", saves["plain"])
    if device is None:
        print(f"  to_netcdf from CuPy: skipped ({label})")
    else:
        row("to_netcdf from CuPy: as_numpy | as is", saves["device"])
    if device is not None and label:
        print(f"  {label.strip()} (the CuPy rows)")


if __name__ == "__main__":
    main()
