"""The Stack CRD (deploy/crds/pulumi.com_stacks.yaml) as a server serves it, on both
tiers (any_kubeapi: the emulator and the real kube-apiserver): the samples apply, the
classic manifest applies as v1alpha1 unchanged and reads back as v1, the CEL rules
refuse what the controller could not act on with a message that says what is wrong,
and `kubectl get` prints the columns docs/stack-api.md shows."""
import json
import pathlib

import pytest
import yaml

from kube_fixtures import KubeError, wait_for

ROOT = pathlib.Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "deploy" / "samples"
CLASSIC = SAMPLES / "classic-stack.yaml"
V1, V1ALPHA1 = "pulumi.com/v1", "pulumi.com/v1alpha1"
FLUX = {"sourceRef": {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
                      "name": "repo"}}
SOURCE_RULE = ("exactly one source is needed; set one of fluxSource, ociSource, programRef, "
               "projectRepo or workspaceTemplate.spec.local")
STACK_RULE = ("stack names the Pulumi stack; only a classic programRef Stack may leave it out "
              "(its stack is then the Stack's own name)")
REF_RULE = "ociSource.ref needs exactly one of tag, digest or semver"


def stack(name, api_version=V1, **spec):
    return {"apiVersion": api_version, "kind": "Stack", "metadata": {"name": name},
            "spec": spec}


def sample_docs():
    """Every object of deploy/samples/ as the kustomization lists it."""
    kust = yaml.safe_load((SAMPLES / "kustomization.yaml").read_text())
    return [d for f in kust["resources"] for d in yaml.safe_load_all((SAMPLES / f).read_text())
            if d]


def plural(api, obj):
    return api.plural_of(obj["apiVersion"], obj["kind"])


@pytest.mark.parametrize("mode", [["--server-side"], []], ids=["server-side", "client-side"])
def test_every_sample_applies(any_kubeapi, mode):
    api, ns = any_kubeapi, any_kubeapi.namespace
    proc = api.kubectl("apply", *mode, "-k", SAMPLES, "-n", ns)
    assert "unknown field" not in proc.stderr, proc.stderr
    for doc in sample_docs():
        got = api.client.get(doc["apiVersion"], plural(api, doc), doc["metadata"]["name"], ns)
        if doc["kind"] == "Stack":      # the Stack CRD adds no defaults; Flux's do
            assert got["spec"] == doc["spec"], doc["metadata"]["name"]
        else:
            assert {k: got["spec"][k] for k in doc["spec"]} == doc["spec"]


@pytest.mark.parametrize("mode", [["--server-side"], []], ids=["server-side", "client-side"])
def test_classic_manifest_applies_as_v1alpha1_and_reads_as_v1(any_kubeapi, mode):
    api, ns = any_kubeapi, any_kubeapi.namespace
    classic = yaml.safe_load(CLASSIC.read_text())
    proc = api.kubectl("apply", *mode, "-f", CLASSIC, "-n", ns)
    assert "unknown field" not in proc.stderr and "deprecated" not in proc.stderr, proc.stderr
    name = classic["metadata"]["name"]
    as_v1 = api.client.get(V1, "stacks", name, ns)
    as_alpha = api.client.get(V1ALPHA1, "stacks", name, ns)
    assert as_v1["apiVersion"] == V1 and as_alpha["apiVersion"] == V1ALPHA1
    assert as_v1["spec"] == as_alpha["spec"] == classic["spec"]
    # kubectl's preferred version is v1: a plain `get` shows the same object there
    got = json.loads(api.kubectl("get", "stack", name, "-n", ns, "-o", "json").stdout)
    assert got["apiVersion"] == V1 and got["spec"] == classic["spec"]
    # applying it again changes nothing (no defaults were added behind the user's back)
    again = api.kubectl("apply", *mode, "-f", CLASSIC, "-n", ns)
    assert "unchanged" in again.stdout or "serverside-applied" in again.stdout, again.stdout
    assert api.client.get(V1, "stacks", name, ns)["metadata"]["generation"] == 1


def test_status_subresource_on_both_versions(any_kubeapi):
    api, ns = any_kubeapi, any_kubeapi.namespace
    api.client.create(stack("s", api_version=V1ALPHA1, stack="dev", fluxSource=FLUX),
                      "stacks", ns)
    for gv, revision in ((V1ALPHA1, "main@sha1:aaa"), (V1, "main@sha1:bbb")):
        api.client.patch(gv, "stacks", "s", {"spec": {"stack": "ignored"},
                                             "status": {"lastAppliedRevision": revision}},
                         ns, subresource="status")
        got = api.client.get(V1, "stacks", "s", ns)
        assert got["status"]["lastAppliedRevision"] == revision
        assert got["spec"]["stack"] == "dev" and got["metadata"]["generation"] == 1


def _refusal(api, obj):
    with pytest.raises(KubeError) as e:
        api.client.create(obj, "stacks", api.namespace)
    assert e.value.code == 422, e.value
    return e.value.status


