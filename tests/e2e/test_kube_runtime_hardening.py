"""The controller runtime against slow callbacks and hostile API servers (issue 10):
leader election that keeps renewing while a callback blocks, metadata-only informers,
and informers that back off and bound what a server can make them do (410 storms,
endless continue chains, list replies that ignore `limit`).

The driver is tests/tools/kube_rt_tool.c; hostile servers are plain-HTTP loopback
servers started by the test itself (a kubeconfig with an http:// server carries no
credentials, so nothing secret is sent to them).
"""
import base64
import itertools
import json
import os
import socket
import subprocess
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kube_fixtures import wait_for


class Tool:
    """One kube_rt_tool process: commands on stdin, answers on stdout, JSON log lines
    on stderr (kept in a file)."""

    def __init__(self, pc_tools, tmp_path, *args):
        self.err_path = tmp_path / f"kube_rt_tool-{args[0]}-{time.monotonic_ns()}.log"
        self.err = open(self.err_path, "w")
        self.proc = subprocess.Popen([os.path.join(pc_tools, "kube_rt_tool"), *map(str, args)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err, text=True)

    def ask(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.line()

    def line(self):
        out = self.proc.stdout.readline()
        if not out:
            raise AssertionError(f"kube_rt_tool ended (exit {self.proc.wait()}):\n"
                                 + self.err_path.read_text()[-4000:])
        return out.rstrip("\n")

    def log(self):
        """The JSON log records (every stderr line must be one)."""
        return [json.loads(line) for line in self.err_path.read_text().splitlines() if line]

    def close(self, timeout=60):
        self.proc.stdin.close()
        rest = self.proc.stdout.read()
        rc = self.proc.wait(timeout)
        self.err.close()
        assert rc == 0, f"kube_rt_tool exited {rc}:\n" + self.err_path.read_text()[-4000:]
        return rest


@pytest.fixture
def rt_tool(pc_tools, tmp_path):
    started = []

    def start(*args):
        t = Tool(pc_tools, tmp_path, *args)
        started.append(t)
        return t
    yield start
    for t in started:
        if t.proc.poll() is None:
            t.proc.kill()
            t.proc.wait()


def last_seq(api):
    items = api.requests()
    return items[-1]["seq"] if items else 0


# -- leader election ----------------------------------------------------------------


def test_slow_on_started_does_not_stop_renewals(kubeapi, rt_tool, tmp_path):
    """on_started blocks for three lease durations; the Lease must be renewed all along
    (the old elector called it on the renew thread: no renewal, a second leader)."""
    kc = kubeapi.write_kubeconfig(tmp_path / "kubeconfig")
    t = rt_tool("leader", kc, "default", "slow-callback", 3000, 2000, 500, 9000)
    assert t.line() == "started"
    since = last_seq(kubeapi)
    assert t.line() == "callback-returned"
    renewals = [r for r in kubeapi.requests(since)
                if r["method"] == "PUT" and r["path"].endswith("/leases/slow-callback")
                and r["code"] == 200]
    # one every retry period (0.5 s) in 9 s; far more than the 3 s lease needs
    assert len(renewals) >= 6, renewals
    lease = kubeapi.get("coordination.k8s.io/v1", "leases", "slow-callback", "default")
    assert lease["spec"]["holderIdentity"]
    rest = t.close()
    assert "lost" not in rest.split()
    assert "stopped" in rest.split()


def test_on_started_not_run_after_the_lease_was_lost(kubeapi, rt_tool, tmp_path):
    """on_started waits behind a slow on_new_leader; the Lease is lost meanwhile and
    on_stopped runs.  Starting the work after that would start it with no Lease."""
    kc = kubeapi.write_kubeconfig(tmp_path / "kubeconfig")
    t = rt_tool("leader", kc, "default", "lost-early", 3000, 2000, 500, 0, 8000)
    assert t.line() == "new-leader"
    kubeapi.fail_next(100000, code=500, path="/leases/lost-early")   # no more renewals
    assert t.line() == "lost"
    assert t.line() == "new-leader-returned"
    kubeapi.clear_faults()
    rest = t.close().split()
    assert "started" not in rest, rest


def micro_now():
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"


def test_renewed_lease_with_a_long_holder_identity_is_not_taken(kubeapi, rt_tool, tmp_path):
    """The candidate compared a record cut to 511 bytes: behind a 600-byte holder
    identity every renewal looked the same, so it took a Lease that was being
    renewed (two leaders)."""
    holder = "other-controller_" + "x" * 600
    kubeapi.client.create({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "long-holder", "namespace": "default"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 2,
                 "acquireTime": micro_now(), "renewTime": micro_now()}}, "leases")
    stop, failures = threading.Event(), []

    def renew():
        while not stop.wait(0.3):
            try:
                lease = kubeapi.client.get("coordination.k8s.io/v1", "leases", "long-holder",
                                           "default")
                if lease["spec"]["holderIdentity"] != holder:
                    return
                lease["spec"]["renewTime"] = micro_now()
                kubeapi.client.update(lease, "leases")
            except Exception as exc:       # noqa: BLE001 - reported below
                failures.append(repr(exc))
                return
    renewer = threading.Thread(target=renew, daemon=True)
    renewer.start()
    try:
        since = last_seq(kubeapi)
        kc = kubeapi.write_kubeconfig(tmp_path / "kubeconfig")
        t = rt_tool("leader", kc, "default", "long-holder", 2000, 1500, 500, 0)

        def reads():
            return [r for r in kubeapi.requests(since) if r["method"] == "GET"
                    and r["path"].endswith("/leases/long-holder")
                    and r["userAgent"].startswith("pulumi-controller")]
        # 6 reads 0.5 to 1.1 s apart: more than the 2 s lease went by, renewed throughout
        wait_for(lambda: len(reads()) >= 6, 30, what="the candidate to read the Lease 6 times")
        lease = kubeapi.client.get("coordination.k8s.io/v1", "leases", "long-holder", "default")
        assert lease["spec"]["holderIdentity"] == holder
        assert not failures, failures
    finally:
        stop.set()
        renewer.join()
    assert t.line() == "started"       # once the renewals stop, it takes over
    t.close()


def test_stopping_a_candidate_aborts_its_request(hostile, rt_tool, tmp_path):
    """A stop used to wait for the Lease request under way to time out (up to the renew
    deadline, 30 s here) before the process could go on shutting down."""
    held = threading.Event()

    def answer(h, path, query):
        held.set()
        time.sleep(120)                 # a server that never answers
    server = hostile(answer)
    kc = server.kubeconfig(tmp_path / "hostile-kubeconfig")
    t = rt_tool("leader", kc, "default", "hung", 40000, 30000, 2000, 0)
    assert held.wait(30)
    t.proc.stdin.close()
    assert t.proc.wait(15) == 0        # not the 30 s the request may take
    assert t.proc.stdout.read().split() == ["stopped"]
    t.err.close()
    assert not [r for r in t.log() if r["level"] == "warn"], t.log()


# -- metadata-only informers --------------------------------------------------------


def secret(name, namespace, value):
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": namespace, "labels": {"rt": "meta"}},
            "data": {"password": base64.b64encode(value.encode()).decode()}}


