"""The emulator's API semantics, checked request by request (status codes, Status
bodies, resourceVersion, generation, subresources, patches, apply, finalizers,
selectors, pagination, watch, auth, fault knobs, restart).

Every test that needs no emulator-only knob runs both ways through `any_kubeapi`:
against a fresh emulator (namespace "default") and against the session's real
kube-apiserver (a fresh namespace per test), with the same assertions; where the
real server answered differently, the real answer is the one asserted.  On the real
server resourceVersions are etcd revisions shared by every namespace of the session,
so the tests assert their order, not their arithmetic.  Tests left on `kubeapi`
alone say why: a fault knob, the request log, or work that belongs to
kube-controller-manager (namespace cleanup, garbage collection), which the real tier
does not run.
"""
import json
import secrets
import subprocess
import threading

import pytest

from kube_fixtures import KubeClient, KubeError, wait_for
from kubeapi.client import WatchBroken

GV = "pulumi.com/v1"
CRD_GV = "apiextensions.k8s.io/v1"


FLUX_SOURCE = {"sourceRef": {"apiVersion": "source.toolkit.fluxcd.io/v1",
                              "kind": "GitRepository", "name": "repo"}}


def stack(name, ns="default", labels=None, **spec):
    """A Stack the CRD accepts: a stack name and, unless given another, a fluxSource
    (the CRD's CEL rule wants exactly one source)."""
    spec.setdefault("stack", f"org/{name}/dev")
    if not {"fluxSource", "ociSource", "programRef", "projectRepo"} & spec.keys():
        spec["fluxSource"] = FLUX_SOURCE
    m = {"name": name, "namespace": ns}
    if labels:
        m["labels"] = labels
    return {"apiVersion": GV, "kind": "Stack", "metadata": m, "spec": spec}


def cm(name, ns="default", **data):
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns}, "data": data}


def namespace(name):
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def err_of(fn, *a, **kw):
    with pytest.raises(KubeError) as info:
        fn(*a, **kw)
    return info.value


def rv(obj):
    return int(obj["metadata"]["resourceVersion"])


def unique(prefix):
    """A name no other test of the real server's session uses (cluster-scoped objects
    are shared by the whole session)."""
    return f"{prefix}{secrets.token_hex(3)}"


def gadget_crd(group):
    return {"apiVersion": CRD_GV, "kind": "CustomResourceDefinition",
            "metadata": {"name": f"gadgets.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {
                                       "type": "object",
                                       "x-kubernetes-preserve-unknown-fields": True}}}]}}


def established(c, name):
    crd = c.get(CRD_GV, "customresourcedefinitions", name)
    return any(x["type"] == "Established" and x["status"] == "True"
               for x in (crd.get("status") or {}).get("conditions") or [])


# -- auth and discovery ----------------------------------------------------------------

def test_auth_wrong_token_and_anonymous_paths(any_kubeapi):
    api = any_kubeapi
    bad = KubeClient(api.url, "wrong", api.ca_file)
    code, _, body = bad.raw("GET", "/api/v1/namespaces")
    assert code == 401
    assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "Unauthorized", "reason": "Unauthorized", "code": 401}
    anon = KubeClient(api.url, None, api.ca_file)
    for path in ("/version", "/healthz", "/readyz", "/livez"):
        assert anon.raw("GET", path)[0] == 200, path
    assert bad.raw("GET", "/version")[0] == 401
    # anonymous requests are authenticated as system:anonymous, which RBAC forbids
    code, _, body = anon.raw("GET", "/api")
    assert (code, body["reason"], body["message"], body["details"]) == (
        403, "Forbidden", 'forbidden: User "system:anonymous" cannot get path "/api"', {})
    code, _, body = anon.raw("GET", "/api/v1/namespaces")
    assert (code, body["message"], body["details"]) == (
        403, 'namespaces is forbidden: User "system:anonymous" cannot list resource '
             '"namespaces" in API group "" at the cluster scope', {"kind": "namespaces"})
    code, _, body = anon.raw("DELETE", f"/apis/pulumi.com/v1/namespaces/{api.namespace}/"
                             "stacks/s1/status")
    assert (code, body["message"], body["details"]) == (
        403, 'stacks.pulumi.com "s1" is forbidden: User "system:anonymous" cannot delete '
             f'resource "stacks/status" in API group "pulumi.com" in the namespace '
             f'"{api.namespace}"', {"name": "s1", "group": "pulumi.com", "kind": "stacks"})


def test_token_rotation(kubeapi):
    # emulator only: the real server reads --token-auth-file once, at start
    kubeapi.set_tokens(["new-token"])
    assert kubeapi.client.raw("GET", "/api")[0] == 401
    assert KubeClient(kubeapi.url, "new-token", kubeapi.ca_file).raw("GET", "/api")[0] == 200
    kubeapi.set_tokens([kubeapi.token])


def test_discovery_of_the_project_crds(any_kubeapi):
    c = any_kubeapi.client
    groups = {g["name"]: g for g in c.request("GET", "/apis")["groups"]}
    assert groups["source.toolkit.fluxcd.io"]["preferredVersion"]["version"] == "v1"
    # v1beta2 is served by the emulator's Flux CRDs (as Flux up to 2.6); Flux 2.9's own, which
    # the real tier installs once its source-controller runs, serve v1 only
    versions = [v["version"] for v in groups["source.toolkit.fluxcd.io"]["versions"]]
    assert versions == ["v1", "v1beta2"] if any_kubeapi.kind == "emulator" else \
        versions in (["v1", "v1beta2"], ["v1"])
    res = c.request("GET", "/apis/pulumi.com/v1")["resources"]
    names = {r["name"]: r for r in res}
    assert names["stacks"]["kind"] == "Stack" and names["stacks"]["namespaced"]
    assert names["stacks/status"]["verbs"] == ["get", "patch", "update"]
    assert names["stacks"]["categories"] == ["pulumi"]
    core = {r["name"] for r in c.request("GET", "/api/v1")["resources"]}
    assert {"namespaces", "configmaps", "secrets", "serviceaccounts", "events"} <= core
    accept = ("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
              "application/json")
    code, headers, agg = c.raw("GET", "/apis", headers={"Accept": accept})
    assert headers["Content-Type"] == \
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    pulumi = [g for g in agg["items"] if g["metadata"]["name"] == "pulumi.com"][0]
    res = [r for r in pulumi["versions"][0]["resources"] if r["resource"] == "stacks"][0]
    assert (res["resource"], res["scope"], res["responseKind"]["kind"]) == \
        ("stacks", "Namespaced", "Stack")
    assert res["subresources"][0]["subresource"] == "status"
    version = c.request("GET", "/version")
    assert version["major"] == "1" and int(version["minor"]) >= 29


def test_discovery_follows_a_crd_created_and_deleted(any_kubeapi):
    """A CRD of its own (the project's CRDs are shared by the real server's session)."""
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    group = unique("t") + ".example.com"
    crd = c.create(gadget_crd(group), "customresourcedefinitions")
    name = crd["metadata"]["name"]
    try:
        wait_for(lambda: established(c, name), what="the CRD to be Established")
        # the real server serves a new CRD a moment after it is Established, and
        # answers 429 "storage is (re)initializing" for its kind a moment longer
        wait_for(lambda: c.raw("GET", f"/apis/{group}/v1/namespaces/{ns}/gadgets")[0] == 200,
                 what="its kind to be listable")
        gadget = {"apiVersion": f"{group}/v1", "kind": "Gadget",
                  "metadata": {"name": "g", "namespace": ns}, "spec": {"any": 1}}
        assert c.create(gadget, "gadgets")["metadata"]["uid"]
        assert group in {g["name"] for g in c.request("GET", "/apis")["groups"]}
    finally:
        c.delete(CRD_GV, "customresourcedefinitions", name)
    wait_for(lambda: c.raw("GET", f"/apis/{group}/v1")[0] == 404, what="its group to go")
    wait_for(lambda: group not in {g["name"] for g in c.request("GET", "/apis")["groups"]},
             what="its group to leave /apis")
    wait_for(lambda: c.raw("GET", f"/apis/{CRD_GV}/customresourcedefinitions/{name}")[0]
             == 404, what="the CRD to be gone")


