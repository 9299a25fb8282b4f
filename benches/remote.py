#!/usr/bin/env python3
"""Remote reads side by side in one run (issue 52, goal 7; docs/remote.md): HDF5 files served on
loopback by nginx (``http://``) and, with ``--s3``, moto's S3 server (``s3://``), read

* by h5gds (``h5gds.from_file(url)`` / ``h5gds.read`` of a file h5py opened by URL through the gds
  driver: the driver's ranged GETs, its block cache for HDF5's small reads),
* by h5py over fsspec (``HTTPFileSystem`` / ``s3fs``, fsspec's default read-ahead cache), what users do
  today,
* by obstore's raw parallel ranged GETs of the same bytes (no HDF5, no decoding: 8 MiB pieces of the
  bytes the dataset occupies, 16 in flight, copied into one array), the byte-level limit,

each with 0 ms and 20 ms of added round-trip latency: a delaying TCP proxy this benchmark starts on
loopback holds every byte 10 ms in each direction (the connection's set-up too), and counts the
requests that pass it (every request these readers make is a GET or HEAD without a body: one
header block each). Cases: (a) open a file holding 1,000 small datasets and read one; (b) one
float32 dataset whole, contiguous and in 256 KiB Zstandard chunks (256 MiB by default, not the
issue's 1 GiB: this shared machine's memory and time; ``--size 1G`` for the issue's); (c) 64 random
rows of each. Each tool's first result is checked against the local file; then the alternatives
run interleaved ``--reps`` times, and the medians, rates, requests and ratios are printed as a
Markdown table.

Run it with any Python 3.9+ after building the wheel (``scripts/build-wheel.sh target/wheels``):
it makes its own environment, ``target/bench-remote-venv``, with the pinned packages below and that
wheel, and re-runs itself there::

    python3 benches/remote.py                 # HTTP (nginx), 256 MiB, 3 rounds
    python3 benches/remote.py --s3 --size 16M # also S3 (moto's server), at 0 ms only
"""

import argparse
import asyncio
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "target" / "bench-remote-venv"
#: The benchmark environment's packages, pinned (h5py and numpy as in the project's .venv).
PINS = ["h5py==3.16.0", "numpy==2.4.6", "hdf5plugin==7.1.0", "fsspec==2026.9.0", "s3fs==2026.9.0",
        "aiohttp==3.14.5", "obstore==0.12.1", "moto[server]==5.2.6"]
KIB, MIB = 1 << 10, 1 << 20
ROW = 16384  # float32 columns: a row is 64 KiB; a 256 KiB chunk is 4 rows
PIECE, IN_FLIGHT = 8 * MIB, 16  # obstore's raw reads, as the driver's defaults


# --- the environment -------------------------------------------------------------------------------------------

def ensure_environment(wheel):
    """Re-runs this script in ``VENV`` (made here with ``PINS`` and ``wheel``) unless running there."""
    if Path(sys.prefix).resolve() == VENV.resolve():
        return
    python = VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    stamp = VENV / "pins.txt"
    if not stamp.exists() or stamp.read_text() != "\n".join(PINS):
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *PINS],
                       check=True)
        stamp.write_text("\n".join(PINS))
    wheels = sorted(ROOT.glob("target/wheels/h5gds-*x86_64.whl"), key=lambda p: p.stat().st_mtime)
    wheel = Path(wheel) if wheel else (wheels[-1] if wheels else None)
    if wheel is None or not wheel.exists():
        sys.exit("no h5gds wheel: run scripts/build-wheel.sh target/wheels first (or give --wheel)")
    installed = VENV / "wheel.txt"
    tag = f"{wheel.resolve()} {wheel.stat().st_mtime_ns}"
    if not installed.exists() or installed.read_text() != tag:
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                        "--force-reinstall", str(wheel)], check=True)
        installed.write_text(tag)
    os.execv(str(python), [str(python), str(Path(__file__).resolve()), *sys.argv[1:]])


# --- the delaying proxy -------------------------------------------------------------------------------------------

