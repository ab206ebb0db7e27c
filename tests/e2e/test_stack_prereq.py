"""Issue 14 scenario 3: spec.prerequisites (and Flux's dependsOn).  B waits for A
(Reconciling=True, PrerequisiteNotReady naming A) and runs nothing; A's success starts B
at once, through the cache's prerequisite index, not a poll; a cycle is Stalled.  Both
tiers."""
import datetime

GIT = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "name": "app"}


def ts(s):
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ")


def test_b_waits_for_a_and_starts_when_a_succeeds(stack_world):
    w = stack_world
    w.flux_source("GitRepository", "app", w.artifact(w.revision_files("stack-plan")))
    w.apply_stack("b", stack="b", fluxSource={"sourceRef": GIT},
                  prerequisites=[{"name": "a", "requirement": {"succeededWithinDuration": "1h"}}])
    w.controller()
    obj = w.wait_condition("b", "Reconciling", "True", reason="PrerequisiteNotReady")
    msg = w.cond(obj, "Ready")["message"]
    assert f"prerequisite {w.namespace}/a" in msg and "no such Stack" in msg
    assert w.cond(obj, "Ready")["status"] == "False"
    w.settle("b")
    assert w.updates("b") == []
    w.apply_stack("a", stack="a", fluxSource={"sourceRef": GIT})
    b = w.wait_ready("b")
    a = w.stack("a")
    # B's update started once A's had ended, within a second (RFC 3339 seconds).
    gap = ts(b["status"]["lastUpdate"]["startTime"]) - ts(a["status"]["lastUpdate"]["endTime"])
    assert datetime.timedelta(0) <= gap <= datetime.timedelta(seconds=1), gap
    assert len(w.updates("a")) == 1 and len(w.updates("b")) == 1


def test_a_cycle_is_stalled(stack_world):
    w = stack_world
    w.flux_source("GitRepository", "app", w.artifact(w.revision_files("stack-plan")))
    w.apply_stack("c", stack="c", fluxSource={"sourceRef": GIT}, prerequisites=[{"name": "d"}])
    w.apply_stack("d", stack="d", fluxSource={"sourceRef": GIT},
                  dependsOn=[{"name": "c", "namespace": w.namespace}])
    w.controller()
    for name in "cd":
        obj = w.wait_condition(name, "Stalled", "True", reason="PrerequisiteCycle")
        assert "form a cycle" in w.cond(obj, "Stalled")["message"]
    assert w.updates() == []
    assert "PrerequisiteCycle" in w.event_reasons("c")
    # Breaking the cycle lets both run, d first.
    w.apply_stack("d", stack="d", fluxSource={"sourceRef": GIT})
    w.wait_ready("d")
    w.wait_ready("c")
