"""The Job runner, controller side (issue 16; docs/job-runner.md): a Stack whose updates
run as batch/v1 Jobs, on both tiers (stack_world [emulator] / [real]) with the test kubelet
of tests/e2e/kubelet.py playing the Job controller and a kubelet.

Most scenarios run the pod with a fake `run-update` (FAKE below, chosen by the pod's env
FAKE_MODE): it keeps to the termination-message contract of JOBS.md and lets each test pick
the pod's behaviour (succeed, fail with a log, run past the deadline), so what is tested
is the controller's side: the Job it builds, slots, adoption, the verdicts it reads back.
The last scenario runs the real `pulumi-controller run-update` (and, on the real tier, the real
pulumi CLI with the plugins the "image" carries, --job-plugins-dir)."""
import base64
import json
import re
import threading

import pytest

from job_fixtures import FAULT_LABEL, JOB_IMAGE, job_controller, job_name
from stack_fixtures import PASSPHRASE, STACK_API, wait_until

GIT = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "name": "app"}
IMAGE = JOB_IMAGE
MANAGED = "app.kubernetes.io/managed-by=pulumi-controller"

FAKE = r'''#!/usr/bin/env python3
import json, os, sys, time
args = sys.argv[1:]
assert args[0] == "run-update", args
log = args[args.index("--termination-log") + 1]
doc = json.loads(os.environ["PULUMI_CONTROLLER_UPDATE"])
mode = os.environ.get("FAKE_MODE", "ok")
def finish(status, message, cls, code, changes=None, outputs="none"):
    with open(log, "w") as f:
        json.dump({"v": 1, "status": status, "message": message, "changes": changes,
                   "outputs": outputs, "lock": None, "class": cls}, f)
    sys.exit(code)
def write_outputs():
    """GET and PUT the outputs Secret with the pod's own token, as run-update does."""
    import base64, ssl, urllib.request
    sa = args[args.index("--service-account-dir") + 1]
    token = open(sa + "/token").read().strip()
    ctx = ssl.create_default_context(cafile=sa + "/ca.crt")
    url = "https://%s:%s/api/v1/namespaces/%s/secrets/%s" % (
        os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"],
        doc["namespace"], doc["outputsSecret"])
    def call(method, body=None):
        req = urllib.request.Request(url, method=method, data=body and json.dumps(body).encode(),
                                     headers={"Authorization": "Bearer " + token,
                                              "Content-Type": "application/json"})
        return json.load(urllib.request.urlopen(req, context=ctx))
    sec = call("GET")
    sec["data"] = {"message": base64.b64encode(b"hello").decode(),
                   "token": base64.b64encode(b"s3cr3t-output").decode()}
    ann = sec["metadata"].setdefault("annotations", {})
    ann["pulumi.com/secrets"] = '["token"]'
    ann["pulumi.com/masked-outputs"] = '{"message":"hello","token":"[secret]"}'
    call("PUT", sec)
print("fetching", doc["source"]["url"], file=sys.stderr)
if mode == "ok":
    finish("ok", "", "ok", 0, {"create": 1})
if mode == "outputs":
    write_outputs()
    finish("ok", "", "ok", 0, {"create": 2}, outputs="written")
if mode == "fail":
    print("error: resource quota exceeded in step 3", file=sys.stderr)
    # A careless program: the controller must not repeat this.
    print("the passphrase is " + os.environ.get("PULUMI_CONFIG_PASSPHRASE", "?"), file=sys.stderr)
    finish("failed", "update failed: 1 resource error", "failed", 1)
if mode == "fail-secrets":
    # A program printing every secret config value, one at the very end of its log.
    values = [os.environ[doc["secretConfig"][k]] for k in sorted(doc["secretConfig"])]
    for v in values:
        print("value: " + v, file=sys.stderr)
    print("error: the last value was " + values[-1], file=sys.stderr)
    finish("failed", "update failed near " + values[-1], "failed", 1)
if mode == "sleep":
    time.sleep(3600)
'''


@pytest.fixture
def fake_kubelet(stack_world, kubelet_for, tmp_path):
    """stack_world with a kubelet whose `pulumi-controller` is FAKE."""
    script = tmp_path / "fake-run-update"
    script.write_text(FAKE)
    script.chmod(0o755)
    stack_world.kubelet = kubelet_for(stack_world, commands={"pulumi-controller": str(script)})
    return stack_world


def job_stack(w, name, mode="ok", labels=None, **spec):
    runner = {"type": "Job", "podTemplate": {
        "metadata": {"labels": dict(labels or {})},
        "spec": {"env": [{"name": "FAKE_MODE", "value": mode}]}}}
    spec.setdefault("fluxSource", {"sourceRef": GIT})
    return w.apply_stack(name, runner=runner, **spec)


def jobs_of(w, stack=None):
    sel = MANAGED + (f",pulumi.com/stack-name={stack}" if stack else "")
    return w.client.list("batch/v1", "jobs", w.namespace, labelSelector=sel)["items"]


def pods_of(w, job):
    return w.client.list("v1", "pods", w.namespace,
                         labelSelector=f"batch.kubernetes.io/job-name={job}")["items"]


def wait_job(w, stack):
    return wait_until(lambda: (jobs_of(w, stack) or [None])[0], what=f"a Job of {stack}")


