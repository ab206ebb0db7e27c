"""Debian's docker-registry (distribution 2.8) on loopback, in three setups.

* ``registry_plain``: plain HTTP, anonymous;
* ``registry_basic``: TLS with a test CA plus htpasswd (bcrypt) basic auth;
* ``registry_token``: TLS with token auth; the token issuer is
  ``token_issuer.TokenIssuer`` (JWTs signed RS256 with an openssl-made key
  whose certificate is the registry's rootcertbundle), also served over TLS.

Each fixture writes its config into a temp dir and runs
``docker-registry serve CONFIG.yml`` in the foreground; readiness is polled
on ``/v2/`` with a deadline.  Registries are session-scoped: tests use their
own repository names.

Helpers: ``Registry.ref(repo, tag)`` builds ``oci://`` references,
``pc_args()`` the matching TLS/auth flags for pulumi-controller,
``skopeo_args(prefix)`` for skopeo, ``blob_path(digest)`` the storage file
of a blob, and ``api()`` raw distribution-API calls with the right auth.
"""
import base64
import json
import pathlib
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest

from nginx_fixtures import free_port, make_ca_and_cert
from token_issuer import TokenIssuer

REGISTRY_BIN = "/usr/bin/docker-registry"
USER = "ci-user"
PASSWORD = "s3cret-Pa55word-9f1c"
SERVICE = "pc-test-registry"
ISSUER = "pc-test-issuer"
IDENTITY_TOKEN = "identity-refresh-token-77ad0c"


class Registry:
    def __init__(self, base, mode):
        self.base = pathlib.Path(base)
        self.mode = mode
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.root = self.base / "storage"
        self.root.mkdir()
        self.ca = None
        self.issuer = None
        self.proc = None
        self.user, self.password = (USER, PASSWORD) if mode != "plain" else (None, None)
        tls = ""
        auth = ""
        if mode != "plain":
            self.ca, cert, key = make_ca_and_cert(self.base)
            tls = f"  tls:\n    certificate: {cert}\n    key: {key}\n"
        if mode == "basic":
            out = subprocess.run(["htpasswd", "-Bbn", USER, PASSWORD], check=True,
                                 capture_output=True, text=True).stdout
            (self.base / "htpasswd").write_text(out)
            auth = f"auth:\n  htpasswd:\n    realm: {SERVICE}\n    path: {self.base / 'htpasswd'}\n"
        elif mode == "token":
            tdir = self.base / "issuer"
            tdir.mkdir()
            self.issuer = TokenIssuer(tdir, free_port(), SERVICE, ISSUER, {USER: PASSWORD},
                                      tls_cert=cert, tls_key=key,
                                      refresh_tokens={IDENTITY_TOKEN: USER})
            auth = (f"auth:\n  token:\n    realm: {self.issuer.realm}\n    service: {SERVICE}\n"
                    f"    issuer: {ISSUER}\n    rootcertbundle: {self.issuer.cert_path}\n")
        self.scheme = "http" if mode == "plain" else "https"
        self.url = f"{self.scheme}://{self.host}"
        conf = (f"version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n"
                f"storage:\n  filesystem:\n    rootdirectory: {self.root}\n  delete:\n    enabled: true\n"
                f"  maintenance:\n    uploadpurging:\n      enabled: false\n"
                f"http:\n  addr: {self.host}\n  secret: pc-e2e-secret\n{tls}{auth}")
        self.conf = self.base / "config.yml"
        self.conf.write_text(conf)

    # ---- lifecycle ----
    def start(self):
        if self.issuer is not None:
            self.issuer.start()
        self.log = open(self.base / "registry.log", "wb")
        self.proc = subprocess.Popen([REGISTRY_BIN, "serve", str(self.conf)],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("docker-registry exited: " +
                                   (self.base / "registry.log").read_text(errors="replace"))
            try:
                self.raw("GET", "/v2/", auth=False)
                return
            except (ConnectionError, urllib.error.URLError, OSError):
                time.sleep(0.05)
        raise TimeoutError("docker-registry did not answer /v2/")

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
            self.log.close()
        if self.issuer is not None:
            self.issuer.stop()

    # ---- references and flags ----
    def ref(self, repo, tag=None, digest=None):
        r = f"oci://{self.host}/{repo}"
        if tag:
            r += f":{tag}"
        if digest:
            r += f"@{digest}"
        return r

    def pc_args(self, creds=True):
        """pulumi-controller flags; the password goes through stdin (see pc_input)."""
        if self.mode == "plain":
            return ["--plain-http"]
        args = ["--ca-file", str(self.ca)]
        if creds:
            args += ["--creds", self.user, "--password-stdin"]
        return args

    def pc_input(self, creds=True):
        return self.password + "\n" if self.mode != "plain" and creds else None

    def skopeo_args(self, prefix):
        """Flags for one side of skopeo copy: prefix is "src" or "dest" ("" for inspect)."""
        p = f"--{prefix}-" if prefix else "--"
        if self.mode == "plain":
            return [f"{p}tls-verify=false"]
        certdir = self.base / "certs"
        if not certdir.exists():
            certdir.mkdir()
            shutil.copy(self.ca, certdir / "ca.crt")
        return [f"{p}cert-dir={certdir}", f"{p}creds={self.user}:{self.password}"]

    def blob_path(self, digest):
        algo, hexd = digest.split(":")
        return self.root / "docker/registry/v2/blobs" / algo / hexd[:2] / hexd / "data"

    # ---- raw API ----
    def _context(self):
        if self.ca is None:
            return None
        return ssl.create_default_context(cafile=str(self.ca))

    def _auth_header(self, repo):
        if self.mode == "basic":
            return "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        if self.mode == "token":
            scope = f"repository:{repo}:pull,push" if repo else ""
            url = f"{self.issuer.realm}?service={SERVICE}&scope={scope}"
            req = urllib.request.Request(url, headers={"Authorization": "Basic " + base64.b64encode(
                f"{self.user}:{self.password}".encode()).decode()})
            with urllib.request.urlopen(req, context=self._context(), timeout=10) as r:
                return "Bearer " + json.load(r)["token"]
        return None

    def raw(self, method, path, body=None, headers=None, auth=True, repo=None):
        """One API call; returns (status, headers, body bytes) for any status."""
        h = dict(headers or {})
        if auth:
            a = self._auth_header(repo)
            if a:
                h["Authorization"] = a
        req = urllib.request.Request(self.url + path, data=body, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, context=self._context(), timeout=10) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), err.read()

    def put_blob(self, repo, data):
        import hashlib
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        st, hdrs, _ = self.raw("POST", f"/v2/{repo}/blobs/uploads/", body=b"", repo=repo)
        assert st == 202, st
        loc = hdrs["Location"]
        if loc.startswith("/"):
            loc = self.url + loc
        sep = "&" if "?" in loc else "?"
        path = loc[len(self.url):] + f"{sep}digest={digest}"
        st, _, body = self.raw("PUT", path, body=data,
                               headers={"Content-Type": "application/octet-stream"}, repo=repo)
        assert st == 201, (st, body)
        return digest

    def put_manifest(self, repo, tag, obj, media_type):
        data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        st, hdrs, body = self.raw("PUT", f"/v2/{repo}/manifests/{tag}", body=data,
                                  headers={"Content-Type": media_type}, repo=repo)
        assert st == 201, (st, body)
        return hdrs.get("Docker-Content-Digest")


