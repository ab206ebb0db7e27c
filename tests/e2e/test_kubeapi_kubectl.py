"""Fidelity of the API-server emulator, proven with the real kubectl.

Each test drives kubectl and checks what it prints and what the server then holds.
Tests that need no emulator-only knob run both ways through `any_kubeapi`: against a
fresh emulator (the /usr/bin/kubectl dispatcher picks kubectl 1.<minor> from its
/version) and against the session's real kube-apiserver (the kubectl built with it),
in a fresh namespace that is the kubeconfig's default.  Each test's Widget CRD has a
group of its own, because CRDs are shared by the real server's whole session; kubectl
is given the qualified resource (widgets.<group>) so that no other group's widgets
can answer.  Tests that read the emulator's request log or set its version stay on
`kubeapi` and say so.
"""
import json
import secrets

import pytest
import yaml

from kube_fixtures import wait_for
from real_fixtures import EmulatorView
from test_kubeapi_api import FLUX_SOURCE

CRD_GV = "apiextensions.k8s.io/v1"


def widget_crd(group):
    return f"""
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.{group}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: widgets, singular: widget, kind: Widget}}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {{status: {{}}}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {{type: object, properties: {{size: {{type: integer}}}}}}
          status: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"""


class Widgets:
    """One test's Widget CRD (group w<hex>.example.com) on the server under test."""

    def __init__(self, api, tmp_path):
        self.api, self.tmp_path = api, tmp_path
        self.group = f"w{secrets.token_hex(3)}.example.com"
        self.gv = f"{self.group}/v1"
        self.resource = f"widgets.{self.group}"     # what kubectl is given
        self.crd_file = tmp_path / "crd.yaml"
        self.crd_file.write_text(widget_crd(self.group))
        self.installed = False

    def obj(self, name, size=3, labels=None, **meta):
        return {"apiVersion": self.gv, "kind": "Widget",
                "metadata": dict(meta, name=name, labels=labels or {"app": "demo"}),
                "spec": {"size": size}}

    def install(self):
        """kubectl apply of the CRD, then a wait until it is served: the real server
        serves a new CRD a moment after the apply returns."""
        out = self.api.kubectl("apply", "--server-side", "-f", self.crd_file).stdout
        self.installed = True
        self.api.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                         f"crd/{self.resource}")
        wait_for(lambda: self.api.client.raw("GET", f"/apis/{self.gv}")[0] == 200,
                 what="the widget group to be served")
        return out

    def setup(self, *objs):
        self.install()
        ns = self.api.namespace
        for obj in objs:
            obj = dict(obj, metadata=dict(obj["metadata"], namespace=ns))
            self.api.client.create(obj, "widgets")

    def get(self, name):
        return self.api.client.get(self.gv, "widgets", name, self.api.namespace)

    def remove(self):
        if self.installed:
            self.api.client.raw("DELETE", f"/apis/{CRD_GV}/customresourcedefinitions/"
                                f"{self.resource}")


@pytest.fixture
def widgets(any_kubeapi, tmp_path):
    w = Widgets(any_kubeapi, tmp_path)
    yield w
    w.remove()


@pytest.fixture
def emulator_widgets(kubeapi, tmp_path):
    w = Widgets(EmulatorView(kubeapi), tmp_path)
    yield w
    w.remove()


def _read_until(proc, predicate, timeout=30):
    """Reads kubectl's stdout lines until predicate(lines) holds (a reader thread keeps
    the pipe drained so no line waits in a buffer)."""
    import queue
    import threading
    import time
    if not hasattr(proc, "lines"):
        proc.lines, proc.seen = queue.Queue(), []

        def pump():
            for line in proc.stdout:
                proc.lines.put(line.rstrip("\n"))
            proc.lines.put(None)
        threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout
    while not predicate(proc.seen):
        try:
            line = proc.lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"kubectl printed {proc.seen}") from None
        if line is None:
            raise AssertionError(f"kubectl ended early: {proc.seen} {proc.stderr.read()}")
        proc.seen.append(line)
    return proc.seen


