"""The operator's command line end to end (issue 13; docs/cli.md): `get`, `reconcile`
(also --with-source), `suspend`, `resume`, `outputs` and `history` against a running
controller, and their failures -- no such Stack, no permission, a reconcile nobody
answers, bad flags -- on both tiers of `stack_world` ([emulator] and [real]).

Two tests have one tier, by nature: usage errors are refused before any server is
contacted, and hostile API answers come from a small fake server of this file (no
real API server can be made to send a Stack whose status is a number).
"""
import base64
import json
import os
import pathlib
import pty
import re
import select
import signal
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from kube_fixtures import KubeError, wait_for
from stack_fixtures import SANITIZER_MARKS, SOURCE_API

GIT = {"apiVersion": SOURCE_API, "kind": "GitRepository", "name": "app"}
REQUESTED = "reconcile.fluxcd.io/requestedAt"
DB_PASSWORD = "db-Pw-Cli-Output-7e21"


# -- running the command ----------------------------------------------------------------

def run(pc_bin, *args, kubeconfig=None, timeout=120, check=None):
    """pulumi-controller ARGS [--kubeconfig K]; no KUBECONFIG from the test's
    environment.  Fails on a sanitizer report; check= asserts the exit status."""
    argv = [pc_bin, *map(str, args)]
    if kubeconfig is not None:
        argv += ["--kubeconfig", str(kubeconfig)]
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    for mark in SANITIZER_MARKS:
        assert mark not in r.stderr, r.stderr
    if check is not None:
        assert r.returncode == check, f"{args} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r


def pc(w, *args, **kw):
    kw.setdefault("kubeconfig", w.api.kubeconfig)
    return run(w.pc_bin, *args, **kw)