def _registry(mode):
    base = tempfile.mkdtemp(prefix=f"pc-registry-{mode}-")
    reg = Registry(base, mode)
    reg.start()
    return reg, base


@pytest.fixture(scope="session")
def registry_plain():
    reg, base = _registry("plain")
    yield reg
    reg.stop()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def registry_basic():
    reg, base = _registry("basic")
    yield reg
    reg.stop()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def registry_token():
    reg, base = _registry("token")
    yield reg
    reg.stop()
    shutil.rmtree(base, ignore_errors=True)


def write_docker_config(path, obj):
    path = pathlib.Path(path)
    path.write_text(json.dumps(obj))
    path.chmod(0o600)
    return path


class FakeRegistry:
    """A scripted HTTP server for what a real registry cannot be made to do:
    redirect blobs to another host, send an oversized manifest, stall.

    ``routes`` maps a path to a function(handler) -> (status, headers, body),
    or to the string "stall" (accept and never answer).  body is bytes, or an
    iterable of byte chunks written as they come (then headers must carry
    any Content-Length).  Every request is
    recorded as (method, path, headers dict).
    """

    def __init__(self, host="127.0.0.1"):
        import http.server
        import threading
        self.routes = {}
        self.requests = []
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def handle_any(self):
                path = self.path.split("?")[0]
                with fake.lock:
                    fake.requests.append((self.command, self.path, dict(self.headers)))
                route = fake.routes.get(path)
                if route == "stall":
                    fake.stop_event.wait(60)
                    return
                if route is None:
                    status, headers, body = 404, {"Content-Type": "application/json"}, \
                        b'{"errors":[{"code":"NAME_UNKNOWN","message":"no such route"}]}'
                else:
                    status, headers, body = route(self)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                if isinstance(body, bytes):
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command == "HEAD":
                    return
                if isinstance(body, bytes):
                    self.wfile.write(body)
                    return
                # An iterable of chunks (headers carry Content-Length): a
                # body that trickles, stalls or never ends.
                for chunk in body:
                    if fake.stop_event.is_set():
                        return
                    self.wfile.write(chunk)
                    self.wfile.flush()

            do_GET = do_HEAD = do_PUT = do_POST = handle_any

        self.server = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.host = f"{host}:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def headers_for(self, path):
        with self.lock:
            return [h for (_, p, h) in self.requests if p.split("?")[0] == path]

    def close(self):
        self.stop_event.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_registry():
    servers = []

    def make(host="127.0.0.1"):
        s = FakeRegistry(host)
        servers.append(s)
        return s
    yield make
    for s in servers:
        s.close()