def controller(w, **flags):
    flags.setdefault("job_image", IMAGE)
    return w.controller(runner="job", **flags)


def test_the_job_its_pod_security_and_owner_and_no_secret_value(fake_kubelet):
    w = fake_kubelet
    src = w.flux_source("GitRepository", "app", w.artifact())
    stack = job_stack(w, "demo", labels={FAULT_LABEL: "hold", "team": "infra"},
                      secretsRef={"dbPassword": literal(LITERAL_SECRET),
                                  "decoy": literal("backend")})
    controller(w)

    job = wait_job(w, "demo")
    md, spec = job["metadata"], job["spec"]
    w.wait_condition("demo", "Reconciling", reason="JobRunning")
    assert md["name"].startswith("demo-up-") and len(md["name"]) == len("demo-up-") + 10
    for labels in (md["labels"], spec["template"]["metadata"]["labels"]):
        assert labels["app.kubernetes.io/managed-by"] == "pulumi-controller"
        assert labels["pulumi.com/stack-name"] == "demo"
        assert labels["pulumi.com/operation"] == "up"
        assert labels["team"] == "infra"
    # The label is the fingerprint's head; the name hashes the Stack's uid with it.
    ctr, = spec["template"]["spec"]["containers"]
    fp = json.loads({e["name"]: e for e in ctr["env"]}["PULUMI_CONTROLLER_UPDATE"]["value"])["fingerprint"]
    assert md["labels"]["pulumi.com/fingerprint"] == fp[:10]
    assert md["name"] == job_name(stack, "up", fp)
    owner, = md["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Stack", "demo", stack["metadata"]["uid"])
    assert owner["controller"] is True and owner["blockOwnerDeletion"] is True
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] == 1800 and spec["ttlSecondsAfterFinished"] == 3600
    ps = spec["template"]["spec"]
    assert ps["restartPolicy"] == "Never" and ps["serviceAccountName"] == "demo-runner"
    assert ps["securityContext"]["runAsNonRoot"] is True
    assert ps["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    c, = ps["containers"]
    assert c["name"] == "update" and c["image"] == IMAGE
    assert c["command"] == ["pulumi-controller", "run-update"]
    assert c["terminationMessagePath"] == "/tmp/termination-log"
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["runAsNonRoot"] is True
    assert {m["mountPath"] for m in c["volumeMounts"]} == {"/tmp", "/work"}
    assert {v["name"]: "emptyDir" in v for v in ps["volumes"]} == {"tmp": True, "work": True}
    env = {e["name"]: e for e in c["env"]}
    doc = json.loads(env["PULUMI_CONTROLLER_UPDATE"]["value"])
    assert doc["operation"] == "up" and doc["stack"] == "dev" and doc["name"] == "demo"
    assert doc["source"] == {"kind": "artifact", "url": src["url"], "digest": src["digest"],
                             "revision": src["revision"]}
    assert doc["outputsSecret"] == "demo-outputs" and doc["timeoutSeconds"] == 1800
    assert "PULUMI_CONFIG_PASSPHRASE" in doc["env"]
    assert env["PULUMI_CONFIG_PASSPHRASE"]["valueFrom"] == {
        "secretKeyRef": {"name": "pulumi-passphrase", "key": "passphrase"}}
    pod = wait_until(lambda: (pods_of(w, md["name"]) or [None])[0], what="the Job's pod")
    for obj in (job, pod, w.stack("demo")):
        assert PASSPHRASE not in json.dumps(obj)
    # backend and secretsProvider (may carry credentials) from the Stack's own Secret
    # (issue 21, low): never literal in the Job or its pod.
    for obj in (job, pod):
        assert w.backend_url not in json.dumps(obj)
    assert "backend" not in doc and doc["backendFromEnv"] == "PULUMI_CONTROLLER_BACKEND"
    assert doc["secretsProviderFromEnv"] == "PULUMI_CONTROLLER_SECRETS_PROVIDER"
    for var, key in (("PULUMI_CONTROLLER_BACKEND", "backend"),
                     ("PULUMI_CONTROLLER_SECRETS_PROVIDER", "secretsProvider")):
        assert env[var]["valueFrom"] == {"secretKeyRef": {"name": "demo-job-inputs", "key": key}}
    inputs = w.client.get("v1", "secrets", "demo-job-inputs", w.namespace)
    assert inputs["metadata"]["ownerReferences"][0]["uid"] == stack["metadata"]["uid"]
    assert base64.b64decode(inputs["data"]["backend"]).decode() == w.backend_url
    assert base64.b64decode(inputs["data"]["secretsProvider"]).decode() == "passphrase"
    # A secret config value written in the Stack (issue 21): from the same Secret, by the
    # config's index; a value that reads like a key name overwrites no key.
    assert_literal_secrets_by_reference(w, job, pod, doc, env, inputs,
                                        {"dbPassword": LITERAL_SECRET, "decoy": "backend"})
    assert "in Job " + md["name"] in w.condition("demo", "Ready")["message"]


LITERAL_SECRET = "lit-s3cret-4f1e"


def literal(value):
    return {"type": "Literal", "literal": {"value": value}}


def assert_literal_secrets_by_reference(w, job, pod, doc, env, inputs, values):
    """values (config key -> secretsRef Literal value) reach the pod only from
    <name>-job-inputs: in neither the Job nor its pod, each a secretKeyRef named by
    doc's secretConfig."""
    for obj in (job, pod):
        assert LITERAL_SECRET not in json.dumps(obj)
    keys = set()
    for key, value in values.items():
        var = doc["secretConfig"][key]
        assert "value" not in env[var]
        ref = env[var]["valueFrom"]["secretKeyRef"]
        assert ref["name"] == "demo-job-inputs" and ref["key"].startswith("config.")
        assert base64.b64decode(inputs["data"][ref["key"]]).decode() == value
        keys.add(ref["key"])
    assert len(keys) == len(values)
    assert base64.b64decode(inputs["data"]["backend"]).decode() == w.backend_url


def test_a_backend_taken_out_of_the_spec_is_taken_out_of_the_job_inputs_secret(fake_kubelet):
    """Issue 21 (review): <name>-job-inputs kept the backend and secretsProvider (which
    may carry credentials) after both were removed from the spec."""
    w = fake_kubelet
    src = w.flux_source("GitRepository", "app", w.artifact())
    job_stack(w, "demo")
    controller(w)
    w.wait_ready("demo", revision=src["revision"])
    inputs = w.client.get("v1", "secrets", "demo-job-inputs", w.namespace)
    assert set(inputs["data"]) == {"backend", "secretsProvider"}
    # The same backend, now from the environment: the spec names neither.
    w.patch_stack("demo", {"spec": {"backend": None, "secretsProvider": None, "envRefs": {
        "PULUMI_BACKEND_URL": {"type": "Literal", "literal": {"value": w.backend_url}}}}})
    obj = w.wait_ready("demo", revision=src["revision"])
    assert obj["status"]["lastUpdate"]["state"] == "succeeded"
    inputs = w.client.get("v1", "secrets", "demo-job-inputs", w.namespace)
    assert not inputs.get("data"), inputs.get("data")
    assert inputs["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]


def test_an_update_that_succeeds_is_ready_and_its_pod_may_write_the_outputs_secret(fake_kubelet):
    w = fake_kubelet
    src = w.flux_source("GitRepository", "app", w.artifact())
    job_stack(w, "demo")
    controller(w)

    obj = w.wait_ready("demo", revision=src["revision"])
    st = obj["status"]
    assert st["lastUpdate"]["type"] == "up" and st["lastUpdate"]["state"] == "succeeded"
    assert st["lastUpdate"]["resourceChanges"] == {"create": 1}
    assert st["fingerprint"] == st["lastAttemptedFingerprint"]
    job, = jobs_of(w, "demo")
    assert job["metadata"]["name"] == job_name(obj, "up", st["fingerprint"])
    assert "UpdateStarted" in w.event_reasons("demo")
    sec = w.outputs_secret("demo")
    assert sec["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
    role = w.client.get("rbac.authorization.k8s.io/v1", "roles", "demo-outputs-writer", w.namespace)
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"],
                              "resourceNames": ["demo-outputs"], "verbs": ["get", "update"]}]
    rb = w.client.get("rbac.authorization.k8s.io/v1", "rolebindings", "demo-outputs-writer",
                      w.namespace)
    assert rb["subjects"] == [{"kind": "ServiceAccount", "name": "demo-runner", "namespace": w.namespace}]
    assert rb["roleRef"]["name"] == "demo-outputs-writer"
    # The result is recorded once: the Job is marked, and nothing runs again.
    wait_until(lambda: "pulumi.com/result-recorded" in
               (w.client.get("batch/v1", "jobs", job["metadata"]["name"], w.namespace)
                ["metadata"].get("annotations") or {}), what="the Job marked recorded")
    w.settle("demo")
    assert len(jobs_of(w, "demo")) == 1


def test_outputs_the_pod_writes_with_its_own_token_reach_status_masked(fake_kubelet):
    w = fake_kubelet
    src = w.flux_source("GitRepository", "app", w.artifact())
    job_stack(w, "demo", mode="outputs")
    controller(w)

    obj = w.wait_ready("demo", revision=src["revision"])
    assert obj["status"]["outputs"] == {"message": "hello", "token": "[secret]"}
    assert obj["status"]["outputsSecretName"] == "demo-outputs"
    assert w.outputs_secret("demo")["decoded"] == {"message": "hello", "token": "s3cr3t-output"}
    assert "s3cr3t-output" not in json.dumps(obj)


def test_a_failed_update_reports_its_message_and_log_tail_without_secrets(fake_kubelet):
    w = fake_kubelet
    w.flux_source("GitRepository", "app", w.artifact())
    job_stack(w, "demo", mode="fail")
    controller(w)

    obj = w.wait_condition("demo", "Reconciling", reason="RetryingAfterFailure")
    ready = w.cond(obj, "Ready")
    assert ready["reason"] == "UpdateFailed"
    assert "update failed: 1 resource error" in ready["message"]
    assert "log tail:" in ready["message"] and "quota exceeded in step 3" in ready["message"]
    assert obj["status"]["lastUpdate"]["state"] == "failed"
    ev = w.wait_event("demo", "UpdateFailed")
    assert "quota exceeded in step 3" in ev[0]["message"]
    for text in [json.dumps(obj)] + [json.dumps(e) for e in w.events("demo")]:
        assert PASSPHRASE not in text
    assert "[secret]" in ready["message"]


def test_secret_values_like_the_mask_or_short_ones_at_the_log_end_are_masked(fake_kubelet):
    """Issue 21 item 2: `[secret]` made the old masker loop forever, `secret` and a short
    value at the very end of the tail overran its buffer, before the status was written."""
    w = fake_kubelet
    w.flux_source("GitRepository", "app", w.artifact())
    w.secret("cfg", {"a": "[secret]", "b": "secret", "c": "k9Zq"})
    ref = {k: {"type": "Secret", "secret": {"name": "cfg", "key": k}} for k in "abc"}
    job_stack(w, "demo", mode="fail-secrets", secretsRef=ref)
    ctl = controller(w)

    obj = w.wait_condition("demo", "Reconciling", reason="RetryingAfterFailure")
    ready = w.cond(obj, "Ready")
    assert ready["reason"] == "UpdateFailed"
    # (The value `secret` is masked inside the masks too: "[[secret]]".)
    msg = ready["message"]
    assert re.search(r"update failed near \[+secret\]+; log tail: ", msg), msg
    assert re.search(r"error: the last value was \[+secret\]+$", msg), msg
    assert "k9Zq" not in json.dumps(obj)
    for e in w.events("demo"):
        assert "k9Zq" not in json.dumps(e)
    assert ctl.alive() and ctl.sanitizer_report() is None


def foreign_objects_are_refused_and_left_alone(w, plural, api_version, obj):
    """Issue 21 item 10: the Job runner took over an existing `<name>-outputs` Secret or
    `<name>-outputs-writer` Role / RoleBinding that was not the Stack's."""
    name = obj["metadata"]["name"]
    obj["metadata"]["namespace"] = w.namespace
    before = w.client.create(obj, plural, w.namespace)
    w.flux_source("GitRepository", "app", w.artifact())
    job_stack(w, "demo")
    controller(w)

    st = w.wait_condition("demo", "Stalled", reason="ObjectNotOwned")
    msg = w.cond(st, "Stalled")["message"]
    assert f"the {obj['kind']} {w.namespace}/{name}" in msg, msg
    assert "exists and is not owned by this Stack" in msg and "left as it is" in msg, msg
    assert w.cond(st, "Ready")["status"] == "False"
    assert "ObjectNotOwned" in w.event_reasons("demo")
    after = w.client.get(api_version, plural, name, w.namespace)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert "ownerReferences" not in after["metadata"]
    assert jobs_of(w, "demo") == []


def test_a_foreign_outputs_secret_is_refused_and_left_alone(fake_kubelet):
    foreign_objects_are_refused_and_left_alone(fake_kubelet, "secrets", "v1", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "demo-outputs"},
        "data": {"mine": "c2VjcmV0"}})


