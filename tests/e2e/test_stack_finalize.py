"""Stack scenario 7 (issue 11): deleting a Stack with destroyOnFinalize destroys its
resources in the simulated cloud, then the object goes; without it the finalizer is not
there and the resources stay; a failing destroy keeps the finalizer and says why, and
the destroy is retried until it succeeds.  Both tiers."""
from stack_fixtures import SOURCE_API

FINALIZER = "finalizer.stack.pulumi.com"
GIT = {"sourceRef": {"apiVersion": SOURCE_API, "kind": "GitRepository", "name": "app"}}
# The test provider (both CLIs) kills the CLI at its first delete: the destroy fails.
CRASH_DESTROY = {"PULUMI_STANDIN_CRASH": {"type": "Literal", "literal": {"value": "destroy:0"}}}


def file_of(w, name):
    return w.stack(name)["status"]["outputs"]["path"].rsplit("/", 1)[-1]


def test_destroy_on_finalize_destroys_then_the_stack_goes(stack_world):
    w = stack_world
    w.flux_source("GitRepository", "app", w.artifact())
    w.apply_stack("doomed", stack="doomed", fluxSource=GIT, destroyOnFinalize=True)
    w.apply_stack("kept", stack="kept", fluxSource=GIT)
    w.controller()
    w.wait_ready("doomed")
    w.wait_ready("kept")
    assert FINALIZER in w.stack("doomed")["metadata"].get("finalizers", [])
    assert FINALIZER not in w.stack("kept")["metadata"].get("finalizers", [])
    doomed, kept = file_of(w, "doomed"), file_of(w, "kept")
    assert set(w.cloud_files()) == {doomed, kept}

    w.delete_stack("doomed")
    w.delete_stack("kept")
    w.wait_gone("doomed")
    w.wait_gone("kept")
    assert set(w.cloud_files()) == {kept}                # only the destroyed Stack's went
    reasons = w.event_reasons("doomed")
    assert "DestroyStarted" in reasons and "DestroySucceeded" in reasons
    assert [r["stack"] for r in w.updates(commands=("destroy",))] == ["doomed"]
    assert w.locks() == []


def test_failing_destroy_keeps_the_finalizer_and_says_why(stack_world):
    w = stack_world
    w.flux_source("GitRepository", "app", w.artifact())
    w.apply_stack("demo", fluxSource=GIT, destroyOnFinalize=True, envRefs=CRASH_DESTROY)
    w.controller()
    w.wait_ready("demo")
    name = file_of(w, "demo")

    w.delete_stack("demo")
    obj = w._wait("demo", lambda: (lambda o: o if o and (w.cond(o, "Ready") or {}).get("reason")
                                   == "DestroyFailed" else None)(w.stack_or_none("demo")),
                  240, "Ready=False DestroyFailed")
    ready, rec = w.cond(obj, "Ready"), w.cond(obj, "Reconciling")
    assert ready["status"] == "False" and ready["message"]
    assert rec and rec["status"] == "True" and rec["reason"] == "DestroyFailed"
    assert FINALIZER in obj["metadata"]["finalizers"]
    assert obj["metadata"].get("deletionTimestamp")
    ev = w.wait_event("demo", "DestroyFailed")
    assert ev[0]["type"] == "Warning"
    assert name in w.cloud_files()                        # nothing destroyed yet

    # Without the fault the retried destroy succeeds and the Stack goes.
    w.patch_stack("demo", {"spec": {"envRefs": {"PULUMI_STANDIN_CRASH": None}}})
    w.wait_gone("demo", timeout=300)
    assert name not in w.cloud_files()
    assert w.locks() == []


def test_a_suspended_stack_is_released_without_destroy(stack_world):
    """Flux skips the garbage collection of a suspended object: so does the controller."""
    w = stack_world
    w.flux_source("GitRepository", "app", w.artifact())
    w.apply_stack("demo", fluxSource=GIT, destroyOnFinalize=True)
    w.controller()
    w.wait_ready("demo")
    name = file_of(w, "demo")
    w.patch_stack("demo", {"spec": {"suspend": True}})
    w.settle("demo")

    w.delete_stack("demo")
    w.wait_gone("demo")
    assert name in w.cloud_files()                        # left in place
    assert w.updates(commands=("destroy",)) == []
    ev = w.wait_event("demo", "DestroySkipped")
    assert ev[0]["type"] == "Warning" and "left in place" in ev[0]["message"]
    assert w.locks() == []


def test_an_unparsable_spec_keeps_the_finalizer_until_fixed(stack_world):
    w = stack_world
    w.flux_source("GitRepository", "app", w.artifact())
    w.apply_stack("demo", fluxSource=GIT, destroyOnFinalize=True)
    w.controller()
    w.wait_ready("demo")
    name = file_of(w, "demo")
    # The API server takes this spec; the controller cannot act on it.
    w.patch_stack("demo", {"spec": {"policyPacks": ["../outside"]}})
    w.wait_condition("demo", "Stalled", reason="SpecInvalid")

    w.delete_stack("demo")
    obj = w._wait("demo", lambda: (lambda o: o if o and o["metadata"].get("deletionTimestamp") and
                                   "cannot destroy" in (w.cond(o, "Stalled") or {}).get("message", "")
                                   else None)(w.stack_or_none("demo")),
                  120, "Stalled SpecInvalid, cannot destroy")
    msg = w.cond(obj, "Stalled")["message"]
    assert "spec.policyPacks[0]" in msg and "remove the finalizer " + FINALIZER in msg
    assert FINALIZER in obj["metadata"]["finalizers"]
    assert name in w.cloud_files()
    assert w.updates(commands=("destroy",)) == []

    # Fixed, the destroy runs and the Stack goes.
    w.patch_stack("demo", {"spec": {"policyPacks": None}})
    w.wait_gone("demo", timeout=240)
    assert name not in w.cloud_files()


def test_a_first_update_that_failed_half_way_is_destroyed(stack_world):
    """No update ever succeeded, but the first one created a File before it failed: with
    the program nowhere (the source deleted, the workspace lost with the pod's storage)
    the finalizer stays until it can be destroyed."""
    w = stack_world
    w.flux_source("GitRepository", "app", w.artifact(w.program_files("stack-half")))
    w.apply_stack("demo", fluxSource=GIT, destroyOnFinalize=True)
    w.controller()
    w.wait_event("demo", "UpdateFailed")
    created = set(w.cloud_files())
    assert len(created) == 1, created
    assert w.ctl.stop() == 0
    w.delete_source("GitRepository", "app")
    # A replaced pod: its storage (and the workspace in it) is new.
    w.controller(storage_path=str(w.workdir / "storage-new"))

    w.delete_stack("demo")
    # Stalled, not retried on a timer: nothing can change until the source is back.
    w.wait_condition("demo", "Stalled", reason="DestroyFailed")
    obj = w.stack("demo")
    assert FINALIZER in obj["metadata"]["finalizers"]
    assert "no copy of the program is left" in w.cond(obj, "Ready")["message"]
    assert set(w.cloud_files()) == created

    # The program is back: destroyed, then the Stack goes.
    w.flux_source("GitRepository", "app", w.artifact(w.program_files("stack-half")))
    w.wait_gone("demo", timeout=240)
    assert w.cloud_files() == {}
