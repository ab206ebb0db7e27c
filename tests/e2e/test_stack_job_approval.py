"""spec.approval: Manual with the Job runner (issue 16; docs/job-runner.md, "Approval"), on
both tiers (stack_world [emulator] / [real]) with the test kubelet of tests/e2e/kubelet.py
running the real `pulumi-controller run-update` (and, on the real tier, the real pulumi CLI).

The preview --save-plan runs in a `plan` Job whose pod hands the plan back in the Secret
<name>-plan-result (a Role lets the plan Job's ServiceAccount <name>-planner get and update
exactly that Secret; it cannot touch <name>-outputs, which only the up Job's <name>-runner may); the controller parses it strictly, copies the very bytes it judged
into <name>-plan (which no Role names: the runner cannot write the plan it is judged by),
describes it in status.preview and waits (AwaitingApproval); the approved plan's `up` Job
mounts <name>-plan and carries only the plan id, and its pod refuses a plan that is not
the approved one.  No Job spec ever holds the plan.

The test kubelet gives every pod its own /tmp (where pytest's directories are), so the
backend and the stand-in's cloud of these Stacks live under /var/tmp: the plan's pod, the
up's pod and the test then see one stack state and one cloud, as pods of a real cluster
see one backend and one cloud."""
import base64
import json
import os
import pathlib
import shutil
import tempfile

import pytest

from job_fixtures import FAULT_LABEL, _connection, _world_env, job_name
from kubeapi.client import KubeClient, KubeError
from stack_fixtures import wait_until
from test_stack_approval import approve, awaiting, forget_stack, plan_refused

HERE = pathlib.Path(__file__).resolve().parent
GIT = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "name": "app"}
IMAGE = "registry.example.test/pulumi-controller:test"
MANAGED = "app.kubernetes.io/managed-by=pulumi-controller"


@pytest.fixture
def shared(job_world, request):
    """(world, dir): dir/backend and dir/cloud outside /tmp, and the controller's plugin
    cache for the pods (--job-plugins-dir) on the real tier."""
    w = job_world
    d = pathlib.Path(tempfile.mkdtemp(dir="/var/tmp", prefix="pc-job-approval-"))
    request.addfinalizer(lambda: shutil.rmtree(d, ignore_errors=True))
    (d / "backend").mkdir()
    (d / "cloud").mkdir()
    w.job_plugins = None
    if w.cli.kind == "real":
        (d / "plugins").symlink_to(os.path.realpath(w.cli.home / "plugins"))
        w.job_plugins = str(d / "plugins")
    return w, d


def revision(w, greeting):
    return w.flux_source("GitRepository", "app", w.artifact(w.revision_files("stack-plan", greeting)))


def approval_stack(w, d, labels=None, env=None, pod_env=None, **spec):
    runner = {"type": "Job", "podTemplate": {"metadata": {"labels": dict(labels or {})}}}
    if pod_env:
        runner["podTemplate"]["spec"] = {"env": pod_env}
    return w.apply_stack("demo", fluxSource={"sourceRef": GIT}, approval="Manual",
                         runner=runner, backend=f"file://{d / 'backend'}",
                         envRefs=dict({"PULUMI_STANDIN_CLOUD": {"type": "Literal", "literal": {
                             "value": str(d / "cloud")}}}, **(env or {})), **spec)


def controller(w):
    return w.controller(runner="job", job_image=IMAGE, job_plugins_dir=w.job_plugins)


def cloud_files(d):
    files = d / "cloud" / "files"
    return {p.name: p.read_text() for p in sorted(files.iterdir())} if files.exists() else {}


def jobs_of(w, op=None):
    sel = MANAGED + ",pulumi.com/stack-name=demo" + (f",pulumi.com/operation={op}" if op else "")
    return w.client.list("batch/v1", "jobs", w.namespace, labelSelector=sel)["items"]


