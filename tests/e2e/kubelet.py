"""The test kubelet: kube-controller-manager's Job controller and a kubelet, for the
Job runner's tests (issue 16; the contract is /work/wt/JOBS.md, "test kubelet").

These machines have no kubelet and no container runtime, so TestKubelet plays both
against whichever API server the test runs on (the emulator, tests/e2e/kubeapi, or
the real kube-apiserver of real_fixtures.py, where no controller-manager runs):

- as the Job controller: it watches Jobs (label selector, default
  app.kubernetes.io/managed-by=pulumi-controller), creates one Pod per Job
  (generateName <job>-, ownerReference to the Job, the batch.kubernetes.io labels,
  the job-tracking finalizer), keeps Job status as the real controller writes it
  (startTime, active/ready/terminating/succeeded/failed, the interim conditions
  SuccessCriteriaMet / FailureTarget then Complete / Failed with reasons
  CompletionsReached, BackoffLimitExceeded, DeadlineExceeded), enforces
  activeDeadlineSeconds by deleting the Job's pods, deletes finished Jobs after
  ttlSecondsAfterFinished (Foreground), and plays the garbage collector for them
  (pods of a deleted Job are deleted, the foregroundDeletion finalizer removed);
  it also publishes what the namespace controllers would (the `default`
  ServiceAccount, the kube-root-ca.crt ConfigMap);
- as the kubelet of one Node (registered with its log endpoint): it binds the pod
  (nodeName), runs the container's command as a local process group with the pod's
  environment (valueFrom resolved through the API, $(VAR) expanded), every volume
  materialised in a directory (secret, configMap, projected with the
  serviceAccountToken from TokenRequest, downwardAPI, emptyDir), each arg, env value
  and workingDir naming a mount path rewritten to that directory, and writes Pod
  status (Running, then Succeeded/Failed with the container's terminated state and
  the termination-message file, at most 4096 bytes); it serves the container's log
  on https://127.0.0.1:<port>/containerLogs/..., which both API servers proxy for
  pods/log; a pod's deletion (graceful on both tiers) sends SIGTERM to the process
  group, SIGKILL after the grace period.

Faults, chosen by the label FAULT_LABEL on the Job or its pod template:
  unschedulable  the pod stays Pending, PodScheduled=False reason Unschedulable
  image-pull     the pod is bound and stays Pending, waiting reason ErrImagePull
  hold           the pod is Running but its process starts only when release() is
                 called or the label is removed from the Pod
TestKubelet.set_fault(selector, fault) does the same for Jobs a label selector matches.

What it does not do (FIDELITY.md): no images or containers (the command runs on the
host, as the test user, with the "image" environment it is given), no resource
limits, no probes, no restarts (restartPolicy OnFailure is run as Never), a
backoffLimit above 0 recreates the pod without the exponential delay.
"""
import base64
import collections
import ctypes
import datetime
import http.client
import json
import os
import pathlib
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlencode, urlsplit

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from kubeapi.client import KubeClient, KubeError, resource_path  # noqa: E402
from kubeapi.selectors import LabelSelector  # noqa: E402

DEFAULT_SELECTOR = "app.kubernetes.io/managed-by=pulumi-controller"
FAULT_LABEL = "kubelet.pulumi-controller.test/fault"
FAULTS = ("unschedulable", "image-pull", "hold")
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
FOREGROUND_FINALIZER = "foregroundDeletion"
ORPHAN_FINALIZER = "orphan"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
MESSAGE_LIMIT = 4096              # the kubelet's cap on one container's message
FALLBACK_BYTES, FALLBACK_LINES = 2048, 80
DEFAULT_TERMINATION_PATH = "/dev/termination-log"
VAR_REF = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")
SANITIZER_ENV = ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS")


def now():
    """metav1.Time as the API writes it: seconds, UTC."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text):
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def _die_with_parent():
    """In the child (before exec): SIGKILL when the thread that started it ends, so no
    pod process outlives its kubelet, even a killed test run."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)


def condition(type_, status, reason=None, message=None, probe=False):
    c = {"type": type_, "status": status, "lastTransitionTime": now()}
    if probe:
        c["lastProbeTime"] = now()
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    return c