def _proxy_main(listen_port, upstream_port, one_way, requests, ready, trace=None):
    """A TCP proxy on 127.0.0.1:``listen_port`` to ``upstream_port``: every chunk of bytes forwarded
    ``one_way`` seconds after it arrived, in both directions (the upstream connection opened one
    round trip after the client's), without limiting the rate; ``requests`` counts the header blocks
    the clients sent (their requests: GETs and HEADs, no bodies). With ``trace`` (a file's path),
    each connection and request is written there as it arrives from the client: the wall-clock
    time, the connection's number and the request's line and ``Range``."""
    log = open(trace, "a", buffering=1) if trace else None
    connections = iter(range(1 << 62))

    def note(conn, what):
        if log:
            log.write(f"{time.time():.6f} c{conn} {what}\n")

    async def pump(reader, writer, count, conn=0):
        loop = asyncio.get_running_loop()
        queue = asyncio.Queue()

        async def send():
            while True:
                due, data = await queue.get()
                if data is None:
                    break
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()

        sender = asyncio.create_task(send())
        tail = b""
        try:
            while True:
                data = await reader.read(1 << 20)
                if not data:
                    break
                if count:
                    seen = tail + data
                    with requests.get_lock():
                        requests.value += seen.count(b"\r\n\r\n")
                    tail = seen[-3:]
                    if log:
                        for head in data.split(b"\r\n\r\n"):
                            lines = head.split(b"\r\n")
                            if lines[0].split(b" ")[0] in (b"GET", b"HEAD"):
                                ranges = [h for h in lines if h.lower().startswith(b"range:")]
                                note(conn, (lines[0] + b" " + b"".join(ranges)).decode(errors="replace"))
                queue.put_nowait((loop.time() + one_way, data))
        except ConnectionError:
            pass
        queue.put_nowait((0, None))
        try:
            await sender
        except ConnectionError:
            pass

    async def handle(client_reader, client_writer):
        conn = next(connections)
        note(conn, "connect")
        await asyncio.sleep(2 * one_way)  # the connection's set-up: one round trip
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(pump(client_reader, up_writer, True, conn), pump(up_reader, client_writer, False))
        for w in (up_writer, client_writer):
            w.close()

    # Stopped by SIGTERM: gone at once, without asyncio's complaints about the connections open.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", listen_port, backlog=256)
        ready.set()
        async with server:
            await server.serve_forever()

    asyncio.run(main())


class DelayProxy:
    """``_proxy_main`` in a process of its own (so that the readers' Python does not slow it)."""

    def __init__(self, upstream_port, rtt_ms, trace=None):
        from remote_servers import free_port
        self.port = free_port()
        context = multiprocessing.get_context("spawn")
        self.requests = context.Value("q", 0)
        ready = context.Event()
        self.proc = context.Process(target=_proxy_main, args=(self.port, upstream_port, rtt_ms / 2000,
                                                               self.requests, ready, trace), daemon=True)
        self.proc.start()
        if not ready.wait(30):
            raise RuntimeError("the delaying proxy did not start")

    def count(self):
        with self.requests.get_lock():
            return self.requests.value

    def stop(self):
        self.proc.terminate()
        self.proc.join(10)


# --- the files --------------------------------------------------------------------------------------------------