def test_openapi_v3_lets_kubectl_validate(any_kubeapi):
    c = any_kubeapi.client
    root = c.request("GET", "/openapi/v3")["paths"]
    url = root["apis/pulumi.com/v1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/apis/pulumi.com/v1?hash=")
    doc = c.request("GET", url.split("?")[0])
    op = doc["paths"]["/apis/pulumi.com/v1/namespaces/{namespace}/stacks/{name}"]["patch"]
    assert op["x-kubernetes-group-version-kind"] == {"group": "pulumi.com", "version": "v1",
                                                     "kind": "Stack"}
    assert "fieldValidation" in {p["name"] for p in op["parameters"]}


def test_no_openapi_v2(kubeapi):
    # emulator only: the real server still serves /openapi/v2; the emulator leaves it out
    # so that clients are seen to work with v3 alone
    assert kubeapi.client.raw("GET", "/openapi/v2")[0] == 404


# -- create, get, update ----------------------------------------------------------------

def test_create_sets_system_fields_and_refuses_duplicates(any_kubeapi):
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    s = c.create(stack("s1", ns), "stacks")
    m = s["metadata"]
    assert m["generation"] == 1 and m["uid"] and m["creationTimestamp"].endswith("Z")
    # the CRD's status default, as Flux's kinds have: kstatus sees InProgress, not Current
    assert s["status"] == {"observedGeneration": -1}
    assert c.get(GV, "stacks", "s1", ns)["status"] == {"observedGeneration": -1}
    e = err_of(c.create, stack("s1", ns), "stacks")
    assert (e.code, e.reason) == (409, "AlreadyExists")
    assert e.status["message"] == 'stacks.pulumi.com "s1" already exists'
    assert e.status["details"] == {"name": "s1", "group": "pulumi.com", "kind": "stacks"}
    nowhere = unique("nope-")
    e = err_of(c.create, stack("s1", nowhere), "stacks")
    assert (e.code, e.status["message"]) == (404, f'namespaces "{nowhere}" not found')
    gen = c.create({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"generateName": "cfg-", "namespace": ns}}, "configmaps")
    assert gen["metadata"]["name"].startswith("cfg-") and len(gen["metadata"]["name"]) == 9
    assert "generation" not in gen["metadata"]
    e = err_of(c.get, GV, "stacks", "missing", ns)
    assert e.code == 404 and e.status["message"] == 'stacks.pulumi.com "missing" not found'
    e = err_of(c.get, "v1", "configmaps", "missing", ns)
    assert e.status["details"] == {"name": "missing", "kind": "configmaps"}
    e = err_of(c.create, {"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": "Bad_Name", "namespace": ns}},
               "configmaps")
    assert e.code == 422 and e.status["details"]["causes"][0]["field"] == "metadata.name"


def test_resource_version_is_one_global_counter_and_no_op_writes_keep_it(any_kubeapi):
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    a = c.create(cm("a", ns, x="1"), "configmaps")
    b = c.create(stack("b", ns), "stacks")
    # one counter across kinds: the real server's is etcd's revision, which other
    # tests' writes also move, so only the order is the same both ways
    assert rv(b) > rv(a)
    listed = c.list("v1", "configmaps", ns)
    assert int(listed["metadata"]["resourceVersion"]) >= rv(b)
    assert "kind" not in listed["items"][0]          # built-in list items carry no kind
    assert c.list(GV, "stacks", ns)["items"][0]["kind"] == "Stack"
    same = c.update(c.get("v1", "configmaps", "a", ns), "configmaps")
    assert rv(same) == rv(a)


def test_resource_version_counts_by_one(kubeapi):
    # emulator only: one writer, so each write is the next version (etcd's revision is
    # shared by the real session's other namespaces)
    c = kubeapi.client
    a = c.create(cm("a", x="1"), "configmaps")
    assert rv(c.create(stack("b"), "stacks")) == rv(a) + 1


def test_update_conflicts_and_preconditions(any_kubeapi):
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    s = c.create(stack("s1", ns), "stacks")
    s2 = json.loads(json.dumps(s))
    s["spec"]["refresh"] = True
    s = c.update(s, "stacks")
    assert s["metadata"]["generation"] == 2
    s2["spec"]["preview"] = True
    e = err_of(c.update, s2, "stacks")
    assert (e.code, e.reason) == (409, "Conflict")
    assert e.status["message"] == ('Operation cannot be fulfilled on stacks.pulumi.com "s1": '
                                   'the object has been modified; please apply your changes '
                                   'to the latest version and try again')
    del s2["metadata"]["resourceVersion"]
    e = err_of(c.update, s2, "stacks")
    assert e.code == 422 and e.status["message"] == (
        'stacks.pulumi.com "s1" is invalid: metadata.resourceVersion: Invalid value: 0: must '
        'be specified for an update')
    # built-in kinds allow an unconditional update
    c.create(cm("c", ns), "configmaps")
    assert c.update(cm("c", ns, k="v"), "configmaps")["data"] == {"k": "v"}
    # a resourceVersion inside a patch is a precondition
    e = err_of(c.patch, GV, "stacks", "s1", {"metadata": {"resourceVersion": "1"},
                                             "spec": {"refresh": False}}, ns)
    assert e.code == 409
    e = err_of(c.delete, GV, "stacks", "s1", ns,
               {"preconditions": {"uid": "0000"}})
    assert e.code == 409 and e.status["message"].startswith(
        'Operation cannot be fulfilled on Stack.pulumi.com "s1": the UID in the precondition '
        '(0000) does not match the UID in record (')
    assert e.status["details"]["kind"] == "Stack"


def test_generation_and_status_subresource(any_kubeapi):
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    c.create(stack("s1", ns), "stacks")
    s = c.patch(GV, "stacks", "s1", {"metadata": {"labels": {"a": "b"},
                                                  "annotations": {"x": "y"}}}, ns)
    assert s["metadata"]["generation"] == 1
    s = c.patch(GV, "stacks", "s1", {"status": {"observedGeneration": 1}}, ns)
    assert s["status"] == {"observedGeneration": -1}   # the main resource ignores status
    s = c.patch(GV, "stacks", "s1", {"status": {"observedGeneration": 1},
                                     "spec": {"stack": "changed"}}, ns,
                subresource="status")
    assert s["status"] == {"observedGeneration": 1}
    assert s["spec"]["stack"] == "org/s1/dev" and s["metadata"]["generation"] == 1
    s["status"]["outputsSecretName"] = "o"
    s["metadata"]["labels"] = {"ignored": "yes"}
    s = c.update(s, "stacks", subresource="status")
    assert s["status"]["outputsSecretName"] == "o" and s["metadata"]["labels"] == {"a": "b"}
    s = c.patch(GV, "stacks", "s1", {"spec": {"preview": True}}, ns)
    assert s["metadata"]["generation"] == 2
    got = c.get(GV, "stacks", "s1", ns, subresource="status")
    assert got["kind"] == "Stack" and got["spec"]["preview"] is True


def test_pruning_validation_and_field_validation_modes(any_kubeapi):
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    path = f"/apis/pulumi.com/v1/namespaces/{ns}/stacks"
    code, headers, body = c.raw("POST", path, stack("s1", ns, bogus=1))
    assert code == 201 and "bogus" not in body["spec"]
    assert 'unknown field \\"spec.bogus\\"' in headers.get("Warning", "") or \
        'unknown field "spec.bogus"' in headers.get("Warning", "")
    code, _, body = c.raw("POST", path, stack("s2", ns, bogus=1),
                          params={"fieldValidation": "Strict"})
    assert code == 400 and 'unknown field "spec.bogus"' in body["message"]
    e = err_of(c.create, stack("s3", ns, refresh="yes"), "stacks")
    assert e.code == 422
    assert e.status["details"]["causes"][0]["field"] == "spec.refresh"
    assert "must be of type boolean" in e.status["message"]
    e = err_of(c.create, {"apiVersion": GV, "kind": "Stack",
                          "metadata": {"name": "s4", "namespace": ns}, "spec": {}},
               "stacks")
    assert e.code == 422 and "spec.stack: Required value" in e.status["message"]
    # strict decoding comes before the schema's validation
    code, _, body = c.raw("POST", path, {"apiVersion": GV, "kind": "Stack",
                                         "metadata": {"name": "s5"}, "spec": {"dir": "x"}},
                          params={"fieldValidation": "Strict"})
    assert (code, body["message"]) == (400, 'Stack in version "v1" cannot be handled as a '
                                       'Stack: strict decoding error: unknown field "spec.dir"')
    # an apply configuration with a field the schema lacks is a 500, whatever the mode
    for mode in ("Strict", "Ignore"):
        code, _, body = c.raw("PATCH", f"{path}/s6", {"apiVersion": GV, "kind": "Stack",
                                                      "metadata": {"name": "s6"},
                                                      "spec": {"stack": "x", "dir": "x"}},
                              "application/apply-patch+yaml",
                              params={"fieldManager": "m", "fieldValidation": mode})
        assert (code, body) == (500, {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "code": 500, "message": "failed to create typed patch object (/s6; pulumi.com/v1, "
                                   "Kind=Stack): .spec.dir: field not declared in schema"})
    sec = c.create({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "s", "namespace": ns},
                    "stringData": {"token": "abc"}}, "secrets")
    assert sec["data"] == {"token": "YWJj"} and "stringData" not in sec
    assert sec["type"] == "Opaque"


