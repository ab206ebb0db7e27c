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