def table(text):
    """[{HEADER: cell}] of a kubectl-style table: columns are three or more spaces
    apart, and no cell holds three spaces."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    head = re.split(r" {3,}", lines[0].strip())
    return [dict(zip(head, re.split(r" {3,}", ln.rstrip()))) for ln in lines[1:]]


def header(text):
    return re.split(r" {3,}", text.splitlines()[0].strip())


def without_rv(obj):
    obj = json.loads(json.dumps(obj))
    obj.get("metadata", {}).pop("resourceVersion", None)
    return obj


def kubeconfig_copy(w, name, token=None, contexts=None, current=None):
    """A copy of the world's kubeconfig with another token, more contexts
    ({name: server URL}) or another current-context."""
    doc = yaml.safe_load(open(w.api.kubeconfig))
    if token is not None:
        doc["users"][0]["user"] = {"token": token}
    for ctx, server in (contexts or {}).items():
        cluster = dict(doc["clusters"][0]["cluster"], server=server)
        doc["clusters"].append({"name": ctx, "cluster": cluster})
        doc["contexts"].append({"name": ctx, "context": dict(doc["contexts"][0]["context"],
                                                             cluster=ctx)})
    if current:
        doc["current-context"] = current
    path = w.workdir / name
    path.write_text(json.dumps(doc))
    return path


def secret_ref(name, key):
    return {"type": "Secret", "secret": {"name": name, "key": key}}


# -- with a running controller ----------------------------------------------------------

def test_get_outputs_history_and_reconcile(stack_world):
    w = stack_world
    ns = w.namespace
    w.secret("db", {"password": DB_PASSWORD})
    src = w.flux_source("GitRepository", "app", w.artifact(w.program_files("stack-secrets")))
    w.apply_stack("demo", fluxSource={"sourceRef": GIT},
                  secretsRef={"dbPassword": secret_ref("db", "password")})
    w.controller()
    obj = w.wait_ready("demo", revision=src["revision"])
    ready = w.cond(obj, "Ready")

    # get: the table, by every spelling of the same question
    for args in (["get"], ["get", "stacks"], ["get", "demo"], ["get", f"{ns}/demo"],
                 ["get", "stack", "demo", "-n", ns]):
        r = pc(w, *args, check=0)
        assert header(r.stdout) == ["NAME", "READY", "REVISION", "SUSPENDED", "LAST UPDATE", "AGE",
                                    "MESSAGE"], args
        row, = [x for x in table(r.stdout) if x["NAME"] == "demo"]
        assert row["READY"] == "True" and row["REVISION"] == src["revision"]
        assert row["SUSPENDED"] == "False"
        assert re.fullmatch(r"up succeeded \d+[smhd]\w* ago", row["LAST UPDATE"]), row
        assert re.fullmatch(r"\d+[smh]\w*", row["AGE"]), row
        assert row["MESSAGE"] == ready["message"]

    r = pc(w, "get", "-A", check=0)
    assert header(r.stdout)[:2] == ["NAMESPACE", "NAME"]
    assert [x for x in table(r.stdout) if (x["NAMESPACE"], x["NAME"]) == (ns, "demo")]

    # -o json / yaml: the objects, managedFields left out; yaml reads back the same
    listed = json.loads(pc(w, "get", "-o", "json", check=0).stdout)
    assert listed["kind"] == "List" and [i["metadata"]["name"] for i in listed["items"]] == ["demo"]
    assert "managedFields" not in listed["items"][0]["metadata"]
    one = json.loads(pc(w, "get", "demo", "-o", "json", check=0).stdout)
    assert one["apiVersion"] == "pulumi.com/v1" and one["kind"] == "Stack"
    assert one["spec"] == obj["spec"]
    as_yaml = yaml.safe_load(pc(w, "get", "demo", "-o", "yaml", check=0).stdout)
    assert without_rv(as_yaml) == without_rv(one)

    # outputs: secret ones masked unless --show-secrets
    r = pc(w, "outputs", "demo", check=0)
    assert header(r.stdout) == ["OUTPUT", "VALUE"]
    assert {x["OUTPUT"]: x["VALUE"] for x in table(r.stdout)} == {
        "region": "nowhere", "secretOut": "[secret]"}
    for fmt in ("json", "yaml"):
        r2 = pc(w, "outputs", f"{ns}/demo", "-o", fmt, check=0)
        assert yaml.safe_load(r2.stdout) == {"region": "nowhere", "secretOut": "[secret]"}
        assert DB_PASSWORD not in r2.stdout + r2.stderr
    assert DB_PASSWORD not in r.stdout + r.stderr
    r = pc(w, "outputs", "demo", "--show-secrets", "-o", "json", check=0)
    assert json.loads(r.stdout) == {"region": "nowhere", "secretOut": DB_PASSWORD}

    # reconcile: one more update, acknowledged, outcome printed; no progress line
    # when stdout is not a terminal
    mark = w.mark()
    r = pc(w, "reconcile", f"{ns}/demo", check=0)
    assert f"✔ Stack {ns}/demo reconciled: Ready at revision {src['revision']}" in r.stdout
    assert "\r" not in r.stdout and "\033[K" not in r.stdout
    st = w.stack("demo")
    token = st["metadata"]["annotations"][REQUESTED]
    assert st["status"]["lastHandledReconcileAt"] == token
    w.settle("demo")
    assert len(w.updates("dev", since=mark)) == 1

    # history: what status.history holds, newest first
    hist = w.stack("demo")["status"]["history"]
    assert len(hist) >= 2
    rows = table(pc(w, "history", "demo", check=0).stdout)
    assert [x["#"] for x in rows] == [str(i + 1) for i in range(len(hist))]
    assert [(x["TYPE"], x["RESULT"], x["REVISION"]) for x in rows] == \
        [(h["type"], h["result"], h["revision"]) for h in hist]
    assert json.loads(pc(w, "history", "demo", "-o", "json", check=0).stdout) == hist
    w.assert_no_secret(DB_PASSWORD)


def test_reconcile_on_a_terminal_shows_progress(stack_world):
    """stdout a terminal: the waiting line is drawn in place (and cleared), not printed."""
    w = stack_world
    w.flux_source("GitRepository", "app", w.artifact())
    w.apply_stack("demo", fluxSource={"sourceRef": GIT})
    w.controller()
    w.wait_ready("demo")
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    proc = subprocess.Popen([w.pc_bin, "reconcile", "demo", "--kubeconfig", w.api.kubeconfig],
                            stdout=slave, stderr=subprocess.PIPE, env=env)
    os.close(slave)
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], 300)
        assert ready, "no output from reconcile within 300s"
        try:
            chunk = os.read(master, 4096)
        except OSError:                # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(60) == 0, proc.stderr.read()
    text = out.decode()
    assert "\r\033[K" in text                     # the progress line's erase
    assert "to be reconciled" not in text         # the line for logs is not printed
    assert f"✔ Stack {w.namespace}/demo reconciled" in text


def test_reconcile_reports_failure_suspend_and_resume(stack_world):
    w = stack_world
    ns = w.namespace
    w.flux_source("GitRepository", "app", w.artifact())
    w.flux_source("GitRepository", "bad", w.artifact(w.program_files("stack-fail")))
    w.apply_stack("ok", stack="ok", fluxSource={"sourceRef": GIT})
    w.apply_stack("bad", stack="bad", fluxSource={"sourceRef": dict(GIT, name="bad")},
                  maxUpdateFailures=100)
    w.apply_stack("stuck", stack="stuck", fluxSource={"sourceRef": dict(GIT, name="bad")},
                  maxUpdateFailures=1)
    w.controller()
    w.wait_ready("ok")
    w.wait_condition("bad", "Ready", "False", "UpdateFailed")
    w.wait_condition("stuck", "Stalled", "True", "UpdateFailed")

    # a Stalled Stack: the request runs one more update, which fails; the message says
    # the controller will not retry on its own
    mark = w.mark()
    r = pc(w, "reconcile", "stuck", check=1)
    assert f"✗ Stack {ns}/stuck reconciliation failed (Stalled: it is not retried until " \
        "something changes): UpdateFailed:" in r.stderr
    assert len(w.updates("stuck", since=mark)) == 1

    # a reconcile whose update fails: exit 1 with the reason and message
    r = pc(w, "reconcile", "bad", check=1)
    assert f"✗ Stack {ns}/bad reconciliation failed: UpdateFailed:" in r.stderr
    assert "bad/name" in r.stderr
    assert r.stderr.count("\n") == 1

    # suspend: spec.suspend; a reconcile of a suspended Stack is refused at once
    r = pc(w, "suspend", "ok", check=0)
    assert r.stdout == f"✔ Stack {ns}/ok suspended\n"
    assert w.stack("ok")["spec"]["suspend"] is True
    row, = table(pc(w, "get", "ok", check=0).stdout)
    assert row["SUSPENDED"] == "True"
    r = pc(w, "reconcile", "ok", check=1)
    assert f"Stack {ns}/ok is suspended: resume it first" in r.stderr

    # resume: suspend cleared and a reconcile requested in one write, then waited for
    mark = w.mark()
    r = pc(w, "resume", f"{ns}/ok", check=0)
    assert f"✔ Stack {ns}/ok resumed" in r.stdout
    assert f"✔ Stack {ns}/ok reconciled: Ready" in r.stdout
    st = w.stack("ok")
    assert st["spec"]["suspend"] is False
    assert st["status"]["lastHandledReconcileAt"] == st["metadata"]["annotations"][REQUESTED]
    w.settle("ok")
    assert len(w.updates("ok", since=mark)) == 1

    pc(w, "suspend", "ok", check=0)
    r = pc(w, "resume", "ok", "--wait=false", check=0)
    assert r.stdout == f"✔ Stack {ns}/ok resumed\n"


def _source_annotation(w, name):
    obj = w.client.get(SOURCE_API, "gitrepositories", name, w.namespace)
    return (obj["metadata"].get("annotations") or {}).get(REQUESTED)


def _answer_as_source_controller(w, name, token, artifact, ready=True):
    """What source-controller does with a request: a new artifact (flux_source), and
    the token in status.lastHandledReconcileAt."""
    written = w.hand_written_source("GitRepository", name, artifact, ready=ready)
    w.client.patch(SOURCE_API, "gitrepositories", name, {"status": {"lastHandledReconcileAt": token}},
                   w.namespace, "merge", "status")
    return written


def test_reconcile_with_source(stack_world):
    """The test plays source-controller (it answers the request itself, a failure too), so its
    source is hand-written on both tiers: the real source-controller leaves such sources alone.
    The real one answering `flux reconcile source` is test_flux_git.py's."""
    w = stack_world
    ns = w.namespace
    src = w.hand_written_source("GitRepository", "app", w.artifact())
    w.apply_stack("demo", fluxSource={"sourceRef": GIT})
    w.controller()
    w.wait_ready("demo", revision=src["revision"])
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    argv = [w.pc_bin, "reconcile", "demo", "--with-source", "--timeout", "5m",
            "--kubeconfig", w.api.kubeconfig]

    # The source answers with a new revision: the Stack is then reconciled to it.
    before = _source_annotation(w, "app")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    token = wait_for(lambda: (_source_annotation(w, "app") or before) != before and
                     _source_annotation(w, "app"), 60, what="the source's reconcile request")
    new = _answer_as_source_controller(w, "app", token, w.artifact(w.revision_files(greeting="two")))
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    assert f"► annotating GitRepository {ns}/app" in out
    assert f"✔ GitRepository {ns}/app: fetched revision {new['revision']}" in out
    assert f"✔ Stack {ns}/demo reconciled: Ready at revision {new['revision']}" in out
    assert w.stack("demo")["status"]["lastAppliedRevision"] == new["revision"]

    # The source fails: so does the command, and the Stack is not asked.
    stack_token = w.stack("demo")["metadata"]["annotations"][REQUESTED]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    token2 = wait_for(lambda: _source_annotation(w, "app") != token and _source_annotation(w, "app"),
                      60, what="the second reconcile request")
    _answer_as_source_controller(w, "app", token2, w.artifact(w.revision_files(greeting="two")),
                                 ready=False)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, out + err
    assert f"✗ GitRepository {ns}/app reconciliation failed: GitOperationFailed: fetch failed" in err
    assert w.stack("demo")["metadata"]["annotations"][REQUESTED] == stack_token