# -- patches and apply -----------------------------------------------------------------

def test_json_and_merge_patches(any_kubeapi):
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    c.create(stack("s1", ns, targets=["a", "b"], config={"k": "v", "n": 1}), "stacks")
    s = c.patch(GV, "stacks", "s1", {"spec": {"config": {"k": None}, "targets": ["c"]}}, ns)
    assert s["spec"]["config"] == {"n": 1} and s["spec"]["targets"] == ["c"]
    s = c.patch(GV, "stacks", "s1", [{"op": "test", "path": "/spec/targets/0", "value": "c"},
                                     {"op": "add", "path": "/spec/targets/-", "value": "d"}],
                ns, "json")
    assert s["spec"]["targets"] == ["c", "d"]
    e = err_of(c.patch, GV, "stacks", "s1",
               [{"op": "test", "path": "/spec/targets/0", "value": "zzz"}], ns, "json")
    assert (e.code, e.status["message"]) == (
        422, "the server rejected our request due to an error in our request")
    e = err_of(c.patch, GV, "stacks", "s1", {"op": "bad"}, ns, "json")
    assert (e.code, e.status["message"]) == (
        400, "error decoding patch: json: cannot unmarshal object into Go value of type "
             "[]handlers.jsonPatchOp")
    e = err_of(c.patch, GV, "stacks", "nope", {"spec": {}}, ns)
    assert e.code == 404
    e = err_of(c.patch, GV, "stacks", "s1", {"spec": {}}, ns, "strategic")
    assert e.code == 415 and e.reason == "UnsupportedMediaType"
    e = err_of(c.patch, GV, "stacks", "s1", {"spec": {}}, ns, force="true")
    assert e.code == 422 and e.status["details"]["kind"] == "PatchOptions"


def test_server_side_apply_ownership_conflicts_and_removal(any_kubeapi):
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    base = stack("s1", ns, refresh=True, targets=["a"])
    code, _, _ = c.raw("PATCH", f"/apis/pulumi.com/v1/namespaces/{ns}/stacks/s1",
                       base, "application/apply-patch+yaml",
                       params={"fieldManager": "alice", "force": "false"})
    assert code == 201
    e = err_of(c.patch, GV, "stacks", "s1", base, ns, "apply")
    assert e.code == 422 and "fieldManager: Required value" in e.status["message"]
    # bob applies a different value of a field alice owns
    e = err_of(c.patch, GV, "stacks", "s1", stack("s1", ns, refresh=False), ns, "apply",
               fieldManager="bob", force="false")
    assert (e.code, e.reason) == (409, "Conflict")
    assert e.status["message"] == ('Apply failed with 1 conflict: conflict with "alice": '
                                   '.spec.refresh')
    assert e.status["details"] == {"causes": [{"reason": "FieldManagerConflict",
                                               "message": 'conflict with "alice"',
                                               "field": ".spec.refresh"}]}
    # the same value is shared ownership, not a conflict
    c.patch(GV, "stacks", "s1", stack("s1", ns, refresh=True), ns, "apply",
            fieldManager="bob", force="false")
    # forcing takes the field
    s = c.patch(GV, "stacks", "s1", stack("s1", ns, preview=True, refresh=False), ns,
                "apply", fieldManager="bob", force="true")
    assert s["spec"]["refresh"] is False and s["spec"]["preview"] is True
    # alice drops targets from her configuration: it is removed (nobody else owns it)
    s = c.patch(GV, "stacks", "s1", stack("s1", ns), ns, "apply", fieldManager="alice",
                force="false")
    assert "targets" not in s["spec"] and s["spec"]["preview"] is True
    assert s["metadata"]["generation"] == 3
    owners = {m["manager"]: m for m in s["metadata"]["managedFields"]}
    assert "f:preview" in owners["bob"]["fieldsV1"]["f:spec"]
    assert owners["alice"]["operation"] == "Apply"
    # an Update by a third manager takes fields without conflicts
    c.patch(GV, "stacks", "s1", {"spec": {"preview": False}}, ns, fieldManager="carol")
    e = err_of(c.patch, GV, "stacks", "s1", stack("s1", ns, preview=True), ns, "apply",
               fieldManager="bob", force="false")
    assert 'conflict with "carol" using pulumi.com/v1: .spec.preview' in e.status["message"]
    # apply to /status owns status only
    st = c.patch(GV, "stacks", "s1", {"apiVersion": GV, "kind": "Stack",
                                      "metadata": {"name": "s1", "namespace": ns},
                                      "status": {"observedGeneration": 3}},
                 ns, "apply", subresource="status", fieldManager="ctrl", force="true")
    assert st["status"]["observedGeneration"] == 3
    ctrl = [m for m in st["metadata"]["managedFields"] if m["manager"] == "ctrl"][0]
    assert ctrl["subresource"] == "status" and list(ctrl["fieldsV1"]) == ["f:status"]
    # an identical re-apply is a no-op
    again = c.patch(GV, "stacks", "s1", stack("s1", ns), ns, "apply", fieldManager="alice",
                    force="false")
    assert rv(again) == rv(st)


# -- deletion ---------------------------------------------------------------------------

def test_finalizers_and_deletion_timestamp(any_kubeapi):
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    s = stack("s1", ns)
    s["metadata"]["finalizers"] = ["pulumi.com/finalizer"]
    created = c.create(s, "stacks")
    held = c.delete(GV, "stacks", "s1", ns, {"propagationPolicy": "Background"})
    assert held["kind"] == "Stack"
    assert held["metadata"]["deletionTimestamp"] and held["metadata"]["generation"] == 2
    again = c.delete(GV, "stacks", "s1", ns)
    assert rv(again) == rv(held)
    e = err_of(c.patch, GV, "stacks", "s1",
               {"metadata": {"finalizers": ["pulumi.com/finalizer", "other.io/x"]}}, ns)
    assert e.code == 422 and "no new finalizers can be added" in e.status["message"]
    c.patch(GV, "stacks", "s1", {"spec": {"refresh": True}}, ns)
    still = c.get(GV, "stacks", "s1", ns)
    assert still["metadata"]["deletionTimestamp"] == held["metadata"]["deletionTimestamp"]
    last = c.patch(GV, "stacks", "s1", {"metadata": {"finalizers": None}}, ns)
    # the answer keeps the last stored version: the emptied object is deleted, not
    # stored; the watch's DELETED event has the delete's own, later version
    assert rv(last) == rv(still) and "finalizers" not in last["metadata"]
    assert err_of(c.get, GV, "stacks", "s1", ns).code == 404
    gone = collect(c.watch(GV, "stacks", ns, resourceVersion=str(rv(still)),
                           timeoutSeconds=5), 1)[0]
    assert gone["type"] == "DELETED" and rv(gone["object"]) > rv(still)
    c.create(stack("s2", ns), "stacks")
    status = c.delete(GV, "stacks", "s2", ns)
    assert status["kind"] == "Status" and status["status"] == "Success"
    assert status["details"]["name"] == "s2" and status["details"]["uid"]
    assert created["metadata"]["uid"] != status["details"]["uid"]


