"""Real Flux in the conformance tier: the programs `make deps-real` builds (scripts/
deps-real.sh; versions in tests/real/versions.env) run against the session's real
kube-apiserver (real_fixtures.real_kube), with real servers for their sources.

    git_server      session-scoped GitServer: `git http-backend` (it ships with git)
                    behind a small CGI shim on 127.0.0.1; repositories are bare
                    repositories made and committed to with the real `git`:
                    .commit(repo, files, message) -> commit sha, .url(repo), .tag(repo, name);
                    .require_auth(repo, username, password) serves a repository only
                    with those basic-auth credentials (401 otherwise, counted in .refused)
    git_ssh_server  session-scoped GitSSHServer: sshd on 127.0.0.1 serving the same
                    repositories over SSH to one client key (.identity, .known_hosts,
                    .url(repo)); skipped when openssh-server is not installed
    s3_server       session-scoped S3Server: .real/bin/s3-server (gofakes3, in memory):
                    .endpoint (host:port), .put_objects(bucket, {key: bytes}) (the bucket
                    then holds exactly those objects)
    flux            session-scoped FluxControllers: source-controller and
                    kustomize-controller (KUBECONFIG in their environment: they have no
                    --kubeconfig flag) after the Flux CRDs of their own modules
                    (.real/flux-crds) are applied and served; health probed before use;
                    logs kept (.explain() = their tails, for failure messages).
                    .cli(*args, namespace=) runs the real `flux` CLI.
    flux_notification  session-scoped NotificationController: the real
                    notification-controller (its event server on .events_url), started on
                    first use after its Alert and Receiver CRDs are replaced by the
                    rendering of deploy/flux/notifications (Stack added to their kind
                    enums), as a user's flux-system kustomization would install them.
                    source-controller's storage is on tmpfs (/dev/shm) and the session
                    nginx serves it: --storage-adv-addr is nginx's address, and nginx's
                    root links to the storage's kind directories, so nginx's access log
                    counts artifact downloads as for the emulator tier's hand-written
                    sources.

source-controller serves only the sources that carry SHARD_LABEL (Flux's sharding label,
--watch-label-selector=sharding.fluxcd.io/key=pc-test), in every namespace (each real-tier
test has its own): the tests that write a source's status by hand (hostile archives, sources
that never get an artifact, the Kubernetes tests that create Flux objects to see how the API
server treats them) share the session's API server with it and must not race it.
"""
import base64
import json
import os
import pathlib
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from kube_fixtures import wait_for  # noqa: E402
from nginx_fixtures import free_port  # noqa: E402
from real_fixtures import REAL, _log_tail, _terminate, real_binary  # noqa: E402

SHARD_LABEL = ("sharding.fluxcd.io/key", "pc-test")
SOURCE_API = "source.toolkit.fluxcd.io/v1"
SOURCE_PLURALS = {"GitRepository": "gitrepositories", "OCIRepository": "ocirepositories",
                  "Bucket": "buckets"}
SOURCE_FINALIZER = "finalizers.fluxcd.io"
RUNTIME_NAMESPACE = "flux-system"
GIT_BACKEND = "/usr/lib/git-core/git-http-backend"
# source-controller's storage layout: one directory per kind under --storage-path.
STORAGE_KINDS = ("gitrepository", "ocirepository", "bucket", "helmchart", "helmrepository")
GIT_IDENTITY = {"GIT_AUTHOR_NAME": "pc test", "GIT_AUTHOR_EMAIL": "test@pc.example",
                "GIT_COMMITTER_NAME": "pc test", "GIT_COMMITTER_EMAIL": "test@pc.example"}


# -- the Git server -------------------------------------------------------------------

