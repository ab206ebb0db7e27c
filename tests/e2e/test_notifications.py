"""Stack events to Flux's notification-controller (`run --events-addr`, issue 15,
docs/notifications.md), on both tiers:

  - every Stack event is posted as fluxcd/pkg's event JSON to a receiver the test serves:
    involvedObject (apiVersion, kind, name, namespace, uid, resourceVersion), severity
    info|error, reason, message, metadata {pulumi.com/revision}, reportingController,
    reportingInstance (the hostname), an RFC 3339 timestamp;
  - a 5xx is retried until it is accepted, a 429 (the server's "duplicate") never;
  - a dead address costs the reconciles nothing: they finish, and what is lost is counted
    in pulumi_controller_notifications_dropped_total;
  - [real] through the real notification-controller: the Alert CRD patched by
    deploy/flux/notifications accepts kind Stack, and an Alert with a generic Provider
    delivers the Stack's failure to a webhook the test serves.
"""
import json
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from flux_fixtures import NOTIFICATION_COMPONENT
from nginx_fixtures import free_port
from stack_fixtures import SOURCE_API, wait_until

DROPPED = "pulumi_controller_notifications_dropped_total"
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def git(name):
    return {"sourceRef": {"apiVersion": SOURCE_API, "kind": "GitRepository", "name": name}}


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, fmt, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        srv = self.server
        with srv.lock:
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            reason = (body or {}).get("reason", "")
            held = srv.hold
            script = srv.scripts.get(reason) or []
            status = script.pop(0) if script else 202
            srv.received.append({"path": self.path, "ctype": self.headers.get("Content-Type"),
                                 "body": body, "status": status})
        if held:
            srv.release.wait(120)
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


class Receiver:
    """An event endpoint on 127.0.0.1 that records every POST and answers 202, or for an
    event whose reason has a script the statuses of that script in turn."""

    def __init__(self):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.lock = threading.Lock()
        self.httpd.received = []
        self.httpd.scripts = {}
        self.httpd.hold = False                 # requests wait for release while set
        self.httpd.release = threading.Event()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def script(self, reason, *statuses):
        with self.httpd.lock:
            self.httpd.scripts[reason] = list(statuses)

    def posts(self, reason=None, name=None):
        with self.httpd.lock:
            got = list(self.httpd.received)
        return [p for p in got if p["body"] and (reason is None or p["body"]["reason"] == reason)
                and (name is None or p["body"]["involvedObject"]["name"] == name)]

    def wait_post(self, reason, name, status=None, count=1):
        def seen():
            got = [p for p in self.posts(reason, name) if status is None or p["status"] == status]
            return got if len(got) >= count else None
        return wait_until(seen, what=f"{count} POST(s) of a {reason} event of Stack {name}")

    def hold(self):
        with self.httpd.lock:
            self.httpd.hold = True

    def close(self):
        self.httpd.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def metric(ctl, name, **labels):
    key = name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else "")
    return ctl.metrics().get(key, 0)