@pytest.mark.usefixtures("isolated_docker_config")
def test_rollback_by_pinning_the_digest(stack_world, run_pc, registry_plain, tmp_path):
    """docs/cli.md "Rolling back", ociSource: the digest from `history`, pinned with the
    documented kubectl patch, brings the earlier program back."""
    from test_stack_oci import oci_source, push
    w = stack_world
    repo = f"stacks-{w.id}/rollback"
    d1 = push(run_pc, registry_plain, w, tmp_path, repo, "stable", "good")
    w.apply_stack("demo", ociSource=oci_source(registry_plain, repo, {"tag": "stable"}))
    w.controller()
    w.wait_ready("demo", revision=f"stable@{d1}")
    d2 = push(run_pc, registry_plain, w, tmp_path, repo, "stable", "bad")
    w.wait_ready("demo", revision=f"stable@{d2}", timeout=120)
    assert list(w.cloud_files().values()) == ["bad"]

    rows = table(pc(w, "history", "demo", check=0).stdout)
    assert [x["REVISION"] for x in rows] == [f"stable@{d2}", f"stable@{d1}"]
    good = rows[1]["REVISION"].split("@", 1)[1]
    w.kubectl("patch", "stack", "demo", "--type", "merge", "-p", json.dumps(
        {"spec": {"ociSource": {"ref": {"tag": None, "semver": None, "digest": good}}}}))
    w.wait_ready("demo", revision=good, timeout=120)
    assert list(w.cloud_files().values()) == ["good"]
    rows = table(pc(w, "history", "demo", check=0).stdout)
    assert [x["REVISION"] for x in rows][:2] == [good, f"stable@{d2}"]