def expand_refs(text, env):
    """$(VAR) expansion as the kubelet does it: defined names are replaced, $$ is a
    literal $, anything else is left as written."""
    def sub(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return VAR_REF.sub(sub, text)


class KubeletError(Exception):
    """A pod cannot start: reason (a waiting reason the kubelet reports) and message."""

    def __init__(self, reason, message):
        super().__init__(message)
        self.reason = reason
        self.message = message


# -- list + watch ---------------------------------------------------------------------

class Watcher(threading.Thread):
    """Lists, then watches one resource, calling handler(type, obj) for every event and
    handler("SYNC", items) after each (re)list; resumes from the last resourceVersion
    after a cut, relists after 410.  stop() ends it at once (closes the socket)."""

    def __init__(self, client, api_version, plural, handler, stop_event, namespace=None,
                 **params):
        super().__init__(daemon=True, name=f"watch-{plural}")
        self.client = client
        self.api_version = api_version
        self.plural = plural
        self.namespace = namespace
        self.handler = handler
        self.stop_event = stop_event
        self.params = {k: v for k, v in params.items() if v}
        self.conn = None
        self.synced = threading.Event()
        self.errors = collections.deque(maxlen=20)
        self.retry = None               # retry(when, fn): the kubelet's timers

    def run(self):
        rv = None
        while not self.stop_event.is_set():
            try:
                if rv is None:
                    listing = self.client.list(self.api_version, self.plural, self.namespace,
                                               **self.params)
                    rv = listing["metadata"]["resourceVersion"]
                    self._handle("SYNC", listing["items"])
                    self.synced.set()
                rv = self._stream(rv)
            except KubeError as e:
                self.errors.append(str(e))
                if e.code == 410:
                    rv = None
                    continue
                self.stop_event.wait(0.5)
            except (OSError, http.client.HTTPException, ValueError) as e:
                self.errors.append(repr(e))
                self.stop_event.wait(0.5)     # the server restarts: try again shortly

    def _handle(self, etype, obj):
        """An event the handler fails on is not lost: it is handled again after a
        second (the handler is level-based), as a controller's queue retries."""
        try:
            self.handler(etype, obj)
        except (KubeError, OSError, http.client.HTTPException, KeyError) as e:
            self.errors.append(f"{etype}: {e!r}")
            if not self.stop_event.is_set():
                self.retry(time.time() + 1, lambda: self._handle(etype, obj))

    def _stream(self, rv):
        params = dict(self.params, watch="true", resourceVersion=rv,
                      allowWatchBookmarks="true", timeoutSeconds="300")
        base = self.client
        path = resource_path(self.api_version, self.plural, self.namespace) + "?" + \
            urlencode(params)
        conn = http.client.HTTPSConnection(base.host, base.port, context=base.ctx, timeout=330)
        self.conn = conn
        try:
            if self.stop_event.is_set():
                return rv
            conn.request("GET", path, headers=base._headers())
            resp = conn.getresponse()
            if resp.status != 200:
                body = resp.read()
                raise KubeError(resp.status, json.loads(body) if body else None)
            buf = b""
            while not self.stop_event.is_set():
                chunk = resp.read1(65536)
                if not chunk:
                    return rv
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if not line.strip():
                        continue
                    ev = json.loads(line)
                    obj = ev.get("object") or {}
                    if ev["type"] == "ERROR":
                        raise KubeError(obj.get("code", 500), obj)
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    if ev["type"] != "BOOKMARK":
                        self._handle(ev["type"], obj)
            return rv
        finally:
            self.conn = None
            conn.close()

    def stop(self):
        conn = self.conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Scheduler(threading.Thread):
    """Runs callbacks at given times (Job deadlines, TTLs) on one thread."""

    def __init__(self, stop_event):
        super().__init__(daemon=True, name="kubelet-timers")
        self.stop_event = stop_event
        self.cond = threading.Condition()
        self.items = []

    def at(self, when, fn):
        with self.cond:
            self.items.append((when, fn))
            self.items.sort(key=lambda i: i[0])
            self.cond.notify()

    def run(self):
        while not self.stop_event.is_set():
            with self.cond:
                if not self.items:
                    self.cond.wait(1.0)
                    continue
                when, fn = self.items[0]
                delay = when - time.time()
                if delay > 0:
                    self.cond.wait(min(delay, 1.0))
                    continue
                self.items.pop(0)
            try:
                fn()
            except Exception as e:          # a timer must not end the thread
                print(f"kubelet: timer failed: {e!r}", file=sys.stderr)

    def wake(self):
        with self.cond:
            self.cond.notify_all()


# -- the container log ----------------------------------------------------------------

class ContainerLog:
    """stdout and stderr of one container, line by line with their arrival times (the
    CRI log file a real kubelet reads), written by two reader threads."""

    def __init__(self, path):
        self.path = path
        self.lines = []              # (time, stream, text without newline)
        self.cond = threading.Condition()
        self.closed = 0
        self.file = open(path, "w")

    def reader(self, pipe, stream):
        def run():
            for raw in iter(pipe.readline, b""):
                text = raw.decode(errors="replace").rstrip("\n")
                stamp = datetime.datetime.now(datetime.timezone.utc)
                with self.cond:
                    self.lines.append((stamp, stream, text))
                    self.file.write(f"{stamp.isoformat()} {stream} F {text}\n")
                    self.file.flush()
                    self.cond.notify_all()
            pipe.close()
            with self.cond:
                self.closed += 1
                self.cond.notify_all()
        t = threading.Thread(target=run, daemon=True, name=f"log-{stream}")
        t.start()
        return t

    def done(self):
        return self.closed >= 2

    def text(self):
        with self.cond:
            return "".join(t + "\n" for _, _, t in self.lines)

    def select(self, params):
        """The log as GET containerLogs answers it: sinceSeconds/sinceTime, tailLines,
        timestamps, then limitBytes (which may cut the last line)."""
        with self.cond:
            lines = list(self.lines)
        if params.get("sinceSeconds"):
            cut = datetime.datetime.now(datetime.timezone.utc) - \
                datetime.timedelta(seconds=int(params["sinceSeconds"]))
            lines = [line for line in lines if line[0] >= cut]
        elif params.get("sinceTime"):
            cut = datetime.datetime.fromtimestamp(parse_time(params["sinceTime"]),
                                                  datetime.timezone.utc)
            lines = [line for line in lines if line[0] >= cut]
        if params.get("tailLines") not in (None, ""):
            n = int(params["tailLines"])
            lines = lines[-n:] if n > 0 else []
        stamps = params.get("timestamps") in ("true", "1")
        out = "".join((s.strftime("%Y-%m-%dT%H:%M:%S.%fZ") + " " if stamps else "") + t + "\n"
                      for s, _, t in lines).encode()
        if params.get("limitBytes"):
            out = out[:int(params["limitBytes"])]
        return out

    def close(self):
        with self.cond:
            self.file.close()


class LogServer:
    """The kubelet's HTTPS endpoint: GET /containerLogs/{ns}/{pod}/{container}."""

    def __init__(self, kubelet, workdir):
        self.kubelet = kubelet
        cert, key = self._certificate(workdir)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        handler = self._handler()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.1}, daemon=True,
                                       name="kubelet-logs")

    @staticmethod
    def _certificate(workdir):
        from kubeapi import tlsgen
        d = pathlib.Path(workdir) / "kubelet-pki"
        d.mkdir(parents=True, exist_ok=True)
        tlsgen.make_ca(str(d))
        return tlsgen.make_server_cert(str(d))

    def _handler(self):
        kubelet = self.kubelet

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):
                pass

            def do_GET(self):
                url = urlsplit(self.path)
                parts = [p for p in url.path.split("/") if p]
                params = {k: v[-1] for k, v in parse_qs(url.query).items()}
                if len(parts) != 4 or parts[0] != "containerLogs":
                    return self._reply(404, b"404 page not found\n")
                code, body = kubelet.container_log(parts[1], parts[2], parts[3], params)
                follow = params.get("follow") in ("true", "1") and code == 200
                if not follow:
                    return self._reply(code, body)
                self._follow(kubelet.log_of(parts[1], parts[2]), params)

            def _reply(self, code, body):
                self.send_response(code)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _follow(self, log, params):
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                with log.cond:
                    first = log.select(params)
                    sent = len(log.lines)
                if first:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(first), first))
                while True:
                    with log.cond:
                        while len(log.lines) == sent and not log.done():
                            log.cond.wait(1.0)
                        new, sent = log.lines[sent:], len(log.lines)
                        finished = log.done() and not new
                    data = "".join(t + "\n" for _, _, t in new).encode()
                    if data:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                        self.wfile.flush()
                    if finished:
                        break
                self.wfile.write(b"0\r\n\r\n")
        return Handler

    def start(self):
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


# -- one pod --------------------------------------------------------------------------

