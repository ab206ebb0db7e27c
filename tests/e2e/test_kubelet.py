"""The test kubelet's own tests (tests/e2e/kubelet.py), on both tiers of any_kubelet:
[emulator] (tests/e2e/kubeapi) and [real] (kube-apiserver without a
controller-manager).  Hand-written Jobs run `sh -c ...` (the host's sh) or the real
pulumi-controller binary; what they observe comes back through the termination
message, the container log (pods/log through the API server) and Pod/Job status.

Scripts cannot see their own path rewriting inside a shell string (only whole args and
env values are rewritten), so they take their paths from env values.
"""
import base64
import json
import os
import signal

import pytest

from job_fixtures import FAULT_LABEL
from kube_fixtures import KubeError, wait_for

TMP_MOUNT = {"name": "tmp", "mountPath": "/tmp"}


def job_spec(name, script=None, command=None, env=None, mounts=(), volumes=(), labels=None,
             deadline=None, ttl=None, backoff=0, sa=None, tmp="/tmp"):
    """A Job of the contract's shape: one container `update`, restartPolicy Never, the
    termination log on an emptyDir at /tmp (or `tmp`)."""
    labels = dict({"kubelet-test": "yes"}, **(labels or {}))
    termination = tmp + "/termination-log"
    container = {"name": "update", "image": "pulumi-controller:test",
                 "command": command or ["sh", "-c", script],
                 "env": [{"name": "TERM_LOG", "value": termination}] + list(env or []),
                 "terminationMessagePath": termination,
                 "terminationMessagePolicy": "File",
                 "volumeMounts": [dict(TMP_MOUNT, mountPath=tmp)] + list(mounts)}
    spec = {"backoffLimit": backoff,
            "template": {"metadata": {"labels": labels},
                         "spec": {"restartPolicy": "Never", "containers": [container],
                                  "volumes": [{"name": "tmp", "emptyDir": {}}] +
                                  list(volumes)}}}
    if sa:
        spec["template"]["spec"]["serviceAccountName"] = sa
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    if ttl is not None:
        spec["ttlSecondsAfterFinished"] = ttl
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": labels}, "spec": spec}


def create_job(k, job):
    job["metadata"]["namespace"] = k.namespace
    return k.direct_client.create(job, "jobs")


def get_job(k, name):
    return k.direct_client.get("batch/v1", "jobs", name, k.namespace)


def conditions(obj):
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []
            if c["status"] == "True"}


def wait_job(k, name, type_, timeout=60):
    def done():
        job = get_job(k, name)
        return job if type_ in conditions(job) else None
    return wait_for(done, timeout, what=f"Job {name} {type_}")


def pods_of(k, name):
    return k.direct_client.list("v1", "pods", k.namespace,
                                labelSelector=f"batch.kubernetes.io/job-name={name}")["items"]


def one_pod(k, name, timeout=30):
    return wait_for(lambda: (pods_of(k, name) or [None])[0], timeout, what=f"a pod of {name}")


def wait_pod(k, name, predicate, what, timeout=60):
    def ok():
        pods = pods_of(k, name)
        return pods[0] if pods and predicate(pods[0]) else None
    return wait_for(ok, timeout, what=what)


def terminated(pod):
    cs = (pod.get("status") or {}).get("containerStatuses") or [{}]
    return cs[0].get("state", {}).get("terminated")


def running(pod):
    return (pod.get("status") or {}).get("phase") == "Running"


def running_process(k, job):
    """(pod, its PodRun) once the Job's pod is Running with its process started."""
    pod = wait_pod(k, job, running, "Running")
    run = k.kubelet.pods[(k.namespace, pod["metadata"]["name"])]
    wait_for(lambda: run.proc is not None, 10, what="the process")
    return pod, run


def pod_log(k, pod, **params):
    code, _, body = k.direct_client.raw(
        "GET", f"/api/v1/namespaces/{k.namespace}/pods/{pod}/log", params=params or None)
    assert code == 200, body
    return body