def test_namespace_label_terminating_phase_and_403(any_kubeapi):
    """The apiserver's own part of namespace deletion (its NamespaceLifecycle admission);
    emptying and removing the namespace is the controller-manager's (next test)."""
    c = any_kubeapi.client
    team = unique("team-")
    c.create(namespace(team), "namespaces")
    try:
        ns = c.get("v1", "namespaces", team)
        assert ns["metadata"]["labels"] == {"kubernetes.io/metadata.name": team}
        assert ns["status"]["phase"] == "Active"
        held = stack("held", team)
        held["metadata"]["finalizers"] = ["pulumi.com/finalizer"]
        c.create(held, "stacks")
        term = c.delete("v1", "namespaces", team)
        assert term["status"]["phase"] == "Terminating"
        e = err_of(c.create, cm("d", team), "configmaps")
        assert e.code == 403 and "because it is being terminated" in e.status["message"]
        assert c.get("v1", "namespaces", team)["status"]["phase"] == "Terminating"
    finally:
        # raw: nothing here may hide the test's own failure
        c.raw("PATCH", f"/apis/pulumi.com/v1/namespaces/{team}/stacks/held",
              {"metadata": {"finalizers": []}}, "application/merge-patch+json")
        c.raw("DELETE", f"/api/v1/namespaces/{team}")


def test_namespace_deletion_and_garbage_collection(kubeapi):
    # emulator only: emptying a deleted namespace and collecting owned objects are
    # kube-controller-manager's work, which the real tier does not run
    c = kubeapi.client
    c.create(namespace("team"), "namespaces")
    owner = c.create(stack("web", ns="team"), "stacks")
    secret = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": "web-outputs", "namespace": "team",
                           "ownerReferences": [{"apiVersion": GV, "kind": "Stack",
                                                "name": "web",
                                                "uid": owner["metadata"]["uid"],
                                                "controller": True}]}}
    c.create(secret, "secrets")
    c.delete(GV, "stacks", "web", "team")
    assert err_of(c.get, "v1", "secrets", "web-outputs", "team").code == 404
    held = stack("held", ns="team")
    held["metadata"]["finalizers"] = ["pulumi.com/finalizer"]
    c.create(held, "stacks")
    c.create(cm("c", ns="team"), "configmaps")
    assert c.delete("v1", "namespaces", "team")["status"]["phase"] == "Terminating"
    assert err_of(c.get, "v1", "configmaps", "c", "team").code == 404
    c.patch(GV, "stacks", "held", {"metadata": {"finalizers": []}}, "team")
    assert err_of(c.get, "v1", "namespaces", "team").code == 404


# -- list: selectors and pagination ------------------------------------------------------

def test_selectors(any_kubeapi):
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    for name, labels in (("a", {"env": "prod", "team": "x"}), ("b", {"env": "dev"}),
                         ("c", {"team": "y"})):
        c.create(stack(name, ns, labels=labels), "stacks")

    def names(**params):
        return [i["metadata"]["name"] for i in c.list(GV, "stacks", ns, **params)["items"]]
    assert names(labelSelector="env") == ["a", "b"]
    assert names(labelSelector="!env") == ["c"]
    assert names(labelSelector="env!=prod") == ["b", "c"]
    assert names(labelSelector="env in (prod,dev),team") == ["a"]
    assert names(labelSelector="team notin (x)") == ["b", "c"]
    assert names(fieldSelector="metadata.name=b") == ["b"]
    assert names(fieldSelector=f"metadata.name!=b,metadata.namespace={ns}") == ["a", "c"]
    assert names(fieldSelector="metadata.namespace=elsewhere") == []
    e = err_of(c.list, GV, "stacks", ns, fieldSelector="spec.stack=x")
    assert e.code == 400 and e.status["message"] == "field label not supported: spec.stack"
    e = err_of(c.list, GV, "stacks", ns, labelSelector="a b")
    assert (e.code, e.status["message"]) == (
        400, "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt")
    e = err_of(c.list, GV, "stacks", ns, labelSelector="a in (")
    assert e.status["message"] == \
        "unable to parse requirement: found '', expected: ',', ')' or identifier"
    assert names(labelSelector="team in ()") == []
    assert names(labelSelector="env=dev,team!=x") == ["b"]
    # all namespaces (the real server's holds other tests' stacks as well)
    everywhere = c.list(GV, "stacks", fieldSelector=f"metadata.namespace={ns}")["items"]
    assert [i["metadata"]["name"] for i in everywhere] == ["a", "b", "c"]


def test_pagination_is_a_consistent_snapshot(any_kubeapi):
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    for i in range(5):
        c.create(cm(f"c{i}", ns), "configmaps")
    page = c.list("v1", "configmaps", ns, limit=2)
    assert [i["metadata"]["name"] for i in page["items"]] == ["c0", "c1"]
    assert page["metadata"]["remainingItemCount"] == 3
    snap = page["metadata"]["resourceVersion"]
    c.delete("v1", "configmaps", "c3", ns)
    c.create(cm("c9", ns), "configmaps")
    page2 = c.list("v1", "configmaps", ns, limit=2, **{"continue":
                                                        page["metadata"]["continue"]})
    assert [i["metadata"]["name"] for i in page2["items"]] == ["c2", "c3"]
    assert page2["metadata"]["resourceVersion"] == snap
    page3 = c.list("v1", "configmaps", ns, limit=2, **{"continue":
                                                        page2["metadata"]["continue"]})
    assert [i["metadata"]["name"] for i in page3["items"]] == ["c4"]
    assert "continue" not in page3["metadata"]


def test_expired_continue_token(kubeapi):
    # emulator only: `expire` (on the real server, etcd compaction past the snapshot)
    c = kubeapi.client
    for i in range(5):
        c.create(cm(f"c{i}"), "configmaps")
    page = c.list("v1", "configmaps", "default", limit=2)
    snap = page["metadata"]["resourceVersion"]
    c.delete("v1", "configmaps", "c3", "default")
    c.create(cm("c9"), "configmaps")
    page2 = c.list("v1", "configmaps", "default", limit=2, **{"continue":
                                                             page["metadata"]["continue"]})
    kubeapi.expire()
    code, _, body = c.raw("GET", "/api/v1/namespaces/default/configmaps",
                          params={"limit": 2, "continue": page2["metadata"]["continue"]})
    assert code == 410 and body["reason"] == "Expired"
    assert body["message"].startswith("The provided continue parameter is too old")
    assert body["metadata"]["continue"]
    rest = c.list("v1", "configmaps", "default", **{"continue": body["metadata"]["continue"]})
    assert [i["metadata"]["name"] for i in rest["items"]] == ["c4", "c9"]
    e = err_of(c.list, "v1", "configmaps", "default", limit=2, resourceVersion=snap)
    assert e.code == 410


# -- watch -------------------------------------------------------------------------------

def collect(gen, n):
    out = []
    for ev in gen:
        out.append(ev)
        if len(out) == n:
            break
    return out


def test_watch_events_from_resource_versions_and_selector_transitions(any_kubeapi):
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    a = c.create(stack("a", ns, labels={"env": "prod"}), "stacks")
    start = rv(a)
    c.patch(GV, "stacks", "a", {"spec": {"refresh": True}}, ns)
    c.patch(GV, "stacks", "a", {"metadata": {"labels": {"env": "dev"}}}, ns)
    c.patch(GV, "stacks", "a", {"metadata": {"labels": {"env": "prod"}}}, ns)
    c.delete(GV, "stacks", "a", ns)
    evs = collect(c.watch(GV, "stacks", ns, resourceVersion=str(start),
                          labelSelector="env=prod", timeoutSeconds=5), 4)
    assert [e["type"] for e in evs] == ["MODIFIED", "DELETED", "ADDED", "DELETED"]
    versions = [rv(e["object"]) for e in evs]
    assert versions == sorted(set(versions)) and versions[0] > start
    assert evs[1]["object"]["metadata"]["labels"] == {"env": "prod"}
    # RV "0" starts with the current state as ADDED events
    c.create(stack("b", ns), "stacks")
    evs = collect(c.watch(GV, "stacks", ns, resourceVersion="0", timeoutSeconds=5), 1)
    assert evs[0]["type"] == "ADDED" and evs[0]["object"]["metadata"]["name"] == "b"


def test_watch_events_count_by_one_and_cover_all_namespaces(kubeapi):
    # emulator only: +1 per write and an all-namespace watch from "0" need a server
    # nobody else writes to
    c = kubeapi.client
    start = rv(c.create(stack("a", labels={"env": "prod"}), "stacks"))
    c.patch(GV, "stacks", "a", {"spec": {"refresh": True}}, "default")
    c.delete(GV, "stacks", "a", "default")
    evs = collect(c.watch(GV, "stacks", "default", resourceVersion=str(start),
                          timeoutSeconds=5), 2)
    assert [rv(e["object"]) for e in evs] == [start + 1, start + 2]
    c.create(stack("b"), "stacks")
    evs = collect(c.watch(GV, "stacks", None, resourceVersion="0", timeoutSeconds=5), 1)
    assert evs[0]["type"] == "ADDED" and evs[0]["object"]["metadata"]["name"] == "b"