class PodRun:
    """One Pod on this node: its directory, its volumes, its process, its log."""

    def __init__(self, kubelet, job_state, pod):
        self.kubelet = kubelet
        self.job = job_state
        self.pod = pod
        self.ns = pod["metadata"]["namespace"]
        self.name = pod["metadata"]["name"]
        self.uid = pod["metadata"]["uid"]
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix=f"{self.name}-", dir=kubelet.pods_dir))
        self.container = pod["spec"]["containers"][0]
        self.log = ContainerLog(self.dir / "container.log")
        self.proc = None
        self.phase = "Pending"
        self.started_at = None
        self.kill_reason = None          # set when the process is being stopped
        self.release_event = threading.Event()
        self.terminate_event = threading.Event()
        self.wake = threading.Event()    # set by release, terminate and the process's end
        self.counted = False
        self.grace = None
        self.done = threading.Event()
        self.mounts = []                 # (mountPath, host dir), longest first
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"pod-{self.name}")

    # -- status ---------------------------------------------------------------------

    def write_status(self, status):
        if not self.kubelet.stop_event.is_set():     # a stopped kubelet writes nothing
            self.kubelet.patch_pod_status(self.ns, self.name, status)

    def _container_status(self, state, ready=False):
        image = self.container.get("image", "")
        return {"name": self.container["name"], "state": state, "ready": ready,
                "started": "running" in state, "restartCount": 0, "image": image,
                "imageID": f"{image}@sha256:{'0' * 64}" if "running" in state or
                "terminated" in state else "",
                **({"containerID": f"testkubelet://{self.uid}"}
                   if "running" in state or "terminated" in state else {})}

    def _addresses(self):
        return {"hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
                "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}]}

    def _pending(self, reason, message):
        self.write_status({
            "phase": "Pending", "startTime": self.started_at or now(), **self._addresses(),
            "conditions": [condition("PodReadyToStartContainers", "True"),
                           condition("Initialized", "True"),
                           condition("Ready", "False", "ContainersNotReady",
                                     f"containers with unready status: "
                                     f"[{self.container['name']}]"),
                           condition("ContainersReady", "False", "ContainersNotReady",
                                     f"containers with unready status: "
                                     f"[{self.container['name']}]"),
                           condition("PodScheduled", "True")],
            "containerStatuses": [self._container_status(
                {"waiting": {"reason": reason, "message": message}})]})

    def _running(self):
        self.phase = "Running"
        self.write_status({
            "phase": "Running", "startTime": self.started_at, **self._addresses(),
            "conditions": [condition("PodReadyToStartContainers", "True"),
                           condition("Initialized", "True"), condition("Ready", "True"),
                           condition("ContainersReady", "True"),
                           condition("PodScheduled", "True")],
            "containerStatuses": [self._container_status(
                {"running": {"startedAt": self.started_at}}, ready=True)]})
        self.kubelet.pod_running(self)

    def _terminated(self, exit_code, message, reason=None, pod_reason=None, pod_message=None,
                    finished=None):
        ok = exit_code == 0 and pod_reason is None
        self.phase = "Succeeded" if ok else "Failed"
        term = {"exitCode": exit_code, "reason": reason or ("Completed" if ok else "Error"),
                "startedAt": self.started_at, "finishedAt": finished or now(),
                "containerID": f"testkubelet://{self.uid}"}
        if message:
            term["message"] = message
        status = {"phase": self.phase, "startTime": self.started_at or now(),
                  **self._addresses(),
                  "conditions": [condition("PodReadyToStartContainers", "False"),
                                 condition("Initialized", "True"),
                                 condition("Ready", "False", "PodCompleted"),
                                 condition("ContainersReady", "False", "PodCompleted"),
                                 condition("PodScheduled", "True")],
                  "containerStatuses": [self._container_status({"terminated": term})]}
        if pod_reason:
            status["reason"], status["message"] = pod_reason, pod_message
        self.write_status(status)

    # -- setup ----------------------------------------------------------------------

    def _resolve_env(self):
        """The container's environment: the image's, the service variables, then the
        pod's env and envFrom with valueFrom resolved through the API."""
        k = self.kubelet
        env = dict(k.image_env(self.container.get("image", "")))
        env["HOSTNAME"] = self.name
        env.setdefault("HOME", str(self.dir / "rootfs"))
        env.update(k.service_env())
        for src in self.container.get("envFrom") or []:
            prefix = src.get("prefix", "")
            if "secretRef" in src:
                data = k.secret_data(self.ns, src["secretRef"]["name"],
                                     src["secretRef"].get("optional"))
            else:
                data = k.config_map_data(self.ns, src["configMapRef"]["name"],
                                         src["configMapRef"].get("optional"))
            for key, value in (data or {}).items():
                env[prefix + key] = value.decode(errors="replace")
        for e in self.container.get("env") or []:
            if "valueFrom" not in e:
                env[e["name"]] = expand_refs(e.get("value", ""), env)
                continue
            value = self._value_from(e["valueFrom"])
            if value is not None:
                env[e["name"]] = value
        return env

    def _value_from(self, src):
        k = self.kubelet
        if "secretKeyRef" in src or "configMapKeyRef" in src:
            ref = src.get("secretKeyRef") or src.get("configMapKeyRef")
            kind = "secret" if "secretKeyRef" in src else "configmap"
            data = k.secret_data(self.ns, ref["name"], ref.get("optional")) \
                if kind == "secret" else \
                k.config_map_data(self.ns, ref["name"], ref.get("optional"))
            if data is None:
                return None
            if ref["key"] not in data:
                if ref.get("optional"):
                    return None
                raise KubeletError("CreateContainerConfigError",
                                   f"couldn't find key {ref['key']} in {kind.title()} "
                                   f"{self.ns}/{ref['name']}")
            return data[ref["key"]].decode(errors="replace")
        if "fieldRef" in src:
            return self._field(src["fieldRef"]["fieldPath"])
        if "resourceFieldRef" in src:
            res = src["resourceFieldRef"]["resource"]
            kind, _, name = res.partition(".")
            value = ((self.container.get("resources") or {}).get(kind) or {}).get(name)
            return str(value if value is not None else {"cpu": 2}.get(name, 0))
        raise KubeletError("CreateContainerConfigError", f"unsupported valueFrom {src}")

    def _field(self, path):
        m, spec = self.pod["metadata"], self.pod["spec"]
        simple = {"metadata.name": m["name"], "metadata.namespace": m["namespace"],
                  "metadata.uid": m["uid"], "spec.nodeName": spec.get("nodeName", ""),
                  "spec.serviceAccountName": spec.get("serviceAccountName", ""),
                  "status.hostIP": "127.0.0.1", "status.podIP": "127.0.0.1",
                  "status.hostIPs": "127.0.0.1", "status.podIPs": "127.0.0.1"}
        if path in simple:
            return simple[path]
        found = re.match(r"^metadata\.(labels|annotations)\['(.+)'\]$", path)
        if found:
            return (m.get(found.group(1)) or {}).get(found.group(2), "")
        if path in ("metadata.labels", "metadata.annotations"):
            items = m.get(path.split(".")[1]) or {}
            return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
        raise KubeletError("CreateContainerConfigError", f"unsupported fieldPath {path}")

    def _write_files(self, root, files, mode):
        root.mkdir(parents=True, exist_ok=True)
        for rel, (data, file_mode) in files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            os.chmod(path, file_mode if file_mode is not None else mode)

    @staticmethod
    def _pick(data, items, what, optional):
        """{path: (bytes, mode)} of a secret or configMap source (items or every key)."""
        if data is None:
            return {}
        if not items:
            return {key: (value, None) for key, value in data.items()}
        out = {}
        for it in items:
            if it["key"] not in data:
                if optional:
                    continue
                raise KubeletError("CreateContainerConfigError",
                                   f"couldn't find key {it['key']} in {what}")
            out[it["path"]] = (data[it["key"]], it.get("mode"))
        return out

    def _source_files(self, src):
        """{path: (bytes, mode)} of one projected source (or volume of that kind)."""
        k = self.kubelet
        if "secret" in src:
            s = src["secret"]
            name = s.get("secretName") or s.get("name")
            return self._pick(k.secret_data(self.ns, name, s.get("optional")), s.get("items"),
                              f"Secret {self.ns}/{name}", s.get("optional"))
        if "configMap" in src:
            s = src["configMap"]
            return self._pick(k.config_map_data(self.ns, s["name"], s.get("optional")),
                              s.get("items"), f"ConfigMap {self.ns}/{s['name']}",
                              s.get("optional"))
        if "serviceAccountToken" in src:
            s = src["serviceAccountToken"]
            token = k.request_token(self.ns, self.pod, s.get("audience"),
                                    s.get("expirationSeconds", 3600))
            return {s["path"]: (token.encode(), None)}
        if "downwardAPI" in src:
            out = {}
            for it in src["downwardAPI"].get("items") or []:
                if "fieldRef" not in it:
                    raise KubeletError("CreateContainerConfigError",
                                       f"unsupported downwardAPI item {it}")
                out[it["path"]] = (self._field(it["fieldRef"]["fieldPath"]).encode(),
                                   it.get("mode"))
            return out
        raise KubeletError("CreateContainerConfigError", f"unsupported volume source {src}")

    def _volumes(self):
        """Materialises every volume; returns {name: host dir}."""
        out = {}
        for v in self.pod["spec"].get("volumes") or []:
            root = self.dir / "volumes" / v["name"]
            out[v["name"]] = root
            if "emptyDir" in v:
                root.mkdir(parents=True)
                continue
            if "projected" in v:
                mode = v["projected"].get("defaultMode", 0o644)
                files = {}
                for src in v["projected"].get("sources") or []:
                    files.update(self._source_files(src))
            elif "secret" in v or "configMap" in v or "downwardAPI" in v:
                kind = next(x for x in ("secret", "configMap", "downwardAPI") if x in v)
                mode = v[kind].get("defaultMode", 0o644)
                files = self._source_files({kind: v[kind]})
            else:
                raise KubeletError("CreateContainerConfigError",
                                   f"volume {v['name']}: only secret, configMap, projected, "
                                   "downwardAPI and emptyDir are materialised")
            self._write_files(root, files, mode)
        return out

    def _mount(self, volumes):
        mounts = []
        for m in self.container.get("volumeMounts") or []:
            host = volumes.get(m["name"])
            if host is None:
                raise KubeletError("CreateContainerConfigError",
                                   f"volume {m['name']} of mount {m['mountPath']} not found")
            if m.get("subPath"):
                host = host / m["subPath"]
                host.mkdir(parents=True, exist_ok=True)
            mounts.append((m["mountPath"].rstrip("/") or "/", str(host)))
        self.mounts = sorted(mounts, key=lambda x: -len(x[0]))

    def rewrite(self, value):
        """value with a leading mount path replaced by its directory on this host."""
        for path, host in self.mounts:
            if value == path or value.startswith(path + "/"):
                return host + value[len(path):]
        return value

    def _termination_path(self):
        path = self.container.get("terminationMessagePath") or DEFAULT_TERMINATION_PATH
        host = self.rewrite(path)
        if host == path:         # not on a volume: the kubelet's own file, bind-mounted
            host = str(self.dir / "termination-log")
            self.mounts.append((path, host))
            self.mounts.sort(key=lambda x: -len(x[0]))
        pathlib.Path(host).parent.mkdir(parents=True, exist_ok=True)
        return host

    def _argv(self, env):
        c = self.container
        image = self.kubelet.image(c.get("image", ""))
        command = list(c.get("command") or image.get("entrypoint") or [])
        args = list(c.get("args") if c.get("args") is not None else
                    ([] if c.get("command") else image.get("cmd") or []))
        argv = [expand_refs(a, env) for a in command + args]
        if not argv:
            raise KubeletError("CreateContainerError", "no command specified")
        argv = [self.rewrite(a) for a in argv]
        argv[0] = self.kubelet.map_command(argv[0])
        return argv

    # -- the run --------------------------------------------------------------------

    def start(self):
        self.thread.start()

    def _run(self):
        try:
            self._lifecycle()
        except Exception as e:              # never leave a pod half-way without a trace
            self.kubelet.note(f"pod {self.ns}/{self.name}: {e!r}")
            if self.phase not in ("Succeeded", "Failed"):
                try:
                    self._terminated(128, None, "StartError")
                except Exception:
                    pass
                self.kubelet.pod_finished(self)
        finally:
            self.log.close()
            self.done.set()

    def _wait_start_conditions(self):
        """Waits for the pod's env and volumes to be possible (a missing Secret keeps it
        Pending with CreateContainerConfigError, as a kubelet retries); returns the
        environment, or None when the pod is being deleted first."""
        while True:
            try:
                env = self._resolve_env()
                self._mount(self._volumes())
                return env
            except KubeletError as e:
                self._pending(e.reason, e.message)
                if self.terminate_event.wait(1.0):
                    return None
                shutil.rmtree(self.dir / "volumes", ignore_errors=True)

    def _lifecycle(self):
        fault = self.kubelet.fault_of(self.job.job, self.pod)
        self.started_at = now()
        if fault == "image-pull":
            image = self.container.get("image", "")
            self._pending("ErrImagePull", f'failed to pull and unpack image "{image}": '
                          "failed to resolve reference: not found")
            self.terminate_event.wait()
            return self._stopped_before_start()
        env = self._wait_start_conditions()
        if env is None:
            return self._stopped_before_start()
        termination = self._termination_path()
        argv = self._argv(env)
        env = {k: self.rewrite(v) for k, v in env.items()}
        cwd = self.container.get("workingDir")
        cwd = self.rewrite(cwd) if cwd else str(self.dir / "rootfs")
        pathlib.Path(cwd).mkdir(parents=True, exist_ok=True)
        pathlib.Path(env["HOME"]).mkdir(parents=True, exist_ok=True)
        self._running()
        if fault == "hold":
            while not self.release_event.is_set() and not self.terminate_event.is_set():
                self.wake.wait()
                self.wake.clear()
            if self.terminate_event.is_set():
                return self._stopped_before_start(exit_code=137, running=True)
        try:
            self.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         start_new_session=True,
                                         preexec_fn=_die_with_parent)
        except OSError as e:
            self._terminated(128, f"failed to start: {e}", "StartError")
            return self.kubelet.pod_finished(self)
        readers = [self.log.reader(self.proc.stdout, "stdout"),
                   self.log.reader(self.proc.stderr, "stderr")]
        code = self._wait_process()
        for r in readers:
            r.join(10)
        self._finish(code, termination)

    def _wait_process(self):
        """Waits for the process; a deletion or deadline stops it: SIGTERM to the process
        group, SIGKILL after the grace period.  Returns the exit code (128+signal)."""
        deadline = self.pod["spec"].get("activeDeadlineSeconds")
        deadline_at = parse_time(self.started_at) + deadline if deadline else None
        proc = self.proc
        threading.Thread(target=lambda: (proc.wait(), self.wake.set()), daemon=True,
                         name=f"wait-{self.name}").start()
        while proc.poll() is None:
            if self.terminate_event.is_set():
                break
            if deadline_at is not None and time.time() >= deadline_at:
                self.kill_reason = "DeadlineExceeded"
                self.grace = 0
                break
            self.wake.wait(None if deadline_at is None else max(0, deadline_at - time.time()))
            self.wake.clear()
        if proc.poll() is not None:
            return self._code(proc.returncode)
        self._signal(signal.SIGTERM)
        try:
            return self._code(self.proc.wait(self.grace if self.grace is not None else 30))
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            return self._code(self.proc.wait())

    @staticmethod
    def _code(returncode):
        return 128 - returncode if returncode < 0 else returncode

    def _signal(self, sig):
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def _finish(self, code, termination):
        message = self._message(termination, code)
        if self.kill_reason == "DeadlineExceeded":
            self._terminated(code, message, pod_reason="DeadlineExceeded",
                             pod_message="Pod was active on the node longer than the "
                                         "specified deadline")
        else:
            self._terminated(code, message)
        self.kubelet.pod_finished(self)

    def _message(self, termination, code):
        try:
            with open(termination, "rb") as f:
                data = f.read(MESSAGE_LIMIT)
        except OSError:
            data = b""
        policy = self.container.get("terminationMessagePolicy", "File")
        if not data and code != 0 and policy == "FallbackToLogsOnError":
            lines = self.log.text().splitlines(keepends=True)[-FALLBACK_LINES:]
            data = "".join(lines).encode()[-FALLBACK_BYTES:]
        return data.decode(errors="replace")

    def _stopped_before_start(self, exit_code=None, running=False):
        """The pod is deleted before its process ran (a fault held it)."""
        if running:
            self._terminated(exit_code or 137, None)
        self.kubelet.pod_finished(self)

    # -- from the outside -----------------------------------------------------------

    def terminate(self, grace, reason=None):
        """Stops the pod: its process gets SIGTERM, SIGKILL after grace seconds."""
        if self.terminate_event.is_set():
            return
        self.grace = grace
        self.kill_reason = self.kill_reason or reason
        self.terminate_event.set()
        self.wake.set()

    def release(self):
        self.release_event.set()
        self.wake.set()

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)