def update_doc(job):
    c = job["spec"]["template"]["spec"]["containers"][0]
    return json.loads(next(e["value"] for e in c["env"] if e["name"] == "PULUMI_CONTROLLER_UPDATE"))


def plan_secret(w):
    return w.client.get("v1", "secrets", "demo-plan", w.namespace)


def plan_text(w):
    return base64.b64decode(plan_secret(w)["data"]["plan.json"]).decode()


def test_the_plan_job_awaits_approval_and_the_up_job_applies_exactly_it(shared):
    w, d = shared
    src = revision(w, "hello")
    approval_stack(w, d)
    controller(w)
    obj = awaiting(w, "demo")
    pv = obj["status"]["preview"]
    plan = pv["planId"]
    assert pv["revision"] == src["revision"]
    assert pv["changeSummary"].get("create", 0) >= 2, pv
    assert any(s["op"] == "create" and s["urn"].endswith("::note") for s in pv["steps"]), pv["steps"]
    ready = w.cond(obj, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "AwaitingApproval")
    assert f"pulumi-controller approve {w.namespace}/demo --plan {plan}" in ready["message"]
    assert "AwaitingApproval" in w.event_reasons("demo")
    assert cloud_files(d) == {}                        # nothing applied
    assert jobs_of(w, "up") == []

    # The plan Job: told its Secret, holding no plan; the plan is in the Secret only.
    pjob, = jobs_of(w, "plan")
    assert pjob["metadata"]["name"].startswith("demo-plan-")
    assert update_doc(pjob)["planSecret"] == "demo-plan-result"
    # The program under review runs as <name>-planner, never as the up Job's <name>-runner.
    assert pjob["spec"]["template"]["spec"]["serviceAccountName"] == "demo-planner"
    assert "resourcePlans" not in json.dumps(pjob)
    for name in ("demo-plan", "demo-plan-result", "demo-planner"):
        obj = w.client.get("v1", "serviceaccounts" if name == "demo-planner" else "secrets", name,
                           w.namespace)
        owner, = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("Stack", "demo", True)
    # The plan up Jobs mount is the controller's copy of the very bytes the pod handed back.
    result = w.client.get("v1", "secrets", "demo-plan-result", w.namespace)
    assert result["data"]["plan.json"] == plan_secret(w)["data"]["plan.json"]
    assert "resourcePlans" in json.loads(plan_text(w))
    role = w.client.get("rbac.authorization.k8s.io/v1", "roles", "demo-plan-writer", w.namespace)
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"],
                              "resourceNames": ["demo-plan-result"], "verbs": ["get", "update"]}]
    binding = w.client.get("rbac.authorization.k8s.io/v1", "rolebindings", "demo-plan-writer",
                           w.namespace)
    assert binding["roleRef"]["name"] == "demo-plan-writer"
    assert [s["name"] for s in binding["subjects"]] == ["demo-planner"]

    approve(w, "demo", plan)
    obj = w.wait_ready("demo", revision=src["revision"], timeout=240)
    assert list(cloud_files(d).values()) == ["hello"]
    assert obj["status"]["lastUpdate"]["type"] == "up"
    assert "preview" not in obj["status"]
    c = w.cond(obj, "AwaitingApproval")
    assert (c["status"], c["reason"]) == ("False", "PlanApplied")
    # The up Job: the approved id and the Secret mounted, never the plan itself.
    ujob, = jobs_of(w, "up")
    assert update_doc(ujob)["planId"] == plan
    pod = ujob["spec"]["template"]["spec"]
    assert ("pulumi-controller-plan", "demo-plan") in \
        [(vol["name"], (vol.get("secret") or {}).get("secretName")) for vol in pod["volumes"]]
    args = pod["containers"][0]["args"]
    assert args[args.index("--plan-dir") + 1] == "/var/run/pulumi-controller/plan"
    assert "resourcePlans" not in json.dumps(ujob)
    assert pod["serviceAccountName"] == "demo-runner"
    binding = w.client.get("rbac.authorization.k8s.io/v1", "rolebindings", "demo-outputs-writer",
                           w.namespace)
    assert [s["name"] for s in binding["subjects"]] == ["demo-runner"]
    if w.tier == "real":
        # What the plan Job's pod runs as cannot rewrite the outputs the up Job wrote
        # (unapproved code would otherwise set what other Stacks read); the up Job's can.
        outputs = w.client.get("v1", "secrets", "demo-outputs", w.namespace)
        planner = runner_client(w, pjob["spec"]["template"]["spec"]["serviceAccountName"])
        for call in (lambda: planner.get("v1", "secrets", "demo-outputs", w.namespace),
                     lambda: planner.update(outputs, "secrets")):
            with pytest.raises(KubeError) as ex:
                call()
            assert ex.value.code == 403
        runner_client(w, pod["serviceAccountName"]).update(
            w.client.get("v1", "secrets", "demo-outputs", w.namespace), "secrets")


