"""spec.driftDetection with the Job runner (issue 16; docs/job-runner.md "Drift checks"), on
both tiers (stack_world [emulator] / [real]) with the test kubelet running the real
`pulumi-controller run-update` (and, on the real tier, the real pulumi CLI): the drift check
`refresh --preview-only` is a Job (op "refresh"), the Stack stays Ready while it runs, the
drifted resources come back through the termination message into status.drift exactly as in
local mode (test_stack_drift.py), and remediate: true repairs the cloud with an up Job run
with --refresh.

The stand-in's cloud directory is under /tmp, which the test kubelet rewrites to each pod's
own /tmp (an emptyDir): the Stacks here name it through a link outside /tmp, so that the
pods and the test look at the same cloud."""
import json
import os
import pathlib
import shutil
import tempfile

import pytest

from stack_fixtures import wait_until
from test_stack_drift import tamper  # the cloud changed behind Pulumi's back, as locally

GIT = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "name": "app"}
IMAGE = "registry.example.test/pulumi-controller:test"
MANAGED = "app.kubernetes.io/managed-by=pulumi-controller"
REFRESH_JOBS = "pulumi.com/operation=refresh"
DRIFT = {"interval": "2s"}


def jobs_of(w, op):
    sel = f"{MANAGED},pulumi.com/stack-name=demo,pulumi.com/operation={op}"
    return w.client.list("batch/v1", "jobs", w.namespace, labelSelector=sel)["items"]


def update_doc(job):
    """The PULUMI_CONTROLLER_UPDATE document of a Job."""
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    return json.loads(next(e["value"] for e in env if e["name"] == "PULUMI_CONTROLLER_UPDATE"))


def outside_tmp(request, target, prefix):
    """A link to target at a path the test kubelet does not rewrite."""
    d = pathlib.Path(tempfile.mkdtemp(dir="/var/tmp", prefix=prefix))
    request.addfinalizer(lambda: shutil.rmtree(d))
    link = d / "link"
    link.symlink_to(os.path.realpath(target))
    return str(link)


@pytest.fixture
def drift_world(job_world, request):
    w = job_world
    w.cloud_link = outside_tmp(request, w.cloud_dir, "pc-job-cloud-")
    # The image's plugin cache (--job-plugins-dir), as test_stack_jobs.py does; the
    # stand-in needs none.
    w.plugins = outside_tmp(request, w.cli.home / "plugins", "pc-job-image-") \
        if w.cli.kind == "real" else None
    return w


def start(w, flags=None, **spec):
    w.flux_source("GitRepository", "app", w.artifact(w.revision_files("stack-plan")))
    w.apply_stack("demo", fluxSource={"sourceRef": GIT}, runner={"type": "Job"},
                  envRefs={"PULUMI_STANDIN_CLOUD": {"type": "Literal",
                                                    "literal": {"value": w.cloud_link}}},
                  **spec)
    return w.controller(runner="job", job_image=IMAGE, job_plugins_dir=w.plugins, **(flags or {}))


def release(w, name):
    """Starts the held pod of Job name, once the kubelet has made it (the Job may be
    seen before its pod is)."""
    wait_until(lambda: w.kubelet.release(name, w.namespace) == 1, what=f"the pod of {name}")