def test_a_foreign_outputs_writer_binding_is_refused_and_left_alone(fake_kubelet):
    foreign_objects_are_refused_and_left_alone(
        fake_kubelet, "rolebindings", "rbac.authorization.k8s.io/v1", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "demo-outputs-writer"},
            "subjects": [{"kind": "ServiceAccount", "name": "someone", "namespace": "elsewhere"}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "theirs"}})


def test_a_deadline_exceeded_is_a_timeout_failure(fake_kubelet):
    w = fake_kubelet
    w.flux_source("GitRepository", "app", w.artifact())
    job_stack(w, "demo", mode="sleep", timeout="3s")
    controller(w)

    job = wait_job(w, "demo")
    assert job["spec"]["activeDeadlineSeconds"] == 3
    obj = w.wait_condition("demo", "Reconciling", reason="RetryingAfterFailure")
    msg = w.cond(obj, "Ready")["message"]
    assert "did not finish within its timeout (3s" in msg
    failed = w.client.get("batch/v1", "jobs", job["metadata"]["name"], w.namespace)
    assert any(c["type"] == "Failed" and c.get("reason") == "DeadlineExceeded"
               for c in failed["status"]["conditions"])


def test_a_controller_restarted_while_a_job_runs_adopts_it(fake_kubelet):
    w = fake_kubelet
    src = w.flux_source("GitRepository", "app", w.artifact())
    job_stack(w, "demo", labels={FAULT_LABEL: "hold"})
    ctl = controller(w)
    job = wait_job(w, "demo")
    w.wait_condition("demo", "Reconciling", reason="JobRunning")
    ctl.stop()

    ctl = controller(w)
    ctl.wait_log("reconcile pass ended", name="demo")
    jobs = jobs_of(w, "demo")
    assert [j["metadata"]["uid"] for j in jobs] == [job["metadata"]["uid"]]
    assert w.kubelet.release(job["metadata"]["name"], w.namespace) == 1
    w.wait_ready("demo", revision=src["revision"])
    assert [j["metadata"]["uid"] for j in jobs_of(w, "demo")] == [job["metadata"]["uid"]]