def test_the_up_pod_refuses_a_plan_that_is_not_the_approved_one(shared):
    """The plan Secret is changed after the preview (another plan in it): the up pod
    computes the id of what it was given and applies nothing; the controller previews
    again (the genuine plan, the same id) and the retry applies exactly the approved plan."""
    w, d = shared
    revision(w, "hello")
    approval_stack(w, d)
    controller(w)
    plan = awaiting(w, "demo")["status"]["preview"]["planId"]
    doc = json.loads(plan_text(w))
    doc["resourcePlans"]["urn:pulumi:dev::intruder::standin:index:File::evil"] = {
        "goal": {"type": "standin:index:File", "name": "evil"}, "steps": ["create"]}
    w.client.patch("v1", "secrets", "demo-plan", {"data": {"plan.json": base64.b64encode(
        json.dumps(doc).encode()).decode()}}, w.namespace, "merge")

    approve(w, "demo", plan)

    def refused():
        last = (w.stack("demo").get("status") or {}).get("lastUpdate") or {}
        return last if last.get("state") == "failed" else None
    last = wait_until(refused, timeout=240, what="the up Job refused")
    assert f"not the approved plan {plan}; nothing was applied" in last["message"], last
    assert cloud_files(d) == {}
    assert "PlanNoLongerApplies" in w.event_reasons("demo")
    obj = w.wait_ready("demo", timeout=240)
    assert list(cloud_files(d).values()) == ["hello"]
    assert obj["status"]["lastUpdate"]["state"] == "succeeded"


def test_a_cloud_changed_after_the_preview_fails_the_plan_and_a_plan_job_previews_again(shared):
    w, d = shared
    revision(w, "hello")
    approval_stack(w, d, refresh=True)
    controller(w)
    approve(w, "demo", awaiting(w, "demo")["status"]["preview"]["planId"])
    w.wait_ready("demo", timeout=240)
    revision(w, "bye")
    plan = awaiting(w, "demo", plan_not=None)["status"]["preview"]["planId"]
    for f in (d / "cloud" / "files").iterdir():       # the cloud moves before the approval
        f.unlink()
    approve(w, "demo", plan)
    obj = awaiting(w, "demo", reason="PlanNoLongerApplies", plan_not=plan)
    fresh = obj["status"]["preview"]["planId"]
    msg = w.cond(obj, "Ready")["message"]
    assert f"the approved plan {plan} no longer applies" in msg and fresh in msg
    assert obj["status"]["approval"]["failedPlan"] == plan
    assert obj["status"]["lastUpdate"]["state"] == "failed"
    assert "PlanNoLongerApplies" in w.event_reasons("demo")
    assert cloud_files(d) == {}
    assert any(s["op"] == "create" for s in obj["status"]["preview"]["steps"])
    approve(w, "demo", fresh)
    w.wait_ready("demo", timeout=240)
    assert list(cloud_files(d).values()) == ["bye"]


