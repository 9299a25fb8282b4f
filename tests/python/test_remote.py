"""Remote files through the gds driver (docs/remote.md): h5py programs under HDF5_DRIVER=gds given
an http:// URL served by nginx, or an s3:// URL served by moto's S3 server, both started here on
loopback. Each read is compared with the same program reading the local file under sec2."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from remote_servers import FaultProxy, Moto, Nginx, free_port, stop, wait_for_port
from support import NEW_PYTHON, OLD_PYTHON, ROOT, clean_env, driver_env, emulator_library, run_child

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
    found = re.search(re.escape(f"closed {url}: ") + r"(\d+) requests \((\d+) HEAD, (\d+) ranged GET\), (\d+) retried",
                      stderr)
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
    total, heads, gets, retried = requests_at_close(proc.stderr, url)
    # No HEAD: the open's GET of the first block gives the length and ETag; the 6 MB contiguous
    # dataset alone is over 20 GETs of 256K; the file's metadata comes through the block cache.
    assert heads == 0 and gets >= 21 and total == heads + gets and retried == 0, proc.stderr
    log = nginx.access_log.read_text()
    assert '"GET /data/file.h5 HTTP/1.1" 206' in log and '"HEAD /data/file.h5 HTTP/1.1"' not in log


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


def test_an_empty_object_fails_as_an_empty_local_file_does(nginx, tmp_path):
    """An empty object has no first block to GET (nginx answers 200 with no body, not the partial
    content asked for): the open asks a HEAD instead, and HDF5 then finds no file signature, as it
    does in an empty local file."""
    (nginx.root / "data" / "empty.h5").write_bytes(b"")
    (tmp_path / "empty.h5").write_bytes(b"")
    url = nginx.url("data/empty.h5")
    remote = ok(run(REMOTE, "missing", url, extra_env={"H5GDS_LOG": "info"}), "open").stdout
    local = ok(run(REMOTE, "missing", str(tmp_path / "empty.h5")), "open").stdout
    assert remote.startswith("ERROR OSError") and "signature" in remote, remote
    assert remote.split(":", 1)[0] == local.split(":", 1)[0], (remote, local)
    log = nginx.access_log.read_text()
    assert '"GET /data/empty.h5 HTTP/1.1"' in log and '"HEAD /data/empty.h5 HTTP/1.1" 200' in log, log


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
        # Both answers retried, and said so at close (H5GDS_LOG=info).
        assert requests_at_close(proc.stderr, url)[3] == 2, proc.stderr
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
        # The open's GET of the first block and its two retries (the open then asks a HEAD, which
        # this proxy passes), then the first read's GET and its two retries.
        assert proxy.injected == 6, proxy.injected
    finally:
        proxy.stop()


def test_a_forked_child_reads_with_its_own_runtime(nginx):
    proc = ok(run(REMOTE, "fork", nginx.url("data/file.h5")), "fork")
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert lines["CHILD"] == lines["PARENT-PART"], proc.stdout


def test_bad_remote_settings_name_the_setting(nginx):
    proc = run(REMOTE, "missing", nginx.url("data/file.h5"), extra_env={"H5GDS_REMOTE_IN_FLIGHT": "0"})
    assert "H5GDS_REMOTE_IN_FLIGHT" in proc.stdout and "1 to 256" in proc.stdout, proc.stdout + proc.stderr


# --- Credentials and endpoint from the shared AWS files; `h5gds info <url>`; device buffers ---

READ_POLICY = '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}'
AUTH_BUCKET = "h5gds-signed"


class SignedMoto:
    """moto's S3 server checking every request's signature (IAM auth, on after the set-up requests
    that create a user allowed to read, its access key and the bucket), holding the source file."""

    SETUP_REQUESTS = 4  # create_user, put_user_policy, create_access_key, create_bucket

    def __init__(self, body):
        import boto3

        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        env = clean_env({"INITIAL_NO_AUTH_ACTION_COUNT": str(self.SETUP_REQUESTS)})
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        wait_for_port(self.port, self.proc, "moto's server (signatures checked)")
        unsigned = {"endpoint_url": self.endpoint, "region_name": "us-east-1", "aws_access_key_id": "setup",
                    "aws_secret_access_key": "setup"}
        iam = boto3.client("iam", **unsigned)
        iam.create_user(UserName="reader")
        iam.put_user_policy(UserName="reader", PolicyName="read", PolicyDocument=READ_POLICY)
        key = iam.create_access_key(UserName="reader")["AccessKey"]
        self.key_id, self.secret = key["AccessKeyId"], key["SecretAccessKey"]
        s3 = boto3.client("s3", **(unsigned | {"aws_access_key_id": self.key_id, "aws_secret_access_key": self.secret}))
        s3.create_bucket(Bucket=AUTH_BUCKET)
        s3.put_object(Bucket=AUTH_BUCKET, Key="data/file.h5", Body=body)
        self.url = f"s3://{AUTH_BUCKET}/data/file.h5"

    def stop(self):
        stop(self.proc)


@pytest.fixture(scope="module")
def signed(source):
    server = SignedMoto(source[0].read_bytes())
    yield server
    server.stop()


def aws_files(tmp_path, server, secret=None, endpoint=None, profile="reader"):
    """The shared AWS files of a user of `server` in `tmp_path` (HOME there too: no file of this
    machine's user is read): the keys in the credentials file, region and endpoint in the config
    file; the environment that names them, with no AWS key, region nor endpoint variable."""
    (tmp_path / "aws").mkdir(exist_ok=True)
    config, credentials = tmp_path / "aws" / "config", tmp_path / "aws" / "credentials"
    config.write_text(f"[default]\nregion = eu-north-1\n\n[profile {profile}]\nregion = us-east-1\n"
                      f"endpoint_url = {endpoint or server.endpoint}\ns3 =\n  max_concurrent_requests = 4\n")
    credentials.write_text(f"[default]\naws_access_key_id = AKIADEFAULTNOTUSED\naws_secret_access_key = unused\n\n"
                           f"[{profile}]\naws_access_key_id = {server.key_id}\n"
                           f"aws_secret_access_key = {secret or server.secret}\n")
    env = {"HOME": str(tmp_path), "AWS_PROFILE": profile, "AWS_CONFIG_FILE": str(config),
           "AWS_SHARED_CREDENTIALS_FILE": str(credentials), "AWS_ALLOW_HTTP": "true"}
    return env, credentials, config


def no_secret_in(server, *texts):
    for text in texts:
        assert server.secret not in text and "wrong-secret" not in text, text


def test_a_profile_of_the_shared_aws_files_signs_the_requests(signed, source, tmp_path):
    env, credentials, config = aws_files(tmp_path, signed)
    proc = ok(run(SCENARIOS, "dump", signed.url, extra_env=env), "dump")
    assert proc.stdout == source[1]
    assert f"credentials: AWS profile 'reader' ({credentials})" in proc.stderr, proc.stderr
    assert f"endpoint {signed.endpoint}/ (from endpoint_url of AWS profile 'reader' ({config}))" in proc.stderr, \
        proc.stderr
    assert f"region us-east-1 (from region of AWS profile 'reader' ({config}))" in proc.stderr, proc.stderr
    no_secret_in(signed, proc.stdout, proc.stderr)
    # Nor at the most verbose log level.
    proc = ok(run(REMOTE, "missing", signed.url, extra_env=env | {"H5GDS_LOG": "trace"}), "open")
    assert proc.stdout.strip() == "OPENED", proc.stdout + proc.stderr
    no_secret_in(signed, proc.stdout, proc.stderr)
    assert signed.key_id not in proc.stderr, proc.stderr


def test_settings_rank_explicit_then_environment_then_profile(signed, source, tmp_path):
    # The profile's endpoint leads nowhere (the discard port): H5GDS_S3_ENDPOINT wins over it.
    env, _, _ = aws_files(tmp_path, signed, endpoint="http://127.0.0.1:9")
    proc = ok(run(SCENARIOS, "dump", signed.url, extra_env=env | {"H5GDS_S3_ENDPOINT": signed.endpoint}), "dump")
    assert proc.stdout == source[1]
    assert f"endpoint {signed.endpoint}/ (from H5GDS_S3_ENDPOINT)" in proc.stderr, proc.stderr
    # The environment's keys win over the profile's: wrong ones there are refused, naming them.
    env, _, _ = aws_files(tmp_path, signed)
    wrong = {"AWS_ACCESS_KEY_ID": signed.key_id, "AWS_SECRET_ACCESS_KEY": "wrong-secret", "AWS_REGION": "us-east-1"}
    proc = ok(run(REMOTE, "missing", signed.url, extra_env=env | wrong), "open")
    assert proc.stdout.startswith("ERROR PermissionError errno=13"), proc.stdout
    assert "credentials: environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)" in proc.stdout, proc.stdout
    assert "region us-east-1 (from AWS_REGION)" in proc.stdout, proc.stdout
    no_secret_in(signed, proc.stdout, proc.stderr)


def test_wrong_keys_in_a_profile_are_refused_with_a_clear_error(signed, tmp_path):
    env, credentials, _ = aws_files(tmp_path, signed, secret="wrong-secret")
    proc = ok(run(REMOTE, "missing", signed.url, extra_env=env), "open")
    out = proc.stdout
    assert out.startswith("ERROR PermissionError errno=13"), out
    assert signed.url in out and "HEAD of the object" in out and "403" in out, out
    assert f"credentials: AWS profile 'reader' ({credentials})" in out, out
    no_secret_in(signed, out, proc.stderr)


def test_a_profile_missing_from_the_files_is_named(signed, tmp_path):
    env, credentials, config = aws_files(tmp_path, signed)
    proc = ok(run(REMOTE, "missing", signed.url, extra_env=env | {"AWS_PROFILE": "absent"}), "open")
    out = proc.stdout
    assert out.startswith("ERROR") and "errno=22" in out, out
    assert f"the AWS profile 'absent' (AWS_PROFILE) is in neither {config} nor {credentials}" in out, out
    # A profile that gets its keys another way is refused, saying how to give them.
    credentials.write_text("[reader]\nrole_arn = arn:aws:iam::123456789012:role/reader\nsource_profile = x\n")
    proc = ok(run(REMOTE, "missing", signed.url, extra_env=env), "open")
    assert "profile 'reader' gets its credentials through role_arn" in proc.stdout, proc.stdout
    assert "aws configure export-credentials" in proc.stdout, proc.stdout


def tool():
    """The h5gds command (`cargo build -p h5gds-cli`, or the tests' `cargo test --workspace`):
    H5GDS_TOOL, else the newest of target/{debug,release}/h5gds."""
    if "H5GDS_TOOL" in os.environ:
        return Path(os.environ["H5GDS_TOOL"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    built = [p for p in (target / "debug" / "h5gds", target / "release" / "h5gds") if p.is_file()]
    assert built, "build the tool first: cargo build -p h5gds-cli"
    return max(built, key=lambda p: p.stat().st_mtime)


def info(url, env=None, json_out=False):
    args = [str(tool()), "info", url] + (["--json"] if json_out else [])
    proc = subprocess.run(args, env=clean_env(env), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"h5gds info {url} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout) if json_out else proc.stdout


def emulator_env(tmp_path):
    """LD_LIBRARY_PATH to h5gds's CPU emulator as libcuda and libcufile, with one device (EMULATED)."""
    libs = tmp_path / "emulator-libs"
    if not libs.is_dir():
        libs.mkdir()
        for name in ("libcuda.so.1", "libcuda.so", "libcufile.so.0", "libcufile.so"):
            (libs / name).symlink_to(emulator_library())
    return {"LD_LIBRARY_PATH": str(libs), "H5GDS_EMU_DEVICES": "1"}


def test_info_on_a_url_says_how_it_is_read(nginx, signed, source, tmp_path):
    size = source[0].stat().st_size
    url = nginx.url("data/file.h5")
    text = info(url, {"H5GDS_REMOTE_IN_FLIGHT": "7"})
    assert "store:          HTTP (plain)" in text, text
    assert "ranged GETs of 8M, 7 in flight, 5 retries with backoff, 30 s timeout" in text, text
    assert re.search(rf"object: +reachable: {size} bytes, ETag \S+ \(every read conditional on it\)", text), text
    report = info(url, emulator_env(tmp_path), json_out=True)
    assert report["reachable"] and report["size"] == size and report["etag"], report
    assert report["store"] == "HTTP (plain)" and report["credentials"].startswith("none"), report
    assert report["device"].startswith("staged: ranged GETs into the pinned bounce buffers"), report
    # S3 through a profile: which credentials, never their secret.
    env, credentials, config = aws_files(tmp_path, signed)
    report = info(signed.url, env, json_out=True)
    assert report["reachable"] and report["size"] == size, report
    assert report["store"] == "S3" and report["credentials"] == f"AWS profile 'reader' ({credentials})", report
    assert report["region"] == f"us-east-1 (from region of AWS profile 'reader' ({config}))", report
    no_secret_in(signed, json.dumps(report))
    # What cannot be read is reported, not a failure of the tool: wrong keys, a missing object,
    # a server nobody runs.
    env, _, _ = aws_files(tmp_path, signed, secret="wrong-secret")
    report = info(signed.url, env, json_out=True)
    assert not report["reachable"] and "403" in report["problem"] and signed.url in report["problem"], report
    no_secret_in(signed, json.dumps(report))
    text = info(nginx.url("data/absent.h5"))
    assert "object:         NOT READABLE:" in text and "No such file or directory" in text, text
    text = info("http://127.0.0.1:9/nobody.h5", {"H5GDS_REMOTE_RETRIES": "0"})
    assert "NOT READABLE" in text and "http://127.0.0.1:9/nobody.h5" in text, text
    # A path is not a URL: the tool says so.
    proc = subprocess.run([str(tool()), "info", "data/file.h5"], env=clean_env(), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0 and "not a URL" in proc.stderr, proc.stderr


def test_a_device_read_of_a_remote_file_is_staged_through_pinned_buffers(nginx, tmp_path):
    """EMULATED: libcuda and libcufile are h5gds's CPU emulator, whose device memory the host cannot
    read (a host dereference crashes the child). H5Dread into device memory of a remote file goes
    through the staging ring's pinned bounce buffers (host-to-device copies), never cuFile."""
    url = nginx.url("data/file.h5")
    env = emulator_env(tmp_path) | {"H5GDS_REMOTE_REQUEST_SIZE": "1M"}
    proc = ok(run(REMOTE, "device", url, extra_env=env), "device read")
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert lines["DEVICE"] == lines["HOST"], proc.stdout
    counters = dict(kv.split("=") for kv in lines["COUNTERS"].split())
    assert int(counters["htod"]) > 0 and int(counters["pinned_allocs"]) > 0, counters
    assert counters["cufile_reads"] == "0" and counters["bounds_violations"] == "0", counters
    assert "a remote file: ranged GETs into pinned bounce buffers" in proc.stderr, proc.stderr
    _, heads, gets, _ = requests_at_close(proc.stderr, url)
    assert heads == 0 and gets >= 13, proc.stderr  # the first block, then 6 MB twice (host, then device) in 1M GETs