def test_every_stack_event_is_posted_in_flux_event_format(stack_world, receiver):
    w = stack_world
    good = w.flux_source("GitRepository", "app", w.artifact())
    bad = w.flux_source("GitRepository", "broken", w.artifact(w.program_files("stack-broken")))
    w.apply_stack("demo", fluxSource=git("app"))
    w.apply_stack("failing", fluxSource=git("broken"), maxUpdateFailures=5)
    w.controller(events_addr=receiver.url)
    w.wait_ready("demo", revision=good["revision"])
    stack = w.stack("demo")

    post = receiver.wait_post("UpdateSucceeded", "demo")[0]
    assert post["ctype"] == "application/json" and post["path"] == "/"
    ev = post["body"]
    ref = ev["involvedObject"]
    assert ref["apiVersion"] == "pulumi.com/v1" and ref["kind"] == "Stack"
    assert ref["name"] == "demo" and ref["namespace"] == w.namespace
    assert ref["uid"] == stack["metadata"]["uid"]
    assert ref["resourceVersion"]
    assert ev["severity"] == "info"
    assert ev["metadata"] == {"pulumi.com/revision": good["revision"]}
    assert good["revision"] in ev["message"]
    assert ev["reportingController"] == "pulumi-controller"
    assert ev["reportingInstance"] == socket.gethostname()
    assert RFC3339.match(ev["timestamp"]), ev["timestamp"]
    assert set(ev) == {"involvedObject", "severity", "timestamp", "message", "reason", "metadata",
                       "reportingController", "reportingInstance"}

    # a Warning is an error, with the revision it failed at
    failed = receiver.wait_post("UpdateFailed", "failing")[0]["body"]
    assert failed["severity"] == "error"
    assert failed["metadata"] == {"pulumi.com/revision": bad["revision"]}
    assert failed["message"]

    # every Kubernetes Event of the Stack went to the endpoint too
    wait_until(lambda: set(w.event_reasons("demo")) <= {p["body"]["reason"] for p in
                                                         receiver.posts(name="demo")},
               what="every Event reason of Stack demo posted")
    assert metric(w.ctl, DROPPED, reason="queue_full") == 0


def test_server_errors_are_retried_and_429_is_not(stack_world, receiver):
    w = stack_world
    src = w.flux_source("GitRepository", "app", w.artifact())
    receiver.script("UpdateStarted", 503, 500)      # then 202
    receiver.script("UpdateSucceeded", 429)         # the server's "duplicate event"
    w.apply_stack("demo", fluxSource=git("app"))
    ctl = w.controller(events_addr=receiver.url)
    w.wait_ready("demo", revision=src["revision"])

    started = receiver.wait_post("UpdateStarted", "demo", status=202)
    assert [p["status"] for p in receiver.posts("UpdateStarted", "demo")] == [503, 500, 202]
    # a retry is the same event, not a new one
    assert len({json.dumps(p["body"], sort_keys=True)
                for p in receiver.posts("UpdateStarted", "demo")}) == 1
    assert started
    # refused is counted when the sender gives up on it; a retry would come before that
    wait_until(lambda: metric(ctl, DROPPED, reason="refused") >= 1, what="the 429 counted")
    assert [p["status"] for p in receiver.posts("UpdateSucceeded", "demo")] == [429]
    assert metric(ctl, "pulumi_controller_notifications_retries_total") >= 2
    assert metric(ctl, DROPPED, reason="retries_exhausted") == 0


def test_a_dead_address_drops_and_counts_without_holding_reconciles(stack_world):
    w = stack_world
    dead = f"http://127.0.0.1:{free_port()}/"       # nothing listens there
    src = w.flux_source("GitRepository", "app", w.artifact())
    names = ("one", "two", "three")
    for name in names:
        w.apply_stack(name, fluxSource=git("app"))
    ctl = w.controller(events_addr=dead, events_queue_size=1)
    # The reconciles finish while the sender still retries its first event (five
    # attempts, about 15 s of backoff): of the six events (UpdateStarted and
    # UpdateSucceeded of each Stack) one is in flight, one queued, the rest dropped
    # when they were recorded, so they are counted by the time the Stacks are Ready.
    for name in names:
        w.wait_ready(name, revision=src["revision"])
    assert metric(ctl, DROPPED, reason="queue_full") >= 1
    wait_until(lambda: metric(ctl, DROPPED, reason="retries_exhausted") >= 1,
               what="the first event given up after its attempts")
    assert metric(ctl, "pulumi_controller_notifications_sent_total") == 0
    ctl.stop()
    assert ctl.find("notification queue full: events are dropped until the event endpoint "
                    "catches up")