def test_continue_approves_in_job_mode_and_a_plan_without_changes_needs_no_approval(shared):
    w, d = shared
    revision(w, "hello")
    approval_stack(w, d)
    controller(w)
    plan = awaiting(w, "demo")["status"]["preview"]["planId"]
    w.patch_stack("demo", {"spec": {"continue": True}})
    obj = w.wait_ready("demo", timeout=240)
    assert obj["status"]["approval"] == {"continueObserved": True, "continuedPlan": plan,
                                         "appliedPlan": plan}
    assert list(cloud_files(d).values()) == ["hello"]
    assert update_doc(jobs_of(w, "up")[0])["planId"] == plan

    # New inputs the program does not read: a plan Job whose plan changes nothing, then its
    # up Job, with no approval asked.
    w.patch_stack("demo", {"spec": {"envRefs": {"PCTEST_X": {
        "type": "Literal", "literal": {"value": "x"}}}}})

    def ready_again():
        o = w.stack("demo")
        st = o.get("status") or {}
        done = (st.get("observedGeneration") == o["metadata"]["generation"] and
                (w.cond(o, "Ready") or {}).get("status") == "True")
        return st["fingerprint"] if done and st.get("fingerprint") != obj["status"]["fingerprint"] \
            else None
    fp = wait_until(ready_again, timeout=240, what="Ready at the new generation")
    assert "preview" not in w.stack("demo")["status"]
    names = {j["metadata"]["name"] for j in jobs_of(w)}
    obj = w.stack("demo")
    assert {job_name(obj, "plan", fp), job_name(obj, "up", fp)} <= names, names
    assert list(cloud_files(d).values()) == ["hello"]


def test_a_controller_restarted_while_the_plan_job_runs_adopts_it(shared):
    w, d = shared
    revision(w, "hello")
    approval_stack(w, d, labels={FAULT_LABEL: "hold"})
    ctl = controller(w)
    job = wait_until(lambda: (jobs_of(w, "plan") or [None])[0], what="the plan Job")
    w.wait_condition("demo", "Reconciling", reason="JobRunning")
    ctl.stop()

    ctl = controller(w)
    ctl.wait_log("reconcile pass ended", name="demo")
    assert [j["metadata"]["uid"] for j in jobs_of(w, "plan")] == [job["metadata"]["uid"]]
    wait_until(lambda: w.kubelet.release(job["metadata"]["name"], w.namespace) == 1,
               what="the plan Job's held pod")
    plan = awaiting(w, "demo")["status"]["preview"]["planId"]
    assert [j["metadata"]["uid"] for j in jobs_of(w, "plan")] == [job["metadata"]["uid"]]
    assert cloud_files(d) == {}
    approve(w, "demo", plan)
    up = wait_until(lambda: (jobs_of(w, "up") or [None])[0], what="the up Job")
    # (The kubelet makes the held pod a moment after the Job appears.)
    wait_until(lambda: w.kubelet.release(up["metadata"]["name"], w.namespace) == 1,
               what="the up Job's held pod")
    w.wait_ready("demo", timeout=240)
    assert list(cloud_files(d).values()) == ["hello"]


def runner_client(w, sa="demo-planner"):
    """A client with a token of ServiceAccount sa (TokenRequest), as the runner's pod has."""
    answer = w.client.request("POST", f"/api/v1/namespaces/{w.namespace}/serviceaccounts/{sa}/token",
                              {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                               "spec": {"expirationSeconds": 600}})
    url, _, ca = _connection(w.api)
    return KubeClient(url, answer["status"]["token"], ca, user_agent="runner-test/1.0")