def in_namespace(objs, ns):
    return {o["metadata"]["name"]: o for o in objs if o["metadata"].get("namespace") == ns}


def test_metadata_only_informer_never_receives_secret_data(any_kubeapi, rt_tool, tmp_path):
    api = any_kubeapi
    ns = api.namespace
    value = "s3cr3t-" + os.urandom(6).hex()
    api.client.create(secret("listed", ns, value), "secrets")
    kc = api.write_kubeconfig(tmp_path / "kubeconfig")
    t = rt_tool("informer", kc, "core", "v1", "secrets", "Secret", 1, "metadata-only")
    assert t.ask("wait-synced 30000") == "synced"
    api.client.create(secret("watched", ns, value), "secrets")   # arrives by the watch

    def both():
        text = t.ask("dump")
        objs = in_namespace(json.loads(text), ns)
        return (text, objs) if {"listed", "watched"} <= set(objs) else None
    text, objs = wait_for(both, 30, what="both Secrets in the cache")
    encoded = base64.b64encode(value.encode()).decode()
    assert value not in text and encoded not in text
    for name in ("listed", "watched"):
        o = objs[name]
        assert set(o) == {"apiVersion", "kind", "metadata"}, o
        assert o["apiVersion"] == "meta.k8s.io/v1"
        assert o["kind"] == "PartialObjectMetadata"
        assert o["metadata"]["labels"] == {"rt": "meta"}
        assert o["metadata"]["resourceVersion"]
    if api.kind == "emulator":
        sent = {(bool(r["query"].get("watch")), r["accept"]) for r in api.requests()
                if r["path"] == "/api/v1/secrets"}
        assert sent == {
            (False, "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"),
            (True, "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1")}, sent
    t.close()


META = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
META_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


def test_metadata_only_media_type_mismatches(any_kubeapi):
    """The wrong one of the two partial kinds is a 406 naming the Go type; a GET asked
    for PartialObjectMetadata is the object's metadata."""
    api = any_kubeapi
    ns = api.namespace
    api.client.create(secret("mismatch", ns, "x"), "secrets")
    base = f"/api/v1/namespaces/{ns}/secrets"
    code, _, body = api.client.raw("GET", base, params={"limit": "1"}, headers={"Accept": META})
    assert (code, body["reason"]) == (406, "NotAcceptable")
    assert body["message"] == ("you requested PartialObjectMetadata, but the requested object "
                               "is a list (*core.SecretList)")
    code, _, body = api.client.raw("GET", base + "/mismatch", headers={"Accept": META_LIST})
    assert (code, body["reason"]) == (406, "NotAcceptable")
    assert body["message"] == ("you requested PartialObjectMetadataList, but the requested "
                               "object is not a list (*core.Secret)")
    code, _, body = api.client.raw("GET", base + "/mismatch", headers={"Accept": META})
    assert code == 200
    assert set(body) == {"apiVersion", "kind", "metadata"}
    assert (body["apiVersion"], body["kind"]) == ("meta.k8s.io/v1", "PartialObjectMetadata")


# -- hostile servers ----------------------------------------------------------------


class Hostile:
    """A plain-HTTP API server on loopback whose answers the test writes:
    answer(handler, path, query) sends the reply.  Every request is recorded."""

    def __init__(self, answer):
        self.requests = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                path, _, q = self.path.partition("?")
                query = dict(urllib.parse.parse_qsl(q, keep_blank_values=True))
                with outer.lock:
                    outer.requests.append({"path": path, "query": query,
                                           "time": time.monotonic()})
                try:
                    answer(self, path, query)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def kubeconfig(self, path):
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "h",
            "clusters": [{"name": "h", "cluster": {"server": self.url}}],
            "users": [{"name": "u", "user": {}}],
            "contexts": [{"name": "h", "context": {"cluster": "h", "user": "u"}}]}))
        return path

    def seen(self, watch=None):
        with self.lock:
            return [r for r in self.requests
                    if watch is None or bool(r["query"].get("watch")) == watch]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hostile():
    servers = []

    def start(answer):
        s = Hostile(answer)
        servers.append(s)
        return s
    yield start
    for s in servers:
        s.close()


def send_json(h, code, doc):
    body = json.dumps(doc).encode() if not isinstance(doc, bytes) else doc
    h.send_response(code)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


EXPIRED = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": "too old resource version: 1 (2)", "reason": "Expired", "code": 410}


def empty_list(rv="5", cont=None):
    meta = {"resourceVersion": rv}
    if cont:
        meta["continue"] = cont
    return {"kind": "SecretList", "apiVersion": "v1", "metadata": meta, "items": []}


def secrets_informer(rt_tool, server, tmp_path, *flags):
    kc = server.kubeconfig(tmp_path / "hostile-kubeconfig")
    return rt_tool("informer", kc, "core", "v1", "secrets", "Secret", 1, *flags)


WINDOW_S = 6.0


def in_window(server, tool):
    """What the informer sent in the WINDOW_S seconds after its first request (an
    upper bound on requests cannot fail on a slow machine; it fails on a storm)."""
    wait_for(lambda: server.seen(), 30, what="the informer's first request")
    start = server.seen()[0]["time"]
    time.sleep(WINDOW_S)
    return [r for r in server.seen() if r["time"] - start <= WINDOW_S]