@pytest.mark.parametrize("spec,field,message", [
    ({"stack": "dev", "fluxSource": FLUX,
      "ociSource": {"url": "oci://r/x", "ref": {"tag": "v1"}}}, "spec", SOURCE_RULE),
    ({"stack": "dev", "fluxSource": FLUX, "projectRepo": "https://github.com/x/y"},
     "spec", SOURCE_RULE),
    ({"stack": "dev"}, "spec", SOURCE_RULE),
    ({"fluxSource": FLUX}, "spec.stack", STACK_RULE),
    ({"stack": "", "fluxSource": FLUX}, "spec.stack",
     "stack must name the Pulumi stack, e.g. dev or acme/network/dev"),
    ({"stack": "dev", "ociSource": {"url": "oci://r/x", "ref": {"tag": "v1", "semver": "1.x"}}},
     "spec.ociSource.ref", REF_RULE),
    ({"stack": "dev", "ociSource": {"url": "oci://r/x", "ref": {}}},
     "spec.ociSource.ref", REF_RULE),
], ids=["flux-and-oci", "flux-and-projectRepo", "no-source", "no-stack", "empty-stack",
        "tag-and-semver", "no-ref"])
def test_cel_refuses_with_a_message_that_says_why(any_kubeapi, spec, field, message):
    api = any_kubeapi
    status = _refusal(api, stack("bad", **spec))
    if message == STACK_RULE:
        reason, text = "FieldValueRequired", f"Required value: {message}"
    elif field == "spec.stack":     # a scalar's value is shown, an object's is not
        reason, text = "FieldValueInvalid", f'Invalid value: "": {message}'
    else:
        reason, text = "FieldValueInvalid", f"Invalid value: {message}"
    assert status["details"]["causes"] == [{"reason": reason, "field": field, "message": text}]
    assert status["message"] == f'Stack.pulumi.com "bad" is invalid: {field}: {text}'


def test_cel_accepts_one_source_of_each_kind_and_checks_updates(any_kubeapi):
    api, ns = any_kubeapi, any_kubeapi.namespace
    for name, spec in [("flux", {"fluxSource": FLUX}),
                       ("oci", {"ociSource": {"url": "oci://r/x", "ref": {"digest": "sha256:0"}}}),
                       ("classic", {"programRef": {"repo": "https://g/x", "ref": "refs/heads/m"}}),
                       ("old", {"projectRepo": "https://github.com/x/y", "branch": "main"})]:
        api.client.create(stack(name, stack="dev", **spec), "stacks", ns)
    # a second source added by a patch is refused like one in a create
    with pytest.raises(KubeError) as e:
        api.client.patch(V1, "stacks", "flux", {"spec": {"programRef": {"repo": "x"}}}, ns)
    assert e.value.code == 422 and SOURCE_RULE in e.value.status["message"]
    # and kubectl shows the message as the server wrote it
    proc = api.kubectl("patch", "stack", "oci", "-n", ns, "--type=merge", "-p",
                       json.dumps({"spec": {"ociSource": {"ref": {"tag": "v2"}}}}), check=False)
    assert proc.returncode != 0 and REF_RULE in proc.stderr, proc.stderr


def test_a_schema_error_that_blocks_the_rules_says_so(any_kubeapi):
    """An unsupported enum value (or a wrong type) stops the server before the CEL
    rules, and it adds a cause saying they were not checked."""
    api = any_kubeapi
    status = _refusal(api, stack("bad", stack="dev", fluxSource=FLUX, runner={"type": "Pod"},
                                 ociSource={"url": "oci://r/x", "ref": {}}))
    assert status["details"]["causes"] == [
        {"reason": "FieldValueNotSupported", "field": "spec.runner.type",
         "message": 'Unsupported value: "Pod": supported values: "Local", "Job"'},
        {"reason": "FieldValueInvalid", "field": "<nil>",
         "message": "Invalid value: null: some validation rules were not checked because the "
                    "object was invalid; correct the existing errors to complete validation"}]


def test_status_is_validated_as_metav1_condition(any_kubeapi):
    """lastTransitionTime is an RFC 3339 date-time with a zone; reason is non-empty;
    the text names the path inside status, the field the whole path."""
    api, ns = any_kubeapi, any_kubeapi.namespace
    api.client.create(stack("s", stack="dev", fluxSource=FLUX), "stacks", ns)
    ready = {"type": "Ready", "status": "True", "reason": "Succeeded", "message": "",
             "lastTransitionTime": "2026-01-01T00:00:00.5+02:00"}
    api.client.patch(V1, "stacks", "s", {"status": {"conditions": [ready]}}, ns,
                     subresource="status")
    for stamp in ("2026-01-01T00:00:00", "2026-01-01 00:00:00Z", ""):
        with pytest.raises(KubeError) as e:
            api.client.patch(V1, "stacks", "s", {"status": {"conditions": [
                dict(ready, lastTransitionTime=stamp)]}}, ns, subresource="status")
        assert e.value.status["details"]["causes"][0] == {
            "reason": "FieldValueTypeInvalid", "field": "status.conditions[0].lastTransitionTime",
            "message": f'Invalid value: "{stamp}": conditions[0].lastTransitionTime in body '
                       f'must be of type date-time: "{stamp}"'}
    with pytest.raises(KubeError) as e:
        api.client.patch(V1, "stacks", "s", {"status": {"conditions": [
            dict(ready, reason="")]}}, ns, subresource="status")
    assert e.value.status["details"]["causes"] == [{
        "reason": "FieldValueInvalid", "field": "status.conditions[0].reason",
        "message": 'Invalid value: "": conditions[0].reason in body should be at least 1 '
                   "chars long"}]