def test_admin_triggered_bookmark(kubeapi):
    # emulator only: the `bookmark` knob (the real server's bookmarks come about once a
    # minute); watch-list, its bookmark and timeoutSeconds are both ways in
    # test_watch_semantics.py
    c = kubeapi.client
    c.create(stack("a"), "stacks")
    gen = c.watch(GV, "stacks", "default", resourceVersion="0", allowWatchBookmarks="true",
                  timeoutSeconds=10)
    assert next(gen)["type"] == "ADDED"
    kubeapi.wait_watches(1)
    kubeapi.bookmark()
    bm = next(gen)
    assert bm["type"] == "BOOKMARK" and list(bm["object"]["metadata"]) == ["resourceVersion"]
    gen.close()


# -- kinds a controller writes -------------------------------------------------------------

def test_leases_and_events(any_kubeapi):
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "pulumi-controller", "namespace": ns},
             "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15,
                      "acquireTime": "2026-01-01T00:00:00.000000Z",
                      "renewTime": "2026-01-01T00:00:00.000000Z", "leaseTransitions": 0}}
    got = c.create(lease, "leases")
    assert err_of(c.create, lease, "leases").code == 409
    mine = json.loads(json.dumps(got))
    theirs = json.loads(json.dumps(got))
    mine["spec"]["holderIdentity"] = "b"
    c.update(mine, "leases")
    theirs["spec"]["holderIdentity"] = "c"
    assert err_of(c.update, theirs, "leases").code == 409
    ev = {"apiVersion": "v1", "kind": "Event",
          "metadata": {"name": "web.1", "namespace": ns},
          "involvedObject": {"apiVersion": GV, "kind": "Stack", "name": "web",
                             "namespace": ns, "uid": "u1"},
          "reason": "Succeeded", "message": "ok", "type": "Normal", "count": 1,
          "source": {"component": "pulumi-controller"}}
    c.create(ev, "events")
    c.patch("v1", "events", "web.1", {"count": 2}, ns, "strategic")
    found = c.list("v1", "events", ns,
                   fieldSelector="involvedObject.kind=Stack,involvedObject.name=web,"
                                 "source=pulumi-controller")
    assert [e["count"] for e in found["items"]] == [2]
    assert c.list("v1", "events", ns, fieldSelector="reason=Failed")["items"] == []


def test_events_k8s_io_is_a_view_of_core_events(any_kubeapi):
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    new = {"apiVersion": "events.k8s.io/v1", "kind": "Event",
           "metadata": {"name": "web.2", "namespace": ns},
           "eventTime": "2026-01-01T00:00:00.000000Z", "type": "Warning",
           "reportingController": "pulumi.com/pulumi-controller",
           "reportingInstance": "pulumi-controller-host", "action": "Update",
           "reason": "Failed", "note": "boom",
           "regarding": {"apiVersion": GV, "kind": "Stack", "name": "web", "namespace": ns}}
    made = c.create(new, "events")
    assert made["apiVersion"] == "events.k8s.io/v1" and made["note"] == "boom"
    core = c.get("v1", "events", "web.2", ns)
    assert core["message"] == "boom" and core["involvedObject"]["name"] == "web"
    assert core["reportingComponent"] == "pulumi.com/pulumi-controller"
    assert [e["metadata"]["name"] for e in c.list("v1", "events", ns,
                                                  fieldSelector="type=Warning")["items"]] \
        == ["web.2"]
    p = c.patch("events.k8s.io/v1", "events", "web.2",
                {"series": {"count": 2, "lastObservedTime": "2026-01-01T00:01:00.000000Z"}},
                ns)
    assert p["series"]["count"] == 2
    bad = dict(new, metadata={"name": "web.3", "namespace": ns}, type="Info",
               reportingController="", deprecatedCount=3)
    bad.pop("action")
    e = err_of(c.create, bad, "events")
    # validated on the core/v1 form, as kube-apiserver does: core names (count), except
    # reportingController, which each version names its own way
    fields = {cause["field"] for cause in e.status["details"]["causes"]}
    assert e.code == 422 and fields == {"type", "reportingController", "action", "count"}
    assert e.status["message"].startswith('Event "web.3" is invalid: ')
    core_bad = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"name": "web.4", "namespace": ns},
                "eventTime": "2026-01-01T00:00:00.000000Z", "type": "Normal",
                "involvedObject": {"kind": "Stack", "name": "web", "namespace": ns},
                "reportingInstance": "i", "action": "Update", "reason": "R"}
    e = err_of(c.create, core_bad, "events")
    assert {cause["field"] for cause in e.status["details"]["causes"]} == \
        {"reportingComponent"}


def test_delete_collection_and_service_accounts(any_kubeapi):
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    for name in ("a", "b", "c"):
        c.create({"apiVersion": "v1", "kind": "ServiceAccount",
                  "metadata": {"name": name, "namespace": ns,
                               "labels": {"keep": "yes" if name == "c" else "no"}}},
                 "serviceaccounts")
    gone = c.request("DELETE", f"/api/v1/namespaces/{ns}/serviceaccounts",
                     params={"labelSelector": "keep=no"})
    assert [i["metadata"]["name"] for i in gone["items"]] == ["a", "b"]
    left = c.list("v1", "serviceaccounts", ns)["items"]
    assert [i["metadata"]["name"] for i in left] == ["c"]


def test_create_with_resource_version_immutable_data_and_list_option_checks(any_kubeapi):
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    obj = cm("a", ns)
    obj["metadata"]["resourceVersion"] = "12"
    e = err_of(c.create, obj, "configmaps")
    assert (e.code, e.reason) == (500, None)       # StatusReasonUnknown is ""
    assert e.status["message"] == "resourceVersion should not be set on objects to be created"
    frozen = dict(cm("f", ns, k="v"), immutable=True)
    c.create(frozen, "configmaps")
    e = err_of(c.patch, "v1", "configmaps", "f", {"data": {"k": "w"}}, ns)
    assert e.code == 422 and "field is immutable when `immutable` is set" in e.status["message"]
    c.patch("v1", "configmaps", "f", {"metadata": {"labels": {"ok": "yes"}}}, ns)
    c.create({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": {"name": "s", "namespace": ns}}, "secrets")
    e = err_of(c.patch, "v1", "secrets", "s", {"type": "kubernetes.io/dockerconfigjson"}, ns)
    assert e.code == 422 and e.status["details"]["causes"][0]["field"] == "type"
    e = err_of(c.list, "v1", "configmaps", ns, resourceVersionMatch="Exact",
               resourceVersion="0")
    assert e.code == 422 and e.status["details"]["kind"] == "ListOptions"
    e = err_of(c.list, "v1", "configmaps", ns, resourceVersionMatch="Exact")
    assert e.code == 422
    e = err_of(c.list, "v1", "configmaps", ns, resourceVersionMatch="Sometimes",
               resourceVersion="1")
    assert e.code == 422


def test_controller_manages_its_finalizer_with_apply(any_kubeapi):
    """A controller adds its finalizer with an apply of metadata only, a user's finalizer
    (another manager) stays, and applying without it releases the object."""
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    c.create(stack("s1", ns), "stacks")
    c.patch(GV, "stacks", "s1", {"metadata": {"finalizers": ["user.io/keep"]}}, ns)
    mine = {"apiVersion": GV, "kind": "Stack",
            "metadata": {"name": "s1", "namespace": ns,
                         "finalizers": ["pulumi.com/finalizer"]}}
    s = c.patch(GV, "stacks", "s1", mine, ns, "apply", fieldManager="ctrl", force="true")
    assert s["metadata"]["finalizers"] == ["user.io/keep", "pulumi.com/finalizer"]
    assert s["spec"]["stack"] == "org/s1/dev" and s["metadata"]["generation"] == 1
    c.delete(GV, "stacks", "s1", ns)
    c.patch(GV, "stacks", "s1", {"metadata": {"finalizers": ["pulumi.com/finalizer"]}}, ns)
    released = dict(mine, metadata={"name": "s1", "namespace": ns})
    c.patch(GV, "stacks", "s1", released, ns, "apply", fieldManager="ctrl", force="true")
    assert err_of(c.get, GV, "stacks", "s1", ns).code == 404


def test_wrongly_typed_fields_are_decoding_errors(any_kubeapi):
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    bad = stack("s1", ns)
    bad["metadata"]["labels"] = {"n": 1}
    e = err_of(c.create, bad, "stacks")
    assert e.code == 400 and e.status["message"] == (
        'Stack in version "v1" cannot be handled as a Stack: json: cannot unmarshal number '
        'into Go struct field ObjectMeta.labels of type string')
    e = err_of(c.create, dict(cm("c", ns), data={"k": ["v"]}), "configmaps")
    assert e.code == 400
    c.create(stack("s2", ns), "stacks")
    e = err_of(c.delete, GV, "stacks", "s2", ns, {"preconditions": "uid"})
    assert e.code == 400 and e.status["message"] == (
        "json: cannot unmarshal string into Go struct field DeleteOptions.preconditions of "
        "type v1.Preconditions")
    got = c.get(GV, "stacks", "s2", ns)
    got["metadata"]["resourceVersion"] = int(got["metadata"]["resourceVersion"])
    assert err_of(c.update, got, "stacks").code == 400


def test_built_in_validation_a_controller_can_meet(any_kubeapi):
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    big = {"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": "outputs", "namespace": ns},
           "stringData": {"a": "x" * (600 * 1024), "b": "y" * (600 * 1024)}}
    e = err_of(c.create, big, "secrets")
    assert (e.code, e.status["message"]) == (
        422, 'Secret "outputs" is invalid: data: Too long: may not be more than 1048576 bytes')
    e = err_of(c.create, cm("c", ns, **{"bad key": "v"}), "configmaps")
    assert e.code == 422 and e.status["details"]["causes"][0]["field"] == "data[bad key]"
    bad = stack("s", ns)
    bad["metadata"]["finalizers"] = ["not a name"]
    assert err_of(c.create, bad, "stacks").code == 422
    bad = stack("s", ns, labels={"bad key!": "v"})
    assert err_of(c.create, bad, "stacks").code == 422
    ev = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "namespace": ns},
          "involvedObject": {"kind": "Stack", "name": "s", "namespace": "other"},
          "reason": "X", "message": "m", "type": "Normal"}
    e = err_of(c.create, ev, "events")
    assert e.code == 422 and "involvedObject.namespace" in e.status["message"]