def test_destroy_on_finalize_runs_in_a_job(fake_kubelet):
    w = fake_kubelet
    src = w.flux_source("GitRepository", "app", w.artifact())
    job_stack(w, "demo", destroyOnFinalize=True)
    controller(w)
    w.wait_ready("demo", revision=src["revision"])

    w.delete_stack("demo")
    w.wait_gone("demo")
    started = [e for e in w.events("demo") if e["reason"] == "DestroyStarted"]
    assert started and "in Job demo-destroy-" in started[0]["message"]
    assert "DestroySucceeded" in w.event_reasons("demo")
    assert not w.cli_invocations(), "no pulumi ran in the controller"


def test_deleting_a_suspended_stack_waits_for_its_running_job(fake_kubelet):
    """Released without destroy, but not while its update Job runs: the finalizer would go
    and garbage collection would kill the pod mid-update."""
    w = fake_kubelet
    w.flux_source("GitRepository", "app", w.artifact())
    job_stack(w, "demo", labels={FAULT_LABEL: "hold"}, destroyOnFinalize=True)   # the finalizer
    controller(w)
    job = wait_job(w, "demo")
    name = job["metadata"]["name"]
    w.wait_condition("demo", "Reconciling", reason="JobRunning")
    w.patch_stack("demo", {"spec": {"suspend": True}})
    w.delete_stack("demo")

    def held():
        o = w.stack_or_none("demo")
        c = w.cond(o, "Reconciling") if o else None
        return o if c and c["reason"] == "JobRunning" and "being deleted" in c["message"] else None
    obj = w._wait("demo", held, 120, "the deleted Stack held by its running Job")
    assert f"once the Job {w.namespace}/{name} has finished" in w.cond(obj, "Reconciling")["message"]
    assert obj["metadata"]["finalizers"] == ["finalizer.stack.pulumi.com"]
    job, = jobs_of(w, "demo")
    assert job["metadata"]["name"] == name and not job["metadata"].get("deletionTimestamp")

    assert w.kubelet.release(name, w.namespace) == 1
    w.wait_gone("demo")
    assert "DestroySkipped" in w.event_reasons("demo")
    done = [c["type"] for c in (job_now(w, name) or {}).get("status", {}).get("conditions", [])
            if c["status"] == "True"]
    assert job_now(w, name) is None or "Complete" in done, done