# -- failures without a controller ------------------------------------------------------

def test_no_such_stack_no_outputs_and_timeouts(stack_world):
    w = stack_world
    ns = w.namespace
    w.apply_stack("idle", fluxSource={"sourceRef": GIT})
    for args in (["get", "missing"], ["reconcile", "missing"], ["reconcile", "missing", "--with-source"],
                 ["suspend", "missing"], ["resume", "missing"], ["outputs", f"{ns}/missing"],
                 ["history", "missing"]):
        r = pc(w, *args, check=1)
        assert r.stderr == f"{args[0]}: Stack {ns}/missing not found\n", args
        assert r.stdout == "", args

    r = pc(w, "outputs", "idle", check=1)
    assert f"Stack {ns}/idle has no outputs yet: Secret {ns}/idle-outputs does not exist" in r.stderr
    r = pc(w, "history", "idle", check=0)
    assert r.stderr == f"Stack {ns}/idle has no update history yet.\n"
    assert json.loads(pc(w, "history", "idle", "-o", "json", check=0).stdout) == []
    r = pc(w, "get", "-n", "no-such-namespace-here", check=0)
    assert r.stderr == "No Stacks found in namespace no-such-namespace-here.\n"
    assert json.loads(pc(w, "get", "-n", "no-such-namespace-here", "-o", "json",
                         check=0).stdout)["items"] == []

    # Nobody handles the request (no controller runs): the wait ends at --timeout,
    # and says where the Stack stands.
    r = pc(w, "reconcile", "idle", "--timeout", "2s", check=1)
    assert f"✗ timed out after 2s waiting for Stack {ns}/idle to handle the reconcile request" \
        in r.stderr
    assert "last handled request: none" in r.stderr
    assert REQUESTED in w.stack("idle")["metadata"]["annotations"]
    r = pc(w, "resume", "idle", "--timeout", "1s", check=1)
    assert "timed out after 1s" in r.stderr

    # Ctrl-C while waiting: the wait ends at once, says the request stays, and the
    # process ends by the signal.
    before = w.stack("idle")["metadata"]["annotations"][REQUESTED]
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    proc = subprocess.Popen([w.pc_bin, "reconcile", "idle", "--kubeconfig", w.api.kubeconfig],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    wait_for(lambda: w.stack("idle")["metadata"]["annotations"][REQUESTED] != before, 60,
             what="the reconcile request")
    wait_for(lambda: proc.stdout.readline().startswith("◎ waiting"), 30, what="the wait")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGINT, out + err
    assert f"✗ interrupted: Stack {ns}/idle keeps the reconcile request" in err

    # An Outputs Secret the Stack does not own is not shown.
    w.secret("idle-outputs", {"x": "not-the-stacks-value"})
    r = pc(w, "outputs", "idle", "--show-secrets", check=1)
    assert f"Secret {ns}/idle-outputs is not owned by Stack {ns}/idle" in r.stderr
    assert "not-the-stacks-value" not in r.stdout + r.stderr

    # --context picks a context of the kubeconfig; an unknown one is an error.
    kc = kubeconfig_copy(w, "two-contexts", contexts={"dead": "https://127.0.0.1:9"},
                         current="dead")
    ctx = yaml.safe_load(open(w.api.kubeconfig))["current-context"]
    row, = table(run(w.pc_bin, "get", "idle", "--context", ctx, kubeconfig=kc, check=0).stdout)
    assert row["NAME"] == "idle"
    r = run(w.pc_bin, "get", "--context", "nope", kubeconfig=kc, check=1)
    assert "nope" in r.stderr
    r = run(w.pc_bin, "get", "--request-timeout", "5s", kubeconfig=kc, check=1)
    assert "127.0.0.1:9" in r.stderr             # the current context's dead server


def test_no_permission(stack_world):
    """[real]: a ServiceAccount token the RBAC authorizer grants nothing, then get and
    list on Stacks only.  [emulator]: it has no authorizer, so the server's 403 is an
    injected fault (api.fail_next) -- the CLI's side of it is the same.  On both, a
    token the server does not know is refused (401)."""
    w = stack_world
    ns = w.namespace
    w.apply_stack("demo", fluxSource={"sourceRef": GIT})

    bad = kubeconfig_copy(w, "bad-token", token="not-a-token-the-server-knows")
    r = pc(w, "get", "demo", kubeconfig=bad, check=1)
    assert "cannot get Stack" in r.stderr and "refused the credentials" in r.stderr
    assert "not-a-token" not in r.stderr

    if w.tier == "emulator":
        w.api.fail_next(1, code=403, path=r"/stacks/demo$")
        r = pc(w, "get", "demo", check=1)
        assert r.stderr.startswith(f"get: not allowed to get Stack {ns}/demo: 403")
        w.api.fail_next(1, code=403, method="PATCH", path=r"/stacks/demo$")
        r = pc(w, "suspend", "demo", check=1)
        assert r.stderr.startswith(f"suspend: not allowed to patch Stack {ns}/demo: 403")
        return

    c = w.client
    c.create({"apiVersion": "v1", "kind": "ServiceAccount",
              "metadata": {"name": "cli-user", "namespace": ns}}, "serviceaccounts", namespace=ns)
    token = c.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/cli-user/token",
                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                       "spec": {"expirationSeconds": 3600}})["status"]["token"]
    kc = kubeconfig_copy(w, "cli-user", token=token)
    user = f"system:serviceaccount:{ns}:cli-user"
    r = pc(w, "get", "demo", kubeconfig=kc, check=1)
    assert r.stderr.startswith(f"get: not allowed to get Stack {ns}/demo: 403 Forbidden:")
    assert user in r.stderr and token not in r.stderr
    r = pc(w, "get", kubeconfig=kc, check=1)
    assert f"not allowed to list Stacks in namespace {ns}: 403 Forbidden" in r.stderr

    c.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
              "metadata": {"name": "stack-reader", "namespace": ns},
              "rules": [{"apiGroups": ["pulumi.com"], "resources": ["stacks"],
                         "verbs": ["get", "list"]}]}, "roles", namespace=ns)
    c.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
              "metadata": {"name": "stack-reader", "namespace": ns},
              "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                          "name": "stack-reader"},
              "subjects": [{"kind": "ServiceAccount", "name": "cli-user", "namespace": ns}]},
             "rolebindings", namespace=ns)
    wait_for(lambda: pc(w, "get", "demo", kubeconfig=kc).returncode == 0, 30,
             what="the RoleBinding to reach the authorizer")
    r = pc(w, "outputs", "demo", kubeconfig=kc, check=1)
    assert f"not allowed to get Secret {ns}/demo-outputs: 403 Forbidden" in r.stderr
    for cmd in ("suspend", "resume", "reconcile"):
        r = pc(w, cmd, "demo", kubeconfig=kc, check=1)
        assert f"not allowed to patch Stack {ns}/demo: 403 Forbidden" in r.stderr, cmd
    assert "suspend" not in w.stack("demo")["spec"]