def make_tree(root, seed="x", big=0):
    """A small program tree with distinct modes, nested dirs and an empty dir."""
    import os
    root = pathlib.Path(root)
    (root / "src" / "lib").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "Pulumi.yaml").write_text(f"name: demo-{seed}\nruntime: nodejs\n")
    (root / "index.ts").write_text(f"export const seed = '{seed}';\n" * 50)
    (root / "src" / "lib" / "util.ts").write_text(f"// {seed}\n")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "private.key").write_bytes(os.urandom(64))
    if big:
        (root / "blob.bin").write_bytes(os.urandom(big))
    os.chmod(root / "run.sh", 0o755)
    os.chmod(root / "private.key", 0o600)
    os.chmod(root / "src" / "lib" / "util.ts", 0o640)
    os.chmod(root / "src", 0o750)
    os.chmod(root / "empty", 0o700)
    return root


def tree_snapshot(root):
    """{relative path: (kind, mode, bytes)} for every entry under root."""
    import os
    import stat
    root = pathlib.Path(root)
    snap = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = pathlib.Path(dirpath) / name
            st = p.lstat()
            rel = str(p.relative_to(root))
            if stat.S_ISDIR(st.st_mode):
                snap[rel] = ("dir", stat.S_IMODE(st.st_mode), None)
            else:
                snap[rel] = ("file", stat.S_IMODE(st.st_mode), p.read_bytes())
    return snap


def small_artifact(files=None):
    """(manifest bytes, manifest digest, {digest: blob bytes}) of a Flux-format
    artifact built in Python, for scripted registries."""
    import hashlib
    import io
    import tarfile
    files = files or {"hello.txt": b"hello from a scripted registry\n"}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in files.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mode = 0o644
            tf.addfile(ti, io.BytesIO(data))
    layer = buf.getvalue()
    config = b'{"created":"1970-01-01T00:00:00Z"}'
    d = lambda b: "sha256:" + hashlib.sha256(b).hexdigest()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.cncf.flux.config.v1+json", "digest": d(config),
                   "size": len(config)},
        "layers": [{"mediaType": "application/vnd.cncf.flux.content.v1.tar+gzip", "digest": d(layer),
                    "size": len(layer)}]}).encode()
    return manifest, d(manifest), {d(layer): layer, d(config): config}


def serve_artifact(fake, repo, tag, manifest, mdigest, blobs, check_auth=None):
    """Routes for one artifact on a FakeRegistry.  check_auth(handler) returns
    None to allow or a (status, headers, body) refusal."""
    def guarded(fn):
        def route(h):
            if check_auth is not None:
                refusal = check_auth(h)
                if refusal is not None:
                    return refusal
            return fn(h)
        return route
    mt = "application/vnd.oci.image.manifest.v1+json"
    fake.routes["/v2/"] = guarded(lambda h: (200, {}, b"{}"))
    for ref in (tag, mdigest):
        fake.routes[f"/v2/{repo}/manifests/{ref}"] = guarded(
            lambda h: (200, {"Content-Type": mt, "Docker-Content-Digest": mdigest}, manifest))
    for dg, data in blobs.items():
        fake.routes[f"/v2/{repo}/blobs/{dg}"] = guarded(lambda h, data=data: (200, {}, data))


@pytest.fixture
def isolated_docker_config(tmp_path, monkeypatch):
    """Keeps the machine's ~/.docker/config.json (and its helpers) out of a test."""
    d = tmp_path / "docker-config-home"
    d.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(d))
    return d