# -- concurrency, paging across namespaces, resourceVersion bounds -----------------------

def test_concurrent_writers_and_watchers_agree_with_the_final_list(any_kubeapi):
    """Watch streams are in resourceVersion order, and replaying one gives exactly what a
    list returns, while several clients write at once."""
    api = any_kubeapi
    c, ns = api.client, api.namespace
    start = c.list(GV, "stacks", ns)["metadata"]["resourceVersion"]
    streams = {"all": [], "odd": []}

    finished = threading.Event()

    def watch(name, **params):
        try:
            for ev in c.watch(GV, "stacks", ns, resourceVersion=start, timeoutSeconds=60,
                              **params):
                streams[name].append(ev)
        except (WatchBroken, OSError):
            if not finished.is_set():      # cut by the test's end: expected
                raise
    watchers = [threading.Thread(target=watch, args=(name,), kwargs=params, daemon=True)
                for name, params in (("all", {}), ("odd", {"labelSelector": "parity=odd"}))]
    for t in watchers:
        t.start()

    def writer(w):
        client = KubeClient(api.url, api.token, api.ca_file)
        for i in range(40):
            name = f"w{w}-{i % 10}"
            parity = "odd" if i % 2 else "even"
            try:
                client.create(stack(name, ns, labels={"parity": parity}), "stacks")
            except KubeError as exc:
                assert exc.code == 409
                if i % 7 == 0:
                    client.delete(GV, "stacks", name, ns)
                else:
                    client.patch(GV, "stacks", name, {"metadata": {"labels": {
                        "parity": parity}}, "spec": {"targets": [str(i)]}}, ns)
    writers = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    final = c.list(GV, "stacks", ns)
    # Every event changes the replayed state, so a stream replays to the final list
    # only once it has delivered all of its events.
    wait_for(lambda: _replay(streams["all"]) == _expected(final, None) and
             _replay(streams["odd"]) == _expected(final, "odd"), what="watches to catch up")
    rvs = [rv(e["object"]) for e in streams["all"]]
    assert rvs == sorted(set(rvs)) and rvs[0] > int(start)
    assert rvs[-1] <= int(final["metadata"]["resourceVersion"])
    if api.kind == "emulator":
        # no gaps: the emulator's writes are all this test's (the real server's
        # revision also counts other namespaces' and its own lease writes)
        assert rvs == list(range(int(start) + 1, rvs[-1] + 1))
    finished.set()
    api.drop_watches()                     # the real half: the proxy cuts them
    for t in watchers:
        t.join(30)


def _replay(events):
    state = {}
    for e in events:
        if e["type"] == "BOOKMARK":
            continue
        name = e["object"]["metadata"]["name"]
        if e["type"] == "DELETED":
            state.pop(name, None)
        else:
            state[name] = e["object"]["metadata"]["resourceVersion"]
    return state


def _expected(listed, parity):
    return {i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in listed["items"]
            if parity is None or i["metadata"]["labels"].get("parity") == parity}


def test_paging_one_namespace_among_similar_names(any_kubeapi):
    """Namespaces whose names share a prefix: a page of one never runs into the next
    (keys are /configmaps/<ns>/<name>)."""
    c = any_kubeapi.client
    team = unique("team")
    spaces = (team, team + "-a", team + "0", team + "b")
    try:
        for ns in spaces:
            c.create(namespace(ns), "namespaces")
            for i in range(3):
                c.create(cm(f"c{i}", ns), "configmaps")
        names, cont, pages = [], None, 0
        while True:
            params = {"limit": 2}
            if cont:
                params["continue"] = cont
            page = c.list("v1", "configmaps", team, **params)
            names += [(i["metadata"]["namespace"], i["metadata"]["name"])
                      for i in page["items"]]
            pages += 1
            cont = page["metadata"].get("continue")
            if pages == 1:
                assert page["metadata"]["remainingItemCount"] == 1
            if not cont:
                break
        assert names == [(team, "c0"), (team, "c1"), (team, "c2")] and pages == 2
        if any_kubeapi.kind == "emulator":
            # every namespace's count: the real server's others hold other tests' objects
            everything = c.list("v1", "configmaps", limit=5)
            assert everything["metadata"]["remainingItemCount"] == 7
    finally:
        for ns in spaces:
            c.raw("DELETE", f"/api/v1/namespaces/{ns}")


