"""The test kubelet's plumbing (tests/e2e/kubelet.py is the kubelet): constants,
time and condition helpers, $(VAR) expansion, a list+watch loop that resumes and
relists (Watcher), and a timer thread for deadlines and TTLs (Scheduler).
"""
import collections
import ctypes
import datetime
import http.client
import json
import re
import signal
import socket
import sys
import threading
import time
from urllib.parse import urlencode

from kubeapi.client import KubeError, resource_path

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