def test_stop_drains_for_a_bounded_time(stack_world, receiver):
    """A receiver that never answers cannot hold the controller's exit: the sender gets a
    bounded drain (5 s), then the POST in flight is aborted and what is left counted."""
    w = stack_world
    src = w.flux_source("GitRepository", "app", w.artifact())
    receiver.hold()
    w.apply_stack("demo", fluxSource=git("app"))
    ctl = w.controller(events_addr=receiver.url)
    w.wait_ready("demo", revision=src["revision"])
    receiver.wait_post("UpdateStarted", "demo")          # the sender is stuck in it
    assert ctl.stop() == 0                               # SIGTERM: exits, and cleanly
    dropped = ctl.find("notifications not sent before shutdown")
    assert dropped and int(dropped[0]["dropped"]) >= 2, ctl.text()[-3000:]
    # only the stuck event was posted (again after each 5 s timeout), nothing after it
    assert {p["body"]["reason"] for p in receiver.posts()} == {"UpdateStarted"}


def test_events_addr_is_checked_at_start_and_documented(run_pc):
    # flag parsing only: no API server is reached, so no tier is involved
    r = run_pc("run", "--events-addr", "notification-controller.flux-system:80")
    assert r.returncode == 2
    assert "--events-addr" in r.stderr and "http or https" in r.stderr
    r = run_pc("run", "--events-queue-size", "0")
    assert r.returncode == 2 and "--events-queue-size" in r.stderr
    help_text = run_pc("run", "--help").stdout
    assert "--events-addr URL" in help_text and "--events-queue-size N" in help_text


# -- through the real notification-controller ---------------------------------------------

def test_alert_for_stack_reaches_a_generic_webhook(stack_world, receiver, request):
    w = stack_world
    if w.tier != "real":
        # notification-controller is a controller-runtime program: it needs the real
        # kube-apiserver (the emulator serves no Alert/Provider CRDs it could watch).
        pytest.skip("real tier only: the real notification-controller runs on the real API server")
    nc = request.getfixturevalue("flux_notification")
    # the component's RBAC lets notification-controller's ServiceAccount read Stacks
    w.kubectl("apply", "-f", str(NOTIFICATION_COMPONENT / "rbac.yaml"))
    sa = "system:serviceaccount:flux-system:notification-controller"
    for verb in ("get", "list"):
        can = w.kubectl("auth", "can-i", verb, "stacks.pulumi.com", f"--as={sa}", "-A", check=False)
        assert can.stdout.strip() == "yes", (verb, can.stdout, can.stderr)

    bad = w.flux_source("GitRepository", "broken", w.artifact(w.program_files("stack-broken")))
    provider = {"apiVersion": "notification.toolkit.fluxcd.io/v1beta3", "kind": "Provider",
                "metadata": {"name": "hook", "namespace": w.namespace},
                "spec": {"type": "generic", "address": receiver.url + "hook"}}
    alert = {"apiVersion": "notification.toolkit.fluxcd.io/v1beta3", "kind": "Alert",
             "metadata": {"name": "stacks", "namespace": w.namespace},
             "spec": {"providerRef": {"name": "hook"}, "eventSeverity": "error",
                      "eventSources": [{"kind": "Stack", "name": "*"}]}}
    w._call(lambda c: c.apply(provider, "providers", field_manager="stack-test"))
    # accepted because the Alert CRD carries the component's enum patch (test_notifications_deploy
    # shows the CRD of the module without it has no Stack)
    w._call(lambda c: c.apply(alert, "alerts", field_manager="stack-test"))

    w.apply_stack("failing", fluxSource=git("broken"), maxUpdateFailures=5)
    w.controller(events_addr=nc.events_url)
    try:
        hook = wait_until(lambda: [p for p in receiver.posts("UpdateFailed", "failing")
                                   if p["path"] == "/hook"],
                          what="the UpdateFailed event at the webhook")[0]["body"]
    except AssertionError as e:
        raise AssertionError(f"{e}{nc.explain()}") from None
    assert hook["involvedObject"]["kind"] == "Stack"
    assert hook["involvedObject"]["namespace"] == w.namespace
    assert hook["severity"] == "error"
    assert hook["reportingController"] == "pulumi-controller"
    # the server kept the key of the Stack's group and strips the prefix when dispatching
    assert hook["metadata"]["revision"] == bad["revision"], hook
    # eventSeverity error: the Normal events of the same Stack were not forwarded
    assert not receiver.posts("UpdateStarted", "failing")

