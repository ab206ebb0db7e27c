"""The kustomize manifests in deploy/ render with the kustomize built into
kubectl, and what they render is consistent: the ServiceAccount the
Deployment runs as is the one the bindings name, and the flags the
Deployment passes are flags `run` accepts."""
import pathlib
import subprocess

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]


def render(d):
    out = subprocess.run(["kubectl", "kustomize", str(ROOT / "deploy" / d)], check=True,
                         capture_output=True, text=True).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.mark.parametrize("d", ["default", "crds", "rbac", "manager", "flux"])
def test_renders(d):
    assert render(d)


def test_default_is_consistent(run_pc):
    docs = render("default")
    kinds = {(x["kind"], x["metadata"]["name"]) for x in docs}
    assert ("CustomResourceDefinition", "stacks.pulumi.com") in kinds
    assert ("Namespace", "pulumi-system") in kinds
    dep = next(x for x in docs if x["kind"] == "Deployment")
    assert dep["metadata"]["namespace"] == "pulumi-system"
    sa = dep["spec"]["template"]["spec"]["serviceAccountName"]
    crb = next(x for x in docs if x["kind"] == "ClusterRoleBinding")
    assert crb["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": "pulumi-system"}]
    container = dep["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert args[0] == "run"
    help_text = run_pc("run", "--help").stdout
    for a in args[1:]:
        flag = a.split("=")[0]
        assert flag in help_text, f"{flag} is not a flag of 'run'"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_samples_parse():
    for f in (ROOT / "deploy" / "samples").glob("*.yaml"):
        for doc in yaml.safe_load_all(f.read_text()):
            assert doc["apiVersion"] and doc["kind"] and doc["metadata"]["name"]