class _GitCGIHandler(BaseHTTPRequestHandler):
    """Runs git http-backend for one request, as a web server's CGI would: the request
    in CGI variables and on stdin, the CGI answer (headers, blank line, body) back."""

    protocol_version = "HTTP/1.0"     # the answer's end is the connection's end

    def log_message(self, fmt, *args):
        self.server.access.append(f"{self.command} {self.path}")

    def _authorized(self, path):
        """The repository's credentials (GitServer.require_auth) are in the request, as
        HTTP basic auth."""
        repo = path.lstrip("/").split(".git", 1)[0]
        want = self.server.credentials.get(repo)
        if want is None:
            return True
        scheme, _, value = (self.headers.get("Authorization") or "").partition(" ")
        try:
            return scheme.lower() == "basic" and base64.b64decode(value).decode() == want
        except ValueError:
            return False

    def _run(self):
        path, _, query = self.path.partition("?")
        if not self._authorized(path):
            self.server.refused.append(f"{self.command} {path}")
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        env = {"GIT_PROJECT_ROOT": str(self.server.root), "GIT_HTTP_EXPORT_ALL": "1",
               "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
               "REQUEST_METHOD": self.command, "PATH_INFO": path, "QUERY_STRING": query,
               "CONTENT_TYPE": self.headers.get("Content-Type", ""),
               "CONTENT_LENGTH": str(length), "REMOTE_ADDR": self.client_address[0],
               "SERVER_PROTOCOL": "HTTP/1.0", "GATEWAY_INTERFACE": "CGI/1.1"}
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        proc = subprocess.run([GIT_BACKEND], input=body, env=env, capture_output=True,
                              timeout=120)
        head, _, payload = proc.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = proc.stdout.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _run


class GitServer:
    """Bare repositories under .root served over smart HTTP on loopback."""

    def __init__(self, base):
        self.base = pathlib.Path(base)
        self.root = self.base / "repos"
        self.work = self.base / "work"
        self.root.mkdir(parents=True)
        self.work.mkdir()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _GitCGIHandler)
        self.httpd.root = self.root
        self.httpd.access = []
        self.httpd.credentials = {}     # repo -> "user:password"
        self.httpd.refused = []         # requests answered 401
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def access(self):
        return list(self.httpd.access)

    def url(self, repo):
        return f"http://127.0.0.1:{self.port}/{repo}.git"

    def require_auth(self, repo, username, password):
        """From now on the repository is served only to requests with these basic-auth
        credentials; others get 401.  The test's own pushes go to the bare repository
        directly, past the server."""
        self.httpd.credentials[repo] = f"{username}:{password}"

    @property
    def refused(self):
        """The requests answered 401 ("GET /ns/repo.git/info/refs")."""
        return list(self.httpd.refused)

    def git(self, *args, cwd=None):
        env = dict(os.environ, **GIT_IDENTITY, GIT_CONFIG_NOSYSTEM="1",
                   HOME=str(self.base), GIT_TERMINAL_PROMPT="0")
        proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=60)
        if proc.returncode != 0:
            raise AssertionError(f"git {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
        return proc.stdout.strip()

    def _checkout(self, repo):
        """The work tree the tests commit in (branch main), made with the bare repo."""
        bare = self.root / f"{repo}.git"
        tree = self.work / repo
        if not bare.exists():
            bare.parent.mkdir(parents=True, exist_ok=True)
            self.git("init", "--bare", "-q", "-b", "main", str(bare))
            tree.mkdir(parents=True)
            self.git("init", "-q", "-b", "main", cwd=tree)
            self.git("remote", "add", "origin", str(bare), cwd=tree)
        return tree

    def commit(self, repo, files, message="update"):
        """Makes the tree of branch main exactly `files` ({path: bytes}), commits and
        pushes it; returns the commit's sha1.  The same tree as main's head is no new
        commit (the same revision, as when a source is reconciled with nothing new)."""
        tree = self._checkout(repo)
        for p in list(tree.iterdir()):
            if p.name != ".git":
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        for rel, data in files.items():
            dst = tree / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(data)
        self.git("add", "-A", cwd=tree)
        has_head = subprocess.run(["git", "rev-parse", "-q", "--verify", "HEAD"], cwd=tree,
                                  capture_output=True).returncode == 0
        if has_head and subprocess.run(["git", "diff", "--cached", "--quiet"],
                                       cwd=tree).returncode == 0:
            return self.git("rev-parse", "HEAD", cwd=tree)
        self.git("commit", "-q", "-m", message, cwd=tree)
        self.git("push", "-q", "origin", "main", cwd=tree)
        return self.git("rev-parse", "HEAD", cwd=tree)

    def tag(self, repo, name):
        """Tags main's head `name` (moving it if it exists) and pushes the tag."""
        tree = self._checkout(repo)
        self.git("tag", "-f", name, cwd=tree)
        self.git("push", "-q", "-f", "origin", f"refs/tags/{name}", cwd=tree)
        return self.git("rev-parse", "HEAD", cwd=tree)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="session")