def test_a_reconcile_request_is_handled_once_its_job_has_run(fake_kubelet):
    """Issue 21: in job mode the pass that created a `requestedAt` request's Job copied the
    token to status.lastHandledReconcileAt, so `flux reconcile` (which waits for it) read
    the Ready of a Job still running; and the next pass, seeing no request and nothing
    else changed, said Ready without reading that Job's outcome."""
    w = fake_kubelet
    src = w.flux_source("GitRepository", "app", w.artifact())
    job_stack(w, "demo")
    controller(w)
    obj = w.wait_ready("demo", revision=src["revision"])
    first, = jobs_of(w, "demo")
    history = len(obj["status"]["history"])
    w.kubelet.set_fault("pulumi.com/stack-name=demo", "hold")
    token = f"2026-12-02T07:00:00.{w.id}Z"
    w.kubectl("annotate", "--overwrite", "stack/demo", f"reconcile.fluxcd.io/requestedAt={token}")

    def running():
        o = w.stack("demo")
        c = w.cond(o, "Reconciling")
        new = [j for j in jobs_of(w, "demo") if j["metadata"]["uid"] != first["metadata"]["uid"]]
        return (new[0], o) if new and c and c["status"] == "True" and c["reason"] == "JobRunning" else None
    job, obj = wait_until(running, what="the request's Job running")
    name = job["metadata"]["name"]
    assert name == first["metadata"]["name"]     # the same inputs: the same name, a new Job
    assert obj["status"].get("lastHandledReconcileAt") != token
    wait_until(lambda: w.kubelet.release(name, w.namespace), what="the request's pod held")

    w._wait("demo", lambda: (w.stack("demo").get("status") or {}).get("lastHandledReconcileAt") == token,
            120, "status.lastHandledReconcileAt to be the token")
    obj = w.stack("demo")
    assert w.cond(obj, "Ready")["status"] == "True"
    assert len(obj["status"]["history"]) == history + 1
    assert obj["status"]["lastUpdate"]["state"] == "succeeded"
    # The outcome names its Job: a Job made again within the second the last one ended in
    # matched that outcome by its times, and was replaced before it ran (seen: 4 runs in 6).
    assert obj["status"]["lastUpdate"]["jobUid"] == job["metadata"]["uid"]
    # The outcome read is this Job's: its recorded mark (patched after the status write).
    def marked():
        j = job_now(w, name)
        return j if j and (j["metadata"].get("annotations") or {}).get("pulumi.com/result-recorded") else None
    assert wait_until(marked, what="the recorded mark")["metadata"]["uid"] == job["metadata"]["uid"]


def job_now(w, name):
    return next((j for j in jobs_of(w) if j["metadata"]["name"] == name), None)