def secret(k, name, data):
    k.direct_client.create({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                            "metadata": {"name": name, "namespace": k.namespace},
                            "data": {x: base64.b64encode(v.encode()).decode()
                                     for x, v in data.items()}}, "secrets")


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_job_runs_to_complete_as_the_job_controller_and_kubelet_write_it(any_kubelet):
    k = any_kubelet
    job = create_job(k, job_spec("ok", 'echo first; echo second >&2; '
                                       'printf \'{"v":1,"status":"succeeded"}\' > "$TERM_LOG"'))
    done = wait_job(k, "ok", "Complete")
    st = done["status"]
    assert set(conditions(done)) == {"SuccessCriteriaMet", "Complete"}
    assert conditions(done)["Complete"]["reason"] == "CompletionsReached"
    # (the real server leaves zero counters out: omitempty)
    assert (st["succeeded"], st.get("failed", 0), st.get("active", 0), st.get("ready", 0)) == \
        (1, 0, 0, 0)
    assert st["startTime"] <= st["completionTime"]
    pod = pods_of(k, "ok")[0]
    m = pod["metadata"]
    assert m["name"].startswith("ok-") and len(pods_of(k, "ok")) == 1
    assert m["labels"]["batch.kubernetes.io/controller-uid"] == job["metadata"]["uid"]
    assert m["labels"]["kubelet-test"] == "yes"
    ref = m["ownerReferences"][0]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == \
        ("Job", "ok", job["metadata"]["uid"], True)
    assert "batch.kubernetes.io/job-tracking" not in (m.get("finalizers") or [])
    assert pod["spec"]["nodeName"] == k.kubelet.node_name
    assert pod["status"]["phase"] == "Succeeded"
    t = terminated(pod)
    assert (t["exitCode"], t["reason"]) == (0, "Completed")
    assert json.loads(t["message"]) == {"v": 1, "status": "succeeded"}
    # stdout and stderr are two pipes: their relative order is not kept (nor by a kubelet)
    assert sorted(pod_log(k, m["name"]).splitlines()) == ["first", "second"]


def test_env_from_secret_and_config_map_and_volumes_at_the_rewritten_paths(any_kubelet):
    k = any_kubelet
    secret(k, "creds", {"password": "s3cret-value", "dockerconfig": '{"auths":{}}'})
    k.direct_client.create({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": "settings", "namespace": k.namespace},
                            "data": {"region": "eu-west-1"}}, "configmaps")
    env = [{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds",
                                                               "key": "password"}}},
           {"name": "REGION", "valueFrom": {"configMapKeyRef": {"name": "settings",
                                                                "key": "region"}}},
           {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
           {"name": "OCI_DIR", "value": "/var/run/pulumi-controller/oci"},
           {"name": "SA_DIR", "value": "/var/run/secrets/kubernetes.io/serviceaccount"},
           {"name": "GREETING", "value": "hello $(REGION)"}]
    mounts = [{"name": "oci", "mountPath": "/var/run/pulumi-controller/oci", "readOnly": True}]
    volumes = [{"name": "oci", "secret": {"secretName": "creds",
                                          "items": [{"key": "dockerconfig",
                                                     "path": "config.json"}]}}]
    # the script asks the API server who it is with the pod's token: authenticated
    # requests to /api are allowed for every ServiceAccount
    script = ('python3 - > "$TERM_LOG" <<"EOF"\n'
              'import json, os, ssl, urllib.request\n'
              'd = os.environ["SA_DIR"]\n'
              'tok = open(d + "/token").read()\n'
              'ctx = ssl.create_default_context(cafile=d + "/ca.crt")\n'
              'url = "https://%s:%s/api" % (os.environ["KUBERNETES_SERVICE_HOST"],'
              ' os.environ["KUBERNETES_SERVICE_PORT"])\n'
              'req = urllib.request.Request(url, headers={"Authorization": "Bearer " + tok})\n'
              'code = urllib.request.urlopen(req, context=ctx).status\n'
              'print(json.dumps({"password": os.environ["PASSWORD"],'
              ' "region": os.environ["REGION"], "pod": os.environ["POD"],'
              ' "greeting": os.environ["GREETING"],'
              ' "config": open(os.environ["OCI_DIR"] + "/config.json").read(),'
              ' "namespace": open(d + "/namespace").read(), "api": code,'
              ' "sa_files": sorted(os.listdir(d))}))\n'
              'EOF')
    create_job(k, job_spec("env", script, env=env, mounts=mounts, volumes=volumes))
    wait_job(k, "env", "Complete")
    pod = pods_of(k, "env")[0]
    seen = json.loads(terminated(pod)["message"])
    assert seen == {"password": "s3cret-value", "region": "eu-west-1",
                    "pod": pod["metadata"]["name"], "greeting": "hello eu-west-1",
                    "config": '{"auths":{}}', "namespace": k.namespace, "api": 200,
                    "sa_files": ["ca.crt", "namespace", "token"]}
    spec = json.dumps(pod["spec"]) + json.dumps(get_job(k, "env")["spec"])
    assert "s3cret-value" not in spec        # valueFrom stays a reference


