"""Issue 13: deploy/monitoring/ -- the kube-state-metrics configuration that gives Stacks
Flux's gotk_resource_info, the alerting rules, the PodMonitor.

- `kubectl kustomize` renders the directory; the PrometheusRule's groups pass the real
  `promtool check rules`;
- the Stack entry has Flux's shape (prefix gotk, metric resource_info, Info with the
  name label, and Flux's common labels), and both copies (the plain config file and the
  chart values) say the same;
- its label paths, evaluated as kube-state-metrics does against a Stack the controller
  reconciled (both tiers), give ready="True", the applied revision and the source name;
- every metric the alerts read is one the controller exposes (its /metrics after that
  reconcile) or gotk_resource_info.
"""
import pathlib
import re
import subprocess

import yaml

from stack_fixtures import SOURCE_API

ROOT = pathlib.Path(__file__).resolve().parents[2]
MON = ROOT / "deploy" / "monitoring"
PROMTOOL = "/usr/bin/promtool"
# The labels Flux's monitoring example gives every kind it lists.
FLUX_COMMON = {"exported_namespace", "ready", "suspended", "revision"}


def stack_entry(resources):
    entries = [r for r in resources if r["groupVersionKind"]["kind"] == "Stack"]
    assert len(entries) == 1
    return entries[0]


def config_entry():
    doc = yaml.safe_load((MON / "kube-state-metrics-config.yaml").read_text())
    assert doc["kind"] == "CustomResourceStateMetrics"
    return stack_entry(doc["spec"]["resources"])


def values_entry():
    doc = yaml.safe_load((MON / "kube-state-metrics-values.yaml").read_text())
    ksm = doc["kube-state-metrics"]
    rules = ksm["rbac"]["extraRules"]
    assert any("pulumi.com" in r["apiGroups"] and "stacks" in r["resources"] and
               set(r["verbs"]) >= {"list", "watch"} for r in rules)
    return stack_entry(ksm["customResourceState"]["config"]["spec"]["resources"])


def rule_groups():
    docs = list(yaml.safe_load_all(subprocess.run(
        ["kubectl", "kustomize", str(MON)], check=True, capture_output=True, text=True).stdout))
    rules = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert len(rules) == 1
    assert {d["kind"] for d in docs} >= {"PodMonitor", "ConfigMap"}
    return rules[0]["spec"]["groups"]


def test_rules_pass_promtool(tmp_path):
    f = tmp_path / "rules.yaml"
    f.write_text(yaml.safe_dump({"groups": rule_groups()}))
    r = subprocess.run([PROMTOOL, "check", "rules", str(f)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_stack_entry_has_flux_shape():
    e = config_entry()
    assert e == values_entry()
    assert e["groupVersionKind"] == {"group": "pulumi.com", "version": "v1", "kind": "Stack"}
    assert e["metricNamePrefix"] == "gotk"
    (m,) = e["metrics"]
    assert m["name"] == "resource_info"
    assert m["each"]["type"] == "Info"
    assert m["each"]["info"]["labelsFromPath"] == {"name": ["metadata", "name"]}
    assert FLUX_COMMON | {"source_name"} <= set(m["labelsFromPath"])


def resolve(obj, path):
    """A kube-state-metrics path: keys, and "[field=value]" picking a list element."""
    for step in path:
        if obj is None:
            return None
        sel = re.fullmatch(r"\[(\w+)=(.*)\]", step)
        if sel:
            obj = next((x for x in obj if x.get(sel[1]) == sel[2]), None)
        else:
            obj = obj.get(step) if isinstance(obj, dict) else None
    return obj


def ksm_value(v):
    """kube-state-metrics renders booleans as true/false."""
    return str(v).lower() if isinstance(v, bool) else (None if v is None else str(v))


def test_paths_read_a_reconciled_stack_and_alerts_read_real_metrics(stack_world):
    w = stack_world
    src = w.flux_source("GitRepository", "app", w.artifact())
    w.apply_stack("demo", fluxSource={"sourceRef": {"apiVersion": SOURCE_API,
                                                    "kind": "GitRepository", "name": "app"}},
                  suspend=False)
    # With --events-addr (here a port nothing listens on) the notification families
    # exist too, so the alert on dropped events is checked like the others.
    ctl = w.controller(events_addr="http://127.0.0.1:9/")
    obj = w.wait_ready("demo", revision=src["revision"])
    (m,) = config_entry()["metrics"]
    labels = {k: ksm_value(resolve(obj, p)) for k, p in m["labelsFromPath"].items()}
    labels["name"] = resolve(obj, m["each"]["info"]["labelsFromPath"]["name"])
    assert labels["name"] == "demo" and labels["exported_namespace"] == w.namespace
    assert labels["ready"] == "True" and labels["reason"] == "Succeeded"
    assert labels["stalled"] is None          # Stalled is present only when True
    assert labels["suspended"] == "false"
    assert labels["revision"] == src["revision"]
    assert labels["source_name"] == "app" and labels["source_kind"] == "GitRepository"

    code = subprocess.run(["curl", "-sf", f"http://127.0.0.1:{ctl.health_port}/metrics"],
                          capture_output=True, text=True, check=True).stdout
    exposed = set(re.findall(r"^# TYPE (\S+) (\S+)", code, re.M))
    names = set()
    for name, typ in exposed:
        names.add(name)
        if typ == "histogram":
            names |= {name + "_bucket", name + "_sum", name + "_count"}
    names.add("gotk_resource_info")
    functions = {"max", "min", "sum", "by", "rate", "increase", "min_over_time", "ok",
                 "canceled", "up", "destroy"}
    for group in rule_groups():
        for rule in group["rules"]:
            expr = re.sub(r'"[^"]*"', '""', rule["expr"])          # no label values
            expr = re.sub(r"\{[^}]*\}", "", expr)                  # no matchers
            expr = re.sub(r"by \([^)]*\)", "", expr)               # no grouping labels
            expr = re.sub(r"\[[^\]]*\]", "", expr)                 # no ranges
            used = set(re.findall(r"[a-zA-Z_][a-zA-Z0-9_]*", expr)) - functions
            assert used <= names, f"{rule['alert']} reads {used - names}"
