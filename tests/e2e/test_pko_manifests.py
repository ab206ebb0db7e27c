"""Stacks written for the Pulumi Kubernetes Operator (PKO) apply unchanged, on both tiers
(any_kubeapi, any_bare_kubeapi: the emulator and the real kube-apiserver).

tests/e2e/pko/ holds one manifest per way PKO v2's documentation writes a Stack (Git with
branch or commit and credentials, a Flux source with a workspace pod, a Program, the
deprecated fields and the no-ops, a program baked into the image, the v1alpha1 alias).
Each applies with `kubectl apply` and strict field validation, reads back with nothing
pruned, and an object PKO's own CRD stored keeps its fields when this project's CRD takes
the definition over.  What the controller then does with each field is tested where the
field is served (test_stack_pko_*.py).

PKO_MANIFESTS=<dir of PKO's own repository> adds every Stack document found there (the
figure of issue 23: how many of PKO's manifests apply as written)."""
import json
import os
import pathlib

import pytest
import yaml

from kube_fixtures import wait_for

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CORPUS = HERE / "pko"


def _documents(path, namespace):
    text = path.read_text().replace("NAMESPACE", namespace)
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]


def _stack_files():
    files = sorted(CORPUS.glob("*.yaml"))
    extra = os.environ.get("PKO_MANIFESTS")
    if extra:
        for path in sorted(pathlib.Path(extra).rglob("*.yaml")):
            if "crds" in path.parts or "helm" in path.parts:
                continue
            try:
                docs = list(yaml.safe_load_all(path.read_text()))
            except yaml.YAMLError:
                continue           # kubectl could not read it either
            if any(isinstance(d, dict) and d.get("kind") == "Stack" for d in docs):
                files.append(path)
    return files


def _stacks_only(path, namespace, tmp_path):
    """The file's Stack documents alone (PKO's files also hold Secrets, Programs,
    RBAC...), in namespace."""
    docs = [d for d in _documents(path, namespace) if d.get("kind") == "Stack"]
    for d in docs:
        d["metadata"]["namespace"] = namespace
    out = tmp_path / path.name
    out.write_text(yaml.safe_dump_all(docs))
    return out, docs


@pytest.mark.parametrize("path", _stack_files(), ids=lambda p: str(p.relative_to(
    CORPUS if p.is_relative_to(CORPUS) else p.parents[2])))
def test_a_pko_stack_applies_as_written_and_reads_back_whole(any_kubeapi, path, tmp_path):
    api, ns = any_kubeapi, any_kubeapi.namespace
    manifest, docs = _stacks_only(path, ns, tmp_path)
    proc = api.kubectl("apply", "--validate=strict", "-f", manifest, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "unknown field" not in proc.stderr, proc.stderr
    for doc in docs:
        got = api.client.get(doc["apiVersion"], "stacks", doc["metadata"]["name"], ns)
        assert got["spec"] == doc["spec"], doc["metadata"]["name"]


# What PKO's CRD lets a stored Stack hold: an open spec and status, as any CRD before
# this project's took the definition over.  Written here, not copied from PKO.
PKO_ERA_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "stacks.pulumi.com"},
    "spec": {
        "group": "pulumi.com", "scope": "Namespaced",
        "names": {"plural": "stacks", "singular": "stack", "kind": "Stack",
                  "listKind": "StackList"},
        "versions": [{
            "name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}},
        }],
    },
}


def test_a_stack_stored_under_pkos_crd_keeps_its_fields_after_the_takeover(any_bare_kubeapi,
                                                                           tmp_path):
    """The migration guide's takeover (server-side apply of deploy/crds with
    --force-conflicts) over a Stack PKO had stored: a field the new schema did not
    declare would be pruned from it for good on its next write."""
    api = any_bare_kubeapi
    crd = tmp_path / "pko-era-crd.json"
    crd.write_text(json.dumps(PKO_ERA_CRD))
    api.kubectl("apply", "-f", crd)
    api.kubectl("wait", "--for=condition=Established", "crd/stacks.pulumi.com", "--timeout=60s")
    ns = "pko-era"
    api.kubectl("create", "namespace", ns)
    stored = {}
    for path in sorted(CORPUS.glob("*.yaml")):
        manifest, docs = _stacks_only(path, ns, tmp_path)
        for doc in docs:
            if doc["apiVersion"] != "pulumi.com/v1":
                continue
            wait_for(lambda: api.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc),
                                         check=False).returncode == 0, 60,
                     what="the PKO-era CRD to serve Stacks")
            stored[doc["metadata"]["name"]] = doc["spec"]
    status = {"lastUpdate": {"name": "network-up-7f3c", "type": "up", "state": "succeeded",
                             "permalink": "https://app.pulumi.com/acme/network/dev/updates/7",
                             "lastAttemptedCommit": "main@sha1:3f7c2a9e",
                             "lastSuccessfulCommit": "main@sha1:3f7c2a9e", "failures": 0},
              "projectInfo": {"name": "network", "runtime": "yaml"},
              "outputs": {"vpcId": "vpc-0a1b"}}
    api.client.patch("pulumi.com/v1", "stacks", "network", {"status": status}, ns,
                     subresource="status")

    api.kubectl("apply", "--server-side", "--force-conflicts", "-k", ROOT / "deploy" / "crds")
    api.kubectl("wait", "--for=condition=Established", "crd/stacks.pulumi.com", "--timeout=60s")

    def served_by_ours():
        crd_now = api.client.get("apiextensions.k8s.io/v1", "customresourcedefinitions",
                                 "stacks.pulumi.com")
        return [v["name"] for v in crd_now["spec"]["versions"]] == ["v1", "v1alpha1"]
    wait_for(served_by_ours, 60, what="this project's CRD")
    for name, spec in stored.items():
        got = wait_for(lambda: api.client.get("pulumi.com/v1", "stacks", name, ns), 30,
                       what=f"Stack {name}")
        assert got["spec"] == spec, name
    got = api.client.get("pulumi.com/v1", "stacks", "network", ns)
    assert got["status"]["lastUpdate"] == status["lastUpdate"]
    assert got["status"]["projectInfo"] == status["projectInfo"]
    assert got["status"]["outputs"] == status["outputs"]