@pytest.mark.parametrize("form", ["http", "event"])
def test_watch_answering_410_is_relisted_with_backoff(hostile, rt_tool, tmp_path, form):
    """client-go backs off 0.8 s doubling to 30 s; the old informer relisted at once,
    every time (about 1,750 list+watch requests in 10 s over four informers)."""
    def answer(h, path, query):
        if not query.get("watch"):
            return send_json(h, 200, empty_list())
        if form == "http":
            return send_json(h, 410, EXPIRED)
        send_json(h, 200, json.dumps({"type": "ERROR", "object": EXPIRED}).encode() + b"\n")
    server = hostile(answer)
    t = secrets_informer(rt_tool, server, tmp_path)
    window = in_window(server, t)
    lists = [r for r in window if not r["query"].get("watch")]
    watches = [r for r in window if r["query"].get("watch")]
    # 0.8-1.6 s, then 1.6-3.2 s, then 3.2-6.4 s between cycles: at most 4 cycles
    assert 2 <= len(lists) <= 5, window
    assert len(watches) <= 5, window
    t.close()
    relists = [r for r in t.log() if r["msg"] == "watch expired; relisting"]
    assert 2 <= len(relists) <= 6
    assert all("410 Expired" in r["error"] for r in relists)


def test_watch_ended_after_one_bookmark_is_not_reopened_at_once(hostile, rt_tool, tmp_path):
    """A server that ends every watch cleanly right after one BOOKMARK: the old
    informer counted the bookmark as health and reconnected without a pause."""
    bookmark = json.dumps({"type": "BOOKMARK", "object": {
        "kind": "Secret", "apiVersion": "v1", "metadata": {"resourceVersion": "5"}}}).encode()

    def answer(h, path, query):
        if not query.get("watch"):
            return send_json(h, 200, empty_list())
        send_json(h, 200, bookmark + b"\n")
    server = hostile(answer)
    t = secrets_informer(rt_tool, server, tmp_path)
    window = in_window(server, t)
    lists = [r for r in window if not r["query"].get("watch")]
    watches = [r for r in window if r["query"].get("watch")]
    assert len(lists) == 1, window
    assert 2 <= len(watches) <= 5, len(watches)
    t.close()


def test_endless_continue_chain_is_bounded_and_backs_off(hostile, rt_tool, tmp_path):
    count = itertools.count()

    def answer(h, path, query):
        if query.get("watch"):
            return send_json(h, 500, b"{}")
        send_json(h, 200, empty_list(cont=f"page-{next(count)}"))   # never the last page
    server = hostile(answer)
    t = secrets_informer(rt_tool, server, tmp_path, "max-pages=20")
    window = in_window(server, t)
    assert not [r for r in window if r["query"].get("watch")]
    # at most 4 lists of 20 pages in the window (the old informer: ~88 pages a second)
    assert 20 <= len(window) <= 80, len(window)
    assert t.ask("wait-synced 10") == "not-synced"
    t.close()
    failed = [r for r in t.log() if r["msg"] == "list failed; retrying"]
    assert failed and all("still not complete after 20 pages (metadata.continue never ends)"
                          in r["error"] for r in failed), failed


def test_repeated_continue_token_fails_the_list(hostile, rt_tool, tmp_path):
    def answer(h, path, query):
        if query.get("watch"):
            return send_json(h, 500, b"{}")
        send_json(h, 200, empty_list(cont="same-again"))
    server = hostile(answer)
    t = secrets_informer(rt_tool, server, tmp_path)
    wait_for(lambda: [r for r in t_log(t) if r["msg"] == "list failed; retrying"], 30,
             what="the list to fail")
    first = [r for r in server.seen()]
    assert first[0]["query"].get("continue") is None
    assert first[1]["query"].get("continue") == "same-again"
    t.close()
    failed = [r for r in t.log() if r["msg"] == "list failed; retrying"]
    assert "the server sent the same continue token twice" in failed[0]["error"]


def t_log(tool):
    try:
        return tool.log()
    except ValueError:       # a line being written
        return []


def big_secret(i, size):
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": f"big-{i}", "namespace": "default", "resourceVersion": "5",
                         "annotations": {"filler": "x" * size}}}


