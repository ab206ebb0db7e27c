"""Issue 14 scenario 1 (and 5 for approvals): plan-bound approval, spec.approval: Manual.
Both tiers (stack_world).

The preview's plan is recorded in status.preview and nothing happens in the simulated cloud
until the plan is approved; then `up --plan` applies exactly it.  A new revision gets a
fresh preview and a stale approval is refused; a revision that yields the identical plan
keeps its approval (the plan id is bound to what changes, not to the revision);
spec.continue approves only the plan in status when it turns true; a cloud changed between
preview and approval fails the plan clearly and yields a fresh preview."""
import os
import subprocess

import pytest

GIT = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "name": "app"}


def revision(w, greeting, extra=None):
    return w.flux_source("GitRepository", "app", w.artifact(
        w.revision_files("stack-plan", greeting), extra=extra))


def awaiting(w, name, reason="AwaitingApproval", plan_not=None):
    """Waits for a plan awaiting approval (other than plan_not); returns the Stack."""
    def pending():
        obj = w.stack(name)
        c = w.cond(obj, "AwaitingApproval")
        st = obj.get("status") or {}
        pv = st.get("preview") or {}
        if (c and c["status"] == "True" and c["reason"] == reason and pv.get("planId") and
                pv["planId"] != plan_not and
                st.get("observedGeneration") == obj["metadata"]["generation"]):
            return obj
        return None
    return w._wait(name, pending, 180, f"a plan of {name} awaiting approval ({reason})")


def approve(w, name, plan):
    w.patch_stack(name, {"spec": {"approvedPlan": plan}})


def plan_args(w, since):
    return [a for r in w.updates("dev", since) for a in r["argv"] if a.startswith("--plan")]


def pc(w, *args, input=None):
    """pulumi-controller preview/approve against this world's API server."""
    return subprocess.run([w.pc_bin, *args, "--kubeconfig", w.api.kubeconfig], capture_output=True,
                          text=True, timeout=60, input=input, env=dict(os.environ))


def kubectl_wait_ready(w, name, seconds=3):
    """`kubectl wait --for=condition=Ready` against the Stack (what a pipeline runs)."""
    return w.kubectl("wait", f"stack/{name}", "--for=condition=Ready", f"--timeout={seconds}s",
                     check=False)


def test_nothing_changes_until_the_plan_is_approved(stack_world):
    w = stack_world
    src = revision(w, "hello")
    w.apply_stack("demo", fluxSource={"sourceRef": GIT}, approval="Manual")
    w.controller()
    obj = awaiting(w, "demo")
    pv = obj["status"]["preview"]
    plan = pv["planId"]
    assert pv["revision"] == src["revision"]
    assert pv["changeSummary"].get("create", 0) >= 2, pv
    assert any(s["op"] == "create" and s["urn"].endswith("standin:index:File::note") and
               s["properties"] == ["content"] for s in pv["steps"]), pv["steps"]
    assert pv["omittedSteps"] == 0 and pv["generatedAt"].endswith("Z")
    ready = w.cond(obj, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "AwaitingApproval")
    assert f"pulumi-controller approve {w.namespace}/demo --plan {plan}" in ready["message"]
    assert w.cond(obj, "Reconciling")["status"] == "True"
    assert "AwaitingApproval" in w.event_reasons("demo")
    assert w.cloud_files() == {}
    assert w.updates("dev") == []                     # no up ran at all
    res = kubectl_wait_ready(w, "demo")
    assert res.returncode != 0 and "timed out" in (res.stderr + res.stdout)

    # Scenario 5: every new status field and condition through kubectl -o yaml.
    out = w.kubectl("get", "stack", "demo", "-o", "yaml").stdout
    for field in ("preview:", f"planId: {plan}", "changeSummary:", "omittedSteps: 0",
                  "inputsDigest:", "type: AwaitingApproval"):
        assert field in out, field

    # The reviewer: preview, then approve with the CLI.
    ref = f"{w.namespace}/demo"
    res = pc(w, "preview", "demo", "-n", w.namespace)     # NAME with -n, as the other commands
    assert res.returncode == 0, res.stderr
    assert f"plan {plan}" in res.stdout and "awaiting approval" in res.stdout
    assert "standin:index:File::note  [content]" in res.stdout
    res = pc(w, "approve", ref, "--plan", "0" * 32, "--yes")
    assert res.returncode == 1 and f"the plan awaiting approval is {plan}" in res.stderr
    res = pc(w, "approve", ref, input="y\n")              # stdin is no terminal: never asks
    assert res.returncode == 1 and "--yes" in res.stderr
    assert "approvedPlan" not in w.stack("demo")["spec"]
    mark = w.mark()
    res = pc(w, "approve", ref, "--plan", plan, "--yes")
    assert res.returncode == 0, res.stderr
    assert w.stack("demo")["spec"]["approvedPlan"] == plan
    obj = w.wait_ready("demo", revision=src["revision"])
    assert list(w.cloud_files().values()) == ["hello"]
    assert len(plan_args(w, mark)) == 1               # up --plan, once
    assert "preview" not in obj["status"]             # the plan was applied
    c = w.cond(obj, "AwaitingApproval")
    assert (c["status"], c["reason"]) == ("False", "PlanApplied")
    assert kubectl_wait_ready(w, "demo").returncode == 0

    # A new revision: a fresh preview; the approval on record names the old plan.
    src2 = revision(w, "bye")
    obj = awaiting(w, "demo", plan_not=plan)
    plan2 = obj["status"]["preview"]["planId"]
    assert obj["status"]["preview"]["revision"] == src2["revision"]
    assert f"spec.approvedPlan {plan} names another plan" in w.cond(obj, "Ready")["message"]
    w.settle("demo")
    assert list(w.cloud_files().values()) == ["hello"]
    assert w.stack("demo")["status"]["lastAppliedRevision"] == src["revision"]

    # The approval is committed with the program (a new revision, the identical plan):
    # the plan id is the same, so the approval holds and there is no loop.
    src3 = revision(w, "bye", extra={"README.md": b"approved plan2\n"})
    approve(w, "demo", plan2)
    obj = w.wait_ready("demo", revision=src3["revision"])
    assert list(w.cloud_files().values()) == ["bye"]
    assert obj["status"]["lastAppliedRevision"] == src3["revision"]