def test_the_real_binary_runs_as_pulumi_controller(any_kubelet, pc_bin, run_pc):
    k = any_kubelet
    create_job(k, job_spec("version", command=["pulumi-controller", "version"]))
    wait_job(k, "version", "Complete")
    pod = pods_of(k, "version")[0]
    expected = run_pc("version").stdout
    assert expected and pod_log(k, pod["metadata"]["name"]) == expected


def test_exit_1_fails_the_job_with_backoff_limit_exceeded(any_kubelet):
    k = any_kubelet
    create_job(k, job_spec("fail", 'echo broken >&2; printf failed > "$TERM_LOG"; exit 1'))
    failed = wait_job(k, "fail", "Failed")
    conds = conditions(failed)
    assert set(conds) == {"FailureTarget", "Failed"}
    assert conds["Failed"]["reason"] == conds["FailureTarget"]["reason"] == \
        "BackoffLimitExceeded"
    assert (failed["status"]["failed"], failed["status"].get("active", 0)) == (1, 0)
    assert "completionTime" not in failed["status"]
    pod = pods_of(k, "fail")[0]
    assert pod["status"]["phase"] == "Failed"
    t = terminated(pod)
    assert (t["exitCode"], t["reason"], t["message"]) == (1, "Error", "failed")


def test_the_termination_message_is_cut_at_4096_bytes(any_kubelet):
    k = any_kubelet
    create_job(k, job_spec("long", 'head -c 5000 /dev/zero | tr "\\0" x > "$TERM_LOG"'))
    wait_job(k, "long", "Complete")
    assert terminated(pods_of(k, "long")[0])["message"] == "x" * 4096


def test_active_deadline_kills_the_process_group_and_fails_deadline_exceeded(any_kubelet):
    k = any_kubelet
    # a child of the shell, in the same process group, must die too
    create_job(k, job_spec("slow", 'sleep 300 & echo $! > "$TERM_LOG.child"; '
                                   'trap "exit 143" TERM; wait', deadline=2))
    pod = wait_pod(k, "slow", running, "Running")
    run = k.kubelet.pods[(k.namespace, pod["metadata"]["name"])]
    pid_file = run.rewrite("/tmp/termination-log.child")
    child = wait_for(lambda: os.path.exists(pid_file) and open(pid_file).read().strip(), 10,
                     what="the child's pid")
    failed = wait_job(k, "slow", "Failed")
    conds = conditions(failed)
    assert conds["Failed"]["reason"] == conds["FailureTarget"]["reason"] == "DeadlineExceeded"
    assert failed["status"].get("active", 0) == 0 and failed["status"]["failed"] == 1
    run.done.wait(30)
    assert run.proc.returncode is not None
    wait_for(lambda: not alive(int(child)), 10, what="the pod's child to be killed")
    # the Job controller deleted the pod: it is gone once its kubelet finished it
    wait_for(lambda: not pods_of(k, "slow"), 30, what="the deleted pod to go")


