"""pytest fixtures for the Kubernetes API-server emulator (tests/e2e/kubeapi).

`kubeapi` starts a fresh emulator for one test, with the project's CRDs
(deploy/crds/ and tests/e2e/crds/) already applied, and yields a KubeAPI:

    api.url, api.token, api.ca_file, api.kubeconfig     connection facts
    api.client                                          kubeapi.client.KubeClient
    api.kubectl(*args)                                  the real kubectl, temp cache dir
    api.write_kubeconfig(path, token=..., token_file=..., client_cert=...)
    api.drop_watches(mode="abort"|"eof")                fault knobs ...
    api.fail_next(n, code=500, retry_after=None, method=None, path=None, watch=None)
    api.expire(watches=False)   api.bookmark()   api.configure(**settings)
    api.stop()  api.start()  api.restart()  api.crash()   state kept across restarts
    api.set_tokens([...])  api.requests(since=0)  api.watches()  api.wait_watches(n)
    api.bulk_create(objs)  api.apply_file(path)

`kubeapi_factory(**options)` starts more (or differently configured) ones:
options are minor, history, bookmark_interval, watch_list (None follows the WatchList
gate's default for the minor version: on in 1.32 and 1.34+), discovery ("aggregated" or
"legacy"), keep_watch_history (watches may resume across a restart; by default they
get 410, as from a real apiserver's fresh watch cache), host ("::1" listens on IPv6
loopback), crds.
"""
import ctypes
import http.client
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
import yaml

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from kubeapi.app import kubeconfig_text  # noqa: E402
from kubeapi.client import KubeClient, KubeError, WatchBroken, resource_path  # noqa: E402
from kubeapi import tlsgen  # noqa: E402

PYTHON = "/usr/bin/python3"
KUBECTL = "/usr/bin/kubectl"


def _crd_files():
    """The CRD manifests under deploy/crds/ and tests/e2e/crds/ (not kustomizations)."""
    out = []
    for path in sorted((ROOT / "deploy" / "crds").glob("*.yaml")) + \
            sorted((HERE / "crds").glob("*.yaml")):
        with open(path) as f:
            if any(d and d.get("kind") == "CustomResourceDefinition"
                   for d in yaml.safe_load_all(f)):
                out.append(path)
    return out


CRD_FILES = _crd_files()


def wait_for(predicate, timeout=10.0, interval=0.02, what="condition"):
    """Polls predicate until it returns a true value; fails the test on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def _die_with_parent():
    """In the child: SIGTERM when the test process dies, so no emulator outlives a
    killed pytest (prctl PR_SET_PDEATHSIG)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)


def plural_of(client, api_version, kind):
    """The resource name serving kind, from the server's discovery."""
    doc = client.request("GET", "/api/v1" if api_version == "v1" else f"/apis/{api_version}")
    for r in doc["resources"]:
        if r["kind"] == kind and "/" not in r["name"]:
            return r["name"]
    raise KeyError(f"{api_version} {kind} is not served")