def git_server():
    base = tempfile.mkdtemp(prefix="pc-git-")
    server = GitServer(base)
    yield server
    server.close()
    shutil.rmtree(base, ignore_errors=True)


# -- the Git server over SSH ------------------------------------------------------------

SSHD = "/usr/sbin/sshd"
# Only `git-upload-pack '<path>'` (a clone or fetch) runs for the one authorized key.
SSH_FORCE_COMMAND = """#!/bin/sh
case "$SSH_ORIGINAL_COMMAND" in
"git-upload-pack "*) exec /bin/sh -c "$SSH_ORIGINAL_COMMAND" ;;
*) echo "only git-upload-pack is served" >&2; exit 1 ;;
esac
"""


class GitSSHServer:
    """sshd on 127.0.0.1 serving a GitServer's bare repositories over SSH (key auth only,
    two client keys, only git-upload-pack).  .identity is a client's private key
    (OpenSSH format), .locked_identity another encrypted with .passphrase, .known_hosts the line a user puts in a known_hosts file for this
    server ([127.0.0.1]:port <host key>), .url(repo) the repository's ssh:// URL."""

    def __init__(self, git, base):
        if not os.path.exists(SSHD):
            pytest.skip("openssh-server is not installed (apt-get install openssh-server)")
        self.git = git
        self.base = pathlib.Path(base)
        self.base.mkdir(parents=True, exist_ok=True)
        self.user = pwd.getpwuid(os.getuid()).pw_name
        keys = {}
        self.passphrase = "ssh-Key-Passphrase-" + secrets.token_hex(4)
        for name, phrase in (("host", ""), ("client", ""), ("locked", self.passphrase)):
            path = self.base / f"{name}_key"
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", phrase, "-C", f"pc-test-{name}",
                            "-f", str(path)], check=True, capture_output=True)
            keys[name] = path
        (self.base / "authorized_keys").write_text(
            keys["client"].with_suffix(".pub").read_text() + keys["locked"].with_suffix(".pub").read_text())
        force = self.base / "git-only"
        force.write_text(SSH_FORCE_COMMAND)
        force.chmod(0o755)
        self.identity = keys["client"].read_text()
        self.locked_identity = keys["locked"].read_text()     # encrypted with .passphrase
        self.port = free_port()
        host_pub = keys["host"].with_suffix(".pub").read_text().split()
        self.known_hosts = f"[127.0.0.1]:{self.port} {host_pub[0]} {host_pub[1]}\n"
        config = self.base / "sshd_config"
        config.write_text("\n".join([
            f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {keys['host']}",
            f"AuthorizedKeysFile {self.base / 'authorized_keys'}", f"AllowUsers {self.user}",
            "PubkeyAuthentication yes", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "PermitRootLogin prohibit-password",
            "StrictModes no", "UsePAM no", "DisableForwarding yes", "PermitTTY no",
            f"ForceCommand {force}", f"PidFile {self.base / 'sshd.pid'}", ""]))
        os.makedirs("/run/sshd", exist_ok=True)     # its privilege separation directory
        self.log_path = self.base / "sshd.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(self._listening, 30, interval=0.1, what="sshd listening")

    def _listening(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"sshd exited:\n{_log_tail(self.log_path, 2000)}")
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def url(self, repo):
        return f"ssh://{self.user}@127.0.0.1:{self.port}{self.git.root}/{repo}.git"

    def tail(self, n=4000):
        return _log_tail(self.log_path, n)

    def close(self):
        _terminate(self.proc, 10)
        self._log.close()