def test_a_deletion_whose_source_is_gone_is_stalled_until_the_source_is_back(fake_kubelet):
    """Issue 21 (low): a job-mode destroy whose Flux source was deleted retried DestroyFailed
    every --requeue-dependency forever; now it is Stalled (no timer) and the source's watch
    runs the destroy once the source is back."""
    w = fake_kubelet
    src = w.flux_source("GitRepository", "app", w.artifact())
    job_stack(w, "demo", destroyOnFinalize=True)
    controller(w)
    w.wait_ready("demo", revision=src["revision"])

    w.delete_source("GitRepository", "app")
    wait_until(lambda: not [s for s in w.client.list(GIT["apiVersion"], "gitrepositories",
                                                     w.namespace)["items"]
                            if s["metadata"]["name"] == "app"], what="the source gone")
    # Gone from the controller's cache too (the source watch queues the Stack): deleted
    # before that, the Stack's destroy Job would still start from the cached source.
    w.wait_condition("demo", "Ready", status="False", reason="SourceNotFound")
    w.delete_stack("demo")
    obj = w.wait_condition("demo", "Stalled", reason="DestroyFailed")
    msg = w.cond(obj, "Stalled")["message"]
    assert f"cannot destroy: GitRepository {w.namespace}/app not found" in msg, msg
    assert "remove destroyOnFinalize" in msg and "finalizer stays" in msg, msg
    assert w.cond(obj, "Reconciling") is None
    assert w.cond(obj, "Ready")["reason"] == "DestroyFailed"
    assert obj["metadata"]["finalizers"]
    assert [j for j in jobs_of(w, "demo") if "-destroy-" in j["metadata"]["name"]] == []

    w.flux_source("GitRepository", "app", w.artifact())
    w.wait_gone("demo")
    assert "DestroySucceeded" in w.event_reasons("demo")


class JobWatch(threading.Thread):
    """Counts unfinished Jobs from a watch: the most that ever ran at once."""

    def __init__(self, w):
        super().__init__(daemon=True)
        self.w, self.running, self.most, self.seen = w, set(), 0, set()
        self.stop = threading.Event()

    def run(self):
        rv = self.w.client.list("batch/v1", "jobs", self.w.namespace,
                                labelSelector=MANAGED)["metadata"]["resourceVersion"]
        while not self.stop.is_set():
            for ev in self.w.client.watch("batch/v1", "jobs", self.w.namespace, timeout=30,
                                          labelSelector=MANAGED, resourceVersion=rv,
                                          timeoutSeconds=5):
                obj = ev["object"]
                rv = obj["metadata"].get("resourceVersion", rv)
                if ev["type"] == "BOOKMARK":
                    continue
                name = obj["metadata"]["name"]
                done = ev["type"] == "DELETED" or any(
                    c["type"] in ("Complete", "Failed") and c["status"] == "True"
                    for c in (obj.get("status") or {}).get("conditions") or [])
                self.seen.add(name)
                if done:
                    self.running.discard(name)
                else:
                    self.running.add(name)
                self.most = max(self.most, len(self.running))


def test_fifty_stacks_run_at_most_max_concurrent_jobs_at_once(fake_kubelet):
    w = fake_kubelet
    w.flux_source("GitRepository", "app", w.artifact())
    names = [f"s{i:02d}" for i in range(50)]
    watch = JobWatch(w)
    watch.start()
    for n in names:
        job_stack(w, n, labels={FAULT_LABEL: "hold"}, stack=n)
    controller(w, max_concurrent_jobs="3")

    def waiting():
        reasons = [w.cond(s, "Reconciling") for s in
                   w.client.list(STACK_API, "stacks", w.namespace)["items"]]
        return sum(1 for c in reasons if c and c.get("reason") == "WaitingForJobSlot") == 47
    wait_until(waiting, what="47 Stacks waiting for a Job slot")
    assert len(jobs_of(w)) == 3
    released = set()

    def release_and_check():
        for j in jobs_of(w):
            n = j["metadata"]["name"]
            if n not in released and w.kubelet.release(n, w.namespace):
                released.add(n)
        return len(released) == 50
    wait_until(release_and_check, timeout=600, what="every Stack's Job released")
    for n in names:
        w.wait_ready(n)
    watch.stop.set()
    assert len(watch.seen) == 50
    assert 1 <= watch.most <= 3


def test_an_unschedulable_pod_fails_the_update_after_the_start_timeout(fake_kubelet):
    w = fake_kubelet
    w.flux_source("GitRepository", "app", w.artifact())
    job_stack(w, "demo", labels={FAULT_LABEL: "unschedulable"})
    controller(w, job_start_timeout="2s")

    obj = w.wait_condition("demo", "Reconciling", reason="RetryingAfterFailure")
    msg = w.cond(obj, "Ready")["message"]
    assert "did not start within 2s: Unschedulable" in msg