def test_pod_log_with_tail_lines_and_limit_bytes_through_the_api_server(any_kubelet):
    k = any_kubelet
    create_job(k, job_spec("logs", "for i in 1 2 3 4 5; do echo line-$i; done"))
    wait_job(k, "logs", "Complete")
    name = pods_of(k, "logs")[0]["metadata"]["name"]
    assert pod_log(k, name, tailLines=2) == "line-4\nline-5\n"
    assert pod_log(k, name, limitBytes=9) == "line-1\nli"
    assert pod_log(k, name, container="update", tailLines=1) == "line-5\n"
    stamped = pod_log(k, name, tailLines=1, timestamps="true")
    assert stamped.endswith("Z line-5\n")
    out = k.kubectl("logs", name, "-n", k.namespace, "--tail=2").stdout
    assert out == "line-4\nline-5\n"


def test_unschedulable_and_image_pull_faults_leave_the_pod_pending(any_kubelet):
    k = any_kubelet
    create_job(k, job_spec("nosched", "true", labels={FAULT_LABEL: "unschedulable"}))
    create_job(k, job_spec("nopull", "true", labels={FAULT_LABEL: "image-pull"}))
    pod = wait_pod(k, "nosched", lambda p: any(
        c["type"] == "PodScheduled" and c["status"] == "False"
        for c in p.get("status", {}).get("conditions") or []), "PodScheduled=False")
    cond = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert cond["reason"] == "Unschedulable" and pod["status"]["phase"] == "Pending"
    assert not pod["spec"].get("nodeName")
    pod = wait_pod(k, "nopull", lambda p: (p.get("status", {}).get("containerStatuses")
                                           or [{}])[0].get("state", {}).get("waiting"),
                   "a waiting container")
    waiting = pod["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting["reason"] == "ErrImagePull" and pod["status"]["phase"] == "Pending"
    code, _, body = k.direct_client.raw(
        "GET", f"/api/v1/namespaces/{k.namespace}/pods/{pod['metadata']['name']}/log")
    assert code == 400 and "waiting to start" in json.dumps(body)
    for name in ("nosched", "nopull"):
        job = get_job(k, name)
        assert job["status"]["active"] == 1 and not conditions(job)


def test_a_pending_pod_still_meets_the_job_deadline(any_kubelet):
    k = any_kubelet
    create_job(k, job_spec("stuck", "true", labels={FAULT_LABEL: "image-pull"}, deadline=2))
    failed = wait_job(k, "stuck", "Failed")
    assert conditions(failed)["Failed"]["reason"] == "DeadlineExceeded"
    wait_for(lambda: not pods_of(k, "stuck"), 30, what="the pending pod to go")


def test_a_held_pod_runs_only_once_released(any_kubelet):
    k = any_kubelet
    create_job(k, job_spec("held", 'printf ran > "$TERM_LOG"', labels={FAULT_LABEL: "hold"}))
    pod = wait_pod(k, "held", running, "Running")
    run = k.kubelet.pods[(k.namespace, pod["metadata"]["name"])]
    assert run.proc is None
    wait_for(lambda: get_job(k, "held")["status"].get("ready") == 1, 10, what="ready 1")
    assert k.kubelet.release("held") == 1
    wait_job(k, "held", "Complete")
    assert terminated(pods_of(k, "held")[0])["message"] == "ran"


def test_set_fault_selects_jobs_by_label(any_kubelet):
    k = any_kubelet
    k.kubelet.set_fault("which=this", "hold")
    create_job(k, job_spec("other", "true", labels={"which": "other"}))
    create_job(k, job_spec("this", "true", labels={"which": "this"}))
    wait_job(k, "other", "Complete")
    pod = wait_pod(k, "this", running, "Running")
    k.kubelet.set_fault("which=this", None)
    k.direct_client.patch("v1", "pods", pod["metadata"]["name"],
                          {"metadata": {"labels": {"which": "released"}}}, k.namespace)
    assert k.kubelet.release("this") == 1
    wait_job(k, "this", "Complete")


def test_ttl_after_finished_deletes_the_job_and_its_pods(any_kubelet):
    k = any_kubelet
    create_job(k, job_spec("short", "true", ttl=1))
    create_job(k, job_spec("kept", "true"))
    wait_job(k, "kept", "Complete")

    def gone():
        try:
            get_job(k, "short")
        except KubeError as e:
            return e.code == 404
        return False
    wait_for(gone, 30, what="the Job's TTL deletion")
    wait_for(lambda: not pods_of(k, "short"), 30, what="its pods to go")
    assert pods_of(k, "kept") and get_job(k, "kept")


def test_deleting_a_running_pod_sends_sigterm_and_the_job_fails(any_kubelet):
    k = any_kubelet
    create_job(k, job_spec("term", 'trap "printf got-term > $TERM_LOG; exit 143" TERM; '
                                   'while :; do sleep 0.1; done'))
    pod, run = running_process(k, "term")
    k.direct_client.delete("v1", "pods", pod["metadata"]["name"], k.namespace,
                           {"gracePeriodSeconds": 10})
    failed = wait_job(k, "term", "Failed")
    assert conditions(failed)["Failed"]["reason"] == "BackoffLimitExceeded"
    assert run.proc.returncode == 143
    wait_for(lambda: not pods_of(k, "term"), 30, what="the pod to go")


def test_stop_kills_every_pod_process(any_kubelet):
    k = any_kubelet
    create_job(k, job_spec("forever", "sleep 300"))
    _, run = running_process(k, "forever")
    pid = run.proc.pid
    k.kubelet.stop()
    assert run.proc.returncode == -signal.SIGKILL or run.proc.returncode is not None
    assert not alive(pid) and not k.kubelet.processes()


@pytest.mark.parametrize("any_kubeapi", ["emulator"], indirect=True)
def test_the_emulator_refuses_a_pod_without_its_service_account(any_kubeapi):
    """ServiceAccount admission ([emulator] only: the real server's own admission is
    what the emulator copies; the kubelet's tests above run through it on [real])."""
    c = any_kubeapi.direct_client
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "default"},
           "spec": {"serviceAccountName": "missing",
                    "containers": [{"name": "c", "image": "x"}]}}
    with pytest.raises(KubeError) as e:
        c.create(pod, "pods")
    assert e.value.code == 403 and 'serviceaccount "missing" not found' in str(e.value)


