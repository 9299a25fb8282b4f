"""Remote files through the gds driver (docs/remote.md): h5py programs under HDF5_DRIVER=gds given
an http:// URL served by nginx, or an s3:// URL served by moto's S3 server, both started here on
loopback. Each read is compared with the same program reading the local file under sec2."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from remote_servers import FaultProxy, Moto, Nginx
from support import NEW_PYTHON, OLD_PYTHON, driver_env, run_child

SCENARIOS = Path(__file__).with_name("h5py_scenarios.py")
REMOTE = Path(__file__).with_name("remote_scenarios.py")
BUCKET = "h5gds-remote-test"
KEY = "dir/file one.h5"  # a space: the key travels percent-encoded in the URL
SECRETS = ("testing-secret-key", "testing-key-id")


def run(script, command, target, driver="gds", extra_env=None, python=NEW_PYTHON):
    return run_child(script, [command, target], driver, python, extra_env, timeout=300)


def ok(proc, what):
    assert proc.returncode == 0, f"{what} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def requests_at_close(stderr, url):
    """The request counts of the close log line of `url` (H5GDS_LOG=info)."""
    found = re.search(re.escape(f"closed {url}: ") + r"(\d+) requests \((\d+) HEAD, (\d+) ranged GET\)", stderr)
    assert found, f"no close line for {url}:\n{stderr}"
    return tuple(int(n) for n in found.groups())


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A local file holding contiguous, chunked, gzip, compact and resizable datasets (written under
    sec2), and its dump under sec2: what every remote read must print."""
    tmp = tmp_path_factory.mktemp("remote-source")
    path = tmp / "source.h5"
    ok(run(SCENARIOS, "write", path, "sec2"), "write")
    dump = ok(run(SCENARIOS, "dump", path, "sec2"), "dump").stdout
    assert "/gzip dataset float64 (200000,)" in dump and "/contiguous dataset float32 (1500000,)" in dump
    return path, dump


@pytest.fixture(scope="module")
def nginx(tmp_path_factory, source):
    server = Nginx(tmp_path_factory.mktemp("nginx"))
    (server.root / "data").mkdir()
    (server.root / "data" / "file.h5").write_bytes(source[0].read_bytes())
    yield server
    server.stop()


@pytest.fixture(scope="module")
def moto(source):
    server = Moto()
    server.s3.create_bucket(Bucket=BUCKET)
    server.s3.put_object(Bucket=BUCKET, Key=KEY, Body=source[0].read_bytes())
    yield server
    server.stop()


S3_URL = f"s3://{BUCKET}/dir/file%20one.h5"


@pytest.mark.parametrize("python", [NEW_PYTHON, OLD_PYTHON], ids=["hdf5-2", "hdf5-1.14"])
def test_an_http_file_reads_as_the_local_file(nginx, source, python):
    url = nginx.url("data/file.h5")
    # Small requests, so that the contiguous dataset's read is many ranged GETs in flight.
    proc = ok(run(SCENARIOS, "dump", url, extra_env={"H5GDS_REMOTE_REQUEST_SIZE": "256K"}, python=python), "dump")
    assert proc.stdout == source[1]
    assert f'opened "{url}"' in proc.stderr and "remote, read-only: HTTP (plain)" in proc.stderr
    total, heads, gets = requests_at_close(proc.stderr, url)
    # One HEAD at open; the 6 MB contiguous dataset alone is over 20 GETs of 256K; the file's
    # metadata comes through the block cache, a few GETs.
    assert heads == 1 and gets >= 20 and total == heads + gets, proc.stderr
    log = nginx.access_log.read_text()
    assert '"GET /data/file.h5 HTTP/1.1" 206' in log and '"HEAD /data/file.h5 HTTP/1.1" 200' in log


def test_an_s3_file_reads_as_the_local_file(moto, source):
    proc = ok(run(SCENARIOS, "dump", S3_URL, extra_env=moto.env()), "dump")
    assert proc.stdout == source[1]
    assert f"closed {S3_URL}:" in proc.stderr and "S3 (" in proc.stderr
    assert not any(secret in proc.stderr + proc.stdout for secret in SECRETS)


def test_the_endpoint_setting_stands_for_the_aws_endpoint(moto, source):
    env = {k: v for k, v in moto.env().items() if k not in ("AWS_ENDPOINT_URL", "AWS_ALLOW_HTTP")}
    env |= {"H5GDS_S3_ENDPOINT": moto.endpoint, "H5GDS_S3_REGION": "us-east-1"}
    proc = ok(run(SCENARIOS, "dump", S3_URL, extra_env=env), "dump")
    assert proc.stdout == source[1]
    assert f"endpoint {moto.endpoint}" in proc.stderr


def test_plain_http_to_s3_needs_a_say_so(moto):
    env = {k: v for k, v in moto.env().items() if k != "AWS_ALLOW_HTTP"}
    proc = ok(run(REMOTE, "missing", S3_URL, extra_env=env), "open")
    assert proc.stdout.startswith("ERROR"), proc.stdout
    assert S3_URL in proc.stdout and "HTTP" in proc.stdout, proc.stdout