def test_the_runner_cannot_write_the_plan_it_is_judged_by(shared):
    """The plan Job's ServiceAccount may write <name>-plan-result (its answer) but not
    <name>-plan (what up Jobs apply) nor read anything else.  RBAC is the real server's:
    the emulator authorizes everything (FIDELITY.md), so there only the Role is checked."""
    w, d = shared
    revision(w, "hello")
    approval_stack(w, d)
    controller(w)
    awaiting(w, "demo")
    role = w.client.get("rbac.authorization.k8s.io/v1", "roles", "demo-plan-writer", w.namespace)
    assert [r["resourceNames"] for r in role["rules"]] == [["demo-plan-result"]]
    if w.tier == "emulator":
        return
    c = runner_client(w)
    mine = c.get("v1", "secrets", "demo-plan-result", w.namespace)   # get + update, as the pod does
    c.update(mine, "secrets")
    judged = w.client.get("v1", "secrets", "demo-plan", w.namespace)
    for call in (lambda: c.get("v1", "secrets", "demo-plan", w.namespace),
                 lambda: c.update(judged, "secrets"),
                 lambda: c.patch("v1", "secrets", "demo-plan", {"data": {"plan.json": ""}}, w.namespace,
                                 "merge")):
        with pytest.raises(KubeError) as ex:
            call()
        assert ex.value.code == 403


def test_a_plan_the_cli_would_read_otherwise_is_refused_in_job_mode(shared):
    """The program in the plan pod rewrites its plan (an empty resourcePlans, the real plans
    as ResourcePlans): the controller refuses what the pod handed back, naming the Secret
    and the key; nothing is recorded as noChanges, no up Job runs, the cloud is untouched."""
    w, d = shared
    (d / "bin").mkdir()
    twin = d / "bin" / "pulumi"          # the pods' pulumi: their /tmp is their own
    twin.write_text(f"#!/bin/sh\nexec python3 {HERE / 'plan_twin.py'} {w.cli.binary} \"$@\"\n")
    twin.chmod(0o755)
    revision(w, "hello")
    approval_stack(w, d, pod_env=[{"name": "PATH", "value": f"{d / 'bin'}:{_world_env(w)['PATH']}"}])
    controller(w)
    obj = plan_refused(w, "demo")
    msg = obj["status"]["lastUpdate"]["message"]
    assert f"the plan the Job handed back in the Secret {w.namespace}/demo-plan-result is refused, " \
        "nothing was applied" in msg, msg
    assert 'esourcePlans" more than once (in some spelling)' in msg, msg
    assert "preview" not in obj["status"]
    assert "plan.json" not in (plan_secret(w).get("data") or {})
    assert jobs_of(w, "up") == []
    assert cloud_files(d) == {}


def test_an_applied_approval_is_used_up_in_job_mode(shared):
    """The up pod checks the id with the plan applied before (planAfter): after the first
    approved plan is applied, the same steps again await a new approval."""
    w, d = shared
    revision(w, "hello")
    approval_stack(w, d)
    controller(w)
    pv = awaiting(w, "demo")["status"]["preview"]
    approve(w, "demo", pv["planId"])
    w.wait_ready("demo", timeout=240)
    forget_stack(d / "backend", d / "cloud")
    # New inputs the program does not read: a plan Job whose steps are those of the first.
    w.patch_stack("demo", {"spec": {"envRefs": {"PCTEST_X": {"type": "Literal", "literal": {"value": "x"}}}}})
    again = awaiting(w, "demo", plan_not=pv["planId"])["status"]["preview"]
    assert [(s["op"], s["urn"]) for s in again["steps"]] == [(s["op"], s["urn"]) for s in pv["steps"]]
    assert cloud_files(d) == {}
    approve(w, "demo", again["planId"])
    w.wait_ready("demo", timeout=240)
    assert list(cloud_files(d).values()) == ["hello"]
    ups = sorted(jobs_of(w, "up"), key=lambda j: j["metadata"]["creationTimestamp"])
    assert update_doc(ups[-1])["planAfter"] == pv["planId"]