def test_no_stack_crd_says_so(any_bare_kubeapi, pc_bin):
    """A server without the Stack CRD: the message says what is missing."""
    k = any_bare_kubeapi
    for args in (["get"], ["get", "demo"], ["history", "demo"], ["suspend", "demo"]):
        r = run(pc_bin, *args, kubeconfig=k.kubeconfig, check=1)
        assert "the API server does not serve the kind" in r.stderr, r.stderr
        assert "are the CRDs installed?" in r.stderr


# -- one tier by nature -----------------------------------------------------------------

USAGE = {
    ("get", "--bogus"): "unrecognized option",
    ("get", "-o", "table"): 'invalid -o "table"',
    ("get", "-A", "demo"): "-A lists every namespace",
    ("get", "-A", "-n", "x"): "-A lists every namespace",
    ("get", "pods", "x"): 'unknown kind "pods"',
    ("get", "a", "b", "c"): "one NAME at most",
    ("get", "Bad_Name"): "is not a Stack name",
    ("reconcile",): "expected one Stack",
    ("reconcile", "a", "b"): "expected one Stack",
    ("reconcile", "a/b/c"): "is not a Stack name",
    ("reconcile", "x", "--timeout", "soon"): 'invalid --timeout "soon"',
    ("reconcile", "x", "--timeout", "0s"): "invalid --timeout",
    ("reconcile", "x", "--show-secrets"): "unrecognized option",
    ("reconcile", "ns1/x", "-n", "ns2"): "--namespace says ns2",
    ("suspend", "x", "--with-source"): "see pulumi-controller suspend --help",
    ("resume", "x", "--wait=maybe"): 'invalid --wait "maybe"',
    ("outputs", "x", "-o", "xml"): 'invalid -o "xml"',
    ("history", "x", "--show-secrets"): "see pulumi-controller history --help",
    ("history", "x", "--request-timeout", "-1s"): "invalid --request-timeout",
    ("get", "--namespace", "Not.A.Label"): "invalid --namespace",
}


