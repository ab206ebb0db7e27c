"""nginx on loopback as the artifact server source-controller would be.

The fixture writes its own config into a temp dir and runs Debian's nginx in
the foreground (``nginx -c CONF -p PREFIX``), never touching /etc/nginx.
Locations:

    /artifacts/NAME       static files from ``server.root``
    /flaky/NAME           HTTP 500 until ``server.heal("NAME")`` creates a marker
    /redirect/NAME        302 to /artifacts/NAME
    /loop                 302 to itself (redirect limit)
    /slow/NAME            1 byte per second (stall / timeout)
    /paced/NAME           2 MiB/s (so concurrent downloads overlap)

The access log records "STATUS URI" per request, so tests count downloads.
nginx writes a request's line only after it sent the response, so a client may
have its answer before the line is there: every read of the logs first waits
(bounded) until they hold a line for each request nginx has counted
(stub_status on a listener of its own, which logs nothing).
A TLS listener with a CA made at fixture time serves the same locations.

``scripted_server(handler)`` is a raw loopback server for what nginx will not
do: handler(conn, request_bytes, n) answers the n-th connection (0-based)
any way it likes (redirects to presigned URLs, endless bodies, garbage).
"""
import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request

import pytest

NGINX = "/usr/sbin/nginx"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, deadline_s=10.0, proc=None):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"port {port} did not open")


def make_ca_and_cert(d):
    """A test CA and a server certificate for 127.0.0.1/localhost (openssl CLI)."""
    d = pathlib.Path(d)
    run = lambda *a: subprocess.run(a, check=True, capture_output=True)
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", "/CN=pulumi-controller test CA", "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt"))
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", str(d / "server.key"), "-out", str(d / "server.csr"))
    run("openssl", "x509", "-req", "-in", str(d / "server.csr"), "-CA", str(d / "ca.crt"),
        "-CAkey", str(d / "ca.key"), "-CAcreateserial", "-days", "2", "-extfile", str(d / "ext.cnf"),
        "-out", str(d / "server.crt"))
    return d / "ca.crt", d / "server.crt", d / "server.key"