def test_list_reply_ignoring_limit_is_bounded(hostile, rt_tool, tmp_path):
    """A server that ignores `limit` and sends 24 MiB: refused at 16 MiB, asked again
    with half the limit down to 1, then a clear error; nothing more is buffered."""
    body = json.dumps({"kind": "SecretList", "apiVersion": "v1",
                       "metadata": {"resourceVersion": "5"},
                       "items": [big_secret(i, 1 << 20) for i in range(24)]}).encode()

    def answer(h, path, query):
        if query.get("watch"):
            return send_json(h, 500, b"{}")
        send_json(h, 200, body)
    server = hostile(answer)
    t = secrets_informer(rt_tool, server, tmp_path)
    wait_for(lambda: [r for r in t_log(t) if r["msg"] == "list failed; retrying"], 60,
             what="the list to fail")
    limits = [r["query"]["limit"] for r in server.seen()][:7]
    assert limits == ["100", "50", "25", "12", "6", "3", "1"], limits
    assert t.ask("wait-synced 10") == "not-synced"
    t.close()
    failed = [r for r in t.log() if r["msg"] == "list failed; retrying"]
    assert "a reply is larger than 16 MiB even with limit=1" in failed[0]["error"], failed


def test_big_objects_are_listed_with_a_smaller_limit(hostile, rt_tool, tmp_path):
    """A server that honours `limit`, with objects so big that 100 of them exceed the
    bound: the informer asks for fewer at once and syncs."""
    items = [big_secret(i, 6 << 20) for i in range(3)]

    def answer(h, path, query):
        if query.get("watch"):
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        start = int(query.get("continue") or 0)
        limit = int(query["limit"])
        page = items[start:start + limit]
        cont = str(start + limit) if start + limit < len(items) else None
        doc = empty_list(cont=cont)
        doc["items"] = page
        send_json(h, 200, doc)
    server = hostile(answer)
    t = secrets_informer(rt_tool, server, tmp_path)
    assert t.ask("wait-synced 60000") == "synced"
    names = sorted(o["metadata"]["name"] for o in json.loads(t.ask("dump")))
    assert names == ["big-0", "big-1", "big-2"]
    t.close()


# -- the probe server ---------------------------------------------------------------


def test_malformed_requests_to_the_probe_server_leave_stderr_json(rt_tool):
    """libmicrohttpd's own complaints went raw to stderr, between the JSON lines; now
    they go through the logger, rate-limited (a client can provoke them at will)."""
    t = rt_tool("serve")
    port = int(t.line().split()[1])
    bad = [b"GET /healthz HTTP/1.1\r\nBad Header Line\r\n\r\n",
           b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
           b"GET /healthz HTTP/9.9\r\n\r\n"]
    answers = []
    for req in bad * 10:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(req)
            answers.append(s.recv(64).split(b"\r\n")[0])
    assert set(answers) == {b"HTTP/1.1 400 Bad Request",
                            b"HTTP/1.1 505 HTTP Version Not Supported"}
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert s.recv(64).startswith(b"HTTP/1.1 200")
    t.close()
    records = t.log()                  # every line JSON, or this raises
    complaints = [r for r in records if r["msg"] == "probe server"]
    assert 1 <= len(complaints) <= 6, complaints
    assert any("Content-Length" in r["error"] for r in complaints)


def test_one_client_cannot_hold_every_connection_of_the_probe_server(rt_tool):
    """Idle connections from one address are bounded (16), so a client cannot take the
    process's descriptors; another address is still answered meanwhile."""
    t = rt_tool("serve")
    port = int(t.line().split()[1])
    fds = f"/proc/{t.proc.pid}/fd"
    before = len(os.listdir(fds))
    held = []
    try:
        for _ in range(60):
            held.append(socket.create_connection(("127.0.0.1", port), timeout=10))

        def settled():
            n = len(os.listdir(fds))
            return n if n - before <= 16 else None
        wait_for(settled, 10, what="the server to refuse connections over the bound")
        # another client address (127.0.0.2 is loopback too) is served meanwhile
        with socket.create_connection(("127.0.0.1", port), timeout=10,
                                      source_address=("127.0.0.2", 0)) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert s.recv(64).startswith(b"HTTP/1.1 200")
    finally:
        for s in held:
            s.close()
    t.close()
