"""spec.approval: Manual with the Job runner (issue 16; docs/job-runner.md, "Approval"), on
both tiers (stack_world [emulator] / [real]) with the test kubelet of tests/e2e/kubelet.py
running the real `pulumi-controller run-update` (and, on the real tier, the real pulumi CLI).

The preview --save-plan runs in a `plan` Job whose pod writes the plan into the Stack's
Secret <name>-plan (a Role lets the pod's ServiceAccount get and update exactly that
Secret); the controller describes it in status.preview and waits (AwaitingApproval); the
approved plan's `up` Job mounts that Secret and carries only the plan id, and its pod
refuses a plan that is not the approved one.  No Job spec ever holds the plan.

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

from job_fixtures import FAULT_LABEL
from stack_fixtures import wait_until
from test_stack_approval import approve, awaiting

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


def approval_stack(w, d, labels=None, **spec):
    runner = {"type": "Job", "podTemplate": {"metadata": {"labels": dict(labels or {})}}}
    return w.apply_stack("demo", fluxSource={"sourceRef": GIT}, approval="Manual",
                         runner=runner, backend=f"file://{d / 'backend'}",
                         envRefs={"PULUMI_STANDIN_CLOUD": {"type": "Literal", "literal": {
                             "value": str(d / "cloud")}}}, **spec)


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
    assert update_doc(pjob)["planSecret"] == "demo-plan"
    assert "resourcePlans" not in json.dumps(pjob)
    sec = plan_secret(w)
    owner, = sec["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("Stack", "demo", True)
    assert "resourcePlans" in json.loads(plan_text(w))
    role = w.client.get("rbac.authorization.k8s.io/v1", "roles", "demo-plan-writer", w.namespace)
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"],
                              "resourceNames": ["demo-plan"], "verbs": ["get", "update"]}]
    binding = w.client.get("rbac.authorization.k8s.io/v1", "rolebindings", "demo-plan-writer",
                           w.namespace)
    assert binding["roleRef"]["name"] == "demo-plan-writer"
    assert [s["name"] for s in binding["subjects"]] == ["default"]

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
    assert obj["status"]["approval"] == {"continueObserved": True, "continuedPlan": plan}
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
    assert {f"demo-plan-{fp[:10]}", f"demo-up-{fp[:10]}"} <= names, names
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
