"""End-to-end tests of `pulumi-controller run`, most against both the API-server
emulator and the real kube-apiserver (fixture `any_kubeapi`).

The controller's informer caches must end with exactly the server's state
however the connection is disturbed; leader election must give one leader
and hand over when it dies or leaves; a rotated token must be picked up;
kinds the server does not serve are skipped; the probes answer.

The controller writes its cache summary ({resource: {"ns/name": rv}}) to
--cache-dump on SIGUSR1; tests compare it with a fresh list from the server.
"""
import json
import os
import random
import signal
import subprocess
import threading
import time
import urllib.request

import pytest

from kube_fixtures import KubeError, wait_for, CRD_FILES
from test_kube_client import exec_certificate_plugin

STACK_API = "pulumi.com/v1"


def stack(name, namespace="default", stack_name="dev", source="repo"):
    """A suspended Stack: these tests are about the runtime (caches, queue, leases), so
    the reconciler passes over them and writes nothing (test_stack_*.py reconcile)."""
    return {"apiVersion": STACK_API, "kind": "Stack",
            "metadata": {"name": name, "namespace": namespace, "labels": {"shard": "a"}},
            "spec": {"stack": stack_name, "suspend": True,
                     "fluxSource": {"sourceRef": {"apiVersion": "source.toolkit.fluxcd.io/v1",
                                                  "kind": "GitRepository", "name": source}}}}