def _stop(proc):
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_apply_crd_then_custom_object_server_side(any_kubeapi, widgets):
    out = widgets.install()
    assert f"customresourcedefinition.apiextensions.k8s.io/{widgets.resource} " \
           "serverside-applied" in out
    w = widgets.tmp_path / "w1.yaml"
    w.write_text(json.dumps(widgets.obj("w1")))
    assert f"widget.{widgets.group}/w1 serverside-applied" in any_kubeapi.kubectl(
        "apply", "--server-side", "-f", w).stdout
    got = widgets.get("w1")
    assert got["spec"] == {"size": 3}
    assert got["metadata"]["generation"] == 1
    managers = {m["manager"]: m for m in got["metadata"]["managedFields"]}
    assert managers["kubectl"]["operation"] == "Apply"
    listed = any_kubeapi.kubectl("get", widgets.resource, "-o", "name").stdout.split()
    assert listed == [f"widget.{widgets.group}/w1"]


def test_get_watch_streams_changes(any_kubeapi, widgets):
    api, ns = any_kubeapi, any_kubeapi.namespace
    widgets.setup(widgets.obj("w1"))
    proc = api.kubectl_bg("get", widgets.resource, "-w", "--output-watch-events", "-o",
                          "custom-columns=TYPE:.type,NAME:.object.metadata.name,"
                          "SIZE:.object.spec.size")
    try:
        # w1 printed: kubectl has listed, and watches from the list's version, so
        # nothing written from now on can be missed
        _read_until(proc, lambda ls: any("w1" in line for line in ls))
        api.client.create(widgets.obj("w2", 7, namespace=ns), "widgets")
        api.client.patch(widgets.gv, "widgets", "w1", {"spec": {"size": 9}}, ns)
        api.client.delete(widgets.gv, "widgets", "w2", ns)
        lines = _read_until(proc, lambda ls: any(line.startswith("DELETED") for line in ls))
        events = [line.split() for line in lines if line.split()[0] in
                  ("ADDED", "MODIFIED", "DELETED")]
        assert ["ADDED", "w2", "7"] in events
        assert ["MODIFIED", "w1", "9"] in events
        assert ["DELETED", "w2", "7"] in events
    finally:
        _stop(proc)


def test_annotate_and_merge_patch_follow_generation_rules(any_kubeapi, widgets):
    api = any_kubeapi
    widgets.setup(widgets.obj("w1"))
    before = widgets.get("w1")
    api.kubectl("annotate", widgets.resource, "w1", "team=blue")
    annotated = widgets.get("w1")
    assert annotated["metadata"]["annotations"] == {"team": "blue"}
    assert annotated["metadata"]["generation"] == 1
    assert int(annotated["metadata"]["resourceVersion"]) > int(
        before["metadata"]["resourceVersion"])
    api.kubectl("patch", widgets.resource, "w1", "--type", "merge", "-p",
                '{"spec":{"size":5}}')
    patched = widgets.get("w1")
    assert patched["spec"]["size"] == 5
    assert patched["metadata"]["generation"] == 2
    managers = {(m["manager"], m["operation"]) for m in patched["metadata"]["managedFields"]}
    assert ("kubectl-annotate", "Update") in managers
    assert ("kubectl-patch", "Update") in managers
    # the same merge patch again changes nothing: no new resourceVersion
    api.kubectl("patch", widgets.resource, "w1", "--type", "merge", "-p",
                '{"spec":{"size":5}}')
    again = widgets.get("w1")
    assert again["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"]


def test_strategic_merge_patch_on_custom_resource_is_415(any_kubeapi, widgets):
    api, ns = any_kubeapi, any_kubeapi.namespace
    widgets.setup(widgets.obj("w1"))
    proc = api.kubectl("patch", widgets.resource, "w1", "-p", '{"spec":{"size":4}}',
                       check=False)
    assert proc.returncode != 0
    assert "the body of the request was in an unknown format - accepted media types " \
           "include: application/json-patch+json, application/merge-patch+json, " \
           "application/apply-patch+yaml" in proc.stderr
    # built-in kinds accept it
    api.client.create({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "c1", "namespace": ns},
                       "data": {"a": "1"}}, "configmaps")
    api.kubectl("patch", "configmap", "c1", "-p", '{"data":{"b":"2"}}')
    assert api.client.get("v1", "configmaps", "c1", ns)["data"] == {"a": "1", "b": "2"}


