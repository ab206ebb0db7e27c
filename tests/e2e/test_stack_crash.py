"""Stack scenario 8 (issue 11): the controller (and every pulumi process it started, as
when its container is killed) is SIGKILLed in the middle of an update and started again:
the Stack ends Ready at the right revision, no lock is left, and no update ran twice to
completion.  PULUMI_STANDIN_SLOW_MS slows each resource step (stand-in and the real test
provider alike).  Both tiers."""
from stack_fixtures import SOURCE_API, wait_until

GIT = {"sourceRef": {"apiVersion": SOURCE_API, "kind": "GitRepository", "name": "app"}}
SLOW = {"PULUMI_STANDIN_SLOW_MS": {"type": "Literal", "literal": {"value": "1500"}}}


def test_sigkill_mid_update_then_restart(stack_world):
    w = stack_world
    src1 = w.flux_source("GitRepository", "app", w.artifact())
    w.apply_stack("demo", fluxSource=GIT, envRefs=SLOW)
    w.controller()
    w.wait_ready("demo", revision=src1["revision"])

    mark = w.mark()
    src2 = w.flux_source("GitRepository", "app", w.artifact(w.revision_files(greeting="two")))
    w.wait_invocation("up", "dev", since=mark)
    wait_until(w.locks, 120, what="the update to take its lock")
    obj = w.stack("demo")
    assert obj["status"]["currentUpdate"]["revision"] == src2["revision"]
    w.crash_controller()
    assert w.locks(), "the killed CLI's lock is left behind"

    w.controller()
    obj = w.wait_ready("demo", revision=src2["revision"], timeout=300)
    assert w.locks() == []
    assert "currentUpdate" not in obj["status"]
    assert list(w.cloud_files().values()) == ["two"]
    assert "LockCancelled" in w.event_reasons("demo")
    done = [h for h in w.history("stackdemo", "dev")
            if h["kind"] == "update" and h["result"] == "succeeded"]
    assert len(done) == 2                                  # revision 1, then 2 once