class Nginx:
    def __init__(self, base):
        self.base = pathlib.Path(base)
        self.root = self.base / "www"
        self.marks = self.base / "marks"
        self.root.mkdir()
        self.marks.mkdir()
        self.log = self.base / "access.log"
        self.port = free_port()
        self.tls_port = free_port()
        self.status_port = free_port()
        self._status_lock = threading.Lock()
        self._status_reads = 0       # the stub_status requests nginx counted too
        self.ca, cert, key = make_ca_and_cert(self.base)
        user = "user root;\n" if os.geteuid() == 0 else ""
        conf = f"""{user}daemon off;
worker_processes 1;
pid {self.base}/nginx.pid;
error_log {self.base}/error.log warn;
events {{ worker_connections 256; }}
http {{
    log_format status '$status $request_uri';
    log_format conn '$connection $request_uri';
    access_log {self.log} status;
    access_log {self.base}/conn.log conn;
    client_body_temp_path {self.base}/tmp-body;
    proxy_temp_path {self.base}/tmp-proxy;
    fastcgi_temp_path {self.base}/tmp-fcgi;
    uwsgi_temp_path {self.base}/tmp-uwsgi;
    scgi_temp_path {self.base}/tmp-scgi;
    default_type application/octet-stream;
    sendfile on;
    server {{
        listen 127.0.0.1:{self.port};
        listen 127.0.0.1:{self.tls_port} ssl;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        root {self.root};
        location /artifacts/ {{ alias {self.root}/; }}
        location ~ ^/flaky/(.+)$ {{
            if (!-f {self.marks}/$1) {{ return 500; }}
            alias {self.root}/$1;
        }}
        location ~ ^/redirect/(.+)$ {{ return 302 /artifacts/$1; }}
        location = /loop {{ return 302 /loop; }}
        location = /post-fails {{ return 500 "no\n"; }}
        location /slow/ {{ alias {self.root}/; limit_rate 1; }}
        location /paced/ {{ alias {self.root}/; limit_rate 2m; }}
    }}
    server {{
        listen 127.0.0.1:{self.status_port};
        access_log off;
        location = /status {{ stub_status; }}
    }}
}}
"""
        self.conf = self.base / "nginx.conf"
        self.conf.write_text(conf)
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen([NGINX, "-c", str(self.conf), "-p", str(self.base)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_for_port(self.port, proc=self.proc)
        wait_for_port(self.tls_port, proc=self.proc)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def url(self, path, tls=False):
        if tls:
            return f"https://127.0.0.1:{self.tls_port}/{path.lstrip('/')}"
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def put(self, name, data):
        p = self.root / name
        p.write_bytes(data)
        p.chmod(0o644)
        return p

    def heal(self, name):
        (self.marks / name).write_text("ok")

    def counted(self):
        """How many requests nginx has counted, not counting stub_status's own."""
        with self._status_lock:
            self._status_reads += 1
            with urllib.request.urlopen(f"http://127.0.0.1:{self.status_port}/status", timeout=5) as r:
                text = r.read().decode()
            # "Active connections: N\nserver accepts handled requests\n A H R\n..."
            return int(text.splitlines()[2].split()[2]) - self._status_reads

    def _lines(self, path):
        return path.read_text().splitlines() if path.exists() else []

    def _settled_lines(self, path, deadline_s=20.0):
        """The lines of log `path` once it has one for every request counted so far
        (a response still going out, as on /slow or /paced, holds this up to deadline_s)."""
        end = time.monotonic() + deadline_s
        while True:
            want = self.counted()
            lines = self._lines(path)
            if len(lines) >= want or time.monotonic() >= end:
                return lines
            time.sleep(0.01)

    def requests(self, uri_suffix=None):
        """[(status, uri)] from the access log, optionally only URIs ending so."""
        out = []
        for line in self._settled_lines(self.log):
            status, _, uri = line.partition(" ")
            if uri_suffix is None or uri.endswith(uri_suffix):
                out.append((int(status), uri))
        return out

    def connections(self, uri_suffix):
        """The nginx connection serial number of each request whose URI ends so."""
        out = []
        for line in self._settled_lines(self.base / "conn.log"):
            conn, _, uri = line.partition(" ")
            if uri.endswith(uri_suffix):
                out.append(int(conn))
        return out

    def wait_for_request(self, uri_suffix, status, deadline_s=20.0):
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if any(s == status for s, _ in self.requests(uri_suffix)):
                return
            time.sleep(0.01)
        raise TimeoutError(f"no {status} for {uri_suffix} in the access log")


@pytest.fixture(scope="session")
def nginx():
    if not os.access(NGINX, os.X_OK):
        pytest.fail("nginx is not installed; run 'make deps'")
    base = tempfile.mkdtemp(prefix="pc-nginx-")
    os.chmod(base, 0o755)
    server = Nginx(base)
    server.start()
    yield server
    server.stop()
    shutil.rmtree(base, ignore_errors=True)


class ScriptedServer:
    """A loopback HTTP server whose every connection is answered by
    handler(conn, request_bytes, n); it keeps the request lines it saw."""

    def __init__(self, handler):
        self.handler = handler
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.requests = []
        self.connections = 0
        self.accepted = threading.Event()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        n = 0
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._one, args=(conn, n), daemon=True).start()
            n += 1

    def _one(self, conn, n):
        with conn:
            try:
                req = b""
                while b"\r\n\r\n" not in req:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    req += chunk
                self.requests.append(req.split(b"\r\n", 1)[0].decode("latin-1"))
                self.accepted.set()
                self.handler(conn, req, n)
            except OSError:
                pass

    def url(self, path="artifact.tar.gz"):
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def stopped(self):
        return self._stop.is_set()

    def close(self):
        self._stop.set()
        self.sock.close()


@pytest.fixture
def scripted_server():
    servers = []

    def make(handler):
        s = ScriptedServer(handler)
        servers.append(s)
        return s
    yield make
    for s in servers:
        s.close()


@pytest.fixture
def broken_server(scripted_server):
    """A server that promises Content-Length N and closes after N/2 bytes;
    .connections counts the attempts."""
    def make(body):
        def handler(conn, req, n):
            head = (f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n"
                    "Content-Type: application/gzip\r\nConnection: close\r\n\r\n")
            conn.sendall(head.encode() + body[: len(body) // 2])
        return scripted_server(handler)
    return make


# ---- helpers for tests that stop a transfer midway (fetch, pull, unpack) ----

def wait_until(cond, what, deadline_s=30.0):
    """Polls cond() until it holds; TimeoutError(what) after deadline_s."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.02)
    raise TimeoutError(what)


def staging_names(parent):
    """The staging directories (".NAME.tmp-XXXXXX") in parent."""
    parent = str(parent)
    return [n for n in os.listdir(parent) if ".tmp-" in n] if os.path.isdir(parent) else []


def partial_staging(parent):
    """True once a staging directory in parent has something in it."""
    return any(os.listdir(os.path.join(str(parent), n)) for n in staging_names(parent))


def holds_open(pid, path):
    """True when process pid has path open (it is waiting on that lock)."""
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False