def write_files(directory, size):
    """many.h5 (1,000 datasets of 100 float64) and big.h5 (``contig`` and ``zstd``: float32 rows of
    64 KiB, a smooth signal quantised to 1/64, so Zstandard has something to do); the byte spans
    of each dataset (for obstore), and the local arrays."""
    import h5py
    import hdf5plugin
    import numpy as np

    many = directory / "many.h5"
    with h5py.File(many, "w") as f:
        for i in range(1000):
            f[f"d{i:04d}"] = np.arange(100, dtype="f8") + i
    rows = max(64, size // (ROW * 4))
    t = np.arange(rows * ROW, dtype=np.float64)
    data = (np.round((np.sin(t / 2000) * 40 + np.sin(t / 37) * 3) * 64) / 64).astype("f4").reshape(rows, ROW)
    big = directory / "big.h5"
    with h5py.File(big, "w") as f:
        f["contig"] = data
        f.create_dataset("zstd", data=data, chunks=(4, ROW), **hdf5plugin.Zstd())
    spans = {}
    with h5py.File(many, "r") as f:
        spans["many/d0777"] = [(f["d0777"].id.get_offset(), 800)]
    with h5py.File(big, "r") as f:
        spans["contig"] = [(f["contig"].id.get_offset(), data.nbytes)]
        dset = f["zstd"]
        chunks = [dset.id.get_chunk_info(i) for i in range(dset.id.get_num_chunks())]
        spans["zstd chunks"] = {c.chunk_offset[0] // 4: (c.byte_offset, c.size) for c in chunks}
        spans["zstd"] = merge((c.byte_offset, c.size) for c in chunks)
    return data, spans


def merge(extents):
    """(offset, size) extents merged where they touch."""
    out = []
    for offset, size in sorted(extents):
        if out and out[-1][0] + out[-1][1] == offset:
            out[-1] = (out[-1][0], out[-1][1] + size)
        else:
            out.append((offset, size))
    return out


def pieces(spans):
    """The spans cut into ``PIECE``-byte ranges (start, end)."""
    return [(s, min(s + PIECE, o + n)) for o, n in spans for s in range(o, o + n, PIECE)]


# --- the readers ---------------------------------------------------------------------------------------------

class Target:
    """Where the files are read from: a URL prefix for h5gds, an fsspec file system, an obstore store."""

    def __init__(self, kind, endpoint, bucket=None):
        self.kind, self.endpoint, self.bucket = kind, endpoint, bucket

    def url(self, name):
        return f"{self.endpoint}/{name}" if self.kind == "http" else f"s3://{self.bucket}/{name}"

    def fsspec_open(self, name):
        # fsspec's own default: the file system instance (its aiohttp session, the connections
        # it keeps open) cached and shared by every call, as h5gds shares its client.
        if self.kind == "http":
            import fsspec
            fs = fsspec.filesystem("http")
            return fs.open(self.url(name), "rb")
        import s3fs
        fs = s3fs.S3FileSystem(key="bench-key", secret="bench-secret", endpoint_url=self.endpoint,
                               client_kwargs={"region_name": "us-east-1"})
        return fs.open(f"{self.bucket}/{name}", "rb")

    def store(self):
        if self.kind == "http":
            from obstore.store import HTTPStore
            return HTTPStore.from_url(self.endpoint, client_options={"allow_http": True})
        from obstore.store import S3Store
        return S3Store(self.bucket, endpoint=self.endpoint, access_key_id="bench-key",
                       secret_access_key="bench-secret", region="us-east-1",
                       client_options={"allow_http": True})


def obstore_read(store, name, ranges):
    """The byte ranges of object ``name``, ``IN_FLIGHT`` GETs at a time (threads calling obstore's
    blocking ``get_range``, which releases the GIL: its asyncio form took seconds per call here,
    with a new event loop per read), each copied into its place in one array as it arrives (a
    dataset's bytes in one buffer, as every reader here returns them)."""
    import numpy as np
    import obstore

    at = np.cumsum([0] + [e - s for s, e in ranges])
    out = np.empty(int(at[-1]), np.uint8)

    def one(k):
        start, end = ranges[k]
        out[at[k]:at[k + 1]] = np.frombuffer(obstore.get_range(store, name, start=start, end=end), np.uint8)

    with ThreadPoolExecutor(IN_FLIGHT) as pool:
        list(pool.map(one, range(len(ranges))))
    return out


def cases(target, data, spans, rng):
    """Per case: {tool: (call, check of its result)}."""
    import h5py
    import hdf5plugin  # noqa: F401  (h5py's Zstd filter)
    import numpy as np

    import h5gds

    rows = np.sort(rng.choice(data.shape[0], 64, replace=False))
    small = np.arange(100, dtype="f8") + 777
    store = target.store()

    def fsspec_read(name, dataset, sel=()):
        with target.fsspec_open(name) as raw, h5py.File(raw, "r") as f:
            return f[dataset][sel]

    def h5gds_rows(dataset):
        with h5py.File(target.url("big.h5"), "r", driver="gds") as f:
            return h5gds.read(f[dataset], sel=rows)

    def same(want):
        return lambda got: np.array_equal(got, want)

    def raw(ranges, file="big.h5"):
        with open(LOCAL / file, "rb") as f:
            want = []
            for s, e in ranges:
                f.seek(s)
                want.append(f.read(e - s))
        want = b"".join(want)
        return lambda got: got.tobytes() == want

    many_range = [(o, o + n) for o, n in spans["many/d0777"]]
    contig = pieces(spans["contig"])
    zstd = pieces(spans["zstd"])
    start, _ = spans["contig"][0]
    row_ranges = [(start + int(r) * ROW * 4, start + (int(r) + 1) * ROW * 4) for r in rows]
    chunk_ranges = sorted({(spans["zstd chunks"][int(r) // 4][0], sum(spans["zstd chunks"][int(r) // 4]))
                           for r in rows})
    return {
        "(a) open, read 1 of 1,000 datasets": {
            "h5gds": (lambda: h5gds.from_file(target.url("many.h5"), "d0777"), same(small)),
            "h5py + fsspec": (lambda: fsspec_read("many.h5", "d0777"), same(small)),
            "obstore raw": (lambda: obstore_read(store, "many.h5", many_range), raw(many_range, "many.h5")),
        },
        "(b) contiguous, whole": {
            "h5gds": (lambda: h5gds.from_file(target.url("big.h5"), "contig"), same(data)),
            "h5py + fsspec": (lambda: fsspec_read("big.h5", "contig"), same(data)),
            "obstore raw": (lambda: obstore_read(store, "big.h5", contig), raw(contig)),
        },
        "(b) 256 KiB zstd chunks, whole": {
            "h5gds": (lambda: h5gds.from_file(target.url("big.h5"), "zstd"), same(data)),
            "h5py + fsspec": (lambda: fsspec_read("big.h5", "zstd"), same(data)),
            "obstore raw": (lambda: obstore_read(store, "big.h5", zstd), raw(zstd)),
        },
        "(c) 64 random rows, contiguous": {
            "h5gds": (lambda: h5gds_rows("contig"), same(data[rows])),
            "h5py + fsspec": (lambda: fsspec_read("big.h5", "contig", rows), same(data[rows])),
            "obstore raw": (lambda: obstore_read(store, "big.h5", row_ranges), raw(row_ranges)),
        },
        "(c) 64 random rows, zstd chunks": {
            "h5gds": (lambda: h5gds_rows("zstd"), same(data[rows])),
            "h5py + fsspec": (lambda: fsspec_read("big.h5", "zstd", rows), same(data[rows])),
            "obstore raw": (lambda: obstore_read(store, "big.h5", chunk_ranges), raw(chunk_ranges)),
        },
    }, {"(b) contiguous, whole": data.nbytes, "(b) 256 KiB zstd chunks, whole": data.nbytes}


LOCAL = None


def run_case(tools, reps, proxy):
    """Each tool checked once, then ``reps`` interleaved rounds: {tool: (median s, requests per call)}."""
    requests = {}
    for name, (call, check) in tools.items():
        before = proxy.count() if proxy else 0
        if not check(call()):
            sys.exit(f"{name} read other bytes than the local file holds")
        requests[name] = proxy.count() - before if proxy else None
    times = {name: [] for name in tools}
    order = list(tools)
    for round_ in range(reps):
        # Alternated, each round starting with the next tool (none always follows another).
        for name in order[round_ % len(order):] + order[:round_ % len(order)]:
            call = tools[name][0]
            t = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - t)
    return {name: (statistics.median(ts) if ts else None, requests[name]) for name, ts in times.items()}


def nbytes_of(data):
    return {"(b) contiguous, whole": data.nbytes, "(b) 256 KiB zstd chunks, whole": data.nbytes}


def table(title, results, nbytes, requests_from):
    lines = [f"\n{title}\n", "| case | tool | median s | GB/s | requests | h5gds's speed-up |", "|---|---|---|---|---|---|"]
    for case, by_tool in results.items():
        h5gds_s = by_tool["h5gds"][0]
        for tool, (seconds, _) in by_tool.items():
            n = nbytes.get(case)
            rate = f"{n / seconds / 1e9:.2f}" if n else "-"
            req = requests_from[case][tool][1]
            ratio = "-" if tool == "h5gds" else f"{seconds / h5gds_s:.2f}x"
            lines.append(f"| {case} | {tool} | {seconds:.3f} | {rate} | {req if req is not None else '?'} | {ratio} |")
    print("\n".join(lines), flush=True)


def trace_requests(nginx, data, rtts, tmp):
    """``--trace``: each face's whole read of ``zstd`` through the delaying proxy, with the
    requests it made (time from the call's start, connection, request line and range)."""
    import h5py
    import numpy as np

    import h5gds

    def by_driver(url):
        with h5py.File(url, "r", driver="gds") as f:
            return h5gds.read(f["zstd"])

    faces = {"h5gds.from_file": lambda url: h5gds.from_file(url, "zstd"),
             "h5py driver=gds + h5gds.read": by_driver}
    for rtt in rtts:
        for face, call in faces.items():
            # The first open of the process to this server (a new client, no connection), then
            # a later one: a proxy of its own per face (a new port: no connection to reuse).
            log = tmp / f"trace-{rtt}-{len(face)}.txt"
            proxy = DelayProxy(nginx.port, rtt, trace=str(log))
            turns = []
            try:
                url = f"http://127.0.0.1:{proxy.port}/big.h5"
                for turn in ("first open of this server", "a later open"):
                    t0 = time.time()
                    got = call(url)
                    turns.append((turn, t0, time.time()))
                    if not np.array_equal(got, data):
                        sys.exit(f"{face} read other bytes than the local file holds")
                    time.sleep(0.2)
            finally:
                proxy.stop()
            lines = [line.split(" ", 1) for line in log.read_text().splitlines()]
            for turn, t0, t1 in turns:
                mine = [(float(at), rest) for at, rest in lines if t0 <= float(at) <= t1]
                print(f"\n### {face}, {rtt} ms added round trip, {turn}: {t1 - t0:.3f} s, "
                      f"{sum(' GET ' in r or ' HEAD ' in r for _, r in mine)} requests", flush=True)
                for at, rest in mine:
                    print(f"{(at - t0) * 1000:8.1f} ms  {rest}")


def main():
    global LOCAL
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="256M", help="bytes of each (b) dataset (256M; K, M, G suffixes)")
    parser.add_argument("--reps", type=int, default=3, help="interleaved rounds (3)")
    parser.add_argument("--rtt-ms", default="0,20", help="added round-trip latencies, ms (0,20)")
    parser.add_argument("--s3", action="store_true",
                        help="also S3 (moto's server; slow for large files; 0 ms added latency only)")
    parser.add_argument("--wheel", help="the h5gds wheel to install (the newest in target/wheels)")
    parser.add_argument("--trace", action="store_true",
                        help="no timings: h5gds's whole read of the Zstandard dataset once per face "
                             "(from_file; h5py's gds driver and h5gds.read) at each --rtt-ms, and "
                             "the requests it made, each with its time from the call's start")
    args = parser.parse_args()
    ensure_environment(args.wheel)
    sys.path.insert(0, str(ROOT / "tests" / "python"))
    from remote_servers import Moto, Nginx
    import numpy as np

    units = {"K": KIB, "M": MIB, "G": 1 << 30}
    size = int(args.size[:-1]) * units[args.size[-1].upper()] if args.size[-1].isalpha() else int(args.size)
    with tempfile.TemporaryDirectory(prefix="h5gds-bench-remote-") as tmp:
        tmp = Path(tmp)
        nginx = Nginx(tmp)
        LOCAL = nginx.root
        data, spans = write_files(nginx.root, size)
        servers = [("http", nginx.port, None)]
        moto = None
        if args.s3:
            # moto answers every ranged GET by reading the whole object out of its buffer under
            # the key's lock (FakeKey.value), then slicing it; past 5 MiB that buffer is a file on
            # disk, so each GET of a large object reads it all from disk, and 16 in flight queue
            # on the lock past object_store's 30 s timeout (the stall seen at 64 MiB). Keeping
            # objects in memory makes each GET one copy of the object instead: still a cost per
            # request that grows with the object (moto is a stand-in for S3's API, not its speed).
            os.environ.setdefault("MOTO_S3_DEFAULT_KEY_BUFFER_SIZE", str(4 << 30))
            moto = Moto()
            moto.s3.create_bucket(Bucket="bench")
            for name in ("many.h5", "big.h5"):
                moto.s3.upload_file(str(nginx.root / name), "bench", name)
            servers.append(("s3", moto.port, "bench"))
            os.environ.update({"AWS_ACCESS_KEY_ID": "bench-key", "AWS_SECRET_ACCESS_KEY": "bench-secret",
                               "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"})
        if args.trace:
            try:
                trace_requests(nginx, data, [int(x) for x in args.rtt_ms.split(",")], tmp)
            finally:
                nginx.stop()
            return
        print(f"# benches/remote.py: {data.nbytes / MIB:.0f} MiB datasets, {args.reps} interleaved rounds, "
              f"medians; loopback on this machine ({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f})")
        counted = {}
        try:
            for rtt in [int(x) for x in args.rtt_ms.split(",")]:
                for kind, port, bucket in servers:
                    if kind == "s3":
                        if rtt:
                            # Through the proxy, moto's server left requests unanswered (h5gds's
                            # reads timed out): S3 is measured without added latency or proxy,
                            # so without request counts.
                            print(f"\n### s3, {rtt} ms added round trip: not run (see docs/remote.md)")
                            continue
                        os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{port}"
                        results = {case: run_case(tools, args.reps, None)
                                   for case, tools in cases(Target(kind, os.environ["AWS_ENDPOINT_URL"], bucket),
                                                            data, spans, np.random.default_rng(7))[0].items()}
                        table(f"### {kind}, {rtt} ms added round trip", results, nbytes_of(data), results)
                        continue
                    # Requests are counted by a proxy: at 0 ms one without delay (its own cost then
                    # shows in the counting run only; the timed runs go straight to the server).
                    proxy = DelayProxy(port, rtt)
                    try:
                        via = f"http://127.0.0.1:{proxy.port}"
                        direct = f"http://127.0.0.1:{port}"
                        endpoint = via if rtt else direct
                        if kind == "s3":
                            os.environ["AWS_ENDPOINT_URL"] = endpoint
                        target = Target(kind, endpoint, bucket)
                        rng = np.random.default_rng(7)
                        all_cases, nbytes = cases(target, data, spans, rng)
                        if not rtt:
                            # The requests, through the proxy (undelayed), once per tool.
                            counting = Target(kind, via, bucket)
                            if kind == "s3":
                                os.environ["AWS_ENDPOINT_URL"] = via
                            count_cases, _ = cases(counting, data, spans, np.random.default_rng(7))
                            counts = {c: run_case(t, 0, proxy) for c, t in count_cases.items()}
                            if kind == "s3":
                                os.environ["AWS_ENDPOINT_URL"] = direct
                        results = {}
                        for case, tools in all_cases.items():
                            results[case] = run_case(tools, args.reps, proxy if rtt else None)
                        if rtt:
                            counts = results
                        counted[(kind, rtt)] = counts
                        table(f"### {kind}, {rtt} ms added round trip", results, nbytes, counts)
                    finally:
                        proxy.stop()
        finally:
            if moto:
                moto.stop()
            nginx.stop()


if __name__ == "__main__":
    main()
