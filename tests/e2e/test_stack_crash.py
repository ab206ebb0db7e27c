"""Stack scenario 8 (issues 11 and 21): the controller and every pulumi process it started
are SIGKILLed at once in the middle of updates of several Stacks, as when its node dies,
and it starts again, either restarted (the same host name: a container restart) or
replaced (a new host name: a Deployment's new pod).  Each incarnation runs in a UTS
namespace of its own under its host name, with leader election as deploy/ runs it, so the
CLI's locks name that host.  Every Stack ends Ready at the new revision, no lock is left,
no update ran twice to completion and no pulumi process is left running.  A lock left by
a controller that held another Lease, or when this one holds none, is never broken.
PULUMI_STANDIN_SLOW_MS slows each resource step (stand-in and the real test provider
alike).  Both tiers."""
import json

import pytest

from pulumi_fixtures import processes_of_cloud
from stack_fixtures import SOURCE_API, wait_until

GIT = {"sourceRef": {"apiVersion": SOURCE_API, "kind": "GitRepository", "name": "app"}}
SLOW = {"PULUMI_STANDIN_SLOW_MS": {"type": "Literal", "literal": {"value": "4000"}}}
NAMES = ("c0", "c1", "c2", "c3")       # as many as --concurrency: all killed mid-update


def lease(w, lease_id="pc-crash"):
    """The flags of a controller of the default install: leader election on a Lease."""
    return {"leader_elect": True, "leader_election_id": lease_id,
            "leader_election_namespace": w.namespace, "lease_duration": "8s",
            "renew_deadline": "6s", "retry_period": "2s"}


def crash_mid_update(w, names, lease_id="pc-crash"):
    """The Stacks Ready at revision 1 under a controller on host ctl-0; then revision 2,
    and once every update holds its lock the controller and its CLIs are killed.
    Returns revision 2's artifact status."""
    src1 = w.flux_source("GitRepository", "app", w.artifact())
    for name in names:
        w.apply_stack(name, stack=name, fluxSource=GIT, envRefs=SLOW)
    w.controller(host="ctl-0", **lease(w, lease_id))
    for name in names:
        w.wait_ready(name, revision=src1["revision"])

    src2 = w.flux_source("GitRepository", "app", w.artifact(w.revision_files(greeting="two")))
    wait_until(lambda: len(w.locks()) == len(names), 180, what="every update to take its lock")
    for name in names:
        assert w.stack(name)["status"]["currentUpdate"]["revision"] == src2["revision"]
    # The CLI (stand-in and real alike) names the host of the UTS namespace it runs in.
    assert {json.loads(p.read_text())["hostname"] for p in w.locks()} == {"ctl-0"}
    w.crash_controller()
    assert len(w.locks()) == len(names), "the killed CLIs' locks are left behind"
    return src2


def nothing_left(w, names):
    """No lock and no pulumi process left; each Stack's file at revision 2."""
    assert w.locks() == []
    assert sorted(w.cloud_files().values()) == ["two"] * len(names)
    wait_until(lambda: processes_of_cloud(w.cloud_dir) == [], 60,
               what="no pulumi process left running")


@pytest.mark.parametrize("second_host", ["ctl-0", "ctl-1"], ids=["restarted", "replaced"])
def test_sigkill_mid_update_then_start_again(stack_world, second_host):
    w = stack_world
    src2 = crash_mid_update(w, NAMES)

    w.controller(host=second_host, **lease(w))
    for name in NAMES:
        obj = w.wait_ready(name, revision=src2["revision"], timeout=300)
        assert "currentUpdate" not in obj["status"]
        assert "interruptedUpdates" not in obj["status"]      # cleared by the update
        assert "LockCancelled" in w.event_reasons(name)
        done = [h for h in w.history("stackdemo", name)
                if h["kind"] == "update" and h["result"] == "succeeded"]
        assert len(done) == 2                                 # revision 1, then 2 once
    nothing_left(w, NAMES)


def test_replaced_twice_mid_recovery(stack_world):
    """Killed again while its replacement still works (before any update finished): the
    third pod still knows the first's lock, through status.interruptedUpdates."""
    w = stack_world
    names = NAMES[:2]
    src2 = crash_mid_update(w, names)

    w.controller(host="ctl-1", **lease(w))
    for name in names:       # the second pod took over the update (and cancelled or not yet)
        wait_until(lambda: w.stack(name)["status"].get("currentUpdate", {}).get("controller")
                   == "ctl-1", 120, what=f"ctl-1 to start updating {name}")
    w.crash_controller()

    w.controller(host="ctl-2", **lease(w))
    for name in names:
        obj = w.wait_ready(name, revision=src2["revision"], timeout=300)
        assert "interruptedUpdates" not in obj["status"]
    nothing_left(w, names)


def test_lock_of_another_lease_is_never_broken(stack_world):
    """The lock of a controller that worked under another Lease, or seen by a controller
    without leader election, is not this controller's to break: UpdateConflict naming
    the holder; started again with the first Lease, it recovers."""
    w = stack_world
    src2 = crash_mid_update(w, NAMES[:1], "pc-shard-a")

    for flags in (lease(w, "pc-shard-b"), {}):
        ctl = w.controller(host="ctl-1", **flags)
        ctl.wait_log("update failed", name="c0", result="conflict", timeout=300)
        obj = w.wait_condition("c0", "Ready", "False", "UpdateConflict")
        assert obj["status"]["lastUpdate"]["lockHolder"].endswith("@ctl-0")
        assert len(w.locks()) == 1
        assert "LockCancelled" not in w.event_reasons("c0")
        ctl.stop()

    w.controller(host="ctl-1", **lease(w, "pc-shard-a"))
    w.wait_ready("c0", revision=src2["revision"], timeout=300)
    nothing_left(w, NAMES[:1])