@pytest.mark.parametrize("policy", ["Background", "Foreground"])
def test_deleting_a_running_job_stops_its_pod_and_removes_it(any_kubelet, policy):
    """The garbage collector's part: on [real] no kube-controller-manager runs, so the
    kubelet deletes the pods of a deleted Job (and ends a foreground deletion)."""
    k = any_kubelet
    create_job(k, job_spec("gone", "sleep 300"))
    _, run = running_process(k, "gone")
    k.direct_client.delete("batch/v1", "jobs", "gone", k.namespace,
                           {"propagationPolicy": policy})
    run.done.wait(60)
    assert run.proc.returncode is not None and not alive(run.proc.pid)
    wait_for(lambda: not pods_of(k, "gone"), 60, what="the Job's pod to go")

    def job_gone():
        try:
            get_job(k, "gone")
        except KubeError as e:
            return e.code == 404
        return False
    wait_for(job_gone, 60, what="the Job to go")


@pytest.mark.parametrize("any_kubeapi", ["emulator"], indirect=True)
def test_a_pod_deleted_while_the_watch_was_down_is_stopped_after_the_relist(any_kubelet):
    """[emulator] only: its knobs keep the kubelet's pod watch down (injected 500s) and
    compact the history (410 on resume), so the DELETED event is never delivered and
    only the relist can tell."""
    k = any_kubelet
    create_job(k, job_spec("missed", "sleep 300"))
    pod, run = running_process(k, "missed")
    name = pod["metadata"]["name"]
    k.fail_next(100000, code=500, path=r"/pods$", watch=True)
    k.drop_watches()
    k.direct_client.patch("v1", "pods", name, {"metadata": {"finalizers": None}}, k.namespace)
    k.direct_client.delete("v1", "pods", name, k.namespace, {"gracePeriodSeconds": 0})
    k.expire()
    assert run.proc.poll() is None          # nothing told the kubelet yet
    k.clear_faults()
    run.done.wait(60)
    assert run.proc.returncode is not None and not alive(run.proc.pid)