def test_a_shared_service_account_is_refused(shared):
    """spec.runner.serviceAccountName: default is Stalled (SpecInvalid); a <name>-runner the
    Stack does not own is never taken over (ServiceAccountNotOwned); another Stack's runner
    ServiceAccount named in spec.runner.serviceAccountName (it would run the program with
    that Stack's rights) is refused (ServiceAccountNotOwned); no Job is made."""
    w, d = shared
    revision(w, "hello")
    # Stack b's b-runner as the controller made it (b suspended: it runs nothing here).
    b = w.apply_stack("b", fluxSource={"sourceRef": GIT}, runner={"type": "Job"}, suspend=True,
                      backend=f"file://{d / 'backend'}")
    w.client.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {
        "name": "b-runner", "ownerReferences": [{
            "apiVersion": b["apiVersion"], "kind": "Stack", "name": "b", "uid": b["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True}]}}, "serviceaccounts", w.namespace)
    w.apply_stack("a", fluxSource={"sourceRef": GIT}, runner={
        "type": "Job", "serviceAccountName": "b-runner"}, backend=f"file://{d / 'backend'}")
    w.apply_stack("demo", fluxSource={"sourceRef": GIT}, runner={
        "type": "Job", "serviceAccountName": "default"}, backend=f"file://{d / 'backend'}")
    w.client.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "other-runner"}},
                    "serviceaccounts", w.namespace)
    w.apply_stack("other", fluxSource={"sourceRef": GIT}, runner={"type": "Job"},
                  backend=f"file://{d / 'backend'}")
    controller(w)
    c = w.cond(w.wait_condition("demo", "Stalled", reason="SpecInvalid"), "Stalled")
    assert "needs a ServiceAccount of its own" in c["message"], c
    c = w.cond(w.wait_condition("other", "Stalled", reason="ServiceAccountNotOwned"), "Stalled")
    assert f"the ServiceAccount {w.namespace}/other-runner exists and is not owned by this Stack" \
        in c["message"], c
    c = w.cond(w.wait_condition("a", "Stalled", reason="ServiceAccountNotOwned"), "Stalled")
    assert f"spec.runner.serviceAccountName: the ServiceAccount {w.namespace}/b-runner is owned by " \
        "another Stack" in c["message"], c
    assert w.client.list("batch/v1", "jobs", w.namespace, labelSelector=MANAGED)["items"] == []
    sa = w.client.get("v1", "serviceaccounts", "other-runner", w.namespace)
    assert "ownerReferences" not in sa["metadata"]
    with pytest.raises(KubeError):
        w.client.get("rbac.authorization.k8s.io/v1", "rolebindings", "other-outputs-writer", w.namespace)


def test_a_plan_job_whose_recorded_mark_was_lost_is_not_read_again(shared):
    """Issue 21 review: a plan Job's outcome is a preview, which writes no lastUpdate, so
    only its pulumi.com/result-recorded mark told a read plan from a new one.  With the mark
    lost (the controller killed between its status write and the mark), a requested fresh
    preview (same generation, so the same Job name) took the old Job's plan again.
    status.preview.jobUid now names the Job a plan came from."""
    w, d = shared
    revision(w, "hello")
    approval_stack(w, d)
    controller(w)
    awaiting(w, "demo")
    recorded = "pulumi.com/result-recorded"
    pjob = wait_until(lambda: next((j for j in jobs_of(w, "plan")
                                    if (j["metadata"].get("annotations") or {}).get(recorded)), None),
                      what="the plan Job marked recorded")
    uid = pjob["metadata"]["uid"]
    assert w.stack("demo")["status"]["preview"].get("jobUid") == uid
    w.client.patch("batch/v1", "jobs", pjob["metadata"]["name"],
                   {"metadata": {"annotations": {recorded: None}}}, w.namespace)
    w.patch_stack("demo", {"metadata": {"annotations": {
        "reconcile.fluxcd.io/requestedAt": "fresh-preview-1"}}})
    wait_until(lambda: (w.stack("demo").get("status") or {}).get("lastHandledReconcileAt") ==
               "fresh-preview-1", timeout=120, what="the request handled")
    uids = [j["metadata"]["uid"] for j in jobs_of(w, "plan")]
    assert uids and uid not in uids, "the request was answered with the old plan Job's result"
    assert w.stack("demo")["status"]["preview"]["jobUid"] in uids