def test_conditions_are_a_map_keyed_by_type(any_kubeapi):
    api, ns = any_kubeapi, any_kubeapi.namespace
    api.client.create(stack("s", stack="dev", fluxSource=FLUX), "stacks", ns)
    ready = {"type": "Ready", "status": "False", "reason": "Progressing", "message": "m",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}
    with pytest.raises(KubeError) as e:
        api.client.patch(V1, "stacks", "s", {"status": {"conditions": [ready, ready]}}, ns,
                         subresource="status")
    assert e.value.code == 422
    assert e.value.status["details"]["causes"] == [{
        "reason": "FieldValueDuplicate", "field": "status.conditions[1]",
        "message": 'Duplicate value: {"type":"Ready"}'}]


def test_kubectl_get_prints_the_columns(any_kubeapi):
    api, ns = any_kubeapi, any_kubeapi.namespace
    api.client.create(stack("web", stack="acme/web/dev", fluxSource=FLUX, suspend=True),
                      "stacks", ns)
    api.client.create(stack("db", stack="acme/db/dev", fluxSource=FLUX), "stacks", ns)
    api.client.patch(V1, "stacks", "web", {"status": {
        "observedGeneration": 1, "lastAppliedRevision": "main@sha1:abc",
        "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded",
                        "message": "applied main@sha1:abc",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}, ns,
        subresource="status")
    lines = api.kubectl("get", "stacks", "-n", ns).stdout.splitlines()
    assert lines[0].split() == ["NAME", "READY", "REASON", "REVISION", "SUSPENDED", "AGE"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["web"][:5] == ["web", "True", "Succeeded", "main@sha1:abc", "true"]
    assert rows["db"][0] == "db" and len(rows["db"]) == 2     # name and age; the rest empty
    wide = api.kubectl("get", "stack", "web", "-n", ns, "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["NAME", "READY", "REASON", "REVISION", "SUSPENDED", "AGE",
                               "STACK", "MESSAGE", "LAST", "UPDATE", "LAST", "COMMIT",
                               "RECONCILING", "STALLED", "PERMALINK"]
    cells = wide[1].split()      # no lastUpdate yet: PKO's columns are empty
    assert cells[:5] == ["web", "True", "Succeeded", "main@sha1:abc", "true"]
    assert cells[6:] == ["acme/web/dev", "applied", "main@sha1:abc"]


def test_a_crd_whose_rule_does_not_compile_is_refused(any_kubeapi):
    """The emulator evaluates only the CEL it knows (kubeapi/cel.py); a rule outside it
    is refused at the CRD, as the real server refuses a rule that does not compile,
    rather than being checked wrongly."""
    api = any_kubeapi
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "widgets.cel.example.com"},
           "spec": {"group": "cel.example.com", "scope": "Namespaced",
                    "names": {"plural": "widgets", "kind": "Widget"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                        "openAPIV3Schema": {"type": "object", "properties": {"spec": {
                            "type": "object", "properties": {"a": {"type": "string"}},
                            "x-kubernetes-validations": [
                                {"rule": "self.a.frobnicate()"}]}}}}}]}}
    with pytest.raises(KubeError) as e:
        api.client.create(crd, "customresourcedefinitions")
    assert e.value.code == 422, e.value
    assert "x-kubernetes-validations[0].rule" in e.value.status["message"]
    assert "compilation failed" in e.value.status["message"]


def test_crd_installs_with_kubectl_apply_k_and_serves_both_versions(any_bare_kubeapi):
    """`kubectl apply -k deploy/crds` (client-side, as a user installs it) on a server
    without it: Established, both versions in discovery with v1 preferred, and the
    descriptions reach `kubectl explain`."""
    api = any_bare_kubeapi
    api.kubectl("apply", "-k", ROOT / "deploy" / "crds")
    api.kubectl("wait", "--for=condition=Established", "crd/stacks.pulumi.com",
                "--timeout=60s")
    group = api.direct_client.request("GET", "/apis/pulumi.com")
    assert [v["version"] for v in group["versions"]] == ["v1", "v1alpha1"]
    assert group["preferredVersion"]["version"] == "v1"
    for gv in (V1, V1ALPHA1):
        assert api.plural_of(gv, "Stack") == "stacks"
    # the real server publishes a new CRD's OpenAPI a moment after it is Established
    explain = wait_for(lambda: api.kubectl("explain", "stacks.spec.ociSource.insecure",
                                           check=False).stdout, 60, interval=0.5,
                       what="kubectl explain to find the Stack kind")
    assert "Plain HTTP to the registry" in explain
