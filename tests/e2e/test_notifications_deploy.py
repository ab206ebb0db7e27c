"""deploy/flux/notifications (docs/notifications.md), rendered with the kustomize built into
kubectl over the Alert and Receiver CRDs of the real notification-controller module
(.real/flux-crds, from `make deps-real`), as a user's flux-system kustomization renders it:
Stack is added once to each kind enum and nothing else of the CRDs changes, the patched
versions are the ones served, the RBAC gives notification-controller's ServiceAccount read
access to Stacks (and the patch a Receiver needs), and the example Alert and Provider
render and point at each other.  test_notifications.py applies the result to the real
kube-apiserver and runs notification-controller on it."""
import copy
import os
import pathlib
import shutil

import pytest
import yaml

from test_deploy import render_dir

ROOT = pathlib.Path(__file__).resolve().parents[2]
COMPONENT = ROOT / "deploy" / "flux" / "notifications"
REAL = pathlib.Path(os.environ.get("REAL_DIR", str(ROOT / ".real")))
CRDS = {"alerts": "notification.toolkit.fluxcd.io_alerts.yaml",
        "receivers": "notification.toolkit.fluxcd.io_receivers.yaml"}
# Where each CRD keeps the kind enum the component extends.
ENUM_PATH = {"alerts": ("eventSources", "v1beta3"), "receivers": ("resources", "v1")}


def crd_sources():
    paths = {k: REAL / "flux-crds" / v for k, v in CRDS.items()}
    missing = [str(p) for p in paths.values() if not p.exists()]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: run `make deps-real`")
    return paths


def flux_system(tmp_path, with_component):
    """A flux-system kustomization holding the two CRDs, with or without the component."""
    d = tmp_path / ("with" if with_component else "without")
    d.mkdir()
    for name, src in crd_sources().items():
        shutil.copyfile(src, d / src.name)
    text = ("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n" +
            "".join(f"- {n}\n" for n in CRDS.values()))
    if with_component:
        text += f"components:\n- {os.path.relpath(COMPONENT, d)}\n"
    (d / "kustomization.yaml").write_text(text)
    return render_dir(d)


def by_kind(docs, kind, name=None):
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def kind_enum(crd, field):
    v = crd["spec"]["versions"][0]
    return v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][field]["items"][
        "properties"]["kind"]["enum"]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nc-deploy")
    return flux_system(tmp, True), flux_system(tmp, False)


@pytest.mark.parametrize("plural", sorted(CRDS))
def test_stack_is_added_once_to_the_kind_enum_and_nothing_else_changes(rendered, plural):
    patched, plain = rendered
    name = f"{plural}.notification.toolkit.fluxcd.io"
    new = by_kind(patched, "CustomResourceDefinition", name)[0]
    old = by_kind(plain, "CustomResourceDefinition", name)[0]
    field, version = ENUM_PATH[plural]
    # the index the patch names is the one version the CRD serves
    assert [v["name"] for v in new["spec"]["versions"]] == [version]
    assert new["spec"]["versions"][0]["served"] is True
    assert "Stack" not in kind_enum(old, field)              # what the component is for
    assert kind_enum(new, field) == kind_enum(old, field) + ["Stack"]
    assert "GitRepository" in kind_enum(new, field)
    undone = copy.deepcopy(new)
    kind_enum(undone, field).remove("Stack")
    assert undone == old


def test_notification_controller_may_read_stacks(rendered):
    patched, _ = rendered
    role = by_kind(patched, "ClusterRole")
    binding = by_kind(patched, "ClusterRoleBinding")
    assert len(role) == 1 and len(binding) == 1
    rules = role[0]["rules"]
    assert rules == [{"apiGroups": ["pulumi.com"], "resources": ["stacks"],
                      "verbs": ["get", "list", "watch", "patch"]}]
    b = binding[0]
    assert b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": role[0]["metadata"]["name"]}
    # the ServiceAccount `flux install` and the bootstrap manifests run it as
    assert b["subjects"] == [{"kind": "ServiceAccount", "name": "notification-controller",
                              "namespace": "flux-system"}]
    # the component adds no other object to the user's flux-system
    assert sorted(d["kind"] for d in patched) == sorted(
        ["CustomResourceDefinition"] * 2 + ["ClusterRole", "ClusterRoleBinding"])


def test_the_example_alert_selects_stacks_through_its_provider():
    docs = render_dir(COMPONENT / "example")
    alert = by_kind(docs, "Alert")[0]
    provider = by_kind(docs, "Provider")[0]
    assert alert["apiVersion"] == provider["apiVersion"] == "notification.toolkit.fluxcd.io/v1beta3"
    assert alert["spec"]["eventSources"] == [{"kind": "Stack", "name": "*"}]
    assert alert["spec"]["providerRef"] == {"name": provider["metadata"]["name"]}
    assert alert["metadata"]["namespace"] == provider["metadata"]["namespace"]
    assert provider["spec"]["type"] == "generic"
    assert alert["spec"]["eventSeverity"] in ("info", "error")
