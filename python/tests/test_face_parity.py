"""The two faces, side by side (issue 51): one table of scenarios, each run through the h5gds package
(face_probe.py) and through array-io (its example face_probe), each in a process of its own at
``H5GDS_LOG=debug``, asserting the same bytes, the same way taken (the engine's verdict lines,
``way=...`` under the target ``h5gds::engine``) and the same kind of error naming the same facts
(the setting and what it accepts, the dataset and the chunk, the file).

The device rows (``test_device_*``) run in scripts/test.sh's emulated device run (both probes find
the emulator's libcuda on LD_LIBRARY_PATH); elsewhere they are skipped. array-io reads rows into
host memory only and the package gathers into host arrays only: there is no device gather row.

The collective rows (``test_collective_*``) run each face's probe under ``mpirun -np 3`` (array-io's
built with its feature ``mpi``, the package's over mpi4py): every rank of both faces must end alike,
a failed write with the same kind on every rank, naming the same facts, and leaving nothing."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ARRAY_IO_PROBE = ROOT / "target" / "debug" / "examples" / "face_probe"

#: 64 x 8 float64, chunks of 8 x 8 where chunked.
DATA = np.arange(64 * 8, dtype="<f8").reshape(64, 8)
DATASETS = ("contiguous", "chunked", "gzip")

#: An error kind in each face's terms: array-io's Error variant, the package's exception class.
KINDS = {
    "setting": ("InvalidSetting", "ValueError"),
    "chunk": ("ChunkDecode", "OSError"),
    "missing": ("FileNotFound", "FileNotFoundError"),
    "read-only": ("Io", "OSError"),
    # A collective call's error (array-io's Error::Collective) of the engine's kind Argument / Io.
    "collective-argument": ("Collective", "ValueError"),
    "collective-io": ("Collective", "FileExistsError"),
}


def _write_datasets(path, **file_args):
    with h5py.File(path, "w", **file_args) as f:
        f["contiguous"] = DATA
        f.create_dataset("chunked", data=DATA, chunks=(8, 8))
        f.create_dataset("gzip", data=DATA, chunks=(8, 8), compression="gzip")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """``plain``: the three datasets; ``userblock``: the same behind a 512-byte user block (its
    bytes are read through HDF5 or h5gds's decoding, never with no HDF5 call); ``damaged``: the
    gzip chunk at [8, 0] overwritten."""
    d = tmp_path_factory.mktemp("parity")
    _write_datasets(d / "plain.h5")
    _write_datasets(d / "userblock.h5", userblock_size=512)
    _write_datasets(d / "damaged.h5")
    with h5py.File(d / "damaged.h5", "r") as f:
        info = f["gzip"].id.get_chunk_info_by_coord((8, 0))
    with open(d / "damaged.h5", "r+b") as raw:
        raw.seek(info.byte_offset)
        raw.write(b"\x00" * info.size)
    return {name: d / f"{name}.h5" for name in ("plain", "userblock", "damaged")} | {"dir": d}


def _run(command, env):
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, cwd=HERE)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, f"{command}: exit {done.returncode}\n{done.stdout}{done.stderr}"
    result = json.loads(lines[-1])
    verdicts = [line for line in done.stderr.splitlines() if "h5gds::engine" in line and "way=" in line]
    result["ways"] = [way_of(line) for line in verdicts]
    result["verdicts"] = verdicts
    return result


def both_faces(op, path, dataset, arg="", env=None):
    """The scenario through the package and through array-io: (package's result, array-io's). A
    write's ``path`` is a directory: each face writes its own file there, ``h5gds.h5`` and
    ``array-io.h5``."""
    if not ARRAY_IO_PROBE.exists():
        pytest.fail(f"{ARRAY_IO_PROBE} is missing: build it with `cargo build -p array-io --features mpi "
                    "--example face_probe` (scripts/test.sh does)")
    base = {k: v for k, v in os.environ.items() if not k.startswith("H5GDS_") or k.startswith("H5GDS_EMU")}
    base.update(env or {}, H5GDS_LOG="debug")
    local_write = ("write" in op) and isinstance(path, Path)
    target = (lambda face: str(path / f"{face}.h5")) if local_write else (lambda face: str(path))
    python = _run([sys.executable, str(HERE / "face_probe.py"), op, target("h5gds"), dataset, arg], base)
    array_io = _run([str(ARRAY_IO_PROBE), op, target("array-io"), dataset, arg], base)
    return python, array_io


def written(path):
    """What each face wrote into the directory ``path``: (the package's dataset /x, array-io's)."""
    found = []
    for face in ("h5gds", "array-io"):
        with h5py.File(path / f"{face}.h5", "r") as f:
            found.append((f["x"][...], f["x"].chunks, f["x"].compression))
    return found


def way_of(line):
    """The way a verdict line names (``way=<name>``, wherever the line puts it)."""
    return re.search(r"way=([a-z0-9-]+)", line).group(1)


def assert_same(python, array_io, way=None, facts=(), kind=None):
    """The same outcome: bytes, the way taken (each face's verdicts, at least one, all ``way`` where
    given) and for a failure, the same kind naming each of ``facts``."""
    faces = {face: {k: v for k, v in result.items() if k != "bytes"}
             for face, result in (("h5gds", python), ("array-io", array_io))}
    assert python["ok"] == array_io["ok"], faces
    if python["ok"]:
        assert python.get("shape") == array_io.get("shape"), faces
        assert python.get("bytes") == array_io.get("bytes"), "the faces read different bytes"
    else:
        expected = KINDS[kind]
        assert (array_io["kind"], python["kind"]) == expected, faces
        for fact in facts:
            for face, result in faces.items():
                assert fact in result["message"], f"{face}'s error does not name {fact!r}: {result['message']}"
    if way is not None:
        assert python["ways"] and array_io["ways"], f"no verdict line: {faces}"
        assert python["ways"] == array_io["ways"], [python["verdicts"], array_io["verdicts"]]
        assert set(python["ways"]) == {way}, python["verdicts"]


# ---- host arrays ----

#: (file, dataset, environment) -> the way both faces take.
HOST_READS = [
    # A read-only file's own bytes, with no HDF5 call.
    *[("plain", name, {}, "stored") for name in DATASETS],
    # Behind a user block: chunks read and decoded by h5gds (unfiltered ones too: array-io read
    # them itself, the package left them to HDF5), a contiguous dataset by HDF5.
    ("userblock", "contiguous", {}, "hdf5"),
    ("userblock", "chunked", {}, "host-decoded"),
    ("userblock", "gzip", {}, "host-decoded"),
    # H5GDS_HOST_CODEC=0: HDF5's filters decode filtered chunks; unfiltered chunks stay h5gds's
    # (array-io left every chunked dataset to HDF5, the engine only the filtered ones).
    ("plain", "chunked", {"H5GDS_HOST_CODEC": "0"}, "stored"),
    ("plain", "gzip", {"H5GDS_HOST_CODEC": "0"}, "hdf5"),
    ("userblock", "chunked", {"H5GDS_HOST_CODEC": "0"}, "host-decoded"),
    ("userblock", "gzip", {"H5GDS_HOST_CODEC": "0"}, "hdf5"),
]


def _read_id(row):
    file, name, env, _ = row
    return "-".join([file, name, *(f"{k}={v}" for k, v in env.items())])


@pytest.mark.parametrize("row", HOST_READS, ids=_read_id)
@pytest.mark.parametrize("op, arg", [("read", ""), ("slab", "16,8")], ids=["whole", "slab"])
def test_host_reads_take_the_same_way(files, row, op, arg):
    file, name, env, way = row
    python, array_io = both_faces(op, files[file], f"/{name}", arg, env)
    assert_same(python, array_io, way=way)
    want = DATA if op == "read" else DATA[:16]
    assert bytes.fromhex(python["bytes"]) == want.tobytes()


@pytest.mark.parametrize("file", ["plain", "userblock"])
@pytest.mark.parametrize("name", DATASETS)
def test_host_gathers_take_the_same_way(files, file, name):
    rows = [40, 3, 3, 17, 63, 0]
    python, array_io = both_faces("gather", files[file], f"/{name}", ",".join(map(str, rows)))
    assert bytes.fromhex(python["bytes"] or "") == DATA[rows].tobytes()
    assert_same(python, array_io, way=python["ways"][0] if python["ways"] else "none")


def test_host_writes_write_the_same_file(files):
    out = files["dir"] / "host-write"
    out.mkdir()
    python, array_io = both_faces("write", out, "/x", "100")
    assert python["ok"] and array_io["ok"], (python, array_io)
    (ours, our_chunks, our_filter), (theirs, their_chunks, their_filter) = written(out)
    assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs)
    assert np.array_equal(ours, np.arange(100.0))
    assert (our_chunks, our_filter) == (their_chunks, their_filter) == (None, None)
    assert python["ways"] == array_io["ways"], (python["verdicts"], array_io["verdicts"])


# ---- refusals and failures ----


@pytest.mark.parametrize("op, arg", [("read", ""), ("slab", "16,8"), ("write", "8")])
def test_an_invalid_setting_is_refused_naming_it_and_its_values(files, op, arg):
    out = files["dir"] / "invalid-write"
    out.mkdir(exist_ok=True)
    path, name = (out, "/x") if op == "write" else (files["plain"], "/chunked")
    python, array_io = both_faces(op, path, name, arg, {"H5GDS_NTHREADS": "abc"})
    assert_same(python, array_io, kind="setting",
                facts=("H5GDS_NTHREADS", '"abc"', "an integer from 1 to 256"))
    assert not list(out.iterdir()), "a refused write left a file"


@pytest.mark.parametrize("op, arg", [("read", ""), ("slab", "16,8")])
def test_a_damaged_chunk_fails_the_read_naming_the_dataset_and_the_chunk(files, op, arg):
    python, array_io = both_faces(op, files["damaged"], "/gzip", arg)
    assert_same(python, array_io, kind="chunk", facts=("/gzip", "[8, 0]"))


def test_a_missing_file_is_refused_naming_it(files):
    missing = files["dir"] / "missing.h5"
    python, array_io = both_faces("read", missing, "/x")
    assert_same(python, array_io, kind="missing", facts=(str(missing),))


def test_a_url_is_refused_for_writing_and_nothing_is_created(files):
    # The package wrote a local file named like the URL (s3:/bucket/x.h5 under the working
    # directory); array-io's refusal named only HDF5's failed create.
    python, array_io = both_faces("write", "s3://parity-bucket/x.h5", "/x", "8")
    assert_same(python, array_io, kind="read-only",
                facts=("s3://parity-bucket/x.h5", "remote file", "read-only", "write to a local path"))
    assert not (HERE / "s3:").exists()


# ---- device arrays (the emulator in scripts/test.sh's device run) ----

@pytest.fixture(scope="module")
def device():
    from device_arrays import cuda_or_skip

    return cuda_or_skip()


@pytest.mark.parametrize("file", ["plain", "userblock"])
@pytest.mark.parametrize("name", DATASETS)
@pytest.mark.parametrize("op, arg", [("device-read", ""), ("device-slab", "16,8")], ids=["whole", "slab"])
def test_device_reads_take_the_same_way(files, device, file, name, op, arg):
    python, array_io = both_faces(op, files[file], f"/{name}", arg)
    want = DATA if op == "device-read" else DATA[:16]
    assert bytes.fromhex(python["bytes"]) == want.tobytes() == bytes.fromhex(array_io["bytes"])
    assert_same(python, array_io, way=python["ways"][0] if python["ways"] else "none")


def _device_write(files, op, arg):
    out = files["dir"] / op
    out.mkdir()
    python, array_io = both_faces(op, out, "/x", arg)
    assert python["ok"] and array_io["ok"], (python, array_io)
    (ours, _, our_filter), (theirs, _, their_filter) = written(out)
    assert np.array_equal(ours, theirs) and np.array_equal(ours, np.arange(int(arg), dtype="<f8"))
    assert our_filter == their_filter
    return python, array_io


def test_device_writes_take_the_same_way(files, device):
    python, array_io = _device_write(files, "device-write", "4096")
    # A plain device write's verdict is the engine's (`engine::device::write`): straight through
    # the gds driver, or staged through pinned host memory, the same way for both faces.
    way = python["ways"][0] if python["ways"] else "none"
    assert way in ("direct", "staged"), python["verdicts"]
    assert_same(python, array_io, way=way)


def test_device_compressed_writes_are_encoded_on_the_gpu_in_both_faces(files, device):
    python, array_io = _device_write(files, "device-write-deflate", "4096")
    assert_same(python, array_io, way="gpu-encoded")


# ---- collective writes (MPI) ----

#: Ranks of the collective rows: uneven tiles (rank r holds r+1 rows), the last rank the odd one out.
RANKS = 3
COLUMNS = 4


def _mpirun(command, env):
    """``command`` on RANKS ranks: each rank's JSON line (in rank order) and the verdicts, as _run."""
    assert shutil.which("mpirun"), "mpirun is missing: scripts/setup.sh installs openmpi-bin"
    env = dict(env, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    job = ["timeout", "-k", "5", "120", "mpirun", "-np", str(RANKS), "--oversubscribe", *command]
    done = subprocess.run(job, env=env, capture_output=True, text=True, timeout=150, cwd=HERE)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and sorted(r["rank"] for r in lines) == list(range(RANKS)), \
        f"{command}: exit {done.returncode} (124: timed out, a hang)\n{done.stdout}{done.stderr}"
    verdicts = sorted(line for line in done.stderr.splitlines() if "h5gds::engine" in line and "way=" in line)
    return sorted(lines, key=lambda r: r["rank"]), [way_of(v) for v in verdicts]


def both_faces_collective(op, path_of, dataset="/x"):
    """The collective scenario through the package (mpi4py) and array-io (rsmpi): for each face, its
    ranks' lines and its verdicts' ways; ``path_of(face)`` is the face's target."""
    pytest.importorskip("mpi4py", reason="scripts/test.sh installs mpi4py for the collective rows")
    if not ARRAY_IO_PROBE.exists():
        pytest.fail(f"{ARRAY_IO_PROBE} is missing: build it with `cargo build -p array-io --features mpi "
                    "--example face_probe` (scripts/test.sh does)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("H5GDS_", "HDF5_")) or k.startswith("H5GDS_EMU")}
    env["H5GDS_LOG"] = "debug"
    args = [dataset, str(COLUMNS)]
    python = _mpirun([sys.executable, str(HERE / "face_probe.py"), op, path_of("h5gds"), *args], env)
    array_io = _mpirun([str(ARRAY_IO_PROBE), op, path_of("array-io"), *args], env)
    return python, array_io


def assert_every_rank_fails_alike(python, array_io, kind, facts):
    """Every rank of each face fails with the same message; the faces' kinds are ``KINDS[kind]`` and
    both name each of ``facts``."""
    for face, (lines, _) in (("h5gds", python), ("array-io", array_io)):
        assert not any(line["ok"] for line in lines), (face, lines)
        assert len({(line["kind"], line["message"]) for line in lines}) == 1, (face, lines)
        for fact in facts:
            assert fact in lines[0]["message"], f"{face}'s error does not name {fact!r}: {lines[0]['message']}"
    assert (array_io[0][0]["kind"], python[0][0]["kind"]) == KINDS[kind], (python[0][0], array_io[0][0])


def test_collective_writes_write_the_same_file_the_same_way(tmp_path):
    python, array_io = both_faces_collective("collective-write", lambda face: str(tmp_path / f"{face}.h5"))
    for face, (lines, _) in (("h5gds", python), ("array-io", array_io)):
        assert all(line["ok"] for line in lines), (face, lines)
    rows = RANKS * (RANKS + 1) // 2
    want = np.arange(rows * COLUMNS, dtype="<f8").reshape(rows, COLUMNS)
    for face in ("h5gds", "array-io"):
        with h5py.File(tmp_path / f"{face}.h5", "r") as f:
            got = f["x"]
            assert got.id.get_create_plist().get_layout() == h5py.h5d.CONTIGUOUS, face
            assert got.dtype == want.dtype and got[()].tobytes() == want.tobytes(), face
    # Each rank's tile went straight from its host memory to the driver: one verdict per rank.
    assert python[1] == array_io[1] == ["direct"] * RANKS, (python[1], array_io[1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["array-io.h5", "h5gds.h5"]


@pytest.mark.parametrize("op, facts", [
    # The last rank's tile is of float32, the others' of float64: named by the engine, in one
    # vocabulary for both faces.
    ("collective-write-element", (f"rank {RANKS - 1}", "f32", "f64")),
    # The last rank's tile is one column wider: the rank, its tile's shape and the expected one.
    ("collective-write-shape", (f"rank {RANKS - 1}", f"[{RANKS}, {COLUMNS + 1}]", f"[1, {COLUMNS}]")),
], ids=["element", "shape"])
def test_a_collective_write_of_ranks_that_disagree_fails_alike_and_leaves_the_target(tmp_path, op, facts):
    old = {}
    for face in ("h5gds", "array-io"):
        with h5py.File(tmp_path / f"{face}.h5", "w") as f:
            f["old"] = np.full(3, 42.0)
        old[face] = (tmp_path / f"{face}.h5").read_bytes()
    python, array_io = both_faces_collective(op, lambda face: str(tmp_path / f"{face}.h5"))
    assert_every_rank_fails_alike(python, array_io, "collective-argument", facts)
    assert python[1] == array_io[1] == [], "no rank writes once the ranks disagree"
    for face in ("h5gds", "array-io"):
        assert (tmp_path / f"{face}.h5").read_bytes() == old[face], f"{face}'s failed write changed the target"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["array-io.h5", "h5gds.h5"]


def test_a_collective_write_to_a_target_rank_0_cannot_create_fails_alike(tmp_path):
    # The target's directory is a regular file: rank 0 cannot create the file; every rank learns so.
    for face in ("h5gds", "array-io"):
        (tmp_path / face).write_bytes(b"not a directory")
    python, array_io = both_faces_collective("collective-write", lambda face: str(tmp_path / face / "x.h5"))
    assert_every_rank_fails_alike(python, array_io, "collective-io", ("creating the file", f"rank 0 of {RANKS}"))
    for face, (lines, _) in (("h5gds", python), ("array-io", array_io)):
        assert str(tmp_path / face) in lines[0]["message"], f"{face}'s error does not name its target's directory"
    assert python[1] == array_io[1] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["array-io", "h5gds"]
    assert all((tmp_path / face).read_bytes() == b"not a directory" for face in ("h5gds", "array-io"))