class ControllerFault:
    """One kind of the controller's requests fails while on: the emulator's injected 500;
    on the real tier the controller runs as deploy/namespaced's ServiceAccount (with
    deploy/job-runner/namespaced)
    (test_deploy_rbac.py) and its Role loses that verb (a real 403).  Kinds: "pods list"
    (the LISTs by job name; the test kubelet's own LISTs go through), "jobs patch"."""

    EMULATOR = {
        ("pods", "list"): dict(method="GET", watch=False, path=r"/api/v1/namespaces/[^/]+/pods$",
                               selector=r"^batch\.kubernetes\.io/job-name="),
        ("jobs", "patch"): dict(method="PATCH", path=r"/apis/batch/v1/namespaces/[^/]+/jobs/[^/]+$"),
    }
    PROBE = {("pods", "list"): ("GET", "/api/v1/namespaces/{ns}/pods", 200),
             ("jobs", "patch"): ("PATCH", "/apis/batch/v1/namespaces/{ns}/jobs/no-such-job", 404)}

    def __init__(self, w, tmp_path):
        self.w = w
        if w.tier != "real":
            return
        import test_deploy_rbac as rbac
        # The namespaced install with the Job runner's rights (deploy/job-runner/namespaced):
        # the base Role holds none of them.
        docs = rbac.td.job_runner_overlay(tmp_path / "k", "namespaced", "job-runner/namespaced",
                                          namespace=w.namespace)
        rbac.apply(w.api, rbac.write_rendering(tmp_path, docs, "namespaced"))
        dep = rbac.td.one(docs, "Deployment")
        self.role = next(d for d in docs if d["kind"] == "Role" and any(
            "pods" in r.get("resources", []) for r in d.get("rules", [])))
        token, self.client = rbac.sa_token(
            w.api, w.namespace, dep["spec"]["template"]["spec"]["serviceAccountName"])
        kubeconfig = w.api.write_kubeconfig(tmp_path / "sa.kubeconfig", token=token,
                                            namespace=w.namespace)
        self.flags = rbac.controller_flags(dep, kubeconfig, w)

    def controller(self, **flags):
        if self.w.tier != "real":
            return controller(self.w, **flags)
        return self.w.controller(**dict(self.flags, runner="job", job_image=IMAGE, **flags))

    def _rules(self, without=None):
        out = []
        for r in self.role["rules"]:
            r = dict(r)
            if without and r.get("resources") == [without[0]]:
                r["verbs"] = [v for v in r["verbs"] if v != without[1]]
            if r["verbs"]:
                out.append(r)
        return out

    def _set(self, kind, on):
        role = self.w.client.get("rbac.authorization.k8s.io/v1", "roles",
                                 self.role["metadata"]["name"], self.w.namespace)
        role["rules"] = self._rules(kind if on else None)
        self.w.client.update(role, "roles")
        method, path, allowed = self.PROBE[kind]
        path = path.format(ns=self.w.namespace)
        body = {} if method == "PATCH" else None
        want = 403 if on else allowed
        wait_until(lambda: self.client.raw(method, path, body, "application/merge-patch+json"
                                           if body is not None else None)[0] == want,
                   timeout=30, what=f"{kind} {'refused' if on else 'allowed again'}")

    def on(self, kind):
        if self.w.tier != "real":
            self.w.api.fail_next(count=100000, code=500, **self.EMULATOR[kind])
        else:
            self._set(kind, True)
        self.kind = kind

    def off(self):
        if self.w.tier != "real":
            self.w.api.clear_faults()
        else:
            self._set(self.kind, False)


def test_a_failed_pods_list_past_the_start_timeout_leaves_the_running_job(fake_kubelet, tmp_path):
    """Issue 21 item 5: after --job-start-timeout a failed pods LIST was taken for "no pod"
    and the running Job deleted mid-update."""
    w = fake_kubelet
    src = w.flux_source("GitRepository", "app", w.artifact())
    fault = ControllerFault(w, tmp_path)
    fault.on(("pods", "list"))
    job_stack(w, "demo", labels={FAULT_LABEL: "hold"})
    ctl = fault.controller(job_start_timeout="2s")
    job = wait_job(w, "demo")
    what = f"the pods of Job {w.namespace}/{job['metadata']['name']}"

    if w.tier == "real":
        # The real server's refusal is a 403 from the Role: the controller says so in
        # status (JobForbidden, looked at again each minute), naming the LIST. The pods
        # are listed only past the start timeout, so this is such a pass.
        def forbidden():
            ctl.alive()
            cond = w.cond(w.stack("demo"), "Reconciling") or {}
            return cond if cond.get("reason") == "JobForbidden" and what in cond.get("message", "") \
                else None
        wait_until(forbidden, what="Reconciling JobForbidden naming the pods LIST")
    else:
        def list_failed_twice():
            ctl.alive()
            return len([r for r in ctl.records() if r.get("msg") == "reconcile" and
                        what in (r.get("error") or "")]) >= 2
        wait_until(list_failed_twice, what="two passes past the start timeout whose pods LIST failed")
    assert [j["metadata"]["uid"] for j in jobs_of(w, "demo")] == [job["metadata"]["uid"]]
    assert "did not start" not in json.dumps(w.stack("demo").get("status") or {})
    fault.off()
    assert w.kubelet.release(job["metadata"]["name"], w.namespace) == 1
    obj = w.wait_ready("demo", revision=src["revision"])
    assert obj["status"]["lastUpdate"]["state"] == "succeeded"
    assert [j["metadata"]["uid"] for j in jobs_of(w, "demo")] == [job["metadata"]["uid"]]


def test_an_outcome_whose_recorded_mark_failed_is_not_read_again(fake_kubelet, tmp_path):
    """Issue 21 (low): the Job's recorded mark could not be written after the status
    recorded its failure; the retry read the same Job's outcome again as a new failure
    instead of running a new Job."""
    w = fake_kubelet
    w.flux_source("GitRepository", "app", w.artifact())
    fault = ControllerFault(w, tmp_path)
    fault.on(("jobs", "patch"))
    job_stack(w, "demo", mode="fail")
    ctl = fault.controller()
    first = wait_job(w, "demo")
    ctl.wait_log("cannot mark the Job's result as recorded", job=first["metadata"]["name"])
    fault.off()
    one = w.stack("demo")["status"]["lastUpdate"]
    assert one["failures"] == 1, one

    def second_failure():
        lu = (w.stack("demo").get("status") or {}).get("lastUpdate") or {}
        return lu if lu.get("failures", 0) >= 2 else None
    two = wait_until(second_failure, timeout=120, what="the second failure recorded")
    # Another Job ran: not the first one's outcome counted twice.
    assert two["startTime"] != one["startTime"], (one, two)
    assert two["failures"] == 2
    job, = jobs_of(w, "demo")
    assert job["metadata"]["uid"] != first["metadata"]["uid"]