# PKO's Update kind, as far as migrate --check reads it (written here).
PKO_UPDATE_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "updates.auto.pulumi.com"},
    "spec": {
        "group": "auto.pulumi.com", "scope": "Namespaced",
        "names": {"plural": "updates", "singular": "update", "kind": "Update",
                  "listKind": "UpdateList"},
        "versions": [{
            "name": "v1alpha1", "served": True, "storage": True, "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}},
        }],
    },
}


def _migrate(api, pc_bin, *args):
    from test_cli import run
    return run(pc_bin, "migrate", *args, kubeconfig=api.kubeconfig)


def test_migrate_check_says_what_each_stack_becomes_and_writes_nothing(any_kubeapi, pc_bin,
                                                                      tmp_path):
    from test_cli import table
    api, ns = any_kubeapi, any_kubeapi.namespace
    plain = {"apiVersion": "pulumi.com/v1", "kind": "Stack",
             "metadata": {"name": "plain", "namespace": ns},
             "spec": {"stack": "dev", "fluxSource": {"sourceRef": {
                 "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
                 "name": "programs"}}}}
    kept = json.loads(json.dumps(plain))
    kept["metadata"].update(name="kept", finalizers=["finalizer.stack.pulumi.com"])
    kept["spec"]["retryOnUpdateConflict"] = True
    for doc in (plain, kept):
        api.client.create(doc, "stacks", ns)
    manifest, _ = _stacks_only(CORPUS / "git-branch.yaml", ns, tmp_path)
    api.kubectl("apply", "-f", manifest)
    crd = tmp_path / "update-crd.json"
    crd.write_text(json.dumps(PKO_UPDATE_CRD))
    api.kubectl("apply", "-f", crd)
    api.kubectl("wait", "--for=condition=Established", "crd/updates.auto.pulumi.com",
                "--timeout=60s")
    update = {"apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Update",
              "metadata": {"name": "network-up-1", "namespace": ns},
              "spec": {"type": "up"}}
    wait_for(lambda: api.kubectl("apply", "-f", "-", input=json.dumps(update),
                                 check=False).returncode == 0, 60, what="Updates served")
    before = api.client.get("pulumi.com/v1", "stacks", "kept", ns)["metadata"]["resourceVersion"]

    r = _migrate(api, pc_bin, "--check", "-n", ns)
    assert r.returncode == 1, r.stdout + r.stderr
    rows = {row["NAME"]: row for row in table(r.stdout.split("\nUpdate ")[0])}
    assert rows["plain"]["VERDICT"] == "ok"
    assert rows["kept"]["VERDICT"] == "change"
    assert "the finalizer is taken off" in rows["kept"]["WHAT CHANGES"]
    assert "retryOnUpdateConflict means nothing here" in rows["kept"]["WHAT CHANGES"]
    assert rows["network"]["VERDICT"] in ("refused", "change")
    if rows["network"]["VERDICT"] == "refused":
        assert "spec." in rows["network"]["WHAT CHANGES"]
    assert f"Update {ns}/network-up-1 of the operator has not finished" in r.stdout
    assert api.client.get("pulumi.com/v1", "stacks", "kept", ns)["metadata"][
        "resourceVersion"] == before

    # the Update finished: only the refusal, if any, keeps the exit status at 1
    api.client.patch("auto.pulumi.com/v1alpha1", "updates", "network-up-1",
                     {"status": {"conditions": [{"type": "Complete", "status": "True",
                                                 "reason": "Updated", "message": "",
                                                 "lastTransitionTime": "2026-01-01T00:00:00Z"}]}},
                     ns, subresource="status")
    api.client.delete("pulumi.com/v1", "stacks", "network", ns)
    r = _migrate(api, pc_bin, "--check", "-n", ns)
    assert "has not finished" not in r.stdout
    assert r.returncode == 0, r.stdout + r.stderr
    api.client.patch("pulumi.com/v1", "stacks", "kept", {"metadata": {"finalizers": None}}, ns)