@pytest.fixture(scope="session")
def git_ssh_server(git_server):
    base = tempfile.mkdtemp(prefix="pc-git-ssh-")
    server = GitSSHServer(git_server, base)
    yield server
    server.close()
    shutil.rmtree(base, ignore_errors=True)


# -- the S3 server ----------------------------------------------------------------------

class S3Server:
    """.real/bin/s3-server on loopback; objects are written with path-style PUTs."""

    def __init__(self, base):
        self.base = pathlib.Path(base)
        self.binary = real_binary("s3-server", component="s3")
        self.log_path = self.base / "s3-server.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([self.binary, "-addr", "127.0.0.1:0"],
                                     stdout=subprocess.PIPE, stderr=self._log,
                                     start_new_session=True)
        line = self.proc.stdout.readline().decode()
        if not line.startswith("listening on "):
            raise AssertionError(f"s3-server did not start: {line!r}\n{_log_tail(self.log_path)}")
        self.endpoint = line.split()[-1]
        self.url = f"http://{self.endpoint}"
        self._buckets = {}

    def _request(self, method, path, data=None):
        req = urllib.request.Request(self.url + path, data=data, method=method)
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read()

    def put_objects(self, bucket, objects):
        """Makes `bucket` hold exactly `objects` ({key: bytes})."""
        if bucket not in self._buckets:
            self._request("PUT", f"/{bucket}")
            self._buckets[bucket] = set()
        for key in self._buckets[bucket] - set(objects):
            self._request("DELETE", f"/{bucket}/{key}")
        for key, data in objects.items():
            self._request("PUT", f"/{bucket}/{key}", data)
        self._buckets[bucket] = set(objects)

    def close(self):
        _terminate(self.proc, 10)
        self._log.close()


@pytest.fixture(scope="session")
def s3_server():
    base = tempfile.mkdtemp(prefix="pc-s3-")
    server = S3Server(base)
    yield server
    server.close()
    shutil.rmtree(base, ignore_errors=True)


# -- the Flux controllers ---------------------------------------------------------------

class FluxProcess:
    """One Flux controller process with its log file and health endpoint."""

    def __init__(self, name, argv, env, log_path):
        self.name = name
        self.log_path = log_path
        self.health_port = int(next(a.split(":")[-1] for a in argv
                                    if a.startswith("--health-addr=")))
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=self._log, env=env,
                                     start_new_session=True)

    def healthy(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n"
                                 f"{_log_tail(self.log_path)}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz",
                                        timeout=2) as r:
                return r.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def tail(self, n=4000):
        return _log_tail(self.log_path, n)

    def stop(self):
        _terminate(self.proc, 30)
        self._log.close()