def test_a_drift_check_is_a_job_the_stack_stays_ready_and_drift_reaches_status(drift_world):
    w = drift_world
    w.kubelet.set_fault(REFRESH_JOBS, "hold")          # each check waits for release()
    start(w, driftDetection=DRIFT)
    w.wait_ready("demo")
    job = wait_until(lambda: (jobs_of(w, "refresh") or [None])[0], what="a drift check Job")
    name = job["metadata"]["name"]
    assert name.startswith("demo-refresh-")
    owner, = job["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("Stack", "demo", True)
    c, = job["spec"]["template"]["spec"]["containers"]
    assert c["command"] == ["pulumi-controller", "run-update"]
    doc = update_doc(job)
    assert doc["operation"] == "refresh" and doc["refresh"] is False

    # While the check's pod is held the Stack says so, and stays Ready.
    def told():
        obj = w.stack("demo")
        ready = w.cond(obj, "Ready")
        return obj if ready and name in ready["message"] else None
    obj = wait_until(told, what="Ready naming the check's Job")
    ready = w.cond(obj, "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "Succeeded"), ready
    assert "drift check" in ready["message"]
    assert w.cond(obj, "Reconciling") is None, w.cond(obj, "Reconciling")
    assert "UpdateStarted" not in [e["reason"] for e in w.events("demo")
                                   if name in e.get("message", "")]

    path = tamper(w)
    release(w, name)
    obj = w.wait_condition("demo", "Drifted", "True", reason="DriftDetected")
    drift = obj["status"]["drift"]
    assert drift["drifted"] is True and drift["detectedAt"].endswith("Z")
    assert [r["urn"].rsplit("::", 1)[-1] for r in drift["resources"]] == ["note"], drift
    assert drift["omittedResources"] == 0 and drift["changeSummary"], drift
    ready = w.cond(obj, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "Drifted")
    assert w.cond(obj, "Stalled")["reason"] == "Drifted"
    ev = [e for e in w.events("demo") if e["reason"] == "DriftDetected"]
    assert ev and ev[0]["type"] == "Warning"
    assert obj["status"]["lastUpdate"]["type"] == "up"     # a check is not an update
    assert path.read_text() == "tampered"                 # no remediation
    assert len(jobs_of(w, "up")) == 1 and update_doc(jobs_of(w, "up")[0])["refresh"] is False

    # Put back by hand: the next check finds the cloud matching.
    path.write_text("hello")
    w.kubelet.set_fault(REFRESH_JOBS, None)

    def resolved():
        w.kubelet.release(name, w.namespace)              # a check held meanwhile
        obj = w.stack("demo")
        c = w.cond(obj, "Drifted")
        return obj if c and (c["status"], c["reason"]) == ("False", "NoDrift") else None
    wait_until(resolved, what="Drifted=False NoDrift")
    w.wait_ready("demo")
    assert "DriftResolved" in w.event_reasons("demo")


def test_a_controller_restarted_while_a_check_runs_adopts_its_job(drift_world):
    """Job names come from the inputs, so the restarted controller finds the check's Job
    (the check is still due: its result is not in the status yet) and follows it."""
    w = drift_world
    w.kubelet.set_fault(REFRESH_JOBS, "hold")
    ctl = start(w, driftDetection=DRIFT)
    w.wait_ready("demo")
    job = wait_until(lambda: (jobs_of(w, "refresh") or [None])[0], what="a drift check Job")
    ctl.stop()

    ctl = w.controller(runner="job", job_image=IMAGE, job_plugins_dir=w.plugins)
    ctl.wait_log("reconcile pass ended", name="demo")
    assert [j["metadata"]["uid"] for j in jobs_of(w, "refresh")] == [job["metadata"]["uid"]]
    tamper(w)
    release(w, job["metadata"]["name"])
    obj = w.wait_condition("demo", "Drifted", "True", reason="DriftDetected")
    assert [r["urn"].rsplit("::", 1)[-1] for r in obj["status"]["drift"]["resources"]] == ["note"]


def test_remediate_repairs_the_cloud_in_an_up_job_with_refresh(drift_world):
    w = drift_world
    start(w, driftDetection=dict(DRIFT, remediate=True))
    w.wait_ready("demo")
    first_up = jobs_of(w, "up")[0]["metadata"]["uid"]
    path = tamper(w)
    obj = w.wait_condition("demo", "Drifted", "False", reason="Remediated")
    assert path.read_text() == "hello"
    drift = obj["status"]["drift"]
    assert drift["drifted"] is False
    assert [r["urn"].rsplit("::", 1)[-1] for r in drift["resources"]] == ["note"], drift
    reasons = w.event_reasons("demo")
    assert "DriftDetected" in reasons and "DriftRemediated" in reasons
    repair, = jobs_of(w, "up")
    assert repair["metadata"]["uid"] != first_up          # a new Job for the same inputs
    assert update_doc(repair)["refresh"] is True
    obj = w.wait_ready("demo")
    assert obj["status"]["lastUpdate"]["type"] == "up"
    assert obj["status"]["lastUpdate"]["state"] == "succeeded"


def test_a_check_whose_pod_never_starts_fails_and_waits_for_the_interval(drift_world):
    """A failed check concludes nothing (DriftCheckFailed, the Stack stays Ready) but
    counts as made: status.drift.checkedAt moves, so the next check waits for the interval
    instead of following at once (a Job a pass)."""
    w = drift_world
    w.kubelet.set_fault(REFRESH_JOBS, "unschedulable")
    start(w, flags={"job_start_timeout": "2s"}, driftDetection=DRIFT)
    w.wait_ready("demo")
    w.wait_event("demo", "DriftCheckFailed")
    obj = wait_until(lambda: (lambda o: o if ((o.get("status") or {}).get("drift") or {}).get(
        "checkedAt") else None)(w.stack("demo")), what="status.drift.checkedAt")
    drift = obj["status"]["drift"]
    assert drift["message"].startswith("the drift check failed: the Job's pod did not start "
                                       "within 2s: Unschedulable"), drift
    assert drift["drifted"] is False
    ready = w.cond(obj, "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "Succeeded"), ready
    assert obj["status"]["lastUpdate"]["type"] == "up"