def test_wait_for_condition_set_through_status_subresource(any_kubeapi, widgets):
    api, ns = any_kubeapi, any_kubeapi.namespace
    widgets.setup(widgets.obj("w1"))
    proc = api.kubectl_bg("wait", "--for=condition=Ready", f"{widgets.resource}/w1",
                          "--timeout=30s")
    try:
        # status written through the main resource is ignored
        api.client.patch(widgets.gv, "widgets", "w1",
                         {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
                         ns)
        assert "status" not in widgets.get("w1")
        api.patch_status(widgets.gv, "widgets", "w1",
                         {"conditions": [{"type": "Ready", "status": "True",
                                          "reason": "Done", "message": "",
                                          "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
                         ns)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert f"widget.{widgets.group}/w1 condition met" in out
        assert widgets.get("w1")["metadata"]["generation"] == 1
    finally:
        _stop(proc)


def test_delete_waits_for_finalizer_release(any_kubeapi, widgets):
    api = any_kubeapi
    widgets.setup(widgets.obj("w1", finalizers=["example.com/hold"]))
    proc = api.kubectl_bg("delete", widgets.resource, "w1", "--timeout=30s")
    try:
        held = wait_for(lambda: widgets.get("w1")["metadata"].get("deletionTimestamp") and
                        widgets.get("w1"), what="deletionTimestamp")
        assert held["metadata"]["generation"] == 2
        assert proc.poll() is None, "kubectl delete returned while the finalizer held"
        api.kubectl("patch", widgets.resource, "w1", "--type", "json", "-p",
                    '[{"op":"remove","path":"/metadata/finalizers"}]')
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert f'widget.{widgets.group} "w1" deleted' in out
        gone = api.kubectl("get", widgets.resource, "w1", check=False)
        assert gone.returncode != 0
        assert f'{widgets.resource} "w1" not found' in gone.stderr
    finally:
        _stop(proc)


def test_label_selectors(any_kubeapi, widgets):
    widgets.setup(widgets.obj("a", labels={"app": "web", "tier": "front"}),
                  widgets.obj("b", labels={"app": "web", "tier": "back"}),
                  widgets.obj("c", labels={"app": "db"}),
                  widgets.obj("d", labels={"app": "cache", "tier": "back"}))

    def names(selector):
        out = any_kubeapi.kubectl("get", widgets.resource, "-l", selector, "-o",
                                  "jsonpath={.items[*].metadata.name}").stdout
        return out.split()
    assert names("app=web") == ["a", "b"]
    assert names("app==web,tier=back") == ["b"]
    assert names("app!=web") == ["c", "d"]
    assert names("app in (db,cache)") == ["c", "d"]
    assert names("app notin (web)") == ["c", "d"]
    assert names("tier") == ["a", "b", "d"]
    assert names("!tier") == ["c"]
    bad = any_kubeapi.kubectl("get", widgets.resource, "-l", "a b c", check=False)
    assert bad.returncode != 0


def test_pagination_with_chunk_size(any_kubeapi, widgets):
    widgets.setup(*[widgets.obj(f"w{i}") for i in range(7)])
    out = any_kubeapi.kubectl("get", widgets.resource, "--chunk-size=2", "-o",
                              "name").stdout.split()
    assert out == [f"widget.{widgets.group}/w{i}" for i in range(7)]


def test_chunk_size_is_limit_and_continue(kubeapi, emulator_widgets):
    # emulator only: the request log shows the pages kubectl asked for
    emulator_widgets.setup(*[emulator_widgets.obj(f"w{i}") for i in range(7)])
    since = kubeapi.requests()[-1]["seq"]
    kubeapi.kubectl("get", emulator_widgets.resource, "--chunk-size=2", "-o", "name")
    lists = [r for r in kubeapi.requests(since)
             if r["method"] == "GET" and r["path"].endswith("/widgets")]
    assert [r["query"].get("limit") for r in lists] == ["2"] * 4
    assert sum(1 for r in lists if "continue" in r["query"]) == 3


@pytest.mark.parametrize("minor,discovery", [(29, "aggregated"), (30, "legacy"),
                                             (31, "aggregated"), (32, "legacy"),
                                             (33, "aggregated")])
def test_each_kubectl_version_applies_with_validation_gets_and_waits(kubeapi_factory, tmp_path,
                                                                      minor, discovery):
    """The dispatcher runs kubectl 1.<minor>; apply keeps default (strict) validation,
    which only passes when the OpenAPI v3 document satisfies kubectl.  Discovery is
    aggregated (apidiscovery v2, or v2beta1 for kubectl 1.29) or legacy (one request per
    group-version)."""
    # emulator only: the server's version (`--minor`) picks the kubectl, and the
    # request log shows what it sent
    api = kubeapi_factory(minor=minor, discovery=discovery)
    widgets = Widgets(EmulatorView(api), tmp_path)
    assert f"Server Version: v1.{minor}.0" in api.kubectl("version").stdout
    widgets.install()
    w = tmp_path / "w.yaml"
    w.write_text(json.dumps(widgets.obj("w1")))
    api.kubectl("apply", "--server-side", "-f", w)
    applies = [r for r in api.requests() if r["method"] == "PATCH"]
    assert applies[-1]["query"]["fieldValidation"] == "Strict"
    assert applies[-1]["userAgent"].startswith(f"kubectl.1.{minor}/v1.{minor}.") or \
        applies[-1]["userAgent"].startswith(f"kubectl/v1.{minor}.")
    api.patch_status(widgets.gv, "widgets", "w1",
                     {"conditions": [{"type": "Ready", "status": "True"}]}, "default")
    out = api.kubectl("wait", "--for=condition=Ready", f"{widgets.resource}/w1",
                      "--timeout=20s").stdout
    assert "condition met" in out
    assert api.kubectl("get", widgets.resource, "w1", "-o",
                       "jsonpath={.spec.size}").stdout == "3"
    discovered = [r for r in api.requests() if r["path"] in ("/api", f"/apis/{widgets.gv}")
                  and r["userAgent"].startswith("kubectl")]
    if discovery == "legacy":
        assert f"/apis/{widgets.gv}" in [r["path"] for r in discovered]
    else:
        assert [r["path"] for r in discovered] == ["/api"] * len(discovered)


@pytest.mark.parametrize("watch_list", [True, False])
def test_watch_list_client_with_and_without_server_support(kubeapi_factory, tmp_path,
                                                           watch_list):
    """kubectl >= 1.35 (here 1.33 with the feature forced on) waits with a sendInitialEvents
    watch; a server without WatchList answers 422 and kubectl falls back to list+watch."""
    # emulator only: a server without WatchList (`watch_list=False`), and the request log
    api = kubeapi_factory(minor=33, watch_list=watch_list)
    widgets = Widgets(EmulatorView(api), tmp_path)
    widgets.setup(widgets.obj("w1"))
    since = api.requests()[-1]["seq"]
    proc = api.kubectl_bg("wait", "--for=condition=Ready", f"{widgets.resource}/w1",
                          "--timeout=30s", env={"KUBE_FEATURE_WatchListClient": "true"})
    try:
        api.wait_watches(1, resource="widgets")
        api.patch_status(widgets.gv, "widgets", "w1",
                         {"conditions": [{"type": "Ready", "status": "True"}]}, "default")
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "condition met" in out
    finally:
        _stop(proc)
    watch_lists = [r for r in api.requests(since)
                   if r["query"].get("sendInitialEvents") == "true"]
    assert watch_lists, "kubectl did not try a watch-list request"
    if watch_list:
        assert all(r["code"] == 200 for r in watch_lists)
    else:
        assert watch_lists[0]["code"] == 422
        assert any(r["query"].get("limit") == "500" for r in api.requests(since))


def test_wrong_token_is_refused(any_kubeapi, tmp_path):
    api = any_kubeapi
    bad = api.write_kubeconfig(tmp_path / "bad.kubeconfig", token="not-the-token")
    proc = api.kubectl("get", "configmaps", kubeconfig=bad, check=False)
    assert proc.returncode != 0
    assert "Unauthorized" in proc.stderr or "provide credentials" in proc.stderr
    # a kubeconfig's tokenFile holds the token alone (the real server's own token
    # file is a CSV of token, user, uid and groups)
    token_file = tmp_path / "token"
    token_file.write_text(api.token + "\n")
    token_file.chmod(0o600)
    good = api.write_kubeconfig(tmp_path / "tf.kubeconfig", token_file=str(token_file))
    listed = set(api.kubectl("get", "namespaces", "-o", "name", kubeconfig=good).stdout.split())
    assert {"namespace/default", "namespace/kube-node-lease", "namespace/kube-public",
            "namespace/kube-system", f"namespace/{api.namespace}"} <= listed
    # system:masters: the real server authorizes with RBAC (the emulator lets any
    # authenticated user do anything)
    cert = api.write_kubeconfig(tmp_path / "cert.kubeconfig",
                                client_cert=("alice", ["system:masters"]))
    assert api.kubectl("get", "ns", "default", "-o", "name",
                       kubeconfig=cert).stdout.strip() == "namespace/default"


def test_fresh_emulator_has_only_the_system_namespaces(kubeapi):
    # emulator only: the real server's session holds every test's namespace
    assert kubeapi.kubectl("get", "namespaces", "-o", "name").stdout.split() == \
        ["namespace/default", "namespace/kube-node-lease", "namespace/kube-public",
         "namespace/kube-system"]


def test_stack_and_flux_kinds_print_their_columns(any_kubeapi, tmp_path):
    api, ns = any_kubeapi, any_kubeapi.namespace
    stack = tmp_path / "stack.yaml"
    stack.write_text(json.dumps({
        "apiVersion": "pulumi.com/v1", "kind": "Stack", "metadata": {"name": "web"},
        "spec": {"stack": "org/web/dev", "fluxSource": {"sourceRef": {
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "name": "repo"}, "dir": "infra"}, "config": {"replicas": 3, "tags": {"a": "b"}}}}))
    api.kubectl("apply", "--server-side", "-f", stack)
    api.patch_status("pulumi.com/v1", "stacks", "web", {
        "observedGeneration": 1, "artifact": {"revision": "main@sha1:abc", "digest": "sha256:0"},
        "lastAppliedRevision": "main@sha1:abc",
        "lastUpdate": {"state": "succeeded", "lastAttemptedCommit": "main@sha1:abc"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded",
                        "message": "ok", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}, ns)
    out = api.kubectl("get", "stacks").stdout.splitlines()
    assert out[0].split() == ["NAME", "READY", "REASON", "REVISION", "SUSPENDED", "AGE"]
    assert out[1].split()[:4] == ["web", "True", "Succeeded", "main@sha1:abc"]
    wide = api.kubectl("get", "stacks", "-o", "wide").stdout.splitlines()
    assert "STACK" in wide[0].split() and "org/web/dev" in wide[1].split()
    # PKO's columns, by their names, for its users' scripts
    assert all(c in wide[0] for c in ("LAST UPDATE", "LAST COMMIT", "RECONCILING", "STALLED",
                                      "PERMALINK")), wide[0]
    head, cells = wide[0], wide[1].ljust(len(wide[0]))
    starts = {c: head.index(c) for c in ("LAST UPDATE", "LAST COMMIT", "RECONCILING", "STALLED")}
    row = {c: cells[i:].split(maxsplit=1)[0] if cells[i:].strip() and cells[i] != " " else ""
           for c, i in starts.items()}
    assert row == {"LAST UPDATE": "succeeded", "LAST COMMIT": "main@sha1:abc", "RECONCILING": "",
                   "STALLED": ""}
    got = api.client.get("pulumi.com/v1", "stacks", "web", ns)
    assert got["spec"]["config"] == {"replicas": 3, "tags": {"a": "b"}}
    bad = tmp_path / "bad.yaml"
    bad.write_text(json.dumps({"apiVersion": "pulumi.com/v1", "kind": "Stack",
                               "metadata": {"name": "bad"}, "spec": {"refresh": True}}))
    proc = api.kubectl("apply", "--server-side", "-f", bad, check=False)
    assert proc.returncode != 0 and "spec.stack: Required value" in proc.stderr
    # a field the schema lacks fails the apply before any validation (kube-apiserver 1.37)
    bad.write_text(json.dumps({"apiVersion": "pulumi.com/v1", "kind": "Stack",
                               "metadata": {"name": "bad"}, "spec": {"dir": "x"}}))
    proc = api.kubectl("apply", "--server-side", "-f", bad, check=False)
    assert proc.returncode != 0
    assert f"failed to create typed patch object ({ns}/bad; pulumi.com/v1, Kind=Stack): " \
           ".spec.dir: field not declared in schema" in proc.stderr
    # The emulator's Flux CRDs (tests/e2e/crds) still serve v1beta2, deprecated, as Flux up to
    # 2.6 did; Flux 2.9's own, which the real tier installs once its source-controller runs
    # (flux_fixtures.py), serve v1 only.
    crd = api.client.get("apiextensions.k8s.io/v1", "customresourcedefinitions",
                         "ocirepositories.source.toolkit.fluxcd.io")
    old = "v1beta2" in {v["name"] for v in crd["spec"]["versions"] if v.get("served")}
    oci = tmp_path / "oci.yaml"
    oci.write_text(json.dumps({"apiVersion": "source.toolkit.fluxcd.io/" +
                               ("v1beta2" if old else "v1"),
                               "kind": "OCIRepository", "metadata": {"name": "o"},
                               "spec": {"url": "oci://r/x", "interval": "5m"}}))
    proc = api.kubectl("apply", "--server-side", "-f", oci)
    assert ("v1beta2 OCIRepository is deprecated, upgrade to v1" in proc.stderr) == old
    v1 = api.client.get("source.toolkit.fluxcd.io/v1", "ocirepositories", "o", ns)
    assert v1["apiVersion"] == "source.toolkit.fluxcd.io/v1"
    assert v1["status"] == {"observedGeneration": -1}
    assert v1["spec"]["provider"] == "generic"


def _reconciling_stack(api):
    ns = api.namespace
    api.client.create({"apiVersion": "pulumi.com/v1", "kind": "Stack",
                       "metadata": {"name": "web", "namespace": ns},
                       "spec": {"stack": "dev", "fluxSource": FLUX_SOURCE}}, "stacks")
    api.patch_status("pulumi.com/v1", "stacks", "web", {"conditions": [
        {"type": "Ready", "status": "False", "reason": "Reconciling", "message": "",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}, ns)


def test_get_watch_with_table_output(any_kubeapi):
    """Plain `kubectl get -w` prints the server's Table rows, also for watch events."""
    proc = any_kubeapi.kubectl_bg("get", "stacks", "-w")
    try:
        # the Stack may be written before or after kubectl's list: either way the
        # last row printed is its Reconciling state, under the one header
        _reconciling_stack(any_kubeapi)
        lines = _read_until(proc, lambda ls: any("Reconciling" in line for line in ls))
        assert lines[0].split() == ["NAME", "READY", "REASON", "REVISION", "SUSPENDED", "AGE"]
        assert lines[-1].split()[:3] == ["web", "False", "Reconciling"]
    finally:
        _stop(proc)


def test_get_watch_asks_for_tables(kubeapi):
    # emulator only: the request log shows the watch's Accept header
    proc = kubeapi.kubectl_bg("get", "stacks", "-w")
    try:
        kubeapi.wait_watches(1, resource="stacks")
        _reconciling_stack(EmulatorView(kubeapi))
        _read_until(proc, lambda ls: any("Reconciling" in line for line in ls))
    finally:
        _stop(proc)
    watches = [r for r in kubeapi.requests() if r["query"].get("watch") == "true"]
    assert "as=Table" in watches[-1]["accept"]


def test_server_side_apply_conflicts_force_and_field_removal(any_kubeapi, widgets):
    api = any_kubeapi
    widgets.setup()
    w = widgets.tmp_path / "w.yaml"
    w.write_text(json.dumps(widgets.obj("w1", 3, labels={"app": "demo", "tier": "web"})))
    api.kubectl("apply", "--server-side", "-f", w)
    api.kubectl("patch", widgets.resource, "w1", "--type", "merge", "-p",
                '{"spec":{"size":4}}')
    w.write_text(json.dumps(widgets.obj("w1", 5, labels={"app": "demo", "tier": "web"})))
    proc = api.kubectl("apply", "--server-side", "-f", w, check=False)
    assert proc.returncode != 0
    assert f'Apply failed with 1 conflict: conflict with "kubectl-patch" using {widgets.gv}: ' \
           '.spec.size' in proc.stderr
    api.kubectl("apply", "--server-side", "--force-conflicts", "-f", w)
    assert widgets.get("w1")["spec"]["size"] == 5
    # a label dropped from the applied manifest is removed; one set by another manager stays
    api.kubectl("label", widgets.resource, "w1", "owner=ops")
    w.write_text(json.dumps(widgets.obj("w1", 5)))
    api.kubectl("apply", "--server-side", "-f", w)
    got = widgets.get("w1")
    assert got["metadata"]["labels"] == {"app": "demo", "owner": "ops"}
    assert got["metadata"]["generation"] == 3


def _typed_creates(api, team):
    api.kubectl("create", "namespace", team)
    api.kubectl("create", "configmap", "c1", "--from-literal=a=b", "-n", team)
    api.kubectl("create", "secret", "generic", "s1", "--from-literal=token=abc", "-n", team)
    api.kubectl("create", "secret", "docker-registry", "pull", "--docker-server=r.io",
                "--docker-username=u", "--docker-password=p", "-n", team)
    api.kubectl("create", "serviceaccount", "runner", "-n", team)


def test_typed_create_commands(any_kubeapi):
    """kubectl create configmap/secret/namespace/serviceaccount: the objects the typed
    commands build (their protobuf bodies: next test)."""
    c = any_kubeapi.client
    team = f"team-{secrets.token_hex(3)}"      # namespaces are shared by the real session
    try:
        _typed_creates(any_kubeapi, team)
        assert c.get("v1", "namespaces", team)["status"]["phase"] == "Active"
        assert c.get("v1", "configmaps", "c1", team)["data"] == {"a": "b"}
        assert c.get("v1", "secrets", "s1", team)["data"] == {"token": "YWJj"}
        pull = c.get("v1", "secrets", "pull", team)
        assert pull["type"] == "kubernetes.io/dockerconfigjson"
        assert ".dockerconfigjson" in pull["data"]
        assert c.get("v1", "serviceaccounts", "runner", team)["metadata"]["namespace"] == team
    finally:
        c.raw("DELETE", f"/api/v1/namespaces/{team}")


def test_typed_create_commands_send_protobuf(kubeapi):
    # emulator only: the request log shows the bodies' content type
    _typed_creates(kubeapi, "team")
    posts = [r for r in kubeapi.requests() if r["method"] == "POST"]
    assert all(r["contentType"] == "application/vnd.kubernetes.protobuf" for r in posts[-5:])


def test_prune_jobs_get_all_and_auth_can_i(any_kubeapi, tmp_path):
    """The workload kinds, enough for kubectl's prune allow-list, `get all` and a
    controller that runs Jobs (no Pods appear: nothing runs the Job on either server);
    `auth can-i` says yes to the test's user (the emulator to anyone)."""
    api, ns = any_kubeapi, any_kubeapi.namespace
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "update-web",
                                                                 "labels": {"app": "x"}},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
               {"name": "pulumi", "image": "pulumi"}]}}}}
    keep = {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "keep", "labels": {"app": "x"}}, "data": {"a": "b"}}
    both = tmp_path / "both.yaml"
    both.write_text(yaml.safe_dump_all([job, keep]))
    api.kubectl("apply", "-f", both)
    assert api.kubectl("get", "all", "-o", "name").stdout.split() == ["job.batch/update-web"]
    got = api.client.get("batch/v1", "jobs", "update-web", ns)
    assert got["metadata"]["generation"] == 1
    assert got["spec"]["template"]["spec"]["containers"][0]["image"] == "pulumi"
    only = tmp_path / "only.yaml"
    only.write_text(json.dumps(keep))
    out = api.kubectl("apply", "--prune", "-l", "app=x", "-f", only).stdout
    assert "job.batch/update-web pruned" in out
    assert api.kubectl("get", "jobs", "-o", "name").stdout.strip() == ""
    assert api.kubectl("auth", "can-i", "delete", "stacks").stdout.strip() == "yes"