class FluxControllers:
    def __init__(self, kube, nginx, workdir):
        self.kube = kube
        self.workdir = pathlib.Path(workdir)
        self.flux_bin = real_binary("flux")
        sc_bin = real_binary("source-controller")
        kc_bin = real_binary("kustomize-controller")
        self.apply_crds()
        kube.kubectl("create", "namespace", RUNTIME_NAMESPACE, check=False)
        self.storage = pathlib.Path(tempfile.mkdtemp(prefix="pc-flux-storage-", dir="/dev/shm"))
        for kind in STORAGE_KINDS:
            (self.storage / kind).mkdir()
            link = nginx.root / kind
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(self.storage / kind)
        self.nginx = nginx
        # KUBECONFIG past the fault proxy: a test's faults are for pulumi-controller.
        self.kubeconfig = kube.direct_kubeconfig
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBECONFIG")}
        env.update(KUBECONFIG=self.kubeconfig, RUNTIME_NAMESPACE=RUNTIME_NAMESPACE,
                   HOME=str(self.workdir))
        common = ["--log-level=debug", "--log-encoding=json", "--enable-leader-election=false",
                  "--watch-all-namespaces=true", "--events-addr="]

        def ports():
            return [f"--health-addr=127.0.0.1:{free_port()}",
                    f"--metrics-addr=127.0.0.1:{free_port()}"]
        self.source = FluxProcess("source-controller", [
            sc_bin, *ports(), *common,
            f"--storage-path={self.storage}",
            f"--storage-addr=127.0.0.1:{free_port()}",
            f"--storage-adv-addr=127.0.0.1:{nginx.port}",
            f"--watch-label-selector={SHARD_LABEL[0]}={SHARD_LABEL[1]}"],
            env, self.workdir / "source-controller.log")
        self.kustomize = FluxProcess("kustomize-controller", [
            kc_bin, *ports(), *common,
            "--no-remote-bases=true"],
            env, self.workdir / "kustomize-controller.log")
        self.processes = (self.source, self.kustomize)
        for p in self.processes:
            wait_for(p.healthy, 120, interval=0.2, what=f"{p.name} /readyz")

    def apply_crds(self):
        """The CRDs of the controller modules, over the emulator's hand-written ones the
        session server was started with; returns once every kind is served."""
        crds = sorted((REAL / "flux-crds").glob("*.yaml"))
        if not crds:
            pytest.fail(f"{REAL / 'flux-crds'} holds no CRD: run `make deps-real`")
        for crd in crds:
            # replaced whole: nothing of the hand-written schema may linger
            if self.kube.kubectl("replace", "-f", str(crd), check=False).returncode != 0:
                self.kube.kubectl("create", "-f", str(crd))
        self.kube.kubectl("wait", "--for=condition=Established", "--timeout=120s",
                          *[f"crd/{c.name.split('_', 1)[1].rsplit('.', 1)[0]}."
                            f"{c.name.split('_', 1)[0]}" for c in crds])
        self.kube.wait_custom_resources_served()

    def explain(self):
        return "".join(f"\n--- {p.name} log tail:\n{p.tail()}" for p in self.processes)

    def cli(self, *args, namespace=None, check=True, timeout=180):
        """Runs the real `flux` CLI against the session server."""
        argv = [self.flux_bin, f"--kubeconfig={self.kubeconfig}", *map(str, args)]
        if namespace:
            argv.append(f"--namespace={namespace}")
        env = dict(os.environ, HOME=str(self.workdir))
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
        if check and proc.returncode != 0:
            raise AssertionError(f"flux {' '.join(map(str, args))} failed ({proc.returncode}):"
                                 f"\n{proc.stdout}\n{proc.stderr}{self.explain()}")
        return proc

    def close(self):
        for p in self.processes:
            p.stop()
        shutil.rmtree(self.storage, ignore_errors=True)


@pytest.fixture(scope="session")
def flux(real_kube, nginx, tmp_path_factory):
    controllers = FluxControllers(real_kube, nginx, tmp_path_factory.mktemp("flux"))
    yield controllers
    controllers.close()


NOTIFICATION_COMPONENT = HERE.parents[1] / "deploy" / "flux" / "notifications"
NOTIFICATION_CRDS = ("notification.toolkit.fluxcd.io_alerts.yaml",
                     "notification.toolkit.fluxcd.io_receivers.yaml")


def render_notification_crds(kubectl, workdir):
    """The Alert and Receiver CRDs of .real/flux-crds with the component
    deploy/flux/notifications applied, rendered by the kustomize in `kubectl`, as the
    flux-system kustomization of docs/notifications.md does; returns the YAML text."""
    base = pathlib.Path(tempfile.mkdtemp(prefix="nc-crds-", dir=workdir))
    for name in NOTIFICATION_CRDS:
        src = REAL / "flux-crds" / name
        if not src.exists():
            pytest.fail(f"{src} is missing: run `make deps-real`")
        shutil.copyfile(src, base / name)
    (base / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n" +
        "".join(f"- {n}\n" for n in NOTIFICATION_CRDS) +
        f"components:\n- {os.path.relpath(NOTIFICATION_COMPONENT, base)}\n")
    return subprocess.run([kubectl, "kustomize", str(base)], check=True, capture_output=True,
                          text=True).stdout