@pytest.mark.parametrize("args", sorted(USAGE), ids=" ".join)
def test_usage_errors_exit_2_before_any_request(pc_bin, tmp_path, args):
    """Refused before the kubeconfig is even read (it does not exist): one tier."""
    r = run(pc_bin, *args, kubeconfig=tmp_path / "none", check=2)
    assert USAGE[args] in r.stderr
    assert "kubeconfig" not in r.stderr


@pytest.mark.parametrize("cmd", ["get", "reconcile", "suspend", "resume", "outputs", "history"])
def test_help_and_every_flag_documented(pc_bin, cmd):
    r = run(pc_bin, cmd, "--help", check=0)
    assert r.stdout.startswith(f"Usage: pulumi-controller {cmd}")
    assert "Exit status:" in r.stdout and "--kubeconfig" in r.stdout
    assert cmd in run(pc_bin, "--help", check=0).stdout
    doc = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    assert f"## {cmd}" in doc or f" and {cmd}" in doc
    for flag in set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", r.stdout)):
        assert f"`{flag}" in doc, f"{cmd} {flag} is not in docs/cli.md"


def test_missing_kubeconfig_is_named(pc_bin, tmp_path):
    r = run(pc_bin, "get", kubeconfig=tmp_path / "absent.yaml", check=1)
    assert str(tmp_path / "absent.yaml") in r.stderr