class Controller:
    """One `run` process with its log (JSON lines) captured to a file."""

    def __init__(self, pc_bin, workdir, name, args, env=None):
        self.log_path = workdir / f"{name}.log"
        self.dump_path = workdir / f"{name}-cache.json"
        self.log = open(self.log_path, "w")
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [pc_bin, "run", "--metrics-addr", "0", "--health-addr", "0",
             "--cache-dump", str(self.dump_path), *map(str, args)],
            stdout=self.log, stderr=self.log, env=full_env)

    def records(self):
        out = []
        for line in self.log_path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass   # sanitizer reports are not JSON; exit status catches them
        return out

    def find(self, msg, **fields):
        return [r for r in self.records() if r.get("msg") == msg and
                all(r.get(k) == v for k, v in fields.items())]

    def wait_log(self, msg, timeout=30, **fields):
        def found():
            if self.proc.poll() is not None:
                raise AssertionError(f"controller exited {self.proc.returncode}:\n"
                                     + self.log_path.read_text()[-4000:])
            return self.find(msg, **fields)
        return wait_for(found, timeout, what=f"log line {msg!r} {fields}")

    def dump(self):
        """Asks for a fresh cache dump and returns it."""
        before = self.dump_path.stat().st_mtime_ns if self.dump_path.exists() else 0
        self.proc.send_signal(signal.SIGUSR1)
        wait_for(lambda: self.dump_path.exists() and self.dump_path.stat().st_mtime_ns != before,
                 10, what="a cache dump")
        return json.loads(self.dump_path.read_text())

    def stop(self, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("controller did not stop on SIGTERM")
        self.log.close()
        return self.proc.returncode

    def kill(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()


@pytest.fixture
def controllers(pc_bin, tmp_path):
    started = []

    def start(args, name=None, env=None):
        c = Controller(pc_bin, tmp_path, name or f"ctl{len(started)}", args, env)
        started.append(c)
        return c
    yield start
    for c in started:
        if c.proc.poll() is None:
            c.kill()


def scope(api):
    """Arguments that keep a controller to this test's objects.  The emulator is fresh
    per test (everything in "default"): none.  The real apiserver is shared by the
    session, each test in its own namespace: --namespace."""
    return ["--namespace", api.namespace] if getattr(api, "kind", "emulator") == "real" else []


def create_all(api, objs):
    """bulk_create on the emulator (one admin request); one create each on a real
    server, past the fault proxy and with one discovery lookup per kind."""
    if getattr(api, "kind", "emulator") == "real":
        client, plurals = api.direct_client, {}
        for o in objs:
            key = (o["apiVersion"], o["kind"])
            if key not in plurals:
                plurals[key] = api.plural_of(*key)
            client.create(o, plurals[key])
    else:
        api.bulk_create(objs)


def server_state(api, plural="stacks", api_version=STACK_API):
    items = api.client.list(api_version, plural, api.namespace)["items"]
    return {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o["metadata"]["resourceVersion"]
            for o in items}


def wait_converged(ctl, api, timeout=60):
    want = server_state(api)

    def same():
        got = ctl.dump().get("stacks")
        return got == want or None
    try:
        wait_for(same, timeout, interval=0.5, what="the cache to match the server")
    except AssertionError:
        got = ctl.dump().get("stacks", {})
        missing = sorted(set(want) - set(got))[:5]
        extra = sorted(set(got) - set(want))[:5]
        stale = sorted(k for k in want if k in got and got[k] != want[k])[:5]
        raise AssertionError(f"cache differs from server: missing {missing}, extra {extra}, "
                             f"stale {stale} (of {len(want)} objects)")
    return want


class Mutator(threading.Thread):
    """Keeps changing Stacks in one namespace (updates, creates, deletes) until
    stopped, riding out server restarts and injected failures.  It writes with
    the server's direct client, so that on the real server it keeps going while
    the fault proxy cuts the controller off."""

    def __init__(self, client, namespace, names):
        super().__init__(daemon=True)
        self.client, self.ns, self.names = client, namespace, list(names)
        self.stop_flag = threading.Event()
        self.done = 0
        self.rng = random.Random(4)
        # Deletes only above the starting count: creates and deletes would
        # otherwise be a random walk, and a long run could empty the namespace.
        self.floor = len(self.names)

    def step(self):
        r = self.rng.random()
        if r < 0.7 and self.names:
            name = self.rng.choice(self.names)
            self.client.patch(STACK_API, "stacks", name,
                              {"spec": {"stack": f"s{self.done}"}}, self.ns, "merge")
        elif r < 0.85 or len(self.names) <= self.floor:
            name = f"new-{self.done}"
            self.client.create(stack(name, self.ns), "stacks", self.ns)
            self.names.append(name)
        elif self.names:
            name = self.names.pop(self.rng.randrange(len(self.names)))
            self.client.delete(STACK_API, "stacks", name, self.ns)

    def run(self):
        while not self.stop_flag.is_set():
            try:
                self.step()
                self.done += 1
            except (KubeError, OSError) as e:   # restarts, injected faults, races
                if isinstance(e, KubeError) and e.code == 404:
                    continue
                time.sleep(0.05)

    def progress(self, n):
        target = self.done + n
        wait_for(lambda: self.done >= target, 60, what=f"{n} more changes")

    def finish(self):
        self.stop_flag.set()
        self.join(30)


def emulator_faults(api, ctl, mut):
    """The emulator's knobs, each followed by a wait for the Stack watch to be open
    again (its watch list), so the next fault hits a live watch, not a backoff."""
    def reconnected(since):
        wait_for(lambda: any(w["resource"] == "stacks" and w["since"] > since
                             for w in api.watches()), 60, what="the Stack watch to reopen")

    mut.progress(100)
    t = time.time()
    api.drop_watches("abort")                # connection cut mid-stream
    reconnected(t)
    mut.progress(100)
    t = time.time()
    api.drop_watches("eof")                  # clean end, as a server-side timeout
    reconnected(t)
    mut.progress(100)
    t = time.time()
    api.fail_next(4, code=500, method="GET")  # the next watches/lists fail
    api.drop_watches("abort")
    reconnected(t)
    mut.progress(100)
    t = time.time()
    api.expire(watches=True)                 # ERROR 410 inside the 200 stream
    reconnected(t)
    mut.progress(100)
    t = time.time()
    api.configure(expired_mode="http")
    api.drop_watches("abort")                # the controller backs off (>= 0.8 s) ...
    api.client.patch(STACK_API, "stacks", "pace", {"spec": {"stack": "x"}}, "default",
                     "merge")                # ... falls behind ...
    api.expire(watches=False)                # ... and comes back with an expired RV: HTTP 410
    reconnected(t)
    api.configure(expired_mode="event")
    mut.progress(100)
    t = time.time()
    api.fail_next(3, code=429, retry_after=1, method="GET")
    api.drop_watches("abort")
    reconnected(t)
    mut.progress(100)
    api.restart()                            # state kept, connections cut
    reconnected(time.time() - 0.5)
    mut.progress(300)


def real_faults(api, ctl, mut):
    """The real server's equivalents: the fault proxy between it and the controller
    (cut, refuse, stall) and a SIGKILL restart of kube-apiserver.  The real server
    has no list of open watches: after each fault a Stack ("mark") changed directly
    must reach the controller's cache, which takes a live watch (or a relist)."""
    proxy, ns, direct = api.proxy, api.namespace, mut.client
    key = f"{ns}/mark"

    def touch_mark():
        return direct.patch(STACK_API, "stacks", "mark", {"spec": {"stack": f"m{mut.done}"}},
                            ns, "merge")["metadata"]["resourceVersion"]

    def caught_up():
        rv = touch_mark()
        wait_for(lambda: ctl.dump().get("stacks", {}).get(key) == rv, 90, interval=0.3,
                 what="a change made after the fault to reach the cache")

    def failures():
        return len(ctl.find("watch failed; reconnecting", resource="stacks"))

    mut.progress(100)
    before = failures()
    proxy.drop_all()                         # connection cut mid-stream
    wait_for(lambda: failures() > before, 30, what="the cut watch to fail")
    caught_up()
    mut.progress(100)

    # Refused for a while: the reconnects fail and the controller falls behind
    # the writes, then resumes from its last resourceVersion (still in the watch
    # cache's window, so no 410).
    proxy.refuse(True)
    before = failures()
    proxy.drop_all()
    wait_for(lambda: failures() >= before + 2, 30, what="a refused reconnect")
    mut.progress(100)
    proxy.refuse(False)
    caught_up()

    # Stalled: the connection stays open but no byte moves (TCP keepalive sees a
    # live proxy).  Shorter than --watch-idle-timeout (2 min by default), so the
    # controller waits: nothing written meanwhile can reach it, and everything does
    # once the bytes flow again (test_stalled_watch_is_ended_and_resumed: longer).
    proxy.pause()
    rv = touch_mark()
    mut.progress(100)
    assert ctl.dump()["stacks"].get(key) != rv, "a change reached the cache through a stall"
    proxy.resume()
    wait_for(lambda: ctl.dump()["stacks"].get(key) == rv, 60, interval=0.3,
             what="the stalled watch to deliver")

    # SIGKILL restart: the new watch cache starts at etcd's current revision.  The
    # proxy refuses the controller until writes have moved the revision past what
    # it saw, so its resume gets the in-stream ERROR 410 "too old resource version".
    proxy.refuse(True)
    proxy.drop_all()
    mut.progress(20)
    api.restart()
    proxy.refuse(False)
    ctl.wait_log("watch expired; relisting", timeout=90, resource="stacks")
    caught_up()
    mut.progress(300)


def test_cache_matches_server_across_drops_410s_500s_and_restart(any_kubeapi, controllers,
                                                                  tmp_path):
    """Etcd compaction is not among the real faults: the watch cache serves watches
    and continue tokens from memory, so a compacted revision changes nothing the
    controller sees (docs/conformance.md); the restart is what gives a 410."""
    api = any_kubeapi
    ns = api.namespace
    names = [f"s{i:04d}" for i in range(1000)]
    # "pace" and "mark" are not mutated: the fault sequences move them on purpose
    create_all(api, [stack(n, ns) for n in names] + [stack("pace", ns), stack("mark", ns)])
    kc = api.write_kubeconfig(tmp_path / "kubeconfig")
    ctl = controllers(["--kubeconfig", kc, *scope(api), "--concurrency", "2"])
    ctl.wait_log("caches synced", timeout=90)
    mut = Mutator(api.direct_client, ns, names)
    mut.start()
    try:
        (emulator_faults if api.kind == "emulator" else real_faults)(api, ctl, mut)
    finally:
        mut.finish()
    state = wait_converged(ctl, api)
    assert len(state) > 900
    # The faults were really seen (else this test proves nothing): a 410 inside
    # the stream made a relist, and cut watches were handled.
    expired = [r["error"] for r in ctl.find("watch expired; relisting", resource="stacks")]
    assert any(m.startswith("watch: ERROR event: 410 Expired") for m in expired), expired
    if api.kind == "emulator":
        # A 410 as the HTTP status of the watch request itself is the emulator's
        # expired_mode="http" knob; kube-apiserver 1.37 sends it in the stream.
        assert any(m.startswith("watch stacks: HTTP: 410 Expired") for m in expired), expired
    assert ctl.find("watch failed; reconnecting", resource="stacks"), \
        "no watch failure was handled"
    assert ctl.stop() == 0


def test_source_change_queues_exactly_its_stacks(any_kubeapi, controllers, tmp_path):
    api = any_kubeapi
    ns = api.namespace
    create_all(api, [stack("a1", ns, source="r1"), stack("a2", ns, source="r1"),
                     stack("b1", ns, source="r2")])
    kc = api.write_kubeconfig(tmp_path / "kubeconfig")
    ctl = controllers(["--kubeconfig", kc, *scope(api)])
    ctl.wait_log("workers started")
    for key in (f"{ns}/a1", f"{ns}/a2", f"{ns}/b1"):
        ctl.wait_log("reconcile", stack=key)
    base = len(ctl.find("reconcile"))
    api.create({"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
                "metadata": {"name": "r1", "namespace": ns},
                "spec": {"url": "https://example.com/r1.git", "interval": "1m"}})
    ctl.wait_log("object changed", kind="GitRepository", name="r1")
    wait_for(lambda: len(ctl.find("reconcile")) >= base + 2, 20, what="two reconciles")
    # The marker below is the last change; once it is reconciled every
    # earlier key has been too, so no late reconcile of b1 can slip past.
    api.create(stack("zz-marker", ns, source="none"))
    ctl.wait_log("reconcile", stack=f"{ns}/zz-marker")
    after = [r["stack"] for r in ctl.find("reconcile")[base:]]
    assert sorted(after) == [f"{ns}/a1", f"{ns}/a2", f"{ns}/zz-marker"]
    assert ctl.stop() == 0


def lease(api, name="pc-test-lease"):
    return api.get("coordination.k8s.io/v1", "leases", name, getattr(api, "namespace", "default"))


def le_args(namespace="default"):
    return ["--leader-elect", "--leader-election-id", "pc-test-lease",
            "--leader-election-namespace", namespace, "--lease-duration", "4s",
            "--renew-deadline", "3s", "--retry-period", "500ms"]


def identity(ctl):
    return ctl.wait_log("leader election: waiting for the lease")[0]["identity"]


def test_leader_election_one_leader_then_failover(any_kubeapi, controllers, tmp_path):
    api = any_kubeapi
    ns = api.namespace
    create_all(api, [stack("s1", ns)])
    kc = api.write_kubeconfig(tmp_path / "kubeconfig")
    args = ["--kubeconfig", kc, *scope(api), *le_args(ns)]
    a = controllers(args, name="a")
    a.wait_log("leader election: became leader")
    b = controllers(args, name="b")
    id_a, id_b = identity(a), identity(b)
    assert id_a != id_b
    # b sees a as the leader and stays a follower while a renews.
    b.wait_log("leader election: current leader", identity=id_a)
    first = lease(api)
    wait_for(lambda: lease(api)["spec"]["renewTime"] != first["spec"]["renewTime"], 10,
             what="a renewal")
    assert not b.find("leader election: became leader")
    assert not b.find("workers started")
    assert lease(api)["spec"]["holderIdentity"] == id_a
    transitions = lease(api)["spec"].get("leaseTransitions", 0)

    a.kill()                                     # no release: b must wait the lease out
    b.wait_log("leader election: became leader", timeout=30)
    b.wait_log("workers started")
    spec = lease(api)["spec"]
    assert spec["holderIdentity"] == id_b
    assert spec["leaseTransitions"] == transitions + 1
    events = [e["message"] for e in api.client.list("v1", "events", ns)["items"]
              if e["involvedObject"].get("kind") == "Lease" and e["reason"] == "LeaderElection"]
    assert sorted(events) == sorted([f"{id_a} became leader", f"{id_b} became leader"])

    # A clean stop releases the Lease so a successor need not wait.
    assert b.stop() == 0
    spec = lease(api)["spec"]
    assert spec["holderIdentity"] == ""
    assert spec["leaseDurationSeconds"] == 1
    assert b.find("leader election: released the lease")


def test_rotated_token_is_picked_up(any_kubeapi, controllers, tmp_path):
    """A token file replaced the kubelet's way is read again.  The tokens are
    ServiceAccount tokens bound to a Secret on the real server (deleting the Secret
    revokes one) and lines of the token file on the emulator."""
    api = any_kubeapi
    ns = api.namespace
    old = api.service_account_token(ns, "pc-ctrl", "pc-ctrl-token-1")
    token_path = tmp_path / "token"
    token_path.write_text(old + "\n")
    kc = api.write_kubeconfig(tmp_path / "kubeconfig", token_file=str(token_path))
    create_all(api, [stack("before", ns)])
    ctl = controllers(["--kubeconfig", kc, *scope(api)])
    ctl.wait_log("caches synced")
    # The kubelet's way: a new file replaces the old one atomically.
    tmp = tmp_path / "token.new"
    tmp.write_text(api.service_account_token(ns, "pc-ctrl", "pc-ctrl-token-2") + "\n")
    os.replace(tmp, token_path)
    api.revoke(ns, "pc-ctrl-token-1", old)
    assert api.token_status(old) == 401
    api.drop_watches("abort")
    api.create(stack("after", ns))
    wait_for(lambda: f"{ns}/after" in ctl.dump().get("stacks", {}), 30,
             what="the new Stack in the cache")
    if api.kind == "emulator":
        # The controller did try the old token once more (the real server keeps no
        # request log; there the direct request above shows the token is dead).
        wait_for(lambda: any(r.get("code") == 401 and r.get("path") != "/api"
                             for r in api.requests()), 10, what="a 401 for the old token")
    assert ctl.stop() == 0


def test_watches_with_an_exec_plugin_client_certificate(any_kubeapi, controllers, tmp_path):
    """Lists and watches authenticate with the client certificate an exec plugin
    hands out (run once, then reused); a dropped watch reconnects with it.  On the
    real server the drop is the fault proxy cutting every connection."""
    api = any_kubeapi
    ns = api.namespace
    kc, calls = exec_certificate_plugin(api, tmp_path, "pc-watcher")
    create_all(api, [stack("before", ns)])
    ctl = controllers(["--kubeconfig", kc, *scope(api)])
    ctl.wait_log("caches synced")
    api.create(stack("during", ns))
    wait_for(lambda: f"{ns}/during" in ctl.dump().get("stacks", {}), 30,
             what="a Stack created while watching")
    api.drop_watches("abort")
    ctl.wait_log("watch failed; reconnecting", resource="stacks")   # the drop did cut it
    api.create(stack("after", ns))
    wait_for(lambda: f"{ns}/after" in ctl.dump().get("stacks", {}), 30,
             what="a Stack created after the drop")
    if api.kind == "emulator":
        stack_watches = [r for r in api.requests()
                         if r["path"].endswith("/stacks") and r["query"].get("watch") == "1"]
        assert len(stack_watches) >= 2
        assert {r["user"] for r in stack_watches} == {"cert:pc-watcher"}
    assert calls.read_text() == "x"
    assert ctl.stop() == 0


def served(api, api_version, kind):
    try:
        return api.plural_of(api_version, kind)
    except (KeyError, KubeError):     # KubeError: the group itself is not served yet
        return None


def test_kinds_not_served_are_skipped(any_bare_kubeapi, controllers, tmp_path):
    """A server with the Stack CRD and none of Flux's, nor the Program CRD (a fresh
    emulator, or the module's bare real server)."""
    api = any_bare_kubeapi
    ns = api.namespace
    for path in CRD_FILES:
        if "pulumi.com_stacks" in str(path):
            api.apply_file(path)
    wait_for(lambda: served(api, STACK_API, "Stack"), 30, what="the Stack CRD to be served")
    # served is not yet writable on the real server: 429 "storage is (re)initializing"
    wait_for(lambda: api.client.raw("GET", f"/apis/{STACK_API}/stacks")[0] == 200, 30,
             what="Stacks to be listable")
    create_all(api, [stack("only", ns)])
    kc = api.write_kubeconfig(tmp_path / "kubeconfig")
    ctl = controllers(["--kubeconfig", kc, *scope(api)])
    ctl.wait_log("caches synced")
    skipped = {r["kind"] for r in ctl.find("kind not served by the API server; not watching it")}
    assert skipped == {"GitRepository", "OCIRepository", "Bucket", "Program"}
    assert set(ctl.dump()) == {"stacks"}
    assert ctl.dump()["stacks"].keys() == {f"{ns}/only"}
    assert ctl.stop() == 0


def test_no_stack_crd_is_a_clear_failure(any_bare_kubeapi, controllers, tmp_path):
    api = any_bare_kubeapi
    kc = api.write_kubeconfig(tmp_path / "kubeconfig")
    ctl = controllers(["--kubeconfig", kc, *scope(api)])
    assert ctl.proc.wait(30) == 1
    assert ctl.find("the server does not serve stacks.pulumi.com/v1; install the CRD")


def test_probes_and_metrics(any_kubeapi, pc_bin, tmp_path):
    api = any_kubeapi
    create_all(api, [stack("p1", api.namespace), stack("p2", api.namespace)])
    kc = api.write_kubeconfig(tmp_path / "kubeconfig")
    log = open(tmp_path / "probe.log", "w")
    proc = subprocess.Popen([pc_bin, "run", "--kubeconfig", kc, *scope(api),
                             "--health-addr", "127.0.0.1:0",
                             "--metrics-addr", "127.0.0.1:0"], stdout=log, stderr=log)
    try:
        def port(msg):
            for line in (tmp_path / "probe.log").read_text().splitlines():
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if r.get("msg") == msg:
                    return int(r["port"])
            return None
        hport = wait_for(lambda: port("serving health probes"), 20, what="health port")
        mport = wait_for(lambda: port("serving metrics"), 20, what="metrics port")

        def get(p, path):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{p}{path}", timeout=5) as r:
                    return r.status, r.read().decode()
            except urllib.error.HTTPError as e:
                return e.code, e.read().decode()
        assert get(hport, "/healthz") == (200, "ok\n")
        wait_for(lambda: get(hport, "/readyz")[0] == 200, 30, what="readyz")
        assert get(hport, "/nope")[0] == 404
        _, text = get(mport, "/metrics")
        assert 'pulumi_controller_cache_objects{kind="Stack"} 2' in text
        assert "pulumi_controller_workqueue_depth" in text
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        log.close()


def test_run_usage_errors(run_pc):
    r = run_pc("run", "--lease-duration", "soon")
    assert r.returncode == 2 and "not a positive duration" in r.stderr
    r = run_pc("run", "--leader-elect", "--lease-duration", "5s", "--renew-deadline", "10s")
    assert r.returncode == 2 and "--lease-duration > --renew-deadline" in r.stderr
    r = run_pc("run", "--concurrency", "0")
    assert r.returncode == 2
    r = run_pc("run", "--help")
    assert r.returncode == 0 and "--watch-label-selector" in r.stdout
    r = run_pc("run", "--kubeconfig", "/nonexistent/kc")
    assert r.returncode == 1 and "/nonexistent/kc" in r.stderr


def cut_off(api):
    """Every request of the controller fails from now on: on the emulator its Lease
    requests get 500 (a server-side knob); the real server has no such knob, so the
    fault proxy refuses every new connection and cuts the open ones."""
    if api.kind == "emulator":
        api.fail_next(10000, code=500, path="leases")
    else:
        api.proxy.refuse(True)
        api.drop_watches()


def restore(api):
    if api.kind == "emulator":
        api.clear_faults()
    else:
        api.proxy.clear()


def test_leader_that_cannot_renew_stops(any_kubeapi, controllers, tmp_path):
    api = any_kubeapi
    kc = api.write_kubeconfig(tmp_path / "kubeconfig")
    a = controllers(["--kubeconfig", kc, *scope(api), *le_args(api.namespace)], name="a")
    a.wait_log("workers started")
    me = identity(a)
    cut_off(api)
    assert a.proc.wait(30) == 1
    assert a.find("leader election: lost the lease")
    restore(api)
    # It did not release (it could not): the record still names it.
    assert lease(api)["spec"]["holderIdentity"] == me


HANGING_PLUGIN = """#!/usr/bin/python3
# Its first run hands out the test's token for {ttl} s; every later run (the refresh,
# due 10 s before expiry) writes its pid and hangs, as a plugin waiting on a dead
# identity provider does, until the controller's plugin timeout (a minute) kills it.
import datetime, json, os, time
runs = {runs!r}
first = not os.path.exists(runs)
open(runs, "a").write("x")
if not first:
    open({hung!r}, "w").write(str(os.getpid()))
    time.sleep(600)
exp = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds={ttl})
print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {{"token": {token!r},
                             "expirationTimestamp": exp.strftime("%Y-%m-%dT%H:%M:%SZ")}}}}))
"""


def running(pid):
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_leader_stuck_in_an_exec_credential_refresh_stops_at_its_deadline(any_kubeapi, controllers,
                                                                          tmp_path):
    """The renewal waits for a credential the hung plugin never gives: the leader must
    stop leading at its renew deadline (3 s), not when the plugin's minute is up."""
    import yaml
    api = any_kubeapi
    runs, hung = tmp_path / "plugin-runs", tmp_path / "plugin-hung"
    plugin = tmp_path / "hanging-plugin.py"
    plugin.write_text(HANGING_PLUGIN.format(runs=str(runs), hung=str(hung), ttl=13, token=api.token))
    plugin.chmod(0o755)
    doc = yaml.safe_load(open(api.write_kubeconfig(tmp_path / "kc-base")))
    doc["users"][0]["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                                        "command": str(plugin), "interactiveMode": "Never"}}
    kc = tmp_path / "kc-exec"
    kc.write_text(yaml.safe_dump(doc))
    a = controllers(["--kubeconfig", kc, *scope(api), *le_args(api.namespace)], name="a")
    a.wait_log("workers started")
    wait_for(hung.exists, 30, what="the refresh to hang")
    pid = int(wait_for(lambda: hung.read_text().strip(), 10, what="the plugin's pid"))
    a.wait_log("leader election: lost the lease", timeout=45)
    # It stopped leading while the plugin still hung (before, only its timeout ended it).
    assert running(pid), "the leader stopped only when the plugin was killed"
    os.kill(pid, signal.SIGKILL)
    assert a.proc.wait(30) == 1


def test_namespace_and_label_selector(any_kubeapi, controllers, tmp_path):
    api = any_kubeapi
    # the real server is shared and never finishes deleting a namespace (no
    # controller-manager): names of its own for each run there
    team_a, team_b = ("team-a", "team-b") if api.kind == "emulator" else \
        (api.namespace + "-a", api.namespace + "-b")
    for ns in (team_a, team_b):
        api.client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
                          "namespaces")
    objs = []
    for ns in (team_a, team_b):
        for shard in ("a", "b"):
            o = stack(f"{shard}-1", ns)
            o["metadata"]["labels"] = {"shard": shard}
            objs.append(o)
    create_all(api, objs)
    kc = api.write_kubeconfig(tmp_path / "kubeconfig")
    ctl = controllers(["--kubeconfig", kc, "--namespace", team_a, "--watch-label-selector",
                       "shard=a"])
    ctl.wait_log("caches synced")
    assert set(ctl.dump()["stacks"]) == {f"{team_a}/a-1"}
    # Objects moving into and out of the selector are added and removed.
    api.client.patch(STACK_API, "stacks", "b-1", {"metadata": {"labels": {"shard": "a"}}},
                     team_a, "merge")
    api.client.patch(STACK_API, "stacks", "a-1", {"metadata": {"labels": {"shard": "z"}}},
                     team_a, "merge")
    api.client.patch(STACK_API, "stacks", "b-1", {"metadata": {"labels": {"shard": "a"}}},
                     team_b, "merge")          # other namespace: never seen
    wait_for(lambda: set(ctl.dump()["stacks"]) == {f"{team_a}/b-1"}, 20,
             what="the selector transitions in the cache")
    assert not [r for r in ctl.find("object changed") if r["namespace"] == team_b]
    assert ctl.stop() == 0


class Ticker(threading.Thread):
    """Patches one Stack every 0.2 s past any fault (a client that bypasses the
    proxy), so the Stack watch is never quiet for long unless the connection stalls."""

    def __init__(self, client, namespace, name):
        super().__init__(daemon=True)
        self.client, self.ns, self.name = client, namespace, name
        self.stop_flag = threading.Event()
        self.last_rv = None

    def run(self):
        n = 0
        while not self.stop_flag.wait(0.2):
            n += 1
            obj = self.client.patch(STACK_API, "stacks", self.name, {"spec": {"stack": f"t{n}"}},
                                    self.ns, "merge")
            self.last_rv = obj["metadata"]["resourceVersion"]

    def finish(self):
        self.stop_flag.set()
        self.join(10)


def test_stalled_watch_is_ended_and_resumed(any_kubeapi, controllers, tmp_path):
    """A watch that receives nothing for --watch-idle-timeout is ended and resumed
    from its resourceVersion.  The stall: the emulator holds every watch stream; on
    the real server the fault proxy stops moving bytes with both connections open,
    so TCP keepalive sees nothing wrong."""
    api = any_kubeapi
    ns = api.namespace
    create_all(api, [stack("tick", ns)])
    kc = api.write_kubeconfig(tmp_path / "kubeconfig")
    ctl = controllers(["--kubeconfig", kc, *scope(api), "--watch-idle-timeout", "3s"])
    ctl.wait_log("caches synced")
    ticker = Ticker(api.direct_client, ns, "tick")
    ticker.start()
    key = f"{ns}/tick"

    def stalls():
        return [r for r in ctl.find("watch failed; reconnecting", resource="stacks")
                if "too slow" in r.get("error", "")]
    try:
        # A busy watch is not ended: the ticks keep the bytes coming.
        wait_for(lambda: ticker.last_rv and ctl.dump()["stacks"].get(key) == ticker.last_rv
                 and len(ctl.find("object changed", name="tick")) >= 15, 30,
                 what="15 ticks through the watch")
        assert stalls() == []
        if api.kind == "real":
            api.proxy.pause()
        else:
            api.configure(hold_watches=True)
        wait_for(stalls, 30, what="the stalled Stack watch to be ended")
        if api.kind == "real":
            api.proxy.resume()
        else:
            api.configure(hold_watches=False)
        seen = ticker.last_rv
        wait_for(lambda: int(ctl.dump()["stacks"].get(key, "0")) >= int(seen), 30,
                 interval=0.3, what="the ticks made during the stall to reach the cache")
    finally:
        ticker.finish()
    assert ctl.stop() == 0
