"""Real servers on loopback for the remote-file tests (test_remote.py): nginx from Debian's archive
(byte ranges, ETags, If-Match), moto's S3 API server from PyPI, and a small HTTP proxy that
answers a set number of requests with a 5xx before passing the rest on. Each is started by a
fixture, waited for in a bounded loop and stopped by it."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def free_port():
    """A loopback TCP port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, proc, what, seconds=30, output=None):
    """Waits (bounded) until `port` accepts connections; fails naming `what` if `proc` exits first
    (with what it wrote: to its stdout pipe, or to the file `output`)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            if output is not None:
                output.seek(0)
                out = output.read()
            else:
                out = proc.stdout.read() if proc.stdout else ""
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening:\n{out}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {seconds} s")


def stop(proc):
    """Stops a server this module started (SIGTERM, then SIGKILL after 10 s)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def nginx_binary():
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").is_file() else None)
    assert found, "nginx is missing: scripts/setup.sh installs Debian's nginx"
    return found


class Nginx:
    """nginx serving the files under `root` on 127.0.0.1 (ranges and ETags are nginx's defaults)."""

    def __init__(self, tmp):
        self.root = tmp / "www"
        self.root.mkdir()
        self.port = free_port()
        prefix = tmp / "nginx"
        prefix.mkdir()
        # Running as root, nginx's workers would switch to an unprivileged user that cannot read
        # a private temporary directory: keep them as this user.
        user = "user root;" if os.geteuid() == 0 else ""
        conf = prefix / "nginx.conf"
        conf.write_text(f"""{user}
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log;
events {{ worker_connections 256; }}
http {{
    access_log {prefix}/access.log;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{self.port};
        root {self.root};
    }}
}}
""")
        self.access_log = prefix / "access.log"
        self.proc = subprocess.Popen([nginx_binary(), "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        wait_for_port(self.port, self.proc, "nginx")

    def url(self, name, port=None):
        return f"http://127.0.0.1:{port or self.port}/{name}"

    def stop(self):
        stop(self.proc)


class Moto:
    """moto's S3 API server on 127.0.0.1, and a boto3 client of it."""

    def __init__(self):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        # Its output (a line per request) goes to a file: to a pipe nobody reads, the server stalls
        # once the pipe is full (the thread writing a request's log line blocks holding the logging
        # lock, and every other request's thread waits on it): benches/remote.py's --s3 at 64 MiB.
        self.output = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=self.output, stderr=subprocess.STDOUT, text=True)
        wait_for_port(self.port, self.proc, "moto's server", output=self.output)
        import boto3  # moto[server] brings it
        self.s3 = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                               aws_access_key_id="testing-key-id", aws_secret_access_key="testing-secret-key")

    def env(self):
        """The AWS variables of a client of this server (the standard chain, as object_store reads it)."""
        return {"AWS_ACCESS_KEY_ID": "testing-key-id", "AWS_SECRET_ACCESS_KEY": "testing-secret-key",
                "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": self.endpoint, "AWS_ALLOW_HTTP": "true"}

    def stop(self):
        stop(self.proc)
        self.output.close()


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 in front of `upstream_port`: the first `faults` requests carrying
    a Range header are answered `status` (a 5xx) without reaching upstream; every other request is
    passed on with `Connection: close` and its answer returned whole. Counts what it saw."""

    def __init__(self, upstream_port, faults, status=503):
        self.upstream_port, self.faults, self.status = upstream_port, faults, status
        self.ranged, self.injected = 0, 0
        self.lock = threading.Lock()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while self.running:
            try:
                conn, _ = self.listener.accept()
            except (socket.timeout, OSError):
                continue
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        with conn:
            conn.settimeout(30)
            head = b""
            while b"\r\n\r\n" not in head:
                data = conn.recv(65536)
                if not data:
                    return
                head += data
            request, _, rest = head.partition(b"\r\n\r\n")
            lines = request.split(b"\r\n")
            ranged = any(line.lower().startswith(b"range:") for line in lines[1:])
            with self.lock:
                self.ranged += ranged
                fault = ranged and self.injected < self.faults
                self.injected += fault
            if fault:
                conn.sendall(f"HTTP/1.1 {self.status} Injected Fault\r\nContent-Length: 0\r\n"
                             "Connection: close\r\n\r\n".encode())
                return
            kept = [line for line in lines if not line.lower().startswith(b"connection:")]
            forwarded = b"\r\n".join(kept + [b"Connection: close"]) + b"\r\n\r\n" + rest
            with socket.create_connection(("127.0.0.1", self.upstream_port), timeout=30) as up:
                up.sendall(forwarded)
                while True:
                    data = up.recv(1 << 20)
                    if not data:
                        break
                    conn.sendall(data)

    def stop(self):
        self.running = False
        self.thread.join(timeout=5)
        self.listener.close()