SECRET_VALUE = "hostile-secret-value-0f3a"


def _b64(s):
    return base64.b64encode(s.encode()).decode()


HOSTILE_STACKS = {
    "empty": {},
    "types": {"metadata": {"name": 5, "uid": ["x"], "generation": "2",
                           "creationTimestamp": 12, "annotations": "x"},
              "spec": {"suspend": "true", "fluxSource": {"sourceRef": "app"}},
              "status": {"conditions": {"type": "Ready"}, "lastUpdate": [], "history": {"a": 1},
                         "currentUpdate": 3, "observedGeneration": 1e308,
                         "lastHandledReconcileAt": 7}},
    "lists": {"metadata": {"name": "lists", "uid": "u-1"},
              "spec": {"programRef": {"repo": 1}},
              "status": {"conditions": [None, 3, {"type": 1}, {"type": "Ready", "status": 1,
                                                                "message": ["x"]}],
                         "history": [None, 1, "x", {"startTime": "nope", "endTime": 5,
                                                    "resourceChanges": [1], "generation": -3},
                                     {"type": "\x1b[2Jup", "result": "ok\nforged line",
                                      "revision": "r" * 5000}]}},
    "control": {"metadata": {"name": "control", "uid": "u-2",
                             "creationTimestamp": "2026-12-01T00:00:00Z"},
                "spec": {"fluxSource": {"sourceRef": {"apiVersion": "x", "kind": "Pod",
                                                      "name": "../../etc"}}},
                "status": {"conditions": [{"type": "Ready", "status": "False",
                                           "reason": "\x07bell", "message": "a\rb\x1b]0;t\x07"}],
                           "lastUpdate": {"type": "up", "state": "\x00", "endTime": "2026-12-01T00:00:00Z"}}},
}

HOSTILE_SECRETS = {
    # not the Stack's: refused
    "empty": {},
    # the annotation unreadable: everything masked
    "types": {"metadata": {"ownerReferences": [{"kind": "Stack", "uid": ["x"]}]},
              "data": {"a": _b64(SECRET_VALUE)}},
    "lists": {"metadata": {"ownerReferences": [None, {"kind": "Stack", "uid": "u-1"}],
                           "annotations": {"pulumi.com/secrets": "[1, 2"}},
              "data": {"s": _b64(SECRET_VALUE), "n": 5, "bad": "%%%", "bin": _b64("a\0b")}},
    "control": {"metadata": {"ownerReferences": [{"kind": "Stack", "uid": "u-2"}],
                             "annotations": {"pulumi.com/secrets": '["s"]'}},
                "data": {"s": _b64(SECRET_VALUE), "plain": _b64("ok\x1b[31m")}},
}