def test_too_large_resource_version_is_a_504(any_kubeapi):
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    c.create(stack("a", ns), "stacks")
    far = int(c.list(GV, "stacks", ns)["metadata"]["resourceVersion"]) + 1000000
    for path in (f"/apis/pulumi.com/v1/namespaces/{ns}/stacks/a",
                 f"/apis/pulumi.com/v1/namespaces/{ns}/stacks"):
        code, _, body = c.raw("GET", path, params={"resourceVersion": str(far)})
        assert code == 504 and body["reason"] == "Timeout", (path, body)
        assert body["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"


def test_too_large_resource_version_waits_for_the_store(kubeapi):
    # emulator only: knowing the very next version needs a server nobody else writes
    # to, and `requests()` tells when the list is waiting
    c = kubeapi.client
    ahead = kubeapi.health()["resourceVersion"] + 1
    result = []
    t = threading.Thread(target=lambda: result.append(
        KubeClient(kubeapi.url, kubeapi.token, kubeapi.ca_file).list(
            GV, "stacks", "default", resourceVersion=str(ahead))), daemon=True)
    t.start()
    wait_for(lambda: any(r["query"].get("resourceVersion") == str(ahead)
                         for r in kubeapi.requests()), what="the list to arrive")
    c.create(stack("a"), "stacks")          # the store reaches the asked-for version
    t.join(10)
    assert [i["metadata"]["name"] for i in result[0]["items"]] == ["a"]


def test_behaviours_checked_against_kube_apiserver_1_37(any_kubeapi):
    """Answers first found by comparing with kube-apiserver v1.37.2 by hand."""
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    # the mux's plain-text 404 outside built-in groups; a Status inside them
    for path in ("/nope", "/apis/nope.io/v1", f"/apis/pulumi.com/v1/namespaces/{ns}/nothings"):
        code, headers, body = c.raw("GET", path)
        assert (code, body) == (404, "404 page not found\n"), path
        assert headers["Content-Type"] == "text/plain; charset=utf-8"
    code, _, body = c.raw("GET", f"/api/v1/namespaces/{ns}/nothings")
    assert (code, body["message"], body["details"]) == (
        404, "the server could not find the requested resource", {})
    # typed kinds default a missing kind; custom resources need it, and the right one
    assert c.raw("POST", f"/api/v1/namespaces/{ns}/configmaps",
                 {"apiVersion": "v1", "metadata": {"name": "nokind"}})[0] == 201
    code, _, body = c.raw("POST", f"/apis/pulumi.com/v1/namespaces/{ns}/stacks",
                          dict(stack("w", ns), kind="Widget"))
    assert (code, body["message"]) == (
        422, 'Widget.pulumi.com "w" is invalid: kind: Invalid value: "Widget": must be Stack')
    # Leases (unlike ConfigMaps) need a resourceVersion on PUT
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "l", "namespace": ns}, "spec": {"holderIdentity": "a"}}
    c.create(lease, "leases")
    e = err_of(c.update, lease, "leases")
    assert e.status["message"] == ('leases.coordination.k8s.io "l" is invalid: '
                                   'metadata.resourceVersion: Invalid value: 0: must be '
                                   'specified for an update')
    # Go's base64 error offsets
    for data, offset in (("abc", 0), ("ab!d", 2)):
        e = err_of(c.create, {"apiVersion": "v1", "kind": "Secret",
                              "metadata": {"name": "s", "namespace": ns},
                              "data": {"a": data}}, "secrets")
        assert e.status["message"] == ('Secret in version "v1" cannot be handled as a Secret: '
                                       f"illegal base64 data at input byte {offset}")
    # the type error names the JSON type
    e = err_of(c.create, stack("t", ns, refresh="yes"), "stacks")
    assert e.status["details"]["causes"][0]["message"] == (
        'Invalid value: "string": spec.refresh in body must be of type boolean: "string"')
    # a CRD gets its cleanup finalizer only when it is deleted
    crd = c.get(CRD_GV, "customresourcedefinitions", "buckets.source.toolkit.fluxcd.io")
    assert "finalizers" not in crd["metadata"]
    # discovery: verbs in the apiserver's order, storage version hash as base64
    res = [r for r in c.request("GET", "/apis/pulumi.com/v1")["resources"] if r["name"] == "stacks"][0]
    assert res["verbs"] == ["delete", "deletecollection", "get", "list", "patch", "create",
                            "update", "watch"]
    assert res["storageVersionHash"] == "HGLIJfHz0nY="
    e = err_of(c.list, GV, "stacks", ns, limit="abc")
    assert e.status["message"] == 'strconv.ParseInt: parsing "abc": invalid syntax'
    e = err_of(c.list, GV, "stacks", ns, **{"continue": "abc"})
    assert e.status["message"] == ("invalid continue token: continue key is not valid: "
                                   "invalid character 'i' looking for beginning of value")


def test_selector_pages_fill_up_to_the_limit(any_kubeapi):
    """`limit` counts matching objects: keys are read on until the page is full, and a
    page continues while keys are left after it, even when none of them matches."""
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    for i in range(5):
        c.create(stack(f"s{i}", ns, labels={"keep": "yes" if i in (0, 4) else "no",
                                            "i": str(i)}), "stacks")

    def pages(limit, selector):
        out, cont = [], None
        while True:
            params = {"limit": limit, "labelSelector": selector}
            if cont:
                params["continue"] = cont
            page = c.list(GV, "stacks", ns, **params)
            out.append([i["metadata"]["name"] for i in page["items"]])
            assert "remainingItemCount" not in page["metadata"]
            cont = page["metadata"].get("continue")
            if not cont:
                return out
    assert pages(2, "keep=yes") == [["s0", "s4"]]
    assert pages(1, "keep=yes") == [["s0"], ["s4"]]
    assert pages(1, "i=0") == [["s0"], []]
    assert pages(1, "i=3") == [["s3"], []]


def test_update_managers_own_the_maps_they_create(any_kubeapi):
    """fieldsV1 as kube-apiserver 1.37 writes it: "." marks a map an Update created."""
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    made = c.create(dict(cm("mf", ns, a="b"), metadata={"name": "mf", "namespace": ns,
                                                         "labels": {"a": "b"}}),
                    "configmaps", fieldManager="mgr")
    assert made["metadata"]["managedFields"][0]["fieldsV1"] == {
        "f:data": {".": {}, "f:a": {}}, "f:metadata": {"f:labels": {".": {}, "f:a": {}}}}
    patched = c.patch("v1", "configmaps", "mf", {"data": {"c": "d"},
                                                 "metadata": {"annotations": {"x": "y"}}},
                      ns, fieldManager="p2")
    mine = [m["fieldsV1"] for m in patched["metadata"]["managedFields"] if m["manager"] == "p2"]
    assert mine == [{"f:data": {"f:c": {}},
                     "f:metadata": {"f:annotations": {".": {}, "f:x": {}}}}]


# -- emulator only: fault knobs, restart, controller-manager work ------------------------

def test_expired_watch_as_error_event_or_http_410(kubeapi):
    # emulator only: `expire` and `expired_mode` (the real 410 after a restart is both
    # ways in test_real_kube.py's test_watch_survives_apiserver_restart)
    c = kubeapi.client
    old = rv(c.create(stack("a"), "stacks"))
    c.patch(GV, "stacks", "a", {"spec": {"refresh": True}}, "default")
    kubeapi.expire()
    evs = list(c.watch(GV, "stacks", "default", resourceVersion=str(old), timeoutSeconds=5))
    assert len(evs) == 1 and evs[0]["type"] == "ERROR"
    assert evs[0]["object"]["code"] == 410 and evs[0]["object"]["reason"] == "Expired"
    assert evs[0]["object"]["message"].startswith(f"too old resource version: {old} (")
    kubeapi.configure(expired_mode="http")
    e = err_of(lambda: next(c.watch(GV, "stacks", "default", resourceVersion=str(old))))
    assert e.code == 410
    # open watches can be expired too
    kubeapi.configure(expired_mode="event")
    gen = c.watch(GV, "stacks", "default", resourceVersion="0", timeoutSeconds=10)
    next(gen)
    kubeapi.wait_watches(1)
    kubeapi.expire(watches=True)
    assert next(gen)["type"] == "ERROR"
    assert list(gen) == []


def test_bounded_history_expires_old_versions(kubeapi_factory):
    # emulator only: the history size is an emulator setting
    api = kubeapi_factory(history=20)
    c = api.client
    first = rv(c.create(stack("a"), "stacks"))
    for i in range(25):
        c.patch(GV, "stacks", "a", {"spec": {"targets": [str(i)]}}, "default")
    evs = list(c.watch(GV, "stacks", "default", resourceVersion=str(first), timeoutSeconds=5))
    assert evs[0]["type"] == "ERROR" and evs[0]["object"]["code"] == 410
    recent = rv(c.get(GV, "stacks", "a", "default")) - 3
    evs = collect(c.watch(GV, "stacks", "default", resourceVersion=str(recent),
                          timeoutSeconds=5), 3)
    assert [e["type"] for e in evs] == ["MODIFIED"] * 3


def test_injected_failures(kubeapi):
    # emulator only: `fail_next`
    c = kubeapi.client
    kubeapi.fail_next(2, code=500)
    assert c.raw("GET", "/api/v1/namespaces")[0] == 500
    code, _, body = c.raw("GET", "/api/v1/namespaces")
    assert code == 500 and body["reason"] == "InternalError"
    assert c.raw("GET", "/api/v1/namespaces")[0] == 200
    kubeapi.fail_next(1, code=429, retry_after=3, path="/stacks")
    assert c.raw("GET", "/api/v1/namespaces")[0] == 200
    code, headers, body = c.raw("GET", "/apis/pulumi.com/v1/stacks")
    assert code == 429 and headers["Retry-After"] == "3"
    assert body["reason"] == "TooManyRequests" and body["details"]["retryAfterSeconds"] == 3
    kubeapi.fail_next(1, code=503, watch=True)
    assert c.raw("GET", "/apis/pulumi.com/v1/stacks")[0] == 200
    code, _, body = c.raw("GET", "/apis/pulumi.com/v1/stacks", params={"watch": "1"})
    assert code == 503 and body["reason"] == "ServiceUnavailable"


