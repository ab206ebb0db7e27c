"""The kustomize manifests in deploy/ render with the kustomize built into
kubectl, and what they render is consistent: the ServiceAccount the
Deployment runs as is the one the bindings name, and the flags the
Deployment passes are flags `run` accepts; the samples render too."""
import pathlib
import subprocess

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]


def render(d):
    out = subprocess.run(["kubectl", "kustomize", str(ROOT / "deploy" / d)], check=True,
                         capture_output=True, text=True).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.mark.parametrize("d", ["default", "crds", "rbac", "manager", "flux", "samples"])
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


def test_samples_render_every_file_and_each_stack_has_one_source():
    """The kustomization lists every sample file; each Stack names exactly one source
    (the CRD refuses anything else; test_stack_crd.py applies them to a server)."""
    samples = ROOT / "deploy" / "samples"
    listed = yaml.safe_load((samples / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(f.name for f in samples.glob("*.yaml")
                                    if f.name != "kustomization.yaml")
    docs = render("samples")
    stacks = [d for d in docs if d["kind"] == "Stack"]
    sources = {"fluxSource", "ociSource", "programRef", "projectRepo"}
    assert len(stacks) == 4
    for s in stacks:
        assert len(sources & s["spec"].keys()) == 1, s["metadata"]["name"]
        assert "namespace" not in s["metadata"]
    kinds = {(d["kind"], d["spec"].get("ociSource") is not None) for d in docs}
    assert {("GitRepository", False), ("OCIRepository", False), ("Stack", True)} <= kinds


def test_classic_sample_is_the_tutorial_shape():
    """classic-stack.yaml stays the shape users copy (v1alpha1, programRef, envs,
    cloud, destroyOnDelete, no stack name): a tidy-up must not modernise it."""
    doc = yaml.safe_load((ROOT / "deploy" / "samples" / "classic-stack.yaml").read_text())
    assert doc["apiVersion"] == "pulumi.com/v1alpha1"
    spec = doc["spec"]
    assert sorted(spec) == ["cloud", "config", "destroyOnDelete", "envs", "programRef"]
    assert spec["programRef"] == {"repo": "git@github.com:acme/pulumi-network.git",
                                  "ref": "refs/tags/v2.1.0"}
    assert spec["envs"]["AWS_ACCESS_KEY_ID"] == {
        "valueFrom": {"secretKeyRef": {"name": "aws-creds", "key": "access-key-id"}}}


def test_crd_versions_share_one_schema():
    """v1 is stored, v1alpha1 is served with the very same schema, columns and status
    subresource, without a conversion webhook."""
    crd = render("crds")[0]
    v1, alpha = crd["spec"]["versions"]
    assert (v1["name"], v1["served"], v1["storage"]) == ("v1", True, True)
    assert (alpha["name"], alpha["served"], alpha["storage"]) == ("v1alpha1", True, False)
    assert alpha["deprecated"] is False
    assert crd["spec"]["conversion"] == {"strategy": "None"}
    for key in ("schema", "additionalPrinterColumns", "subresources"):
        assert v1[key] == alpha[key], key
