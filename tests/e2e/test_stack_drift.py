"""Issue 14 scenario 2 (and 5 for drift): spec.driftDetection.  A file of the simulated
cloud edited by the test is drift: Drifted=True within the interval, status.drift and a
Warning event; without remediation Ready stays False (kubectl wait times out) until the
cloud matches again; with remediate: true an update repairs it and Drifted=False; with
approval: Manual the repair waits for its plan to be approved.  Both tiers."""
GIT = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "name": "app"}
DRIFT = {"interval": "2s"}


def start(w, **spec):
    src = w.flux_source("GitRepository", "app", w.artifact(w.revision_files("stack-plan")))
    w.apply_stack("demo", fluxSource={"sourceRef": GIT}, **spec)
    w.controller()
    return src


def tamper(w, text="tampered"):
    path, = (w.cloud_dir / "files").iterdir()
    path.write_text(text)
    return path


def test_drift_is_reported_and_ready_stays_false_until_the_cloud_matches(stack_world):
    w = stack_world
    start(w, driftDetection=DRIFT)
    obj = w.wait_ready("demo")
    assert w.cond(obj, "Drifted") is None or w.cond(obj, "Drifted")["status"] == "False"
    path = tamper(w)
    obj = w.wait_condition("demo", "Drifted", "True", reason="DriftDetected")
    drift = obj["status"]["drift"]
    assert drift["drifted"] is True and drift["detectedAt"].endswith("Z")
    assert any(r["urn"].endswith("standin:index:File::note") for r in drift["resources"]), drift
    ready = w.cond(obj, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "Drifted")
    assert w.cond(obj, "Stalled")["reason"] == "Drifted"
    ev = [e for e in w.events("demo") if e["reason"] == "DriftDetected"]
    assert ev and ev[0]["type"] == "Warning"
    res = w.kubectl("wait", "stack/demo", "--for=condition=Ready", "--timeout=3s", check=False)
    assert res.returncode != 0
    out = w.kubectl("get", "stack", "demo", "-o", "yaml").stdout
    for field in ("drift:", "drifted: true", "detectedAt:", "type: Drifted", "reason: DriftDetected"):
        assert field in out, field
    assert path.read_text() == "tampered"                 # no remediation
    assert len(w.updates("dev")) == 1                      # only the first update ran
    path.write_text("hello")                               # put back by hand
    obj = w.wait_condition("demo", "Drifted", "False", reason="NoDrift")
    w.wait_ready("demo")
    assert "DriftResolved" in w.event_reasons("demo")


def test_remediate_repairs_the_cloud(stack_world):
    w = stack_world
    start(w, driftDetection=dict(DRIFT, remediate=True))
    w.wait_ready("demo")
    path = tamper(w)
    obj = w.wait_condition("demo", "Drifted", "False", reason="Remediated")
    assert path.read_text() == "hello"
    assert obj["status"]["drift"]["drifted"] is False
    reasons = w.event_reasons("demo")
    assert "DriftDetected" in reasons and "DriftRemediated" in reasons
    repair = w.updates("dev")[-1]
    assert "--refresh" in repair["argv"] or "--refresh=true" in repair["argv"]
    w.wait_ready("demo")


def test_remediation_waits_for_approval_when_manual(stack_world):
    w = stack_world
    start(w, driftDetection=dict(DRIFT, remediate=True), approval="Manual")
    plan = w._wait("demo", lambda: (w.stack("demo").get("status") or {}).get("preview"), 180,
                   "a first plan")["planId"]
    w.patch_stack("demo", {"spec": {"approvedPlan": plan}})
    w.wait_ready("demo")
    path = tamper(w)
    def repair_pending():
        obj = w.stack("demo")
        c = w.cond(obj, "AwaitingApproval")
        pv = (obj.get("status") or {}).get("preview") or {}
        return obj if c and c["status"] == "True" and pv.get("planId") not in (None, plan) else None
    obj = w._wait("demo", repair_pending, 180, "the repair's plan")
    assert w.cond(obj, "Drifted")["status"] == "True"
    assert w.cond(obj, "Ready")["status"] == "False"
    assert path.read_text() == "tampered"                  # nothing without approval
    w.patch_stack("demo", {"spec": {"approvedPlan": obj["status"]["preview"]["planId"]}})
    w.wait_condition("demo", "Drifted", "False", reason="Remediated")
    assert path.read_text() == "hello"
    w.wait_ready("demo")


def test_an_update_with_refresh_reports_the_drift_it_repaired(stack_world):
    """spec.refresh without driftDetection: the update's refresh finds the edited file (its
    outcome event has diffs), reports it in status.drift and a Warning event, and the update
    puts it back."""
    w = stack_world
    start(w, refresh=True)
    w.wait_ready("demo")
    path = tamper(w)
    mark = w.mark()
    w.patch_stack("demo", {"metadata": {"annotations": {
        "reconcile.fluxcd.io/requestedAt": "drift-1"}}})
    obj = w.wait_condition("demo", "Drifted", "False", reason="Remediated")
    drift = obj["status"]["drift"]
    assert [r["urn"].rsplit("::", 1)[-1] for r in drift["resources"]] == ["note"], drift
    assert drift["drifted"] is False and drift["detectedAt"]
    assert path.read_text() == "hello"
    assert len(w.updates("dev", mark)) == 1
    ev = [e for e in w.events("demo") if e["reason"] == "DriftDetected"]
    assert ev and ev[0]["type"] == "Warning"
    w.wait_ready("demo")