# -- the Job controller ---------------------------------------------------------------

class JobState:
    """What the Job controller part knows of one Job."""

    def __init__(self, job):
        self.job = job
        self.uid = job["metadata"]["uid"]
        self.ns = job["metadata"]["namespace"]
        self.name = job["metadata"]["name"]
        status = job.get("status") or {}
        self.start_time = status.get("startTime")
        self.succeeded = status.get("succeeded", 0)
        self.failed = status.get("failed", 0)
        self.conditions = list(status.get("conditions") or [])
        self.pods = {}                 # pod name -> PodRun or None (not on this node)
        self.active = 0
        self.ready = 0
        self.finished = any(c["type"] in ("Complete", "Failed") and c["status"] == "True"
                            for c in self.conditions)
        self.deadline_hit = False
        self.deadline_scheduled = False
        self.ttl_scheduled = False
        self.deleted = False             # being deleted or gone: no more pods, no status
        self.lock = threading.RLock()

    def has(self, type_):
        return any(c["type"] == type_ and c["status"] == "True" for c in self.conditions)


class TestKubelet:
    """Plays the Job controller and one kubelet against an API server (see the module
    docstring).  start() registers the Node and begins; stop() kills every process it
    started, removes the Node and joins its threads."""

    def __init__(self, url, token, ca_file, workdir, pc_bin=None, selector=DEFAULT_SELECTOR,
                 namespace=None, node_name=None, commands=None, images=None, env=None,
                 pod_api_url=None):
        self.url = url
        self.token = token
        self.ca_file = ca_file
        self.workdir = pathlib.Path(workdir)
        self.pods_dir = self.workdir / "pods"
        self.pods_dir.mkdir(parents=True, exist_ok=True)
        self.client = KubeClient(url, token, ca_file, user_agent="test-kubelet/1.0")
        self.selector = selector
        self.namespace = namespace
        self.node_name = node_name or "test-kubelet-" + secrets.token_hex(3)
        self.commands = dict(commands or {})
        if pc_bin:
            self.commands.setdefault("pulumi-controller", pc_bin)
        self.images = dict(images or {})
        self.base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        self.base_env.update({k: os.environ[k] for k in SANITIZER_ENV if k in os.environ})
        self.base_env.update(env or {})
        api = urlsplit(pod_api_url or url)
        self.api_host, self.api_port = api.hostname, str(api.port or 443)
        self.stop_event = threading.Event()
        self.lock = threading.RLock()
        self.jobs = {}                      # uid -> JobState
        self.pods = {}                      # (ns, pod name) -> PodRun
        self.faults = []                    # (LabelSelector, fault)
        self.notes = collections.deque(maxlen=200)
        self.namespaces_ready = set()
        self.timers = Scheduler(self.stop_event)
        self.logs = LogServer(self, self.workdir)
        with open(ca_file) as f:
            self.ca_pem = f.read()
        self.watchers = []
        self.started = False

    # -- lifecycle ----------------------------------------------------------------------

    def start(self, timeout=30):
        self.logs.start()
        self.timers.start()
        self._register_node()
        self.watchers = [
            Watcher(self.client, "batch/v1", "jobs", self._on_job_event, self.stop_event,
                    self.namespace, labelSelector=self.selector),
            Watcher(self.client, "v1", "pods", self._on_pod_event, self.stop_event,
                    self.namespace, labelSelector=JOB_NAME_LABEL,
                    fieldSelector=f"spec.nodeName={self.node_name}"),
        ]
        for w in self.watchers:
            w.retry = self.timers.at
            w.start()
        for w in self.watchers:
            if not w.synced.wait(timeout):
                self.stop()
                raise RuntimeError(f"test kubelet: {w.plural} never listed: "
                                   f"{list(w.errors)}")
        self.started = True
        return self

    def stop(self):
        """Every pod process is killed (SIGKILL to its group) and reaped, the Node
        removed, the threads joined."""
        self.stop_event.set()
        for w in self.watchers:
            w.stop()
        self.timers.wake()
        with self.lock:
            runs = list(self.pods.values())
        for run in runs:
            if run.proc is not None and run.proc.poll() is None:
                run._signal(signal.SIGKILL)
            run.terminate(0, "KubeletStopped")
        for run in runs:
            run.done.wait(30)
        for w in self.watchers:
            w.join(10)
        self.timers.join(5)
        self.logs.stop()
        try:
            self.client.delete("v1", "nodes", self.node_name)
        except (KubeError, OSError):
            pass

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def note(self, text):
        self.notes.append(f"{now()} {text}")

    # -- the node -----------------------------------------------------------------------

    def _register_node(self):
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.node_name,
                             "labels": {"kubernetes.io/hostname": self.node_name,
                                        "kubernetes.io/os": "linux",
                                        "kubernetes.io/arch": "amd64"}}}
        try:
            self.client.create(node, "nodes")
        except KubeError as e:
            if e.code != 409:
                raise
        stamp = now()
        self.client.patch("v1", "nodes", self.node_name, {"status": {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                          {"type": "Hostname", "address": self.node_name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.logs.port}},
            "capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
            "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "test kubelet is posting ready status",
                            "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}],
            "nodeInfo": {"kubeletVersion": "v1.37.2-test", "operatingSystem": "linux",
                         "architecture": "amd64", "containerRuntimeVersion": "none://0",
                         "kernelVersion": "", "osImage": "", "kubeProxyVersion": "",
                         "machineID": "", "systemUUID": "", "bootID": ""}}},
            subresource="status")

    def _ensure_namespace(self, ns):
        """What the namespace's controllers publish before any pod: the `default`
        ServiceAccount (ServiceAccount admission needs it) and kube-root-ca.crt."""
        if ns in self.namespaces_ready:
            return
        for obj, plural in (
                ({"apiVersion": "v1", "kind": "ServiceAccount",
                  "metadata": {"name": "default", "namespace": ns}}, "serviceaccounts"),
                ({"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": "kube-root-ca.crt", "namespace": ns},
                  "data": {"ca.crt": self.ca_pem}}, "configmaps")):
            try:
                self.client.create(obj, plural)
            except KubeError as e:
                if e.code != 409:
                    raise
        self.namespaces_ready.add(ns)

    # -- what pods read through the API -------------------------------------------------

    def _get_data(self, plural, ns, name, optional):
        try:
            obj = self.client.get("v1", plural, name, ns)
        except KubeError as e:
            if e.code == 404:
                if optional:
                    return None
                kind = "secret" if plural == "secrets" else "configmap"
                raise KubeletError("CreateContainerConfigError",
                                   f'{kind} "{name}" not found') from None
            raise
        out = {}
        if plural == "secrets":
            for k, v in (obj.get("data") or {}).items():
                out[k] = base64.b64decode(v)
        else:
            for k, v in (obj.get("data") or {}).items():
                out[k] = v.encode()
            for k, v in (obj.get("binaryData") or {}).items():
                out[k] = base64.b64decode(v)
        return out

    def secret_data(self, ns, name, optional=False):
        return self._get_data("secrets", ns, name, optional)

    def config_map_data(self, ns, name, optional=False):
        return self._get_data("configmaps", ns, name, optional)

    def request_token(self, ns, pod, audience, seconds):
        spec = {"expirationSeconds": max(600, int(seconds)),
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
                                   "name": pod["metadata"]["name"],
                                   "uid": pod["metadata"]["uid"]}}
        if audience:
            spec["audiences"] = [audience]
        sa = pod["spec"].get("serviceAccountName") or "default"
        answer = self.client.request(
            "POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
        return answer["status"]["token"]

    def service_env(self):
        return {"KUBERNETES_SERVICE_HOST": self.api_host,
                "KUBERNETES_SERVICE_PORT": self.api_port,
                "KUBERNETES_SERVICE_PORT_HTTPS": self.api_port,
                "KUBERNETES_PORT": f"tcp://{self.api_host}:{self.api_port}"}

    def image(self, name):
        """The image's config ({entrypoint, cmd, env}) as the test declared it."""
        return self.images.get(name) or self.images.get(name.split("@")[0].split(":")[0]) or {}

    def image_env(self, name):
        env = dict(self.base_env)
        env.update(self.image(name).get("env") or {})
        return env

    def map_command(self, cmd):
        """command[0] as the image would resolve it: a name (or its basename) the test
        mapped, else as written (sh, /bin/true are the host's)."""
        if cmd in self.commands:
            return self.commands[cmd]
        base = os.path.basename(cmd)
        return self.commands.get(base, cmd)

    # -- faults ---------------------------------------------------------------------------

    def set_fault(self, selector, fault):
        """Jobs matching the label selector get fault (one of FAULTS), or none (None)."""
        assert fault in FAULTS or fault is None, fault
        with self.lock:
            self.faults = [(s, f) for s, f in self.faults if s != selector]
            if fault:
                self.faults.append((selector, fault))

    def fault_of(self, job, pod=None):
        labels = dict((job.get("metadata") or {}).get("labels") or {})
        tmpl = ((job.get("spec") or {}).get("template") or {}).get("metadata") or {}
        labels.update(tmpl.get("labels") or {})
        if labels.get(FAULT_LABEL) in FAULTS:
            return labels[FAULT_LABEL]
        with self.lock:
            for sel, fault in self.faults:
                if LabelSelector(sel).match(labels):
                    return fault
        return None

    def release(self, job_name, namespace=None):
        """Starts the process of a held pod of Job job_name."""
        with self.lock:
            runs = [r for r in self.pods.values() if r.job.name == job_name and
                    (namespace is None or r.ns == namespace)]
        for r in runs:
            r.release()
        return len(runs)

    # -- API writes -----------------------------------------------------------------------

    def patch_pod_status(self, ns, name, status):
        try:
            self.client.patch("v1", "pods", name, {"status": status}, ns, "merge", "status")
        except KubeError as e:
            if e.code != 404:
                raise

    def _patch_job_status(self, state, status):
        try:
            obj = self.client.patch("batch/v1", "jobs", state.name, {"status": status},
                                    state.ns, "merge", "status")
            state.job = obj
        except KubeError as e:
            if e.code != 404:
                raise

    def _remove_finalizer(self, plural, api_version, ns, name, finalizer):
        for _ in range(10):
            try:
                obj = self.client.get(api_version, plural, name, ns)
            except KubeError as e:
                if e.code == 404:
                    return
                raise
            fins = obj["metadata"].get("finalizers") or []
            if finalizer not in fins:
                return
            i = fins.index(finalizer)
            try:
                self.client.patch(api_version, plural, name,
                                  [{"op": "test", "path": f"/metadata/finalizers/{i}",
                                    "value": finalizer},
                                   {"op": "remove", "path": f"/metadata/finalizers/{i}"}],
                                  ns, "json")
                return
            except KubeError as e:
                if e.code not in (404, 409, 422):
                    raise
                if e.code == 404:
                    return

    def _delete(self, api_version, plural, ns, name, **options):
        try:
            self.client.delete(api_version, plural, name, ns, options or None)
        except KubeError as e:
            if e.code != 404:
                raise

    # -- Jobs -----------------------------------------------------------------------------

    def _on_job_event(self, etype, obj):
        if etype == "SYNC":
            seen = set()
            for job in obj:
                seen.add(job["metadata"]["uid"])
                self._sync_job(job)
            with self.lock:
                gone = [s for uid, s in self.jobs.items() if uid not in seen]
            for state in gone:
                self._job_deleted(state.job)
            return
        if self.namespace and obj["metadata"].get("namespace") != self.namespace:
            return
        if etype == "DELETED":
            return self._job_deleted(obj)
        self._sync_job(obj)

    def _sync_job(self, job):
        if self.namespace and job["metadata"].get("namespace") != self.namespace:
            return
        uid = job["metadata"]["uid"]
        with self.lock:
            state = self.jobs.get(uid)
            if state is None:
                state = self.jobs[uid] = JobState(job)
        with state.lock:
            state.job = job
            if job["metadata"].get("deletionTimestamp"):
                state.deleted = True
                return self._collect_job(state)
            if state.finished:
                return self._schedule_ttl(state)
            if job.get("spec", {}).get("suspend"):
                return
            if not state.pods and not state.has("FailureTarget") and \
                    not state.has("SuccessCriteriaMet"):
                self._adopt_or_create(state)
            self._schedule_deadline(state)

    def _adopt_or_create(self, state):
        """One pod per Job: an existing pod of this Job (a kubelet restarted) is
        adopted as failed when no process of ours runs it; else a new one is made."""
        existing = self.client.list("v1", "pods", state.ns,
                                    labelSelector=f"{CONTROLLER_UID_LABEL}={state.uid}")["items"]
        if existing:
            for pod in existing:
                state.pods[pod["metadata"]["name"]] = None
            return
        self._create_pod(state)

    def _create_pod(self, state):
        job = state.job
        self._ensure_namespace(state.ns)
        tmpl = json.loads(json.dumps(job["spec"]["template"]))
        meta = tmpl.get("metadata") or {}
        labels = dict(meta.get("labels") or {})
        labels.update({JOB_NAME_LABEL: state.name, CONTROLLER_UID_LABEL: state.uid,
                       "job-name": state.name, "controller-uid": state.uid})
        spec = tmpl["spec"]
        fault = self.fault_of(job)
        if fault != "unschedulable":
            spec["nodeName"] = self.node_name
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"generateName": (state.name + "-")[:58], "namespace": state.ns,
                            "labels": labels,
                            "annotations": dict(meta.get("annotations") or {}),
                            "finalizers": [TRACKING_FINALIZER],
                            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                                 "name": state.name, "uid": state.uid,
                                                 "controller": True,
                                                 "blockOwnerDeletion": True}]},
               "spec": spec}
        created = self.client.create(pod, "pods")
        name = created["metadata"]["name"]
        if not state.start_time:
            state.start_time = now()
        state.active = 1
        status = {"startTime": state.start_time, "active": 1, "ready": 0, "terminating": 0,
                  "uncountedTerminatedPods": {}}
        self._patch_job_status(state, status)
        if fault == "unschedulable":
            state.pods[name] = None
            self.patch_pod_status(state.ns, name, {"phase": "Pending", "conditions": [
                condition("PodScheduled", "False", "Unschedulable",
                          "0/1 nodes are available: 1 node(s) didn't match Pod's node "
                          "affinity/selector. preemption: 0/1 nodes are available: 1 "
                          "Preemption is not helpful for scheduling.", probe=True)]})
            return
        run = PodRun(self, state, created)
        with self.lock:
            self.pods[(state.ns, name)] = run
        state.pods[name] = run
        run.start()

    def pod_running(self, run):
        state = run.job
        with state.lock:
            state.ready = 1
            if not state.finished and not state.has("FailureTarget"):
                self._patch_job_status(state, {"active": 1, "ready": 1})

    def pod_finished(self, run):
        """A pod of ours reached Succeeded/Failed (or was stopped before it started):
        count it as the Job controller does, then let it go."""
        state = run.job
        if self.stop_event.is_set():
            return
        with state.lock:
            self._remove_finalizer("pods", "v1", run.ns, run.name, TRACKING_FINALIZER)
            if run.counted or state.deleted:
                run.counted = True
                return self._delete("v1", "pods", run.ns, run.name, gracePeriodSeconds=0)
            run.counted = True
            if run.phase == "Succeeded":
                state.succeeded += 1
            else:
                state.failed += 1
            state.active = 0
            state.ready = 0
            self._after_pod(state)
        if self.pod_deleting(run):
            self._delete("v1", "pods", run.ns, run.name, gracePeriodSeconds=0)

    def pod_deleting(self, run):
        return run.terminate_event.is_set()

    def _after_pod(self, state):
        """The Job's next state once no pod of it is active."""
        spec = state.job.get("spec") or {}
        completions = spec.get("completions") or 1
        backoff = spec.get("backoffLimit", 6)
        counters = {"active": 0, "ready": 0, "terminating": 0,
                    "succeeded": state.succeeded, "failed": state.failed,
                    "uncountedTerminatedPods": {}}
        if state.deadline_hit or state.has("FailureTarget"):
            target = next(c for c in state.conditions if c["type"] == "FailureTarget")
            return self._finish_job(state, counters, "Failed", target["reason"],
                                    target["message"])
        if state.succeeded >= completions:
            msg = "Reached expected number of succeeded pods"
            state.conditions.append(condition("SuccessCriteriaMet", "True",
                                              "CompletionsReached", msg))
            self._patch_job_status(state, dict(counters, conditions=state.conditions))
            return self._finish_job(state, counters, "Complete", "CompletionsReached", msg)
        if state.failed > backoff:
            msg = "Job has reached the specified backoff limit"
            state.conditions.append(condition("FailureTarget", "True",
                                              "BackoffLimitExceeded", msg))
            self._patch_job_status(state, dict(counters, conditions=state.conditions))
            return self._finish_job(state, counters, "Failed", "BackoffLimitExceeded", msg)
        self._patch_job_status(state, counters)
        state.pods = {}
        self._create_pod(state)          # a retry (no exponential back-off here)

    def _finish_job(self, state, counters, type_, reason, message):
        state.conditions.append(condition(type_, "True", reason, message))
        status = dict(counters, conditions=state.conditions)
        if type_ == "Complete":
            status["completionTime"] = now()
        self._patch_job_status(state, status)
        state.finished = True
        self._schedule_ttl(state)

    def _schedule_deadline(self, state):
        seconds = (state.job.get("spec") or {}).get("activeDeadlineSeconds")
        if not seconds or not state.start_time or state.deadline_scheduled:
            return
        state.deadline_scheduled = True
        self.timers.at(parse_time(state.start_time) + seconds,
                       lambda: self._deadline(state))

    def _deadline(self, state):
        """activeDeadlineSeconds passed: FailureTarget DeadlineExceeded, the pods are
        deleted; Failed follows once they are terminated (_after_pod)."""
        with state.lock:
            if state.finished or state.has("FailureTarget") or state.has("SuccessCriteriaMet"):
                return
            state.deadline_hit = True
            state.conditions.append(condition("FailureTarget", "True", "DeadlineExceeded",
                                              "Job was active longer than specified deadline"))
            self._patch_job_status(state, {"conditions": state.conditions,
                                           "terminating": state.active, "active": 0,
                                           "ready": 0})
            names = list(state.pods)
            runs = dict(state.pods)
        for name in names:
            self._delete("v1", "pods", state.ns, name)
            if runs.get(name) is None:          # no process (unschedulable): count it now
                self._count_unrun_pod(state, name)

    def _count_unrun_pod(self, state, name):
        with state.lock:
            self._remove_finalizer("pods", "v1", state.ns, name, TRACKING_FINALIZER)
            if name not in state.pods or state.deleted:
                return
            del state.pods[name]
            state.failed += 1
            state.active = 0
            self._after_pod(state)

    def _schedule_ttl(self, state):
        ttl = (state.job.get("spec") or {}).get("ttlSecondsAfterFinished")
        if ttl is None or state.ttl_scheduled:
            return
        state.ttl_scheduled = True
        finished = next((c["lastTransitionTime"] for c in state.conditions
                         if c["type"] in ("Complete", "Failed") and c["status"] == "True"),
                        now())
        self.timers.at(parse_time(finished) + ttl, lambda: self._ttl_expired(state))

    def _ttl_expired(self, state):
        """The TTL-after-finished controller's cascading delete."""
        self._delete("batch/v1", "jobs", state.ns, state.name, propagationPolicy="Foreground",
                     preconditions={"uid": state.uid})

    def _collect_job(self, state):
        """A Job being deleted: the garbage collector's part (no kube-controller-manager
        runs on the real tier): its pods go first, then the foregroundDeletion finalizer;
        an orphaning delete keeps the pods, without their owner reference."""
        fins = state.job["metadata"].get("finalizers") or []
        pods = self.client.list("v1", "pods", state.ns,
                                labelSelector=f"{CONTROLLER_UID_LABEL}={state.uid}")["items"]
        if ORPHAN_FINALIZER in fins:
            for pod in pods:
                refs = [r for r in pod["metadata"].get("ownerReferences") or []
                        if r.get("uid") != state.uid]
                self.client.patch("v1", "pods", pod["metadata"]["name"],
                                  {"metadata": {"ownerReferences": refs or None}}, state.ns)
            return self._remove_finalizer("jobs", "batch/v1", state.ns, state.name,
                                          ORPHAN_FINALIZER)
        self._delete_pods(state, pods)
        if FOREGROUND_FINALIZER in fins:
            threading.Thread(target=self._finish_foreground, args=(state,), daemon=True).start()

    def _finish_foreground(self, state):
        runs = [r for r in state.pods.values() if r is not None]
        for r in runs:
            r.done.wait(60)
        for _ in range(600):
            left = self.client.list("v1", "pods", state.ns, labelSelector=
                                    f"{CONTROLLER_UID_LABEL}={state.uid}")["items"]
            if not left or self.stop_event.is_set():
                break
            self._delete_pods(state, left)
            if self.stop_event.wait(0.1):
                return
        self._remove_finalizer("jobs", "batch/v1", state.ns, state.name, FOREGROUND_FINALIZER)

    def _delete_pods(self, state, pods):
        for pod in pods:
            name = pod["metadata"]["name"]
            self._delete("v1", "pods", state.ns, name)
            run = state.pods.get(name)
            if run is None:
                self._remove_finalizer("pods", "v1", state.ns, name, TRACKING_FINALIZER)

    def _job_deleted(self, job):
        """The Job is gone (a background or foreground cascade ended): its pods are
        deleted, their processes stopped, the state forgotten."""
        uid = job["metadata"]["uid"]
        with self.lock:
            state = self.jobs.pop(uid, None)
        if state is None:
            return
        state.deleted = True
        try:
            pods = self.client.list("v1", "pods", state.ns,
                                    labelSelector=f"{CONTROLLER_UID_LABEL}={uid}")["items"]
        except KubeError:
            pods = []
        self._delete_pods(state, pods)

    # -- Pods -----------------------------------------------------------------------------

    def _on_pod_event(self, etype, obj):
        if etype == "SYNC":
            for pod in obj:
                self._on_pod_event("MODIFIED", pod)
            return
        key = (obj["metadata"].get("namespace"), obj["metadata"]["name"])
        with self.lock:
            run = self.pods.get(key)
        if run is None or run.uid != obj["metadata"]["uid"]:
            return
        run.pod["metadata"] = obj["metadata"]
        if etype == "DELETED":
            run.terminate(0, "Deleted")
            self._forget(run)
            return
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            grace = meta.get("deletionGracePeriodSeconds")
            if grace is None:
                grace = obj["spec"].get("terminationGracePeriodSeconds", 30)
            run.terminate(grace, "Deleted")
            if run.done.is_set():
                self._delete("v1", "pods", run.ns, run.name, gracePeriodSeconds=0)
        if FAULT_LABEL not in (meta.get("labels") or {}):
            run.release()

    def _forget(self, run):
        def later():
            run.done.wait(60)
            with self.lock:
                if self.pods.get((run.ns, run.name)) is run:
                    del self.pods[(run.ns, run.name)]
            run.cleanup()
        threading.Thread(target=later, daemon=True).start()

    # -- logs -----------------------------------------------------------------------------

    def log_of(self, ns, pod):
        with self.lock:
            run = self.pods.get((ns, pod))
        return run.log if run else None

    def container_log(self, ns, pod, container, params):
        """(HTTP status, body) for GET containerLogs."""
        with self.lock:
            run = self.pods.get((ns, pod))
        if run is None:
            return 404, f'pod "{pod}" in namespace "{ns}" not found on this node\n'.encode()
        if container != run.container["name"]:
            return 404, f"container {container} is not in pod {pod}\n".encode()
        if params.get("previous") in ("true", "1"):
            return 400, (f'previous terminated container "{container}" in pod "{pod}" not '
                         "found\n").encode()
        return 200, run.log.select(params)

    # -- for tests --------------------------------------------------------------------------

    def processes(self):
        """pids of the pod processes still running."""
        with self.lock:
            return [r.proc.pid for r in self.pods.values()
                    if r.proc is not None and r.proc.poll() is None]


def main(argv=None):
    """python3 tests/e2e/kubelet.py --kubeconfig-url URL --token-file F --ca CA --workdir D
    [--pc-bin BIN] [--selector S] [--namespace NS]: the kubelet as its own process
    (bench/job-scale), until SIGTERM."""
    import argparse
    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--url", required=True)
    p.add_argument("--token-file", required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--pc-bin")
    p.add_argument("--selector", default=DEFAULT_SELECTOR)
    p.add_argument("--namespace")
    p.add_argument("--env", action="append", default=[], help="NAME=VALUE of the image")
    a = p.parse_args(argv)
    token = pathlib.Path(a.token_file).read_text().split()[0].split(",")[0]
    env = dict(e.split("=", 1) for e in a.env)
    k = TestKubelet(a.url, token, a.ca, a.workdir, a.pc_bin, a.selector, a.namespace, env=env)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    k.start()
    print(json.dumps({"ready": True, "node": k.node_name, "port": k.logs.port}), flush=True)
    done.wait()
    k.stop()


if __name__ == "__main__":
    main()