class KubeAPI:
    def __init__(self, workdir, minor=32, history=10000, bookmark_interval=60.0,
                 watch_list=None, crds=True, discovery="aggregated",
                 keep_watch_history=False, host="127.0.0.1"):
        self.workdir = pathlib.Path(workdir)
        self.state_dir = self.workdir / "kubeapi-state"
        self.log_path = self.workdir / "kubeapi.log"
        self.cache_dir = self.workdir / "kubectl-cache"
        self.args = ["--minor", str(minor), "--history", str(history),
                     "--bookmark-interval", str(bookmark_interval)]
        self.args += ["--watch-list", {None: "auto", True: "on", False: "off"}[watch_list],
                      "--discovery", discovery]
        if keep_watch_history:
            self.args.append("--keep-watch-history")
        self.args += ["--host", host]
        self.host = host
        self.port = 0
        self.proc = None
        self.start()
        try:
            self.ca_file = str(self.state_dir / "ca.crt")
            self.token_file = str(self.state_dir / "tokens")
            with open(self.token_file) as f:
                self.token = f.read().split()[0]
            self.kubeconfig = str(self.state_dir / "kubeconfig")
            self.client = KubeClient(self.url, self.token, self.ca_file)
            if crds:
                for path in CRD_FILES:
                    self.apply_file(path)
        except BaseException:
            self.close()        # the test never gets the object, so nobody else would
            raise

    # -- process ------------------------------------------------------------------------

    @property
    def url(self):
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"https://{host}:{self.port}"

    def start(self, timeout=20):
        assert self.proc is None, "emulator already running"
        env = dict(os.environ, PYTHONPATH=str(HERE))
        self.state_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([PYTHON, "-m", "kubeapi", "--state-dir",
                                      str(self.state_dir), "--port", str(self.port),
                                      *self.args], env=env, stdout=log, stderr=log,
                                     cwd=str(self.workdir), preexec_fn=_die_with_parent)
        log.close()
        ready = self.state_dir / "ready.json"
        if ready.exists():
            ready.unlink()

        def is_ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"kubeapi exited with {self.proc.returncode}; see "
                                     f"{self.log_path}:\n{self.log_path.read_text()[-3000:]}")
            if not ready.exists():
                return None
            try:
                return json.loads(ready.read_text())
            except ValueError:
                return None
        try:
            info = wait_for(is_ready, timeout, what="kubeapi to listen")
        except BaseException:
            self.close()
            raise
        self.port = info["port"]

    def stop(self, timeout=20):
        """Graceful stop: watches end, the state is saved for the next start()."""
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("kubeapi did not stop on SIGTERM")
        self.proc = None

    def restart(self):
        self.stop()
        self.start()

    def crash(self, timeout=20):
        """The process dies at once: open watches and connections are cut mid-stream (no
        clean end), but nothing written is lost (the store is saved first, as etcd keeps
        it).  start() brings it back."""
        if self.proc is None:
            return
        try:
            self.client.raw("POST", "/__admin/crash", {})
        except (OSError, http.client.HTTPException):
            pass
        try:
            self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def close(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    # -- admin knobs --------------------------------------------------------------------

    def admin(self, op, body=None, method="POST"):
        code, _, parsed = self.client.raw(method, "/__admin/" + op,
                                          body if body is not None or method != "POST" else {})
        if code != 200:
            raise KubeError(code, parsed)
        return parsed

    def drop_watches(self, mode="abort"):
        """Ends every open watch: 'abort' cuts the connection mid-stream, 'eof' ends the
        chunked body cleanly (as a watch timeout or server shutdown does)."""
        return self.admin("drop-watches", {"mode": mode})["dropped"]

    def fail_next(self, count=1, code=500, retry_after=None, method=None, path=None,
                  watch=None, selector=None):
        """The next `count` API requests (optionally only those whose method matches, whose
        path matches the regex `path`, whose labelSelector matches the regex `selector`, and
        that are (watch=True) or are not (watch=False) watches) fail with `code`: 500, 429
        (Retry-After), 503, 504, 410 or 401."""
        return self.admin("fail", {"count": count, "code": code, "retry_after": retry_after,
                                   "method": method, "path": path, "watch": watch,
                                   "selector": selector})

    def clear_faults(self):
        return self.admin("clear-faults")

    def expire(self, watches=False):
        """Compacts the history: any older resourceVersion now gets 410 Expired; with
        watches=True every open watch also receives an ERROR 410 event and ends."""
        return self.admin("expire", {"watches": watches})

    def bookmark(self):
        return self.admin("bookmark")

    def configure(self, **settings):
        """bookmark_interval, expired_mode ('event'|'http'), latency, fragment_watch,
        hold_watches, watch_list, aggregated_discovery, minor, history_limit."""
        return self.admin("config", settings)

    def health(self):
        return self.admin("health", method="GET")

    def watches(self):
        return self.admin("watches", method="GET")["items"]

    def wait_watches(self, n, timeout=10, **match):
        def enough():
            ws = [w for w in self.watches()
                  if all(w.get(k) == v for k, v in match.items())]
            return ws if len(ws) >= n else None
        return wait_for(enough, timeout, what=f"{n} open watches matching {match}")

    def requests(self, since=0):
        return self.admin(f"requests?since={since}", method="GET")["items"]

    def set_tokens(self, tokens):
        tmp = self.token_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("".join(t + "\n" for t in tokens))
        os.replace(tmp, self.token_file)

    def bulk_create(self, objs, field_manager="kubeapi-admin"):
        return self.admin("objects", {"items": list(objs), "fieldManager": field_manager})

    # -- objects ------------------------------------------------------------------------

    def plural_of(self, api_version, kind):
        return plural_of(self.client, api_version, kind)

    def apply_file(self, path, field_manager="kubeapi-fixture"):
        out = []
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if doc:
                    plural = self.plural_of(doc["apiVersion"], doc["kind"])
                    out.append(self.client.apply(doc, plural, field_manager))
        return out

    def create(self, obj, plural=None):
        plural = plural or self.plural_of(obj["apiVersion"], obj["kind"])
        return self.client.create(obj, plural)

    def get(self, api_version, plural, name, namespace=None):
        return self.client.get(api_version, plural, name, namespace)

    def patch_status(self, api_version, plural, name, status, namespace=None):
        return self.client.patch(api_version, plural, name, {"status": status}, namespace,
                                 "merge", "status")

    # -- kubeconfig and kubectl -----------------------------------------------------------

    def write_kubeconfig(self, path, token=None, token_file=None, client_cert=None,
                         namespace="default"):
        """A kubeconfig for this server; client_cert=(user, groups) mints a client
        certificate signed by the emulator's CA."""
        cert = key = None
        if client_cert is not None:
            user, groups = client_cert
            cert, key = tlsgen.make_client_cert(str(self.state_dir), user, groups)
        if token is None and token_file is None and client_cert is None:
            token = self.token
        with open(path, "w") as f:
            f.write(kubeconfig_text(self.url, self.ca_file, token, token_file, cert, key,
                                    namespace))
        return str(path)

    def kubectl(self, *args, check=True, timeout=60, env=None, input=None, kubeconfig=None):
        full_env = dict(os.environ, HOME=str(self.workdir))
        full_env.update(env or {})
        proc = subprocess.run([KUBECTL, "--kubeconfig", kubeconfig or self.kubeconfig,
                               "--cache-dir", str(self.cache_dir), *map(str, args)],
                              capture_output=True, text=True, timeout=timeout, env=full_env,
                              input=input)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(map(str, args))} failed "
                                 f"({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def kubectl_bg(self, *args, env=None, kubeconfig=None):
        """Starts kubectl in the background (for get -w, wait, delete --wait)."""
        full_env = dict(os.environ, HOME=str(self.workdir))
        full_env.update(env or {})
        return subprocess.Popen([KUBECTL, "--kubeconfig", kubeconfig or self.kubeconfig,
                                 "--cache-dir", str(self.cache_dir), *map(str, args)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=full_env)


@pytest.fixture
def kubeapi_factory(tmp_path):
    started = []

    def make(**options):
        d = tmp_path / f"kubeapi-{len(started)}"
        d.mkdir()
        api = KubeAPI(d, **options)
        started.append(api)
        return api
    yield make
    for api in started:
        try:
            api.stop()
        except AssertionError:
            api.close()


@pytest.fixture
def kubeapi(kubeapi_factory):
    """A fresh emulator with the project's CRDs applied."""
    return kubeapi_factory()


__all__ = ["KubeAPI", "KubeClient", "KubeError", "WatchBroken", "resource_path", "wait_for"]