class _Hostile(BaseHTTPRequestHandler):
    """An "API server" whose Stacks and Secrets are malformed in every way the
    schema forbids; list pages repeat their continue token."""

    def log_message(self, *args):
        pass

    def _send(self, code, body):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        path = self.path.split("?")[0]
        m = re.fullmatch(r"/apis/pulumi\.com/v1/namespaces/(\w+)/stacks(?:/([\w-]+))?", path)
        s = re.fullmatch(r"/api/v1/namespaces/\w+/secrets/([\w-]+)-outputs", path)
        if m and m.group(1) == "notjson":
            return self._send(200, b"{\"items\": [")
        if m and m.group(1) == "loop":
            return self._send(200, {"items": [HOSTILE_STACKS["lists"]],
                                    "metadata": {"continue": "same"}})
        if m and m.group(1) == "scalar":
            return self._send(200, "just a string")
        if m and m.group(2) is None:
            return self._send(200, {"items": list(HOSTILE_STACKS.values()) + [7, None, "x"],
                                    "metadata": {"continue": 5}})
        if m and m.group(2) == "array":
            return self._send(200, [1, 2])
        if m and m.group(2) in HOSTILE_STACKS:
            return self._send(200, HOSTILE_STACKS[m.group(2)])
        if s and s.group(1) in HOSTILE_SECRETS:
            return self._send(200, HOSTILE_SECRETS[s.group(1)])
        return self._send(404, {"kind": "Status", "code": 404, "reason": "NotFound",
                                "message": "not here"})

    def do_PATCH(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        return self._send(200, {"metadata": "patched?"})


@pytest.fixture
def hostile_api(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kc = tmp_path / "hostile.kubeconfig"
    kc.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "h",
        "clusters": [{"name": "h", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
        "contexts": [{"name": "h", "context": {"cluster": "h", "namespace": "ns"}}]}))
    yield kc
    server.shutdown()


def test_hostile_api_answers_do_not_crash(pc_bin, hostile_api):
    """Every command against answers of the wrong shape: exit 0 or 1 with a message,
    no sanitizer report, no control character from the server on the terminal, and no
    secret value without --show-secrets even when the annotation is unreadable."""
    kc = hostile_api
    runs = [["get"], ["get", "-A"], ["get", "-o", "json"], ["get", "-o", "yaml"],
            ["get", "-n", "notjson"], ["get", "-n", "loop"], ["get", "-n", "scalar"],
            ["get", "array"]]
    for name in list(HOSTILE_STACKS) + ["array"]:
        runs += [["get", name], ["get", name, "-o", "yaml"], ["history", name],
                 ["history", name, "-o", "json"], ["outputs", name], ["outputs", name, "-o", "json"],
                 ["reconcile", name, "--timeout", "1s"], ["reconcile", name, "--with-source",
                                                          "--timeout", "1s"],
                 ["suspend", name], ["resume", name, "--timeout", "1s"]]
    for args in runs:
        r = run(pc_bin, *args, kubeconfig=kc, timeout=60)
        assert r.returncode in (0, 1), f"{args}: {r.returncode}\n{r.stdout}\n{r.stderr}"
        for c in ("\x1b", "\x07", "\x00", "\r"):        # json and yaml escape them too
            assert c not in r.stdout + r.stderr, (args, r.stdout, r.stderr)
        if args[0] == "outputs":
            assert SECRET_VALUE not in r.stdout + r.stderr, args
    r = run(pc_bin, "get", "-n", "loop", kubeconfig=kc, check=1)
    assert "same continue token twice" in r.stderr
    r = run(pc_bin, "outputs", "empty", kubeconfig=kc, check=1)
    assert "is not owned by Stack" in r.stderr
    r = run(pc_bin, "outputs", "types", "-o", "json", kubeconfig=kc, check=1)
    assert "is not owned" in r.stderr           # a uid that is a list owns nothing
    r = run(pc_bin, "outputs", "lists", "-o", "json", kubeconfig=kc, check=0)
    assert json.loads(r.stdout) == {"bad": "[secret]", "bin": "[secret]", "n": "[secret]",
                                    "s": "[secret]"}
    assert "annotation is missing or unreadable" in r.stderr
    r = run(pc_bin, "outputs", "lists", "-o", "json", "--show-secrets", kubeconfig=kc, check=0)
    assert json.loads(r.stdout) == {"bad": "(not a text value)", "bin": "(not a text value)",
                                    "n": "(not a text value)", "s": SECRET_VALUE}
    r = run(pc_bin, "outputs", "control", kubeconfig=kc, check=0)
    assert {x["OUTPUT"]: x["VALUE"] for x in table(r.stdout)} == {"plain": "ok\\x1b[31m",
                                                                 "s": "[secret]"}