class NotificationController:
    """The real notification-controller against the session's server: its event
    server on 127.0.0.1 (.events_url), no leader election, every namespace."""

    def __init__(self, flux, workdir):
        self.kube = flux.kube
        self.workdir = pathlib.Path(workdir)
        binary = real_binary("notification-controller")
        crds = self.workdir / "notification-crds.yaml"
        crds.write_text(render_notification_crds(real_binary("kubectl"), self.workdir))
        self.kube.kubectl("replace", "-f", str(crds))
        self.kube.kubectl("wait", "--for=condition=Established", "--timeout=120s",
                          "crd/alerts.notification.toolkit.fluxcd.io",
                          "crd/receivers.notification.toolkit.fluxcd.io")
        self.kube.wait_custom_resources_served()
        self.events_port = free_port()
        self.events_url = f"http://127.0.0.1:{self.events_port}/"
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBECONFIG")}
        env.update(KUBECONFIG=flux.kubeconfig, RUNTIME_NAMESPACE=RUNTIME_NAMESPACE,
                   HOME=str(self.workdir))
        self.proc = FluxProcess("notification-controller", [
            binary, f"--health-addr=127.0.0.1:{free_port()}",
            f"--metrics-addr=127.0.0.1:{free_port()}",
            f"--events-addr=127.0.0.1:{self.events_port}",
            f"--receiverAddr=127.0.0.1:{free_port()}",
            "--log-level=debug", "--log-encoding=json", "--enable-leader-election=false",
            "--watch-all-namespaces=true"],
            env, self.workdir / "notification-controller.log")
        wait_for(self.proc.healthy, 120, interval=0.2, what="notification-controller /readyz")

    def explain(self):
        return f"\n--- notification-controller log tail:\n{self.proc.tail()}"

    def close(self):
        self.proc.stop()


@pytest.fixture(scope="session")
def flux_notification(flux, tmp_path_factory):
    controller = NotificationController(flux, tmp_path_factory.mktemp("notification"))
    yield controller
    controller.close()




# -- a Stack world's real sources ----------------------------------------------------------

def _session_fixture(name, doc):
    """A property that is the session fixture `name` of the world's test."""
    return property(lambda self: self._request.getfixturevalue(name), doc=doc)