def test_continue_approves_only_the_plan_in_status_then(stack_world):
    w = stack_world
    revision(w, "hello")
    w.apply_stack("demo", fluxSource={"sourceRef": GIT}, approval="Manual")
    w.controller()
    plan = awaiting(w, "demo")["status"]["preview"]["planId"]
    w.patch_stack("demo", {"spec": {"continue": True}})
    obj = w.wait_ready("demo")
    assert obj["status"]["approval"] == {"continueObserved": True, "continuedPlan": plan,
                                         "appliedPlan": plan}
    assert list(w.cloud_files().values()) == ["hello"]

    # continue stays true in the spec; a later plan needs it set again.
    revision(w, "bye")
    obj = awaiting(w, "demo", plan_not=plan)
    plan2 = obj["status"]["preview"]["planId"]
    w.settle("demo")
    assert list(w.cloud_files().values()) == ["hello"]
    # Re-approval with continue: false (seen by the controller), then true.
    w.patch_stack("demo", {"spec": {"continue": False}})
    w._wait("demo", lambda: (w.stack("demo")["status"].get("approval") or {}).get(
        "continueObserved") is False, 60, "continue: false observed")
    w.patch_stack("demo", {"spec": {"continue": True}})
    obj = w.wait_ready("demo")
    assert obj["status"]["approval"]["continuedPlan"] == plan2
    assert list(w.cloud_files().values()) == ["bye"]


def test_a_cloud_changed_after_the_preview_fails_the_plan_and_previews_again(stack_world):
    w = stack_world
    revision(w, "hello")
    w.apply_stack("demo", fluxSource={"sourceRef": GIT}, approval="Manual", refresh=True)
    w.controller()
    approve(w, "demo", awaiting(w, "demo")["status"]["preview"]["planId"])
    w.wait_ready("demo")
    revision(w, "bye")
    plan = awaiting(w, "demo")["status"]["preview"]["planId"]
    # The cloud moves between preview and approval: the file is deleted.
    for f in (w.cloud_dir / "files").iterdir():
        f.unlink()
    approve(w, "demo", plan)
    obj = awaiting(w, "demo", reason="PlanNoLongerApplies", plan_not=plan)
    fresh = obj["status"]["preview"]["planId"]
    msg = w.cond(obj, "Ready")["message"]
    assert f"the approved plan {plan} no longer applies" in msg and fresh in msg
    assert obj["status"]["approval"]["failedPlan"] == plan
    assert obj["status"]["lastUpdate"]["state"] == "failed"
    assert "violates plan" in obj["status"]["lastUpdate"]["message"]
    assert "PlanNoLongerApplies" in w.event_reasons("demo")
    assert w.cloud_files() == {}                       # nothing was applied
    assert any(s["op"] == "create" for s in obj["status"]["preview"]["steps"])
    approve(w, "demo", fresh)
    w.wait_ready("demo")
    assert list(w.cloud_files().values()) == ["bye"]


