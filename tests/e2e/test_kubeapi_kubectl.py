"""Fidelity of the API-server emulator, proven with the real kubectl.

Each test drives /usr/bin/kubectl (the dispatcher picks kubectl 1.<minor>
from the emulator's /version) against a fresh emulator and checks what
kubectl prints and what the server then holds.
"""
import json

import pytest
import yaml

from kube_fixtures import wait_for

WIDGET_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
"""


def widget(name, size=3, labels=None):
    return {"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": name, "labels": labels or {"app": "demo"}},
            "spec": {"size": size}}


def test_apply_crd_then_custom_object_server_side(kubeapi, tmp_path):
    crd = tmp_path / "crd.yaml"
    crd.write_text(WIDGET_CRD)
    out = kubeapi.kubectl("apply", "--server-side", "-f", crd).stdout
    assert "widgets.example.com serverside-applied" in out
    w = tmp_path / "w1.yaml"
    w.write_text(json.dumps(widget("w1")))
    assert "widget.example.com/w1 serverside-applied" in kubeapi.kubectl(
        "apply", "--server-side", "-f", w).stdout
    got = kubeapi.client.get("example.com/v1", "widgets", "w1", "default")
    assert got["spec"] == {"size": 3}
    assert got["metadata"]["generation"] == 1
    managers = {m["manager"]: m for m in got["metadata"]["managedFields"]}
    assert managers["kubectl"]["operation"] == "Apply"
    listed = kubeapi.kubectl("get", "widgets", "-o", "name").stdout.split()
    assert listed == ["widget.example.com/w1"]


def _setup_widgets(kubeapi, tmp_path, *objs):
    crd = tmp_path / "crd.yaml"
    crd.write_text(WIDGET_CRD)
    kubeapi.kubectl("apply", "--server-side", "-f", crd)
    for obj in objs:
        obj = dict(obj)
        obj["metadata"] = dict(obj["metadata"], namespace="default")
        kubeapi.client.create(obj, "widgets")


def _read_until(proc, predicate, timeout=15):
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


def test_get_watch_streams_changes(kubeapi, tmp_path):
    _setup_widgets(kubeapi, tmp_path, widget("w1"))
    proc = kubeapi.kubectl_bg("get", "widgets", "-w", "--output-watch-events", "-o",
                              "custom-columns=TYPE:.type,NAME:.object.metadata.name,"
                              "SIZE:.object.spec.size")
    try:
        _read_until(proc, lambda ls: any("w1" in line for line in ls))
        kubeapi.wait_watches(1, resource="widgets")
        kubeapi.client.create(dict(widget("w2", 7), metadata={"name": "w2",
                                                               "namespace": "default"}),
                              "widgets")
        kubeapi.client.patch("example.com/v1", "widgets", "w1", {"spec": {"size": 9}},
                             "default")
        kubeapi.client.delete("example.com/v1", "widgets", "w2", "default")
        lines = _read_until(proc, lambda ls: any(line.startswith("DELETED") for line in ls))
        events = [line.split() for line in lines if line.split()[0] in
                  ("ADDED", "MODIFIED", "DELETED")]
        assert ["ADDED", "w2", "7"] in events
        assert ["MODIFIED", "w1", "9"] in events
        assert ["DELETED", "w2", "7"] in events
    finally:
        proc.kill()
        proc.wait()


def test_annotate_and_merge_patch_follow_generation_rules(kubeapi, tmp_path):
    _setup_widgets(kubeapi, tmp_path, widget("w1"))
    before = kubeapi.client.get("example.com/v1", "widgets", "w1", "default")
    kubeapi.kubectl("annotate", "widget", "w1", "team=blue")
    annotated = kubeapi.client.get("example.com/v1", "widgets", "w1", "default")
    assert annotated["metadata"]["annotations"] == {"team": "blue"}
    assert annotated["metadata"]["generation"] == 1
    assert int(annotated["metadata"]["resourceVersion"]) > int(
        before["metadata"]["resourceVersion"])
    kubeapi.kubectl("patch", "widget", "w1", "--type", "merge", "-p", '{"spec":{"size":5}}')
    patched = kubeapi.client.get("example.com/v1", "widgets", "w1", "default")
    assert patched["spec"]["size"] == 5
    assert patched["metadata"]["generation"] == 2
    managers = {(m["manager"], m["operation"]) for m in patched["metadata"]["managedFields"]}
    assert ("kubectl-annotate", "Update") in managers
    assert ("kubectl-patch", "Update") in managers
    # the same merge patch again changes nothing: no new resourceVersion
    kubeapi.kubectl("patch", "widget", "w1", "--type", "merge", "-p", '{"spec":{"size":5}}')
    again = kubeapi.client.get("example.com/v1", "widgets", "w1", "default")
    assert again["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"]


def test_strategic_merge_patch_on_custom_resource_is_415(kubeapi, tmp_path):
    _setup_widgets(kubeapi, tmp_path, widget("w1"))
    proc = kubeapi.kubectl("patch", "widget", "w1", "-p", '{"spec":{"size":4}}', check=False)
    assert proc.returncode != 0
    assert "the body of the request was in an unknown format - accepted media types " \
           "include: application/json-patch+json, application/merge-patch+json, " \
           "application/apply-patch+yaml" in proc.stderr
    # built-in kinds accept it
    kubeapi.client.create({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "c1", "namespace": "default"},
                           "data": {"a": "1"}}, "configmaps")
    kubeapi.kubectl("patch", "configmap", "c1", "-p", '{"data":{"b":"2"}}')
    assert kubeapi.client.get("v1", "configmaps", "c1", "default")["data"] == {"a": "1",
                                                                              "b": "2"}


def test_wait_for_condition_set_through_status_subresource(kubeapi, tmp_path):
    _setup_widgets(kubeapi, tmp_path, widget("w1"))
    proc = kubeapi.kubectl_bg("wait", "--for=condition=Ready", "widget/w1", "--timeout=30s")
    try:
        kubeapi.wait_watches(1, resource="widgets")
        assert proc.poll() is None
        # status written through the main resource is ignored
        kubeapi.client.patch("example.com/v1", "widgets", "w1",
                             {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
                             "default")
        assert "status" not in kubeapi.client.get("example.com/v1", "widgets", "w1", "default")
        assert proc.poll() is None
        kubeapi.patch_status("example.com/v1", "widgets", "w1",
                             {"conditions": [{"type": "Ready", "status": "True",
                                              "reason": "Done", "message": "",
                                              "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
                             "default")
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "widget.example.com/w1 condition met" in out
        assert kubeapi.client.get("example.com/v1", "widgets", "w1",
                                  "default")["metadata"]["generation"] == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_delete_waits_for_finalizer_release(kubeapi, tmp_path):
    w = widget("w1")
    w["metadata"]["finalizers"] = ["example.com/hold"]
    _setup_widgets(kubeapi, tmp_path, w)
    proc = kubeapi.kubectl_bg("delete", "widget", "w1", "--timeout=30s")
    try:
        held = wait_for(lambda: kubeapi.client.get("example.com/v1", "widgets", "w1", "default")
                        ["metadata"].get("deletionTimestamp") and
                        kubeapi.client.get("example.com/v1", "widgets", "w1", "default"),
                        what="deletionTimestamp")
        assert held["metadata"]["generation"] == 2
        kubeapi.wait_watches(1, resource="widgets")
        assert proc.poll() is None, "kubectl delete returned while the finalizer held"
        kubeapi.kubectl("patch", "widget", "w1", "--type", "json", "-p",
                        '[{"op":"remove","path":"/metadata/finalizers"}]')
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert 'widget.example.com "w1" deleted' in out
        gone = kubeapi.kubectl("get", "widget", "w1", check=False)
        assert gone.returncode != 0
        assert 'widgets.example.com "w1" not found' in gone.stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_label_selectors(kubeapi, tmp_path):
    _setup_widgets(kubeapi, tmp_path,
                   widget("a", labels={"app": "web", "tier": "front"}),
                   widget("b", labels={"app": "web", "tier": "back"}),
                   widget("c", labels={"app": "db"}),
                   widget("d", labels={"app": "cache", "tier": "back"}))

    def names(selector):
        out = kubeapi.kubectl("get", "widgets", "-l", selector, "-o",
                              "jsonpath={.items[*].metadata.name}").stdout
        return out.split()
    assert names("app=web") == ["a", "b"]
    assert names("app==web,tier=back") == ["b"]
    assert names("app!=web") == ["c", "d"]
    assert names("app in (db,cache)") == ["c", "d"]
    assert names("app notin (web)") == ["c", "d"]
    assert names("tier") == ["a", "b", "d"]
    assert names("!tier") == ["c"]
    bad = kubeapi.kubectl("get", "widgets", "-l", "a b c", check=False)
    assert bad.returncode != 0


def test_pagination_with_chunk_size(kubeapi, tmp_path):
    _setup_widgets(kubeapi, tmp_path, *[widget(f"w{i}") for i in range(7)])
    since = kubeapi.requests()[-1]["seq"]
    out = kubeapi.kubectl("get", "widgets", "--chunk-size=2", "-o", "name").stdout.split()
    assert out == [f"widget.example.com/w{i}" for i in range(7)]
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
    api = kubeapi_factory(minor=minor, discovery=discovery)
    assert f"Server Version: v1.{minor}.0" in api.kubectl("version").stdout
    crd = tmp_path / "crd.yaml"
    crd.write_text(WIDGET_CRD)
    api.kubectl("apply", "--server-side", "-f", crd)
    w = tmp_path / "w.yaml"
    w.write_text(json.dumps(widget("w1")))
    api.kubectl("apply", "--server-side", "-f", w)
    applies = [r for r in api.requests() if r["method"] == "PATCH"]
    assert applies[-1]["query"]["fieldValidation"] == "Strict"
    assert applies[-1]["userAgent"].startswith(f"kubectl.1.{minor}/v1.{minor}.") or \
        applies[-1]["userAgent"].startswith(f"kubectl/v1.{minor}.")
    api.patch_status("example.com/v1", "widgets", "w1",
                     {"conditions": [{"type": "Ready", "status": "True"}]}, "default")
    out = api.kubectl("wait", "--for=condition=Ready", "widget/w1", "--timeout=20s").stdout
    assert "condition met" in out
    assert api.kubectl("get", "widget", "w1", "-o", "jsonpath={.spec.size}").stdout == "3"
    discovered = [r for r in api.requests() if r["path"] in ("/api", "/apis/example.com/v1")
                  and r["userAgent"].startswith("kubectl")]
    if discovery == "legacy":
        assert "/apis/example.com/v1" in [r["path"] for r in discovered]
    else:
        assert [r["path"] for r in discovered] == ["/api"] * len(discovered)


@pytest.mark.parametrize("watch_list", [True, False])
def test_watch_list_client_with_and_without_server_support(kubeapi_factory, tmp_path,
                                                           watch_list):
    """kubectl >= 1.35 (here 1.33 with the feature forced on) waits with a sendInitialEvents
    watch; a server without WatchList answers 422 and kubectl falls back to list+watch."""
    api = kubeapi_factory(minor=33, watch_list=watch_list)
    _setup_widgets(api, tmp_path, widget("w1"))
    since = api.requests()[-1]["seq"]
    proc = api.kubectl_bg("wait", "--for=condition=Ready", "widget/w1", "--timeout=30s",
                          env={"KUBE_FEATURE_WatchListClient": "true"})
    try:
        api.wait_watches(1, resource="widgets")
        api.patch_status("example.com/v1", "widgets", "w1",
                         {"conditions": [{"type": "Ready", "status": "True"}]}, "default")
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "condition met" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    watch_lists = [r for r in api.requests(since)
                   if r["query"].get("sendInitialEvents") == "true"]
    assert watch_lists, "kubectl did not try a watch-list request"
    if watch_list:
        assert all(r["code"] == 200 for r in watch_lists)
    else:
        assert watch_lists[0]["code"] == 422
        assert any(r["query"].get("limit") == "500" for r in api.requests(since))


def test_wrong_token_is_refused(kubeapi, tmp_path):
    bad = kubeapi.write_kubeconfig(tmp_path / "bad.kubeconfig", token="not-the-token")
    proc = kubeapi.kubectl("get", "configmaps", kubeconfig=bad, check=False)
    assert proc.returncode != 0
    assert "Unauthorized" in proc.stderr or "provide credentials" in proc.stderr
    good = kubeapi.write_kubeconfig(tmp_path / "tf.kubeconfig", token_file=kubeapi.token_file)
    assert kubeapi.kubectl("get", "namespaces", "-o", "name", kubeconfig=good).stdout.split() \
        == ["namespace/default", "namespace/kube-node-lease", "namespace/kube-public",
            "namespace/kube-system"]
    cert = kubeapi.write_kubeconfig(tmp_path / "cert.kubeconfig",
                                    client_cert=("alice", ["devs"]))
    assert kubeapi.kubectl("get", "ns", "default", "-o", "name",
                           kubeconfig=cert).stdout.strip() == "namespace/default"


def test_stack_and_flux_kinds_print_their_columns(kubeapi, tmp_path):
    stack = tmp_path / "stack.yaml"
    stack.write_text(json.dumps({
        "apiVersion": "pulumi.com/v1", "kind": "Stack", "metadata": {"name": "web"},
        "spec": {"stack": "org/web/dev", "fluxSource": {"sourceRef": {
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "name": "repo"}, "dir": "infra"}, "config": {"replicas": 3, "tags": {"a": "b"}}}}))
    kubeapi.kubectl("apply", "--server-side", "-f", stack)
    kubeapi.patch_status("pulumi.com/v1", "stacks", "web", {
        "observedGeneration": 1, "artifact": {"revision": "main@sha1:abc", "digest": "sha256:0"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded",
                        "message": "ok", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        "default")
    out = kubeapi.kubectl("get", "stacks").stdout.splitlines()
    assert out[0].split() == ["NAME", "READY", "REASON", "REVISION", "AGE"]
    assert out[1].split()[:4] == ["web", "True", "Succeeded", "main@sha1:abc"]
    wide = kubeapi.kubectl("get", "stacks", "-o", "wide").stdout.splitlines()
    assert "STACK" in wide[0].split() and "org/web/dev" in wide[1].split()
    got = kubeapi.client.get("pulumi.com/v1", "stacks", "web", "default")
    assert got["spec"]["config"] == {"replicas": 3, "tags": {"a": "b"}}
    bad = tmp_path / "bad.yaml"
    bad.write_text(json.dumps({"apiVersion": "pulumi.com/v1", "kind": "Stack",
                               "metadata": {"name": "bad"}, "spec": {"dir": "x"}}))
    proc = kubeapi.kubectl("apply", "--server-side", "-f", bad, check=False)
    assert proc.returncode != 0 and "spec.stack: Required value" in proc.stderr
    oci = tmp_path / "oci.yaml"
    oci.write_text(json.dumps({"apiVersion": "source.toolkit.fluxcd.io/v1beta2",
                               "kind": "OCIRepository", "metadata": {"name": "o"},
                               "spec": {"url": "oci://r/x", "interval": "5m"}}))
    proc = kubeapi.kubectl("apply", "--server-side", "-f", oci)
    assert "v1beta2 OCIRepository is deprecated, upgrade to v1" in proc.stderr
    v1 = kubeapi.client.get("source.toolkit.fluxcd.io/v1", "ocirepositories", "o", "default")
    assert v1["apiVersion"] == "source.toolkit.fluxcd.io/v1"
    assert v1["status"] == {"observedGeneration": -1}
    assert v1["spec"]["provider"] == "generic"


def test_get_watch_with_table_output(kubeapi):
    """Plain `kubectl get -w` asks for Tables, also on the watch."""
    proc = kubeapi.kubectl_bg("get", "stacks", "-w")
    try:
        kubeapi.wait_watches(1, resource="stacks")
        kubeapi.client.create({"apiVersion": "pulumi.com/v1", "kind": "Stack",
                               "metadata": {"name": "web", "namespace": "default"},
                               "spec": {"stack": "dev"}}, "stacks")
        kubeapi.patch_status("pulumi.com/v1", "stacks", "web", {"conditions": [
            {"type": "Ready", "status": "False", "reason": "Reconciling", "message": "",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}]}, "default")
        lines = _read_until(proc, lambda ls: any("Reconciling" in line for line in ls))
        assert lines[0].split() == ["NAME", "READY", "REASON", "REVISION", "AGE"]
        assert lines[-1].split()[:3] == ["web", "False", "Reconciling"]
    finally:
        proc.kill()
        proc.wait()
    watches = [r for r in kubeapi.requests() if r["query"].get("watch") == "true"]
    assert "as=Table" in watches[-1]["accept"]


def test_server_side_apply_conflicts_force_and_field_removal(kubeapi, tmp_path):
    _setup_widgets(kubeapi, tmp_path)
    w = tmp_path / "w.yaml"
    w.write_text(json.dumps(dict(widget("w1", 3), metadata={
        "name": "w1", "labels": {"app": "demo", "tier": "web"}})))
    kubeapi.kubectl("apply", "--server-side", "-f", w)
    kubeapi.kubectl("patch", "widget", "w1", "--type", "merge", "-p", '{"spec":{"size":4}}')
    w.write_text(json.dumps(dict(widget("w1", 5), metadata={
        "name": "w1", "labels": {"app": "demo", "tier": "web"}})))
    proc = kubeapi.kubectl("apply", "--server-side", "-f", w, check=False)
    assert proc.returncode != 0
    assert 'Apply failed with 1 conflict: conflict with "kubectl-patch" using example.com/v1: ' \
           '.spec.size' in proc.stderr
    kubeapi.kubectl("apply", "--server-side", "--force-conflicts", "-f", w)
    got = kubeapi.client.get("example.com/v1", "widgets", "w1", "default")
    assert got["spec"]["size"] == 5
    # a label dropped from the applied manifest is removed; one set by another manager stays
    kubeapi.kubectl("label", "widget", "w1", "owner=ops")
    w.write_text(json.dumps(widget("w1", 5)))
    kubeapi.kubectl("apply", "--server-side", "-f", w)
    got = kubeapi.client.get("example.com/v1", "widgets", "w1", "default")
    assert got["metadata"]["labels"] == {"app": "demo", "owner": "ops"}
    assert got["metadata"]["generation"] == 3


def test_typed_create_commands_send_protobuf(kubeapi):
    """kubectl create configmap/secret/namespace/serviceaccount POST protobuf bodies."""
    kubeapi.kubectl("create", "namespace", "team")
    kubeapi.kubectl("create", "configmap", "c1", "--from-literal=a=b", "-n", "team")
    kubeapi.kubectl("create", "secret", "generic", "s1", "--from-literal=token=abc", "-n", "team")
    kubeapi.kubectl("create", "secret", "docker-registry", "pull", "--docker-server=r.io",
                    "--docker-username=u", "--docker-password=p", "-n", "team")
    kubeapi.kubectl("create", "serviceaccount", "runner", "-n", "team")
    posts = [r for r in kubeapi.requests() if r["method"] == "POST"]
    assert all(r["contentType"] == "application/vnd.kubernetes.protobuf" for r in posts[-5:])
    c = kubeapi.client
    assert c.get("v1", "namespaces", "team")["status"]["phase"] == "Active"
    assert c.get("v1", "configmaps", "c1", "team")["data"] == {"a": "b"}
    assert c.get("v1", "secrets", "s1", "team")["data"] == {"token": "YWJj"}
    pull = c.get("v1", "secrets", "pull", "team")
    assert pull["type"] == "kubernetes.io/dockerconfigjson"
    assert ".dockerconfigjson" in pull["data"]
    assert c.get("v1", "serviceaccounts", "runner", "team")["metadata"]["namespace"] == "team"


def test_prune_jobs_get_all_and_auth_can_i(kubeapi, tmp_path):
    """The workload kinds are stored as they come, enough for kubectl's prune allow-list,
    `get all` and a controller that runs Jobs; `auth can-i` is always yes (no RBAC)."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "update-web",
                                                                 "labels": {"app": "x"}},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
               {"name": "pulumi", "image": "pulumi"}]}}}}
    keep = {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "keep", "labels": {"app": "x"}}, "data": {"a": "b"}}
    both = tmp_path / "both.yaml"
    both.write_text(yaml.safe_dump_all([job, keep]))
    kubeapi.kubectl("apply", "-f", both)
    assert kubeapi.kubectl("get", "all", "-o", "name").stdout.split() == ["job.batch/update-web"]
    got = kubeapi.client.get("batch/v1", "jobs", "update-web", "default")
    assert got["metadata"]["generation"] == 1
    assert got["spec"]["template"]["spec"]["containers"][0]["image"] == "pulumi"
    only = tmp_path / "only.yaml"
    only.write_text(json.dumps(keep))
    out = kubeapi.kubectl("apply", "--prune", "-l", "app=x", "-f", only).stdout
    assert "job.batch/update-web pruned" in out
    assert kubeapi.kubectl("get", "jobs", "-o", "name").stdout.strip() == ""
    assert kubeapi.kubectl("auth", "can-i", "delete", "stacks").stdout.strip() == "yes"