def test_a_hostile_pod_template_is_refused_naming_the_field(stack_world):
    w = stack_world
    w.flux_source("GitRepository", "app", w.artifact())
    w.apply_stack("demo", fluxSource={"sourceRef": GIT}, runner={"type": "Job", "podTemplate": {
        "spec": {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}}})
    controller(w)
    obj = w.wait_condition("demo", "Stalled", reason="SpecInvalid")
    assert "spec.runner.podTemplate.spec.volumes[0].hostPath: not allowed" in \
        w.cond(obj, "Stalled")["message"]
    assert jobs_of(w, "demo") == []


def test_a_job_stack_on_a_controller_without_job_image_is_stalled(stack_world):
    w = stack_world
    w.flux_source("GitRepository", "app", w.artifact())
    w.apply_stack("demo", fluxSource={"sourceRef": GIT}, runner={"type": "Job"})
    w.controller()          # local runner, no --job-image
    obj = w.wait_condition("demo", "Stalled", reason="SpecInvalid")
    assert "spec.runner.type: Job, but this controller runs without --job-image" in \
        w.cond(obj, "Stalled")["message"]
    assert w.cond(obj, "Ready")["status"] == "False"
    assert jobs_of(w, "demo") == [] and w.updates() == []


def test_the_real_run_update_makes_the_stack_ready_with_its_outputs(job_world, request):
    w = job_world
    src = w.flux_source("GitRepository", "app", w.artifact())
    w.apply_stack("demo", fluxSource={"sourceRef": GIT}, runner={"type": "Job"})
    job_controller(w, request)

    def settled():
        obj = w.stack("demo")
        ready, stalled = w.cond(obj, "Ready"), w.cond(obj, "Stalled")
        failed = (w.cond(obj, "Reconciling") or {}).get("reason") == "RetryingAfterFailure"
        return obj if (ready and ready["status"] == "True") or stalled or failed else None
    obj = wait_until(settled, what="demo Ready, Stalled or failed")
    assert (w.cond(obj, "Reconciling") or {}).get("reason") != "RetryingAfterFailure", \
        w.cond(obj, "Ready")
    assert w.cond(obj, "Stalled") is None, w.cond(obj, "Stalled")
    assert obj["status"]["lastAppliedRevision"] == src["revision"]
    assert obj["status"]["outputs"]["message"] == "hello"
    assert w.outputs_secret("demo")["decoded"]["message"] == "hello"
    # (Not w.cloud_files(): the stand-in's cloud directory is under /tmp, which the test
    # kubelet rewrites to the pod's own /tmp.)
    assert obj["status"]["lastUpdate"]["type"] == "up"


def test_the_real_run_update_reads_a_literal_secret_config_from_the_job_inputs_secret(
        job_world, request):
    """Issue 21: a secretsRef Literal value was literal in the Job's env (and its pod's,
    which more people read than Stacks). It comes from <name>-job-inputs, and the program
    still gets it."""
    w = job_world
    w.flux_source("GitRepository", "app", w.artifact(w.program_files("stack-secrets")))
    w.apply_stack("demo", fluxSource={"sourceRef": GIT}, runner={"type": "Job"},
                  config={"region": "eu-lit"}, secretsRef={"dbPassword": literal(LITERAL_SECRET)})
    job_controller(w, request)

    job = wait_job(w, "demo")
    obj = w.wait_ready("demo")
    assert obj["status"]["outputs"] == {"region": "eu-lit", "secretOut": "[secret]"}
    assert w.outputs_secret("demo")["decoded"]["secretOut"] == LITERAL_SECRET
    pod, = pods_of(w, job["metadata"]["name"])
    ctr, = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in ctr["env"]}
    doc = json.loads(env["PULUMI_CONTROLLER_UPDATE"]["value"])
    inputs = w.client.get("v1", "secrets", "demo-job-inputs", w.namespace)
    assert_literal_secrets_by_reference(w, job, pod, doc, env, inputs, {"dbPassword": LITERAL_SECRET})
    assert LITERAL_SECRET not in json.dumps(obj["status"])


def test_the_pod_downloads_under_the_controllers_max_artifact_size(job_world, request):
    """Issue 21 (low): --max-artifact-size did not reach the Job's pod, which fetched any
    size under run-update's own default."""
    w = job_world
    art = w.artifact()
    w.flux_source("GitRepository", "app", art)
    w.apply_stack("demo", fluxSource={"sourceRef": GIT}, runner={"type": "Job"})
    job_controller(w, request, max_artifact_size="64")

    job = wait_job(w, "demo")
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--max-artifact-size") + 1] == "64"
    obj = w.wait_condition("demo", "Reconciling", reason="RetryingAfterFailure")
    msg = w.cond(obj, "Ready")["message"]
    assert "artifact: " in msg and "larger than the limit of 64 bytes" in msg, msg
    assert "outputs" not in (obj.get("status") or {})
