"""Issue 21 item 6: the Stack changes while its update runs (a label and an annotation, as
tools and `kubectl label` add them; spec.suspend), so the controller's status write at the
end of the update meets a 409.  The update's outcome is written onto the Stack as it is
now instead of being lost: the update ran once, status records it, and with suspend the
status does not stay Progressing.  The update is held by PULUMI_STANDIN_SLOW_MS (stand-in
and the real test provider alike); each test checks that its change landed while the
update still held its lock.  Both tiers."""
from stack_fixtures import SOURCE_API, wait_until

GIT = {"sourceRef": {"apiVersion": SOURCE_API, "kind": "GitRepository", "name": "app"}}
SLOW = {"PULUMI_STANDIN_SLOW_MS": {"type": "Literal", "literal": {"value": "4000"}}}
WRITTEN_AGAIN = "the Stack changed during the update; writing its outcome again"


def update_running(w):
    """demo Ready at revision 1, then revision 2's update holding its lock; returns the
    revision, the CLI record's mark before it, and the Stack's generation."""
    src1 = w.flux_source("GitRepository", "app", w.artifact())
    w.apply_stack("demo", fluxSource=GIT, envRefs=SLOW)
    w.controller()
    w.wait_ready("demo", revision=src1["revision"])
    mark = w.mark()
    src2 = w.flux_source("GitRepository", "app", w.artifact(w.revision_files(greeting="two")))
    wait_until(w.locks, 120, what="the update to take its lock")
    obj = w.stack("demo")
    assert obj["status"]["currentUpdate"]["revision"] == src2["revision"]
    return src2["revision"], mark, obj["metadata"]["generation"]


def test_label_during_update_runs_it_once(stack_world):
    w = stack_world
    revision, mark, generation = update_running(w)
    w.patch_stack("demo", {"metadata": {"labels": {"team": "blue"},
                                        "annotations": {"example.com/owner": "blue"}}})
    assert w.locks(), "the label landed after the update ended"

    obj = w.wait_ready("demo", revision=revision)
    w.settle("demo")
    assert len(w.updates("dev", since=mark)) == 1, "the update ran again"
    obj = w.stack("demo")
    last = obj["status"]["lastUpdate"]
    assert (last["state"], last["lastSuccessfulCommit"]) == ("succeeded", revision)
    assert obj["status"]["observedGeneration"] == generation == obj["metadata"]["generation"]
    assert obj["metadata"]["labels"]["team"] == "blue"
    assert "currentUpdate" not in obj["status"]
    assert w.ctl.find(WRITTEN_AGAIN, name="demo")
    assert list(w.cloud_files().values()) == ["two"]


def test_suspend_during_update_records_its_outcome(stack_world):
    w = stack_world
    revision, mark, generation = update_running(w)
    w.patch_stack("demo", {"spec": {"suspend": True}})
    assert w.locks(), "suspend landed after the update ended"

    def recorded():
        st = w.stack("demo")["status"]
        return st if "currentUpdate" not in st and \
            st.get("lastUpdate", {}).get("lastAttemptedCommit") == revision else None
    wait_until(recorded, 120, what="the update's outcome in status")
    w.settle("demo")
    obj = w.stack("demo")
    st = obj["status"]
    ready = w.cond(obj, "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "Succeeded")
    assert w.cond(obj, "Reconciling") is None                  # not Progressing
    assert (st["lastUpdate"]["state"], st["lastUpdate"]["generation"]) == ("succeeded", generation)
    # The status is about the generation that was updated; the suspended one is not
    # reconciled (as Flux leaves a suspended object's status).
    assert st["observedGeneration"] == generation < obj["metadata"]["generation"]
    assert len(w.updates("dev", since=mark)) == 1
    assert w.locks() == []
