"""Locks in job mode (issue 16; docs/job-runner.md, "Locks"): a lock left by the pod of an
earlier Job of the Stack, now gone, is cancelled by the next Job; a lock held by anyone else,
or by such a pod while it still runs, is reported and never broken.  Both tiers, with the real
`pulumi-controller run-update` in the test kubelet's pods (and, on the real tier, the real
pulumi CLI), against the world's file:// backend with a lock file planted as a CLI leaves it."""
from job_fixtures import job_controller
from stack_fixtures import wait_until

GIT = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "name": "app"}
# The hostname of a pod of a Job of Stack "demo" (<stack>-<op>-<10 hex>-<5>) that no longer
# exists: what a pod killed hard leaves as the lock's holder.
GONE_POD = "demo-up-0123456789-x7k2p"


def conflict(w, name):
    """The Stack's UpdateConflict status, once its Job met the lock."""
    def seen():
        obj = w.stack(name)
        rec = w.cond(obj, "Reconciling") or {}
        return obj if rec.get("reason") == "UpdateConflict" else None
    return wait_until(seen, what=f"{name} UpdateConflict")


def test_a_lock_left_by_a_gone_pod_of_the_stack_is_cancelled_by_the_next_job(job_world, request):
    w = job_world
    w.flux_source("GitRepository", "app", w.artifact())
    w.apply_stack("demo", fluxSource={"sourceRef": GIT}, runner={"type": "Job"})
    job_controller(w, request)
    w.wait_ready("demo", timeout=240)
    # The stack exists; a pod updating it was then killed hard, its lock left behind.
    lock = w.hold_lock("stackdemo", "dev", owner="pulumi", host=GONE_POD)
    src = w.flux_source("GitRepository", "app", w.artifact(w.revision_files(greeting="bonjour")))
    obj = conflict(w, "demo")
    assert obj["status"]["lastUpdate"]["lockHolder"] == f"pulumi@{GONE_POD}", obj["status"]["lastUpdate"]
    assert f"pulumi@{GONE_POD}" in w.cond(obj, "Reconciling")["message"]
    obj = w.wait_ready("demo", revision=src["revision"], timeout=240)
    assert not lock.exists()
    assert w.locks() == []
    assert "lockHolder" not in obj["status"]["lastUpdate"]
    w.wait_event("demo", "LockCancelled")
    assert obj["status"]["outputs"]["message"] == "bonjour"


def test_a_lock_of_anyone_else_is_never_broken_in_job_mode(job_world, request):
    w = job_world
    w.flux_source("GitRepository", "app", w.artifact())
    lock = w.hold_lock("stackdemo", "dev", owner="ops", host="another-controller")
    w.apply_stack("demo", fluxSource={"sourceRef": GIT}, runner={"type": "Job"})
    job_controller(w, request)
    obj = conflict(w, "demo")
    assert obj["status"]["lastUpdate"]["lockHolder"] == "ops@another-controller"
    # The retries meet the same lock: the conflict again, on a later attempt.
    first = obj["status"]["lastUpdate"]["endTime"]
    wait_until(lambda: conflict(w, "demo")["status"]["lastUpdate"]["endTime"] != first,
               what="a second attempt", timeout=120)
    assert lock.exists()
    assert "LockCancelled" not in w.event_reasons("demo")


def test_a_lock_of_a_stack_pod_that_still_runs_is_never_broken(job_world, request):
    w = job_world
    w.flux_source("GitRepository", "app", w.artifact())
    lock = w.hold_lock("stackdemo", "dev", owner="pulumi", host=GONE_POD)
    # A pod of that name is there (never scheduled: Pending) -- its holder may still be at work.
    w.kubelet._ensure_namespace(w.namespace)     # its ServiceAccount, as for the Jobs' pods
    w.client.create({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": GONE_POD, "labels": {"app.kubernetes.io/managed-by": "pulumi-controller"}},
        "spec": {"containers": [{"name": "update", "image": "registry.example.test/x:1"}]}},
        "pods", w.namespace)
    w.apply_stack("demo", fluxSource={"sourceRef": GIT}, runner={"type": "Job"})
    job_controller(w, request)
    first = conflict(w, "demo")["status"]["lastUpdate"]["endTime"]
    wait_until(lambda: conflict(w, "demo")["status"]["lastUpdate"]["endTime"] != first,
               what="a second attempt", timeout=120)
    assert lock.exists()
    assert "LockCancelled" not in w.event_reasons("demo")
