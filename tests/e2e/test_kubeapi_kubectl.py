"""Fidelity of the API-server emulator, proven with the real kubectl.

Each test drives /usr/bin/kubectl (the dispatcher picks kubectl 1.<minor>
from the emulator's /version) against a fresh emulator and checks what
kubectl prints and what the server then holds.
"""
import json

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
