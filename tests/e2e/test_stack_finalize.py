"""Stack scenario 7 (issue 11): deleting a Stack with destroyOnFinalize destroys its
resources in the simulated cloud, then the object goes; without it the finalizer is not
there and the resources stay; a failing destroy keeps the finalizer and says why, and
the destroy is retried until it succeeds; a destroy that succeeded lets the Stack go
although its source went meanwhile (review 21).  Both tiers."""
from job_fixtures import FAULT_LABEL
from stack_fixtures import SOURCE_API, wait_until
from test_stack_jobs import controller as jobs_controller, fake_kubelet, job_stack, jobs_of, wait_job  # noqa: F401

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


def source_gone(w):
    wait_until(lambda: not [s for s in w.client.list(SOURCE_API, "gitrepositories", w.namespace)["items"]
                            if s["metadata"]["name"] == "app"], what="the source gone")


def test_a_destroy_job_that_succeeded_after_its_source_went_releases_the_stack(fake_kubelet):
    """Review 21: Flux prunes the Stack and its GitRepository together; the destroy Job has
    fetched the program already.  While it runs the Stack waits for it (not Stalled
    "cannot destroy"); the controller is killed meanwhile; its successor finds the Job
    Complete and lets the Stack go, with no source to resolve."""
    w = fake_kubelet
    src = w.flux_source("GitRepository", "app", w.artifact())
    job_stack(w, "demo", labels={FAULT_LABEL: "hold"}, destroyOnFinalize=True)
    jobs_controller(w)
    up = wait_job(w, "demo")["metadata"]["name"]
    wait_until(lambda: w.kubelet.release(up, w.namespace), what="the up Job released")
    w.wait_ready("demo", revision=src["revision"])

    w.delete_stack("demo")
    destroy = wait_until(lambda: next((j["metadata"]["name"] for j in jobs_of(w, "demo")
                                       if "-destroy-" in j["metadata"]["name"]), None),
                         what="the destroy Job")
    w.delete_source("GitRepository", "app")
    source_gone(w)

    def waiting():
        o = w.stack_or_none("demo")
        c = w.cond(o, "Reconciling") if o else None
        return o if c and c["reason"] == "JobRunning" and "source is gone" in c["message"] else None
    obj = w._wait("demo", waiting, 120, "Reconciling JobRunning, the source gone")
    assert f"the Job {w.namespace}/{destroy} still runs" in w.cond(obj, "Reconciling")["message"]
    assert w.cond(obj, "Stalled") is None

    assert w.ctl.stop() == 0
    wait_until(lambda: w.kubelet.release(destroy, w.namespace), what="the destroy Job released")
    jobs_controller(w)
    w.wait_gone("demo", timeout=120)
    assert "DestroySucceeded" in w.event_reasons("demo")


def test_a_destroy_recorded_before_the_release_lets_the_stack_go_without_its_program(stack_world):
    """Review 21, local runner: a destroy that succeeded is written to status before the
    finalizer goes ("keep" shows it: a finalizer of someone else's holds that Stack).  A
    controller killed between the two leaves "killed" as below: destroyed, its finalizer
    still there; the source pruned and the pod replaced (new storage, no workspace), its
    successor lets the Stack go on that record instead of Stalled "cannot destroy"."""
    w = stack_world
    w.flux_source("GitRepository", "app", w.artifact())
    keep = w.stack_object("keep", stack="keep", fluxSource=GIT, destroyOnFinalize=True)
    keep["metadata"]["finalizers"] = ["e2e.test/keep"]
    w._call(lambda c: c.create(keep, "stacks", w.namespace))
    w.apply_stack("killed", stack="killed", fluxSource=GIT, destroyOnFinalize=True)
    w.controller()
    w.wait_ready("keep")
    w.wait_ready("killed")
    kept, killed = file_of(w, "keep"), file_of(w, "killed")

    w.delete_stack("keep")
    obj = w._wait("keep", lambda: (lambda o: o if o and FINALIZER not in o["metadata"]["finalizers"]
                                   else None)(w.stack_or_none("keep")), 240, "keep destroyed")
    last = obj["status"]["lastUpdate"]
    assert (last["type"], last["state"]) == ("destroy", "succeeded"), last
    assert kept not in w.cloud_files()
    w.patch_stack("keep", {"metadata": {"finalizers": None}})
    w.wait_gone("keep")

    assert w.ctl.stop() == 0
    w.delete_source("GitRepository", "app")
    source_gone(w)
    w.delete_stack("killed")
    obj = w.stack("killed")
    assert FINALIZER in obj["metadata"]["finalizers"] and obj["metadata"].get("deletionTimestamp")
    # What the killed controller wrote (as "keep" shows) before it could release.
    obj["status"]["lastUpdate"].update({"type": "destroy", "state": "succeeded"})
    w._call(lambda c: c.update(obj, "stacks", "status"))
    w.controller(storage_path=str(w.workdir / "storage-new"))
    w.wait_gone("killed", timeout=120)
    assert killed in w.cloud_files()              # the record was trusted: no destroy ran
    assert [u["stack"] for u in w.updates(commands=("destroy",))] == ["keep"]