@pytest.mark.parametrize("any_kubeapi", ["emulator"], indirect=True)
def test_status_writes_are_retried_while_the_api_server_fails(any_kubelet):
    """[emulator] only (its fault knob): the first status writes get 503 and the Job
    still completes, as a kubelet's status manager keeps trying."""
    k = any_kubelet
    k.fail_next(4, code=503, method="PATCH", path=r"/status$")
    create_job(k, job_spec("retried", 'printf done > "$TERM_LOG"'))
    wait_job(k, "retried", "Complete")
    assert terminated(pods_of(k, "retried")[0])["message"] == "done"
    assert not [r for r in k.requests() if r["method"] == "PATCH" and r["code"] == 503 and
                not r["path"].endswith("/status")]


@pytest.mark.parametrize("any_kubeapi", ["emulator"], indirect=True)
def test_the_kubelet_as_its_own_process_runs_a_job_and_stops_on_sigterm(any_kubeapi, tmp_path):
    """`python3 tests/e2e/kubelet.py ...` (what a benchmark may run beside the test
    process); [emulator] only: the process is the same on either tier, and this one
    checks its command line and its stop."""
    import subprocess
    import sys
    api = any_kubeapi
    kubelet = os.path.join(os.path.dirname(__file__), "kubelet.py")
    proc = subprocess.Popen([sys.executable, kubelet, "--url", api.url, "--token-file",
                             api.token_file, "--ca", api.ca_file, "--workdir", str(tmp_path),
                             "--selector", "kubelet-test=yes", "--namespace", "default"],
                            stdout=subprocess.PIPE, text=True)
    try:
        ready = json.loads(proc.stdout.readline())
        assert ready["ready"] is True
        create_job(api, job_spec("solo", "echo from-a-process"))
        wait_job(api, "solo", "Complete")
        assert pod_log(api, pods_of(api, "solo")[0]["metadata"]["name"]) == "from-a-process\n"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    assert api.client.raw("GET", f"/api/v1/nodes/{ready['node']}")[0] == 404


def test_a_backoff_limit_above_zero_makes_a_new_pod_after_a_failure(any_kubelet, tmp_path):
    """backoffLimit 1: the first pod fails, a second one is made and succeeds.  Both
    pods see the host file MARK names because no mount path is above it (the emptyDir
    is at /pod-tmp: under /tmp, tmp_path would be rewritten into each pod's own)."""
    k = any_kubelet
    mark = tmp_path / "first-run-done"
    create_job(k, job_spec("again", 'if [ -e "$MARK" ]; then exit 0; fi; : > "$MARK"; exit 1',
                           env=[{"name": "MARK", "value": str(mark)}], backoff=1,
                           tmp="/pod-tmp"))
    done = wait_job(k, "again", "Complete")
    assert (done["status"]["succeeded"], done["status"]["failed"]) == (1, 1)
    phases = sorted(p["status"]["phase"] for p in pods_of(k, "again"))
    assert phases == ["Failed", "Succeeded"]