def test_unchanged_inputs_need_no_approval_and_auto_is_unchanged(stack_world):
    """A plan whose every step is `same` changes nothing in the cloud: it is applied
    without review.  A Stack without approval never previews for a plan."""
    w = stack_world
    revision(w, "hello")
    w.apply_stack("demo", fluxSource={"sourceRef": GIT}, approval="Manual")
    w.apply_stack("auto", stack="auto", fluxSource={"sourceRef": GIT})
    w.controller()
    approve(w, "demo", awaiting(w, "demo")["status"]["preview"]["planId"])
    w.wait_ready("demo")
    w.wait_ready("auto")
    mark = w.mark()
    # New inputs (an environment value the program does not read): the same plan.
    w.patch_stack("demo", {"spec": {"envRefs": {"PCTEST_X": {
        "type": "Literal", "literal": {"value": "x"}}}}})
    w.wait_ready("demo")
    assert "preview" not in w.stack("demo")["status"]
    assert len(plan_args(w, mark)) == 1
    assert not [r for r in w.cli_invocations() if r["stack"] == "auto" and
                any(a.startswith(("--save-plan", "--plan")) for a in r["argv"])]
    assert w.cond(w.stack("auto"), "AwaitingApproval") is None


def test_bad_approval_spec_is_stalled(stack_world):
    w = stack_world
    revision(w, "hello")
    w.apply_stack("demo", fluxSource={"sourceRef": GIT}, approval="Manual",
                  policyPacks=["../outside"])
    w.controller()
    obj = w.wait_condition("demo", "Stalled", reason="SpecInvalid")
    assert "spec.policyPacks[0]" in w.cond(obj, "Stalled")["message"]


def test_a_reverted_revision_voids_the_pending_plan(stack_world):
    """Back to the applied revision: nothing is pending, Ready, and the old plan is gone, so
    approving it later does nothing."""
    w = stack_world
    src = revision(w, "hello")
    w.apply_stack("demo", fluxSource={"sourceRef": GIT}, approval="Manual")
    w.controller()
    approve(w, "demo", awaiting(w, "demo")["status"]["preview"]["planId"])
    w.wait_ready("demo", revision=src["revision"])
    revision(w, "bye")
    awaiting(w, "demo")
    again = revision(w, "hello")
    # The hand-written source names a revision by its content: back at the applied one, no
    # plan is pending.  A real Git revert is a new commit: a new revision whose plan changes
    # nothing, which needs no approval and is applied.  Either way the old plan is gone.
    if w.tier == "emulator":
        assert again["revision"] == src["revision"]
        obj = w._wait("demo", lambda: (lambda o: o if w.cond(o, "AwaitingApproval")["reason"] ==
                                       "NoChangePending" else None)(w.stack("demo")), 120, "no plan")
    else:
        obj = w.wait_ready("demo", revision=again["revision"])
        assert w.cond(obj, "AwaitingApproval")["status"] != "True"
    assert "preview" not in obj["status"]
    assert w.cond(obj, "Ready")["status"] == "True"
    assert list(w.cloud_files().values()) == ["hello"]


