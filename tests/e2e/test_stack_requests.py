"""Stack scenario 4 (issue 11): `kubectl annotate ... reconcile.fluxcd.io/requestedAt=...`
runs one reconcile (one update) and is acknowledged in status.lastHandledReconcileAt, as
is pulumi.com/reconciliation-request in observedReconcileRequest; `kubectl wait
--for=condition=Ready` returns; `spec.suspend: true` stops all work.  Both tiers."""

GIT = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "name": "app"}


def test_kubectl_wait_and_reconcile_requests(stack_world):
    w = stack_world
    src = w.flux_source("GitRepository", "app", w.artifact())
    w.apply_stack("demo", fluxSource={"sourceRef": GIT})
    w.controller()
    r = w.kubectl("wait", "--for=condition=Ready", "stack/demo", "--timeout=300s", timeout=330)
    assert "condition met" in r.stdout
    w.wait_ready("demo", revision=src["revision"])

    for annotation, field in (("reconcile.fluxcd.io/requestedAt", "lastHandledReconcileAt"),
                              ("pulumi.com/reconciliation-request", "observedReconcileRequest")):
        token = f"2026-12-01T09:00:00.{w.id}Z-{field}"
        mark = w.mark()
        w.kubectl("annotate", "--overwrite", "stack/demo", f"{annotation}={token}")
        w._wait("demo", lambda: (w.stack("demo").get("status") or {}).get(field) == token, 180,
                f"status.{field} to be {token}")
        w.wait_ready("demo")
        w.settle("demo")
        assert len(w.updates("dev", since=mark)) == 1, annotation
        assert w.stack("demo")["status"]["lastUpdate"]["state"] == "succeeded"

    # The same token again (the last annotation's, set to what it already holds)
    # is no new request.
    mark = w.mark()
    w.kubectl("annotate", "--overwrite", "stack/demo", f"{annotation}={token}")
    w.settle("demo")
    assert w.updates("dev", since=mark) == []


def test_suspend_stops_all_work(stack_world):
    """A sibling Stack on the same source shows when the controller has seen the new
    revision; the suspended one runs nothing and keeps its status as it was."""
    w = stack_world
    src = w.flux_source("GitRepository", "app", w.artifact())
    w.apply_stack("held", stack="held", fluxSource={"sourceRef": GIT})
    w.apply_stack("sibling", stack="sibling", fluxSource={"sourceRef": GIT})
    w.controller()
    w.wait_ready("held", revision=src["revision"])
    w.wait_ready("sibling", revision=src["revision"])

    w.apply_stack("held", stack="held", fluxSource={"sourceRef": GIT}, suspend=True)
    before = w.stack("held")["status"]
    mark = w.mark()
    src2 = w.flux_source("GitRepository", "app", w.artifact(w.revision_files(greeting="two")))
    w.wait_ready("sibling", revision=src2["revision"])
    w.kubectl("annotate", "--overwrite", "stack/held", "reconcile.fluxcd.io/requestedAt=now-1")
    w.settle("held")
    assert [r for r in w.cli_invocations(since=mark) if r["stack"] == "held"] == []
    assert w.stack("held")["status"] == before

    w.apply_stack("held", stack="held", fluxSource={"sourceRef": GIT}, suspend=False)
    obj = w.wait_ready("held", revision=src2["revision"])
    w.settle("held")
    assert len(w.updates("held", since=mark)) == 1
    assert obj["status"]["lastHandledReconcileAt"] == "now-1"