def test_write_modes_are_refused_and_nothing_is_sent(nginx, moto):
    for url, env in ((nginx.url("data/new.h5"), {}), (nginx.url("data/file.h5"), {}),
                     (f"s3://{BUCKET}/created.h5", moto.env()), (S3_URL, moto.env())):
        before = nginx.access_log.read_text()
        proc = ok(run(REMOTE, "refuse", url, extra_env=env), "refuse")
        lines = proc.stdout.splitlines()
        assert len(lines) == 5 and all(line.startswith("REFUSED") for line in lines), proc.stdout
        for line in lines:
            assert "errno=30" in line and "read-only" in line and "nothing was sent" in line, line
            assert url.split("?")[0] in line, line
        assert nginx.access_log.read_text() == before
    assert sorted(p.name for p in (nginx.root / "data").iterdir()) == ["file.h5"]
    keys = [o["Key"] for o in moto.s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
    assert keys == [KEY]


def test_a_missing_object_names_the_url(nginx, moto):
    for url, env in ((nginx.url("data/absent.h5"), {}), (f"s3://{BUCKET}/absent.h5", moto.env()),
                     ("s3://no-such-bucket-h5gds/x.h5", moto.env())):
        proc = ok(run(REMOTE, "missing", url, extra_env=env), "open")
        out = proc.stdout
        assert out.startswith("ERROR FileNotFoundError errno=2"), out
        assert url in out and "HEAD" in out, out
        assert not any(secret in out + proc.stderr for secret in SECRETS)


def test_an_unreachable_server_fails_the_open_naming_the_url():
    url = "http://127.0.0.1:9/nobody.h5"  # discard port: nothing listens on loopback
    proc = ok(run(REMOTE, "missing", url, extra_env={"H5GDS_REMOTE_RETRIES": "0", "H5GDS_REMOTE_TIMEOUT": "5"}), "open")
    assert proc.stdout.startswith("ERROR") and url in proc.stdout, proc.stdout


def replace_while_open(url, env, replace):
    """Runs `replaced` on `url`, calls `replace()` once the child has opened it; its stdout."""
    child = subprocess.Popen([sys.executable, str(REMOTE), "replaced", url], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=driver_env("gds", env))
    try:
        ready = child.stdout.readline()
        assert ready.strip() == "READY", ready + child.stderr.read()
        replace()
        out, err = child.communicate("go\n", timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
    assert child.returncode == 0, err
    return out


def test_an_object_replaced_while_open_fails_the_next_read(nginx, moto, source, tmp_path):
    other = tmp_path / "other.h5"
    ok(run(SCENARIOS, "write", other, "sec2"), "write")  # the same content written again: new bytes
    target = nginx.root / "data" / "replaced.h5"
    target.write_bytes(source[0].read_bytes())
    os.utime(target, (1_600_000_000, 1_600_000_000))

    def replace_file():
        staged = target.with_suffix(".new")
        staged.write_bytes(other.read_bytes() + b"\0" * 4096)  # another size: another ETag
        os.replace(staged, target)

    out = replace_while_open(nginx.url("data/replaced.h5"), {}, replace_file)
    assert out.startswith("FAILED OSError") and "changed since it was opened" in out, out
    assert nginx.url("data/replaced.h5") in out, out

    moto.s3.put_object(Bucket=BUCKET, Key="replaced.h5", Body=source[0].read_bytes())

    def replace_object():
        moto.s3.put_object(Bucket=BUCKET, Key="replaced.h5", Body=other.read_bytes() + b"\0" * 4096)

    out = replace_while_open(f"s3://{BUCKET}/replaced.h5", moto.env(), replace_object)
    assert out.startswith("FAILED OSError") and "changed since it was opened" in out, out


def test_a_5xx_is_retried_and_a_lasting_one_fails_naming_url_and_range(nginx, source):
    proxy = FaultProxy(nginx.port, faults=2)
    try:
        url = nginx.url("data/file.h5", port=proxy.port)
        proc = ok(run(SCENARIOS, "dump", url), "dump through faults")
        assert proc.stdout == source[1]
        assert proxy.injected == 2 and proxy.ranged > 2
    finally:
        proxy.stop()
    proxy = FaultProxy(nginx.port, faults=1_000_000)
    try:
        url = nginx.url("data/file.h5", port=proxy.port)
        proc = run(SCENARIOS, "dump", url, extra_env={"H5GDS_REMOTE_RETRIES": "2"})
        assert proc.returncode != 0
        assert re.search(re.escape(f"read failed on '{url}' at offset ") + r"\d+ \(\d+ bytes requested\)", proc.stderr), \
            proc.stderr
        assert "503" in proc.stderr, proc.stderr
        assert proxy.injected == 3, proxy.injected  # the first GET and its two retries
    finally:
        proxy.stop()


def test_a_forked_child_reads_with_its_own_runtime(nginx):
    proc = ok(run(REMOTE, "fork", nginx.url("data/file.h5")), "fork")
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert lines["CHILD"] == lines["PARENT-PART"], proc.stdout


def test_bad_remote_settings_name_the_setting(nginx):
    proc = run(REMOTE, "missing", nginx.url("data/file.h5"), extra_env={"H5GDS_REMOTE_IN_FLIGHT": "0"})
    assert "H5GDS_REMOTE_IN_FLIGHT" in proc.stdout and "1 to 256" in proc.stdout, proc.stdout + proc.stderr