def test_approve_refuses_a_plan_that_changed_while_it_was_shown(stack_world):
    """`approve` on a terminal shows the plan and asks; a new revision makes a new plan
    before the answer: the merge patch (with the resourceVersion read) conflicts, the
    command reads again, sees another plan and refuses."""
    import pty
    w = stack_world
    revision(w, "hello")
    w.apply_stack("demo", fluxSource={"sourceRef": GIT}, approval="Manual")
    w.controller()
    plan = awaiting(w, "demo")["status"]["preview"]["planId"]
    master, slave = pty.openpty()
    proc = subprocess.Popen([w.pc_bin, "approve", f"{w.namespace}/demo", "--kubeconfig",
                             w.api.kubeconfig], stdin=slave, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    os.close(slave)
    try:
        shown = ""
        while "[y/N]" not in shown:                         # it asks: the plan was shown
            chunk = proc.stdout.read1(4096) if hasattr(proc.stdout, "read1") else \
                os.read(proc.stdout.fileno(), 4096).decode()
            assert chunk, "approve ended without asking"
            shown += chunk if isinstance(chunk, str) else chunk.decode()
        assert f"plan {plan}" in shown
        revision(w, "bye")
        awaiting(w, "demo", plan_not=plan)                  # a new plan in status
        os.write(master, b"y\n")
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, (out, err)
    assert "changed since it was shown" in err
    assert "approvedPlan" not in w.stack("demo")["spec"]
    w.settle("demo")
    assert w.cloud_files() == {}


def twin(rewrite):
    """The envRefs that make the Stack's `pulumi` plan_twin.py, rewriting as `rewrite` says."""
    return {"PCTEST_PLAN_TWIN": {"type": "Literal", "literal": {"value": rewrite}}}


def plan_refused(w, name):
    """Waits for the update that failed on a refused plan; returns the Stack."""
    def failed():
        obj = w.stack(name)
        last = (obj.get("status") or {}).get("lastUpdate") or {}
        return obj if last.get("state") == "failed" and "is refused" in last.get("message", "") \
            else None
    return w._wait(name, failed, 180, f"the plan of {name} refused")


def forget_stack(backend_dir, cloud_dir):
    """Removes the stack's state from the file:// backend and every file of its cloud: the
    next preview plans exactly what the first one did."""
    for p in (backend_dir / ".pulumi" / "stacks").rglob("dev.json*"):
        p.unlink()
    for p in (cloud_dir / "files").iterdir() if (cloud_dir / "files").exists() else []:
        p.unlink()


@pytest.mark.parametrize("rewrite, says", [
    ("1", 'esourcePlans" more than once (in some spelling)'),
    ("Steps", '"Steps", which Go reads as its field "steps"'),
])
def test_a_plan_the_cli_would_read_otherwise_is_refused_not_applied(stack_world, rewrite, says):
    """The program rewrites its saved plan: an empty "resourcePlans", then the real plans
    as "ResourcePlans" (1), or each changing resource's "steps" as "Steps" alone (Steps).
    cJSON would read no changes (applied unreviewed), the pulumi CLI's Go decoder the
    real changes.  The plan is refused, naming the key; it is not recorded as noChanges
    and nothing is applied."""
    w = stack_world
    revision(w, "hello")
    w.apply_stack("demo", fluxSource={"sourceRef": GIT}, approval="Manual",
                  envRefs=twin(rewrite))
    w.controller()
    obj = plan_refused(w, "demo")
    msg = obj["status"]["lastUpdate"]["message"]
    assert "the plan preview --save-plan wrote is refused, nothing was applied" in msg, msg
    assert says in msg, msg
    assert "preview" not in obj["status"]
    assert w.cond(obj, "Ready")["status"] == "False"
    w.settle("demo")
    assert w.cloud_files() == {}
    assert w.updates("dev") == []                     # no up ran at all


def test_an_applied_approval_is_used_up(stack_world):
    """After the approved plan is applied, the same steps again are a new plan with a new
    id: spec.approvedPlan (still naming the applied one) does not approve it."""
    w = stack_world
    revision(w, "hello")
    w.apply_stack("demo", fluxSource={"sourceRef": GIT}, approval="Manual")
    w.controller()
    pv = awaiting(w, "demo")["status"]["preview"]
    approve(w, "demo", pv["planId"])
    obj = w.wait_ready("demo")
    assert list(w.cloud_files().values()) == ["hello"]

    forget_stack(w.backend_dir, w.cloud_dir)
    w.patch_stack("demo", {"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": "again"}}})
    again = awaiting(w, "demo", plan_not=pv["planId"])["status"]["preview"]
    assert [(s["op"], s["urn"]) for s in again["steps"]] == [(s["op"], s["urn"]) for s in pv["steps"]]
    w.settle("demo")
    assert w.cloud_files() == {}
    assert w.stack("demo")["status"]["approval"]["appliedPlan"] == pv["planId"]
    approve(w, "demo", again["planId"])
    w.wait_ready("demo")
    assert list(w.cloud_files().values()) == ["hello"]


def test_preview_and_approve_print_steps_escaped(stack_world):
    """A URN holding terminal escapes (a name that would erase its own line and print
    another step) is shown escaped by `preview` and `approve`."""
    w = stack_world
    w.apply_stack("demo", fluxSource={"sourceRef": GIT}, approval="Manual")
    hidden = "urn:pulumi:dev::p::standin:index:File::x\x1b[2K\r    create   urn:harmless"
    w.client.patch("pulumi.com/v1", "stacks", "demo", {"status": {"preview": {
        "planId": "0123456789abcdef0123456789abcdef", "revision": "main@sha1:\x1b]0;t\x07",
        "changeSummary": {"delete": 1}, "omittedSteps": 0, "generatedAt": "2026-01-01T00:00:00Z",
        "steps": [{"op": "delete", "urn": hidden, "properties": ["p\x1b[8m"]}]}}},
        w.namespace, "merge", "status")
    for args in (["preview", f"{w.namespace}/demo"],
                 ["approve", f"{w.namespace}/demo", "--plan", "f" * 32, "--yes"]):
        res = pc(w, *args)
        assert "\x1b" not in res.stdout + res.stderr and "\r" not in res.stdout, repr(res.stdout)
        assert "delete   urn:pulumi:dev::p::standin:index:File::x\\x1b[2K\\r    create" in res.stdout, \
            repr(res.stdout)
        assert "[p\\x1b[8m]" in res.stdout and "main@sha1:\\x1b]0;t\\x07" in res.stdout
