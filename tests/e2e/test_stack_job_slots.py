"""Whose Jobs take --max-concurrent-jobs slots, and whose pod tells a Job's outcome
(review of issue 21; docs/job-runner.md "Slots" and "The pod"), on both tiers.

Anyone who may create Jobs and pods in a namespace can give them the labels and the
ownerReference the controller's own carry:

- a Job takes a slot only when its controller ownerReference has the uid of a cached
  Stack and its name is one the controller gives that Stack's Jobs, and at most one Job
  per Stack counts, so a tenant's hand-made Jobs take no more slots than its Stacks could;
- the controller reads a Job's outcome from the pods the Job controller made for it
  (batch.kubernetes.io/controller-uid), not from any pod labelled with the Job's name."""
import json
import time

from job_fixtures import FAULT_LABEL
from stack_fixtures import wait_until
from test_stack_jobs import GIT, controller, fake_kubelet, job_stack, wait_job  # noqa: F401 (a fixture)

IMAGE = "registry.example.test/pulumi-controller:test"
MANAGED = {"app.kubernetes.io/managed-by": "pulumi-controller"}


def hand_made_job(w, name, labels, owner=None):
    """A suspended Job (it never runs, never finishes) with these labels and ownerReference."""
    md = {"name": name, "namespace": w.namespace, "labels": labels}
    if owner:
        md["ownerReferences"] = [dict(owner, apiVersion="pulumi.com/v1", kind="Stack", controller=True)]
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": md,
           "spec": {"suspend": True, "template": {"spec": {
               "restartPolicy": "Never",
               "containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}}}}
    return w.client.create(job, "jobs", w.namespace)


def reconciling(w, name):
    c = w.cond(w.stack(name), "Reconciling") or {}
    return c.get("reason") if c.get("reason") in ("JobRunning", "WaitingForJobSlot") else None


def test_a_tenants_hand_made_jobs_take_at_most_one_slot_per_stack_it_has(stack_world):
    w = stack_world
    w.flux_source("GitRepository", "app", w.artifact())
    tenant = w.apply_stack("tenant", fluxSource={"sourceRef": GIT}, runner={"type": "Job"}, suspend=True)
    uid = tenant["metadata"]["uid"]
    labels = dict(MANAGED, **{"pulumi.com/stack-name": "tenant"})
    # Labelled for the tenant's Stack only (the review's probe).
    hand_made_job(w, "hog", labels)
    # Owned by the Stack's name, with another uid.
    hand_made_job(w, "tenant-up-00000000aa", labels, owner={"name": "tenant", "uid": "not-" + uid})
    # Owned by the Stack's uid, not named as its Jobs are.
    hand_made_job(w, "hog-owned", labels, owner={"name": "tenant", "uid": uid})
    # Owned and named as its Jobs are: two of them, one Stack, one slot.
    hand_made_job(w, "tenant-up-0123456789", labels, owner={"name": "tenant", "uid": uid})
    hand_made_job(w, "tenant-destroy-abcdef0123", labels, owner={"name": "tenant", "uid": uid})
    ctl = w.controller(runner="job", job_image=IMAGE, max_concurrent_jobs="2")

    w.apply_stack("victim", fluxSource={"sourceRef": GIT}, runner={"type": "Job"})
    got = wait_until(lambda: reconciling(w, "victim"), timeout=60, what="victim JobRunning or waiting")
    assert got == "JobRunning", w.cond(w.stack("victim"), "Reconciling")
    # The tenant's one Stack and the victim's Job: both slots taken, as the gauge says.
    wait_until(lambda: ctl.metrics().get("pulumi_controller_jobs_running") == 2,
               what="pulumi_controller_jobs_running 2")
    w.apply_stack("second", fluxSource={"sourceRef": GIT}, runner={"type": "Job"})
    got = wait_until(lambda: reconciling(w, "second"), timeout=60, what="second JobRunning or waiting")
    assert got == "WaitingForJobSlot", w.cond(w.stack("second"), "Reconciling")


FORGED = json.dumps({"status": "failed", "message": "forged by a pod of nobody's Job"})


def forged_pod(w, job):
    """A pod labelled with the Job's name (not its controller-uid) that says the update
    failed; no node runs it, its status is written as a kubelet would."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"{job}-forged", "namespace": w.namespace,
                        "labels": {"batch.kubernetes.io/job-name": job, "job-name": job}},
           "spec": {"restartPolicy": "Never",
                    "containers": [{"name": "update", "image": IMAGE, "command": ["true"]}]}}
    made = w.client.create(pod, "pods", w.namespace)
    w.client.patch("v1", "pods", made["metadata"]["name"], {"status": {
        "phase": "Failed", "containerStatuses": [{
            "name": "update", "image": IMAGE, "imageID": "", "ready": False, "restartCount": 0,
            "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": FORGED}}}]}},
        w.namespace, "merge", "status")
    return made


def test_a_pod_labelled_with_a_jobs_name_does_not_decide_its_outcome(fake_kubelet):
    w = fake_kubelet
    src = w.flux_source("GitRepository", "app", w.artifact())
    job_stack(w, "demo", labels={FAULT_LABEL: "hold"})
    controller(w)
    name = wait_job(w, "demo")["metadata"]["name"]
    real = wait_until(lambda: (w.client.list("v1", "pods", w.namespace,
                                             labelSelector=f"batch.kubernetes.io/job-name={name}")
                               ["items"] or [None])[0], what="the Job's pod")
    # The forged pod is to be the newest: made in a later second (timestamps have seconds).
    made_at = real["metadata"]["creationTimestamp"]
    wait_until(lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) > made_at,
               what="a second after the Job's pod was made")
    forged = forged_pod(w, name)
    assert forged["metadata"]["creationTimestamp"] > made_at
    wait_until(lambda: w.kubelet.release(name, w.namespace), what="the Job's pod released")
    w.wait_ready("demo", revision=src["revision"])
    assert "forged" not in json.dumps(w.stack("demo")["status"])