class RealFluxSources:
    """The real-tier half of stack_fixtures.StackWorld.flux_source: sources the real
    source-controller makes from this world's Git repository, OCI repository or bucket.
    Needs the world's ._request (pytest's), .namespace, .workdir, .pc_bin, ._call and
    .cond."""

    # The session's servers, each started on first use.
    flux = _session_fixture("flux", "the real Flux controllers (FluxControllers)")
    git_server = _session_fixture("git_server", "the loopback Git server (GitServer)")
    s3_server = _session_fixture("s3_server", "the S3 server (S3Server)")
    registry = _session_fixture("registry_plain", "the plain-HTTP docker-registry")

    def git_repo(self, name):
        """The Git server's repository of this world's source `name`."""
        return f"{self.namespace}/{name}"

    def oci_repo(self, name):
        return f"stacks-{self.namespace}/{name}"

    def bucket_name(self, name):
        return f"{self.namespace}-{name}"

    def real_source(self, kind, name, artifact, spec=None):
        """Puts artifact.files where the source's spec points, asks the real
        source-controller to reconcile it (reconcile.fluxcd.io/requestedAt) and waits for
        its artifact; `artifact` then holds the bytes Flux stored.  Returns
        status.artifact."""
        self.flux                 # the CRDs and controllers, before the first object
        expect = self._push_source_content(kind, name, artifact.files)
        obj = self.reconcile_source(kind, name, spec or self.real_source_spec(kind, name))
        got = obj["status"]["artifact"]
        if expect is not None:
            assert got["revision"] == expect, (got, expect)
        data = (self.flux.storage / got["path"]).read_bytes()
        artifact.adopt(data, got["path"], got["url"])
        return got

    def real_source_spec(self, kind, name):
        """The spec of a source the real source-controller serves from this world's
        repository / bucket.  The interval is long: tests ask for reconciles."""
        if kind == "GitRepository":
            return {"url": self.git_server.url(self.git_repo(name)), "interval": "10m",
                    "ref": {"branch": "main"}}
        if kind == "OCIRepository":
            return {"url": f"oci://{self.registry.host}/{self.oci_repo(name)}",
                    "interval": "10m", "ref": {"tag": "latest"}, "insecure": True}
        return {"bucketName": self.bucket_name(name), "endpoint": self.s3_server.endpoint,
                "provider": "generic", "insecure": True, "interval": "10m"}

    def _push_source_content(self, kind, name, files):
        """Publishes files for the source; returns the revision source-controller will
        report when it can be known beforehand (None for a Bucket)."""
        if kind == "GitRepository":
            return "main@sha1:" + self.git_server.commit(self.git_repo(name), files)
        if kind == "OCIRepository":
            return "latest@" + self.push_program(f"{self.oci_repo(name)}:latest", files)
        self.s3_server.put_objects(self.bucket_name(name), files)
        return None

    def push_program(self, ref, files, tool="pulumi-controller"):
        """Pushes files as an OCI artifact to the session's plain registry with
        `pulumi-controller push` or the real `flux push artifact`; returns the
        manifest digest."""
        d = pathlib.Path(tempfile.mkdtemp(prefix="push-", dir=self.workdir))
        for rel, data in files.items():
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_bytes(data)
        url = f"oci://{self.registry.host}/{ref}"
        source, rev = "https://git.example.test/app", f"main@sha1:{'0' * 40}"
        if tool == "flux":
            out = self.flux.cli("push", "artifact", url, f"--path={d}", f"--source={source}",
                                f"--revision={rev}", "--insecure-registry", "--output=json")
            return json.loads(out.stdout)["digest"]
        r = subprocess.run([self.pc_bin, "push", url, "--path", str(d), "--plain-http",
                            "--source", source, "--revision", rev], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    def reconcile_source(self, kind, name, spec=None, timeout=120):
        """Applies the source (spec, if given) with a new requestedAt annotation and
        waits until the real source-controller has handled it: Ready=True at its
        generation with an artifact.  Returns the object."""
        plural = SOURCE_PLURALS[kind]
        token = new_token()
        meta = {"name": name, "namespace": self.namespace,
                "labels": {SHARD_LABEL[0]: SHARD_LABEL[1]},
                "annotations": {"reconcile.fluxcd.io/requestedAt": token}}
        if spec is not None:
            obj = {"apiVersion": SOURCE_API, "kind": kind, "metadata": meta, "spec": spec}
            self._call(lambda c: c.apply(obj, plural, field_manager="stack-test"))
        else:   # an apply without the spec would drop the spec fields the test applied
            self._call(lambda c: c.patch(SOURCE_API, plural, name, {"metadata": meta},
                                         self.namespace, "merge"))
        return self.wait_source_handled(kind, name, token, timeout)

    def wait_source_handled(self, kind, name, token, timeout=120):
        """Waits until source-controller handled the reconcile request `token` and the
        source is Ready with an artifact; returns it."""
        plural = SOURCE_PLURALS[kind]

        def handled():
            cur = self._call(lambda c: c.get(SOURCE_API, plural, name, self.namespace))
            st = cur.get("status") or {}
            ready = self.cond(cur, "Ready")
            if (st.get("lastHandledReconcileAt") == token and st.get("artifact") and
                    st.get("observedGeneration") == cur["metadata"]["generation"] and
                    ready and ready["status"] == "True"):
                return cur
            return None
        try:
            return wait_for(handled, timeout, interval=0.1, what=f"{kind} {name} reconciled")
        except AssertionError as e:
            cur = self._call(lambda c: c.get(SOURCE_API, plural, name, self.namespace))
            raise AssertionError(f"{e}\n{kind} {name}: {json.dumps(cur.get('status'))}"
                                 f"{self.flux.explain()}") from None


def new_token():
    """A fresh reconcile.fluxcd.io/requestedAt value."""
    return secrets.token_hex(6)


__all__ = ["GitServer", "GitSSHServer", "S3Server", "FluxControllers", "NotificationController",
           "render_notification_crds", "RealFluxSources", "SHARD_LABEL",
           "SOURCE_FINALIZER", "new_token"]