def curl_stack_watch(kubeapi):
    """curl watching default/stacks: how libcurl, which the controller uses, sees a
    watch end."""
    return subprocess.Popen(
        ["curl", "-sS", "-N", "--cacert", kubeapi.ca_file, "-H",
         f"Authorization: Bearer {kubeapi.token}",
         f"{kubeapi.url}/apis/pulumi.com/v1/namespaces/default/stacks?watch=1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("mode", ["abort", "eof"])
def test_drop_watches(kubeapi, mode):
    """What libcurl (curl) sees: an aborted watch is a truncated chunked body (curl exit
    18), an 'eof' drop is a clean end of the body (exit 0)."""
    # emulator only: `drop_watches` (the proxy's cut is both ways in test_kube_runtime.py)
    kubeapi.client.create(stack("a"), "stacks")
    proc = curl_stack_watch(kubeapi)
    try:
        kubeapi.wait_watches(1)
        assert kubeapi.drop_watches(mode) == 1
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert json.loads(out.splitlines()[0])["type"] == "ADDED"
    assert proc.returncode == (18 if mode == "abort" else 0), err
    wait_for(lambda: not kubeapi.watches(), what="watch to be unregistered")
    # the Python client tells the two apart as well
    outcome = []

    def run():
        try:
            for _ in kubeapi.client.watch(GV, "stacks", "default", timeoutSeconds=30):
                pass
            outcome.append("end")
        except WatchBroken:
            outcome.append("broken")
    t = threading.Thread(target=run, daemon=True)
    t.start()
    kubeapi.wait_watches(1)
    kubeapi.drop_watches(mode)
    t.join(10)
    assert outcome == ["broken" if mode == "abort" else "end"]


@pytest.mark.parametrize("keep", [False, True])
def test_restart_keeps_objects_versions_and_history(kubeapi_factory, keep):
    # emulator only: `keep_watch_history`; the real restart is both ways in
    # test_real_kube.py's test_watch_survives_apiserver_restart
    api = kubeapi_factory(keep_watch_history=keep)
    c = api.client
    a = c.create(stack("a"), "stacks")
    b = c.patch(GV, "stacks", "a", {"spec": {"refresh": True}}, "default")
    page = c.list(GV, "stacks", limit=1)
    before = c.list(GV, "stacks")
    api.restart()
    after = c.list(GV, "stacks")
    assert after["items"] == before["items"]
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    evs = collect(c.watch(GV, "stacks", "default", resourceVersion=str(rv(a)),
                          timeoutSeconds=5), 1)
    if keep:
        assert evs[0]["type"] == "MODIFIED" and rv(evs[0]["object"]) == rv(b)
    else:               # the watch cache starts at the restart, like kube-apiserver's
        assert evs[0]["type"] == "ERROR" and evs[0]["object"]["code"] == 410
    # lists still read the saved history (etcd keeps it)
    assert c.list(GV, "stacks", limit=1, resourceVersion=page["metadata"]["resourceVersion"])
    assert rv(c.create(stack("c"), "stacks")) == rv(b) + 1
    # a client that was up to date resumes without a relist
    evs = collect(c.watch(GV, "stacks", "default", resourceVersion=str(rv(b)),
                          timeoutSeconds=5), 1)
    assert evs[0]["type"] == "ADDED" and evs[0]["object"]["metadata"]["name"] == "c"


def test_watch_ends_cleanly_when_the_server_stops(kubeapi):
    # emulator only: a graceful stop of the real server waits ~60 s for open watches
    c = kubeapi.client
    gen = c.watch("v1", "configmaps", "default", resourceVersion=str(
        kubeapi.health()["resourceVersion"]), timeoutSeconds=30)
    out = []
    t = threading.Thread(target=lambda: out.extend(gen), daemon=True)
    t.start()
    kubeapi.wait_watches(1)
    kubeapi.stop()
    t.join(10)
    assert not t.is_alive() and out == []
    kubeapi.start()
    assert c.list("v1", "namespaces")["items"]


def test_fragmented_watch_writes_still_carry_whole_events(kubeapi):
    # emulator only: `fragment_watch`
    c = kubeapi.client
    kubeapi.configure(fragment_watch=True)
    for i in range(3):
        c.create(stack(f"s{i}", config={"blob": "x" * 300}), "stacks")
    evs = collect(c.watch(GV, "stacks", "default", resourceVersion="0", timeoutSeconds=5), 3)
    assert [e["object"]["metadata"]["name"] for e in evs] == ["s0", "s1", "s2"]


def test_deleting_a_namespace_or_crd_with_many_objects(kubeapi):
    # emulator only: `bulk_create`, and emptying a namespace is kube-controller-manager's
    # work; the project's CRDs are shared by the real server's session
    c = kubeapi.client
    c.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "big"}},
             "namespaces")
    kubeapi.bulk_create([cm(f"c{i}", ns="big") for i in range(1500)] +
                        [stack(f"s{i}", ns="big") for i in range(1500)])
    c.delete("v1", "namespaces", "big")
    assert err_of(c.get, "v1", "namespaces", "big").code == 404
    assert c.list("v1", "configmaps", "big")["items"] == []
    kubeapi.bulk_create([stack(f"s{i}") for i in range(1500)])
    c.delete("apiextensions.k8s.io/v1", "customresourcedefinitions", "stacks.pulumi.com")
    assert err_of(c.get, "apiextensions.k8s.io/v1", "customresourcedefinitions",
                  "stacks.pulumi.com").code == 404


def test_crash_cuts_watches_and_keeps_every_write(kubeapi):
    # emulator only: `crash`
    proc = curl_stack_watch(kubeapi)
    try:
        kubeapi.wait_watches(1)
        last = kubeapi.client.create(stack("a"), "stacks")
        kubeapi.crash()
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 18, (out, err)      # body cut short, not ended
    kubeapi.start()
    assert rv(kubeapi.client.get(GV, "stacks", "a", "default")) == rv(last)


def test_held_watches_go_silent_until_released(kubeapi):
    # emulator only: `hold_watches`
    c = kubeapi.client
    got = []
    done = threading.Event()

    def run():
        for ev in c.watch(GV, "stacks", "default", resourceVersion="0", timeoutSeconds=30):
            got.append(ev["object"]["metadata"]["name"])
        done.set()
    threading.Thread(target=run, daemon=True).start()
    kubeapi.wait_watches(1)
    kubeapi.configure(hold_watches=True)
    c.create(stack("a"), "stacks")
    c.create(stack("b"), "stacks")
    assert not done.wait(0.5) and got == []      # nothing arrives while held
    kubeapi.configure(hold_watches=False)
    wait_for(lambda: got == ["a", "b"], what="held events after release")
    kubeapi.drop_watches("eof")
    assert done.wait(10)


def test_ipv6_loopback(kubeapi_factory):
    # emulator only: the real server listens on 127.0.0.1
    api = kubeapi_factory(host="::1", crds=False)
    assert api.url.startswith("https://[::1]:")
    assert api.client.get("v1", "namespaces", "default")["metadata"]["name"] == "default"
    assert api.kubectl("get", "ns", "default", "-o", "name").stdout.strip() == \
        "namespace/default"


@pytest.mark.parametrize("policy", ["Orphan", "Foreground", "Background"])
def test_delete_propagation_policies(kubeapi, policy):
    # emulator only: the orphan/foreground finalizers and the dependents are handled by
    # kube-controller-manager's garbage collector, which the real tier does not run
    c = kubeapi.client
    owner = c.create(stack("web"), "stacks")
    ref = {"apiVersion": GV, "kind": "Stack", "name": "web", "uid": owner["metadata"]["uid"]}
    dep = cm("web-outputs")
    dep["metadata"]["ownerReferences"] = [ref]
    c.create(dep, "configmaps")
    c.delete(GV, "stacks", "web", "default", {"propagationPolicy": policy})
    assert err_of(c.get, GV, "stacks", "web", "default").code == 404
    if policy == "Orphan":
        left = c.get("v1", "configmaps", "web-outputs", "default")
        assert "ownerReferences" not in left["metadata"]
    else:
        assert err_of(c.get, "v1", "configmaps", "web-outputs", "default").code == 404
