"""Job slots at scale (issue 16; docs/sharding.md, docs/job-runner.md "Slots"), on both tiers
(stack_world [emulator] / [real]) with the test kubelet holding every pod until the test
releases it (the fake run-update of test_stack_jobs.py):

- two shards (--watch-label-selector) in one namespace: each counts only its own Stacks'
  Jobs against its --max-concurrent-jobs, though its Job informer sees the other's;
- a freed slot wakes as many waiting Stacks as slots are free, oldest first, not every
  waiting Stack (each wake is a pass: a Stack GET and its Secret reads)."""
from job_fixtures import FAULT_LABEL
from stack_fixtures import wait_until
from test_stack_jobs import GIT, controller, fake_kubelet, jobs_of  # noqa: F401 (a fixture)

SHARD = "pulumi.com/shard"


def held_stack(w, name, shard=None):
    """A job-mode Stack whose pod the kubelet holds (Running, not started) until released."""
    obj = w.stack_object(name, stack=name, fluxSource={"sourceRef": GIT}, runner={
        "type": "Job", "podTemplate": {"metadata": {"labels": {FAULT_LABEL: "hold"}},
                                       "spec": {"env": [{"name": "FAKE_MODE", "value": "ok"}]}}})
    if shard:
        obj["metadata"]["labels"] = {SHARD: shard}
    return w.client.apply(obj, "stacks", field_manager="stack-test")


def reason(w, name):
    c = w.condition(name, "Reconciling")
    return c and c.get("reason")


def unfinished_jobs(w, names):
    out = []
    for j in jobs_of(w):
        done = any(c["type"] in ("Complete", "Failed") and c["status"] == "True"
                   for c in (j.get("status") or {}).get("conditions") or [])
        if not done and j["metadata"]["labels"]["pulumi.com/stack-name"] in names:
            out.append(j["metadata"]["name"])
    return out


def release_one_by_one(w, names, most):
    """Releases the held Jobs of the Stacks `names`, one at a time, until each Stack's Job
    was; at every step at most `most` Jobs not yet released run."""
    released = set()
    for _ in names:
        held = wait_until(lambda: [j for j in unfinished_jobs(w, names) if j not in released],
                          what="the next Job")
        assert len(held) <= most, held
        wait_until(lambda: w.kubelet.release(held[0], w.namespace), what=f"{held[0]} released")
        released.add(held[0])


def shard_controller(w, shard, slots):
    return controller(w, watch_label_selector=f"{SHARD}={shard}", max_concurrent_jobs=str(slots),
                      storage_path=str(w.workdir / f"storage-{shard}"))


def test_each_shard_counts_only_its_own_jobs_against_its_slots(fake_kubelet):
    w = fake_kubelet
    w.flux_source("GitRepository", "app", w.artifact())
    a = [f"a{i}" for i in range(4)]
    b = ["b0", "b1"]
    for n in a:
        held_stack(w, n, "a")
    for n in b:
        held_stack(w, n, "b")
    shard_controller(w, "a", 2)
    wait_until(lambda: sum(reason(w, n) == "WaitingForJobSlot" for n in a) == 2 and
               len(unfinished_jobs(w, a)) == 2, what="shard a: two Jobs, two Stacks waiting for a slot")
    # Shard b's informer sees shard a's two running Jobs; they are not b's to count.
    shard_controller(w, "b", 2)
    wait_until(lambda: all(reason(w, n) == "JobRunning" for n in b) and
               len(unfinished_jobs(w, b)) == 2, what="shard b: both Stacks' Jobs beside shard a's two")
    assert len(unfinished_jobs(w, a)) == 2
    assert sum(reason(w, n) == "WaitingForJobSlot" for n in a) == 2

    release_one_by_one(w, a + b, most=4)
    for n in a + b:
        w.wait_ready(n)


def waiting_passes(ctl, name):
    return sum(1 for r in ctl.records()
               if r.get("msg") == "reconcile pass ended" and r.get("name") == name and
               r.get("reason") == "WaitingForJobSlot")


def test_a_freed_slot_wakes_one_waiting_stack_not_all(fake_kubelet):
    w = fake_kubelet
    w.flux_source("GitRepository", "app", w.artifact())
    names = [f"s{i}" for i in range(8)]
    for n in names:
        held_stack(w, n)
    ctl = controller(w, max_concurrent_jobs="1")
    wait_until(lambda: sum(reason(w, n) == "WaitingForJobSlot" for n in names) == 7 and
               len(unfinished_jobs(w, names)) == 1, what="one Job, seven Stacks waiting for its slot")
    release_one_by_one(w, names, most=1)
    for n in names:
        w.wait_ready(n)
    # Each Stack waited once when it found no slot, and was woken only for the slot
    # it then took: seven releases woke one Stack each, not every Stack still waiting.
    passes = {n: waiting_passes(ctl, n) for n in names}
    assert max(passes.values()) <= 2, passes
    assert sum(passes.values()) <= len(names) + 1, passes



def test_a_deleted_or_suspended_waiter_gives_its_place_up(fake_kubelet):
    """One slot; s1 and s2 wait ahead of s3.  s1 is deleted and s2 suspended while they
    wait: the freed slot goes to s3 at once.  (Before, a freed slot woke the head of the
    queue, deleted or not, and held the slot for it for a minute; s3 looked again only
    on its own poll, five minutes on.)"""
    w = fake_kubelet
    w.flux_source("GitRepository", "app", w.artifact())
    controller(w, max_concurrent_jobs="1")
    held_stack(w, "s0")
    wait_until(lambda: reason(w, "s0") == "JobRunning", what="s0's Job")
    for n in ("s1", "s2", "s3"):       # in this order: the queue is in arrival order
        held_stack(w, n)
        wait_until(lambda: reason(w, n) == "WaitingForJobSlot", what=f"{n} waiting for a slot")
    w.delete_stack("s1")
    w.wait_gone("s1")
    w.patch_stack("s2", {"spec": {"suspend": True}})
    w.settle("s2")
    job = wait_until(lambda: unfinished_jobs(w, ["s0"]), what="s0's Job")[0]
    wait_until(lambda: w.kubelet.release(job, w.namespace), what=f"{job} released")
    # Well within the minute a wake was held for a Stack whose pass never came.
    wait_until(lambda: reason(w, "s3") == "JobRunning", timeout=40, what="s3's Job")
    assert unfinished_jobs(w, ["s2"]) == []
    release_one_by_one(w, ["s3"], most=1)
    w.wait_ready("s3")
