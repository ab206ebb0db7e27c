"""The test kubelet: kube-controller-manager's Job controller and a kubelet, for the
Job runner's tests (issue 16; the contract is /work/wt/JOBS.md, "test kubelet").

These machines have no kubelet and no container runtime, so TestKubelet plays both
against whichever API server the test runs on (the emulator, tests/e2e/kubeapi, or
the real kube-apiserver of real_fixtures.py, where no controller-manager runs):

- as the Job controller: it watches Jobs (label selector, default
  app.kubernetes.io/managed-by=pulumi-controller), creates one Pod per Job
  (generateName <job>-, ownerReference to the Job, the batch.kubernetes.io labels,
  the job-tracking finalizer), keeps Job status as the real controller writes it
  (startTime, active/ready/terminating/succeeded/failed, the interim conditions
  SuccessCriteriaMet / FailureTarget then Complete / Failed with reasons
  CompletionsReached, BackoffLimitExceeded, DeadlineExceeded), enforces
  activeDeadlineSeconds by deleting the Job's pods, deletes finished Jobs after
  ttlSecondsAfterFinished (Foreground), and plays the garbage collector for them
  (pods of a deleted Job are deleted, the foregroundDeletion finalizer removed);
  it also publishes what the namespace controllers would (the `default`
  ServiceAccount, the kube-root-ca.crt ConfigMap);
- as the kubelet of one Node (registered with its log endpoint): it binds the pod
  (nodeName), runs the container's command as a local process group with the pod's
  environment (valueFrom resolved through the API, $(VAR) expanded), every volume
  materialised in a directory (secret, configMap, projected with the
  serviceAccountToken from TokenRequest, downwardAPI, emptyDir), each arg, env value
  and workingDir naming a mount path rewritten to that directory, and writes Pod
  status (Running, then Succeeded/Failed with the container's terminated state and
  the termination-message file, at most 4096 bytes); it serves the container's log
  on https://127.0.0.1:<port>/containerLogs/..., which both API servers proxy for
  pods/log; a pod's deletion (graceful on both tiers) sends SIGTERM to the process
  group, SIGKILL after the grace period.

Faults, chosen by the label FAULT_LABEL on the Job or its pod template:
  unschedulable  the pod stays Pending, PodScheduled=False reason Unschedulable
  image-pull     the pod is bound and stays Pending, waiting reason ErrImagePull
  hold           the pod is Running but its process starts only when release() is
                 called or the label is removed from the Pod
TestKubelet.set_fault(selector, fault) does the same for Jobs a label selector matches.

The code: kubelet_base.py (watch loop, timers, constants), kubelet_pod.py (one pod:
volumes, environment, process, log, status), this file (the Job controller, the node,
the API reads pods need, faults).

What it does not do (FIDELITY.md): no images or containers (the command runs on the
host, as the test user, with the "image" environment it is given), no resource
limits, no probes, no restarts (restartPolicy OnFailure is run as Never), a
backoffLimit above 0 recreates the pod without the exponential delay.
"""
import base64
import collections
import http.client
import json
import os
import pathlib
import secrets
import signal
import sys
import threading
from urllib.parse import urlsplit

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from kubeapi.client import KubeClient, KubeError  # noqa: E402
from kubeapi.selectors import LabelSelector  # noqa: E402
from kubelet_base import (CONTROLLER_UID_LABEL, DEFAULT_SELECTOR, FAULT_LABEL,  # noqa: E402,F401
                          FAULTS, FOREGROUND_FINALIZER, JOB_NAME_LABEL, ORPHAN_FINALIZER,
                          SANITIZER_ENV, TRACKING_FINALIZER, KubeletError, Scheduler, Watcher,
                          condition, now, parse_time)
from kubelet_pod import LogServer, PodRun  # noqa: E402




# -- the Job controller ---------------------------------------------------------------

class JobState:
    """What the Job controller part knows of one Job."""

    def __init__(self, job):
        self.job = job
        self.uid = job["metadata"]["uid"]
        self.ns = job["metadata"]["namespace"]
        self.name = job["metadata"]["name"]
        status = job.get("status") or {}
        self.start_time = status.get("startTime")
        self.succeeded = status.get("succeeded", 0)
        self.failed = status.get("failed", 0)
        self.conditions = list(status.get("conditions") or [])
        self.pods = {}                 # pod name -> PodRun or None (not on this node)
        self.active = 0
        self.ready = 0
        self.finished = any(c["type"] in ("Complete", "Failed") and c["status"] == "True"
                            for c in self.conditions)
        self.deadline_hit = False
        self.deadline_scheduled = False
        self.ttl_scheduled = False
        self.deleted = False             # being deleted or gone: no more pods, no status
        self.lock = threading.RLock()

    def has(self, type_):
        return any(c["type"] == type_ and c["status"] == "True" for c in self.conditions)


class TestKubelet:
    """Plays the Job controller and one kubelet against an API server (see the module
    docstring).  start() registers the Node and begins; stop() kills every process it
    started, removes the Node and joins its threads."""

    def __init__(self, url, token, ca_file, workdir, pc_bin=None, selector=DEFAULT_SELECTOR,
                 namespace=None, node_name=None, commands=None, images=None, env=None,
                 pod_api_url=None):
        self.url = url
        self.token = token
        self.ca_file = ca_file
        self.workdir = pathlib.Path(workdir)
        self.pods_dir = self.workdir / "pods"
        self.pods_dir.mkdir(parents=True, exist_ok=True)
        self.client = KubeClient(url, token, ca_file, user_agent="test-kubelet/1.0")
        self.selector = selector
        self.namespace = namespace
        self.node_name = node_name or "test-kubelet-" + secrets.token_hex(3)
        self.commands = dict(commands or {})
        if pc_bin:
            self.commands.setdefault("pulumi-controller", pc_bin)
        self.images = dict(images or {})
        self.base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        self.base_env.update({k: os.environ[k] for k in SANITIZER_ENV if k in os.environ})
        self.base_env.update(env or {})
        api = urlsplit(pod_api_url or url)
        self.api_host, self.api_port = api.hostname, str(api.port or 443)
        self.stop_event = threading.Event()
        self.lock = threading.RLock()
        self.jobs = {}                      # uid -> JobState
        self.pods = {}                      # (ns, pod name) -> PodRun
        self.faults = []                    # (LabelSelector, fault)
        self.notes = collections.deque(maxlen=200)
        self.namespaces_ready = set()
        self.timers = Scheduler(self.stop_event)
        self.logs = LogServer(self, self.workdir)
        with open(ca_file) as f:
            self.ca_pem = f.read()
        self.watchers = []
        self.started = False

    # -- lifecycle ----------------------------------------------------------------------

    def start(self, timeout=30):
        self.logs.start()
        self.timers.start()
        self._register_node()
        self.watchers = [
            Watcher(self.client, "batch/v1", "jobs", self._on_job_event, self.stop_event,
                    self.namespace, labelSelector=self.selector),
            Watcher(self.client, "v1", "pods", self._on_pod_event, self.stop_event,
                    self.namespace, labelSelector=JOB_NAME_LABEL,
                    fieldSelector=f"spec.nodeName={self.node_name}"),
        ]
        for w in self.watchers:
            w.retry = self.timers.at
            w.start()
        for w in self.watchers:
            if not w.synced.wait(timeout):
                self.stop()
                raise RuntimeError(f"test kubelet: {w.plural} never listed: "
                                   f"{list(w.errors)}")
        self.started = True
        return self

    def stop(self):
        """Every pod process is killed (SIGKILL to its group) and reaped, the Node
        removed, the threads joined.  Calling it again does nothing."""
        if self.stop_event.is_set():
            return
        self.stop_event.set()
        for w in self.watchers:
            w.stop()
        self.timers.wake()
        with self.lock:
            runs = list(self.pods.values())
        for run in runs:
            if run.proc is not None and run.proc.poll() is None:
                run._signal(signal.SIGKILL)
            run.terminate(0, "KubeletStopped")
        for run in runs:
            run.done.wait(30)
        for w in self.watchers:
            w.join(10)
        self.timers.join(5)
        self.logs.stop()
        try:
            self.client.delete("v1", "nodes", self.node_name)
        except (KubeError, OSError):
            pass

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def note(self, text):
        self.notes.append(f"{now()} {text}")

    # -- the node -----------------------------------------------------------------------

    def _register_node(self):
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.node_name,
                             "labels": {"kubernetes.io/hostname": self.node_name,
                                        "kubernetes.io/os": "linux",
                                        "kubernetes.io/arch": "amd64"}}}
        try:
            self.client.create(node, "nodes")
        except KubeError as e:
            if e.code != 409:
                raise
        stamp = now()
        self.client.patch("v1", "nodes", self.node_name, {"status": {
            # only an address: kube-apiserver prefers Hostname, which nothing resolves
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.logs.port}},
            "capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
            "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "test kubelet is posting ready status",
                            "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}],
            "nodeInfo": {"kubeletVersion": "v1.37.2-test", "operatingSystem": "linux",
                         "architecture": "amd64", "containerRuntimeVersion": "none://0",
                         "kernelVersion": "", "osImage": "", "kubeProxyVersion": "",
                         "machineID": "", "systemUUID": "", "bootID": ""}}},
            subresource="status")

    def _ensure_namespace(self, ns):
        """What the namespace's controllers publish before any pod: the `default`
        ServiceAccount (ServiceAccount admission needs it) and kube-root-ca.crt."""
        if ns in self.namespaces_ready:
            return
        for obj, plural in (
                ({"apiVersion": "v1", "kind": "ServiceAccount",
                  "metadata": {"name": "default", "namespace": ns}}, "serviceaccounts"),
                ({"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": "kube-root-ca.crt", "namespace": ns},
                  "data": {"ca.crt": self.ca_pem}}, "configmaps")):
            try:
                self.client.create(obj, plural)
            except KubeError as e:
                if e.code != 409:
                    raise
        self.namespaces_ready.add(ns)

    # -- what pods read through the API -------------------------------------------------

    def _get_data(self, plural, ns, name, optional):
        try:
            obj = self.client.get("v1", plural, name, ns)
        except KubeError as e:
            if e.code == 404:
                if optional:
                    return None
                kind = "secret" if plural == "secrets" else "configmap"
                raise KubeletError("CreateContainerConfigError",
                                   f'{kind} "{name}" not found') from None
            raise
        out = {}
        if plural == "secrets":
            for k, v in (obj.get("data") or {}).items():
                out[k] = base64.b64decode(v)
        else:
            for k, v in (obj.get("data") or {}).items():
                out[k] = v.encode()
            for k, v in (obj.get("binaryData") or {}).items():
                out[k] = base64.b64decode(v)
        return out

    def secret_data(self, ns, name, optional=False):
        return self._get_data("secrets", ns, name, optional)

    def config_map_data(self, ns, name, optional=False):
        return self._get_data("configmaps", ns, name, optional)

    def request_token(self, ns, pod, audience, seconds):
        spec = {"expirationSeconds": max(600, int(seconds)),
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
                                   "name": pod["metadata"]["name"],
                                   "uid": pod["metadata"]["uid"]}}
        if audience:
            spec["audiences"] = [audience]
        sa = pod["spec"].get("serviceAccountName") or "default"
        answer = self.client.request(
            "POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
        return answer["status"]["token"]

    def service_env(self):
        return {"KUBERNETES_SERVICE_HOST": self.api_host,
                "KUBERNETES_SERVICE_PORT": self.api_port,
                "KUBERNETES_SERVICE_PORT_HTTPS": self.api_port,
                "KUBERNETES_PORT": f"tcp://{self.api_host}:{self.api_port}"}

    def image(self, name):
        """The image's config ({entrypoint, cmd, env}) as the test declared it."""
        return self.images.get(name) or self.images.get(name.split("@")[0].split(":")[0]) or {}

    def image_env(self, name):
        env = dict(self.base_env)
        env.update(self.image(name).get("env") or {})
        return env

    def map_command(self, cmd):
        """command[0] as the image would resolve it: a name (or its basename) the test
        mapped, else as written (sh, /bin/true are the host's)."""
        if cmd in self.commands:
            return self.commands[cmd]
        base = os.path.basename(cmd)
        return self.commands.get(base, cmd)

    # -- faults ---------------------------------------------------------------------------

    def set_fault(self, selector, fault):
        """Jobs matching the label selector get fault (one of FAULTS), or none (None)."""
        assert fault in FAULTS or fault is None, fault
        with self.lock:
            self.faults = [(s, f) for s, f in self.faults if s != selector]
            if fault:
                self.faults.append((selector, fault))

    def fault_of(self, job, pod=None):
        labels = dict((job.get("metadata") or {}).get("labels") or {})
        tmpl = ((job.get("spec") or {}).get("template") or {}).get("metadata") or {}
        labels.update(tmpl.get("labels") or {})
        if labels.get(FAULT_LABEL) in FAULTS:
            return labels[FAULT_LABEL]
        with self.lock:
            for sel, fault in self.faults:
                if LabelSelector(sel).match(labels):
                    return fault
        return None

    def release(self, job_name, namespace=None):
        """Starts the process of a held pod of Job job_name."""
        with self.lock:
            runs = [r for r in self.pods.values() if r.job.name == job_name and
                    (namespace is None or r.ns == namespace)]
        for r in runs:
            r.release()
        return len(runs)

    # -- API writes -----------------------------------------------------------------------

    def _write(self, fn, what, attempts=60):
        """fn() retried while the API server is away (a restart: refused or cut
        connections, 5xx, 429) for about 30 s, as a kubelet's status manager keeps
        trying; a 404 (the object is gone) ends it quietly with None."""
        for i in range(attempts):
            try:
                return fn()
            except KubeError as e:
                if e.code == 404:
                    return None
                if e.code < 500 and e.code != 429:
                    raise
                err = e
            except (OSError, http.client.HTTPException) as e:
                err = e
            if self.stop_event.wait(0.5):
                break
        raise RuntimeError(f"test kubelet: {what}: {err!r}")

    def patch_pod_status(self, ns, name, status):
        self._write(lambda: self.client.patch("v1", "pods", name, {"status": status}, ns,
                                              "merge", "status"), f"status of pod {ns}/{name}")

    def _patch_job_status(self, state, status):
        obj = self._write(lambda: self.client.patch("batch/v1", "jobs", state.name,
                                                    {"status": status}, state.ns, "merge",
                                                    "status"),
                          f"status of Job {state.ns}/{state.name}")
        if obj is not None:
            state.job = obj

    def _remove_finalizer(self, plural, api_version, ns, name, finalizer):
        for _ in range(10):
            try:
                obj = self.client.get(api_version, plural, name, ns)
            except KubeError as e:
                if e.code == 404:
                    return
                raise
            fins = obj["metadata"].get("finalizers") or []
            if finalizer not in fins:
                return
            i = fins.index(finalizer)
            try:
                self.client.patch(api_version, plural, name,
                                  [{"op": "test", "path": f"/metadata/finalizers/{i}",
                                    "value": finalizer},
                                   {"op": "remove", "path": f"/metadata/finalizers/{i}"}],
                                  ns, "json")
                return
            except KubeError as e:
                if e.code not in (404, 409, 422):
                    raise
                if e.code == 404:
                    return

    def _delete(self, api_version, plural, ns, name, **options):
        try:
            self.client.delete(api_version, plural, name, ns, options or None)
        except KubeError as e:
            if e.code != 404:
                raise

    # -- Jobs -----------------------------------------------------------------------------

    def _on_job_event(self, etype, obj):
        if etype == "SYNC":
            seen = set()
            for job in obj:
                seen.add(job["metadata"]["uid"])
                self._sync_job(job)
            with self.lock:
                gone = [s for uid, s in self.jobs.items() if uid not in seen]
            for state in gone:
                self._job_deleted(state.job)
            return
        if self.namespace and obj["metadata"].get("namespace") != self.namespace:
            return
        if etype == "DELETED":
            return self._job_deleted(obj)
        self._sync_job(obj)

    def _sync_job(self, job):
        if self.namespace and job["metadata"].get("namespace") != self.namespace:
            return
        uid = job["metadata"]["uid"]
        with self.lock:
            state = self.jobs.get(uid)
            if state is None:
                state = self.jobs[uid] = JobState(job)
        with state.lock:
            state.job = job
            if job["metadata"].get("deletionTimestamp"):
                state.deleted = True
                return self._collect_job(state)
            if state.finished:
                return self._schedule_ttl(state)
            if job.get("spec", {}).get("suspend"):
                return
            if not state.pods and not state.has("FailureTarget") and \
                    not state.has("SuccessCriteriaMet"):
                self._adopt_or_create(state)
            self._schedule_deadline(state)

    def _adopt_or_create(self, state):
        """One pod per Job: an existing pod of this Job (a kubelet restarted) is
        adopted as failed when no process of ours runs it; else a new one is made."""
        existing = self.client.list("v1", "pods", state.ns,
                                    labelSelector=f"{CONTROLLER_UID_LABEL}={state.uid}")["items"]
        if existing:
            for pod in existing:
                state.pods[pod["metadata"]["name"]] = None
            return
        self._create_pod(state)

    def _create_pod(self, state):
        job = state.job
        self._ensure_namespace(state.ns)
        tmpl = json.loads(json.dumps(job["spec"]["template"]))
        meta = tmpl.get("metadata") or {}
        labels = dict(meta.get("labels") or {})
        labels.update({JOB_NAME_LABEL: state.name, CONTROLLER_UID_LABEL: state.uid,
                       "job-name": state.name, "controller-uid": state.uid})
        spec = tmpl["spec"]
        fault = self.fault_of(job)
        if fault != "unschedulable":
            spec["nodeName"] = self.node_name
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"generateName": (state.name + "-")[:58], "namespace": state.ns,
                            "labels": labels,
                            "annotations": dict(meta.get("annotations") or {}),
                            "finalizers": [TRACKING_FINALIZER],
                            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                                 "name": state.name, "uid": state.uid,
                                                 "controller": True,
                                                 "blockOwnerDeletion": True}]},
               "spec": spec}
        created = self.client.create(pod, "pods")
        name = created["metadata"]["name"]
        if not state.start_time:
            state.start_time = now()
        state.active = 1
        status = {"startTime": state.start_time, "active": 1, "ready": 0, "terminating": 0,
                  "uncountedTerminatedPods": {}}
        self._patch_job_status(state, status)
        if fault == "unschedulable":
            state.pods[name] = None
            self.patch_pod_status(state.ns, name, {"phase": "Pending", "conditions": [
                condition("PodScheduled", "False", "Unschedulable",
                          "0/1 nodes are available: 1 node(s) didn't match Pod's node "
                          "affinity/selector. preemption: 0/1 nodes are available: 1 "
                          "Preemption is not helpful for scheduling.", probe=True)]})
            return
        run = PodRun(self, state, created)
        with self.lock:
            self.pods[(state.ns, name)] = run
        state.pods[name] = run
        run.start()

    def pod_running(self, run):
        state = run.job
        with state.lock:
            state.ready = 1
            if not state.finished and not state.has("FailureTarget"):
                self._patch_job_status(state, {"active": 1, "ready": 1})

    def pod_finished(self, run):
        """A pod of ours reached Succeeded/Failed (or was stopped before it started):
        count it as the Job controller does, then let it go."""
        state = run.job
        if self.stop_event.is_set():
            return
        with state.lock:
            self._remove_finalizer("pods", "v1", run.ns, run.name, TRACKING_FINALIZER)
            if run.counted or state.deleted:
                run.counted = True
                return self._delete("v1", "pods", run.ns, run.name, gracePeriodSeconds=0)
            run.counted = True
            if run.phase == "Succeeded":
                state.succeeded += 1
            else:
                state.failed += 1
            state.active = 0
            state.ready = 0
            self._after_pod(state)
        if self.pod_deleting(run):
            self._delete("v1", "pods", run.ns, run.name, gracePeriodSeconds=0)

    def pod_deleting(self, run):
        return run.terminate_event.is_set()

    def _after_pod(self, state):
        """The Job's next state once no pod of it is active."""
        spec = state.job.get("spec") or {}
        completions = spec.get("completions") or 1
        backoff = spec.get("backoffLimit", 6)
        counters = {"active": 0, "ready": 0, "terminating": 0,
                    "succeeded": state.succeeded, "failed": state.failed,
                    "uncountedTerminatedPods": {}}
        if state.deadline_hit or state.has("FailureTarget"):
            target = next(c for c in state.conditions if c["type"] == "FailureTarget")
            return self._finish_job(state, counters, "Failed", target["reason"],
                                    target["message"])
        if state.succeeded >= completions:
            msg = "Reached expected number of succeeded pods"
            state.conditions.append(condition("SuccessCriteriaMet", "True",
                                              "CompletionsReached", msg))
            self._patch_job_status(state, dict(counters, conditions=state.conditions))
            return self._finish_job(state, counters, "Complete", "CompletionsReached", msg)
        if state.failed > backoff:
            msg = "Job has reached the specified backoff limit"
            state.conditions.append(condition("FailureTarget", "True",
                                              "BackoffLimitExceeded", msg))
            self._patch_job_status(state, dict(counters, conditions=state.conditions))
            return self._finish_job(state, counters, "Failed", "BackoffLimitExceeded", msg)
        self._patch_job_status(state, counters)
        state.pods = {}
        self._create_pod(state)          # a retry (no exponential back-off here)

    def _finish_job(self, state, counters, type_, reason, message):
        state.conditions.append(condition(type_, "True", reason, message))
        status = dict(counters, conditions=state.conditions)
        if type_ == "Complete":
            status["completionTime"] = now()
        self._patch_job_status(state, status)
        state.finished = True
        self._schedule_ttl(state)

    def _schedule_deadline(self, state):
        seconds = (state.job.get("spec") or {}).get("activeDeadlineSeconds")
        if not seconds or not state.start_time or state.deadline_scheduled:
            return
        state.deadline_scheduled = True
        self.timers.at(parse_time(state.start_time) + seconds,
                       lambda: self._deadline(state))

    def _deadline(self, state):
        """activeDeadlineSeconds passed: FailureTarget DeadlineExceeded, the pods are
        deleted; Failed follows once they are terminated (_after_pod)."""
        with state.lock:
            if state.finished or state.has("FailureTarget") or state.has("SuccessCriteriaMet"):
                return
            state.deadline_hit = True
            state.conditions.append(condition("FailureTarget", "True", "DeadlineExceeded",
                                              "Job was active longer than specified deadline"))
            self._patch_job_status(state, {"conditions": state.conditions,
                                           "terminating": state.active, "active": 0,
                                           "ready": 0})
            names = list(state.pods)
            runs = dict(state.pods)
        for name in names:
            self._delete("v1", "pods", state.ns, name)
            if runs.get(name) is None:          # no process (unschedulable): count it now
                self._count_unrun_pod(state, name)

    def _count_unrun_pod(self, state, name):
        with state.lock:
            self._remove_finalizer("pods", "v1", state.ns, name, TRACKING_FINALIZER)
            if name not in state.pods or state.deleted:
                return
            del state.pods[name]
            state.failed += 1
            state.active = 0
            self._after_pod(state)

    def _schedule_ttl(self, state):
        ttl = (state.job.get("spec") or {}).get("ttlSecondsAfterFinished")
        if ttl is None or state.ttl_scheduled:
            return
        state.ttl_scheduled = True
        finished = next((c["lastTransitionTime"] for c in state.conditions
                         if c["type"] in ("Complete", "Failed") and c["status"] == "True"),
                        now())
        self.timers.at(parse_time(finished) + ttl, lambda: self._ttl_expired(state))

    def _ttl_expired(self, state):
        """The TTL-after-finished controller's cascading delete."""
        self._delete("batch/v1", "jobs", state.ns, state.name, propagationPolicy="Foreground",
                     preconditions={"uid": state.uid})

    def _collect_job(self, state):
        """A Job being deleted: the garbage collector's part (no kube-controller-manager
        runs on the real tier): its pods go first, then the foregroundDeletion finalizer;
        an orphaning delete keeps the pods, without their owner reference."""
        fins = state.job["metadata"].get("finalizers") or []
        pods = self.client.list("v1", "pods", state.ns,
                                labelSelector=f"{CONTROLLER_UID_LABEL}={state.uid}")["items"]
        if ORPHAN_FINALIZER in fins:
            for pod in pods:
                refs = [r for r in pod["metadata"].get("ownerReferences") or []
                        if r.get("uid") != state.uid]
                self.client.patch("v1", "pods", pod["metadata"]["name"],
                                  {"metadata": {"ownerReferences": refs or None}}, state.ns)
            return self._remove_finalizer("jobs", "batch/v1", state.ns, state.name,
                                          ORPHAN_FINALIZER)
        self._delete_pods(state, pods)
        if FOREGROUND_FINALIZER in fins:
            threading.Thread(target=self._finish_foreground, args=(state,), daemon=True).start()

    def _finish_foreground(self, state):
        runs = [r for r in state.pods.values() if r is not None]
        for r in runs:
            r.done.wait(60)
        for _ in range(600):
            left = self.client.list("v1", "pods", state.ns, labelSelector=
                                    f"{CONTROLLER_UID_LABEL}={state.uid}")["items"]
            if not left or self.stop_event.is_set():
                break
            self._delete_pods(state, left)
            if self.stop_event.wait(0.1):
                return
        self._remove_finalizer("jobs", "batch/v1", state.ns, state.name, FOREGROUND_FINALIZER)

    def _delete_pods(self, state, pods):
        for pod in pods:
            name = pod["metadata"]["name"]
            self._delete("v1", "pods", state.ns, name)
            run = state.pods.get(name)
            if run is None:
                self._remove_finalizer("pods", "v1", state.ns, name, TRACKING_FINALIZER)

    def _job_deleted(self, job):
        """The Job is gone (a background or foreground cascade ended): its pods are
        deleted, their processes stopped, the state forgotten."""
        uid = job["metadata"]["uid"]
        with self.lock:
            state = self.jobs.pop(uid, None)
        if state is None:
            return
        state.deleted = True
        try:
            pods = self.client.list("v1", "pods", state.ns,
                                    labelSelector=f"{CONTROLLER_UID_LABEL}={uid}")["items"]
        except KubeError:
            pods = []
        self._delete_pods(state, pods)

    # -- Pods -----------------------------------------------------------------------------

    def _on_pod_event(self, etype, obj):
        if etype == "SYNC":
            listed = {(p["metadata"].get("namespace"), p["metadata"]["name"],
                       p["metadata"]["uid"]) for p in obj}
            with self.lock:
                missed = [r for r in self.pods.values()
                          if (r.ns, r.name, r.uid) not in listed]
            for run in missed:          # deleted while the watch was down (a relist)
                self._on_pod_event("DELETED", {"metadata": dict(run.pod["metadata"])})
            for pod in obj:
                self._on_pod_event("MODIFIED", pod)
            return
        key = (obj["metadata"].get("namespace"), obj["metadata"]["name"])
        with self.lock:
            run = self.pods.get(key)
        if run is None or run.uid != obj["metadata"]["uid"]:
            return
        run.pod["metadata"] = obj["metadata"]
        if etype == "DELETED":
            run.terminate(0, "Deleted")
            self._forget(run)
            return
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            grace = meta.get("deletionGracePeriodSeconds")
            if grace is None:
                grace = obj["spec"].get("terminationGracePeriodSeconds", 30)
            run.terminate(grace, "Deleted")
            if run.done.is_set():
                self._delete("v1", "pods", run.ns, run.name, gracePeriodSeconds=0)
        if run.held_by_label and FAULT_LABEL not in (meta.get("labels") or {}):
            run.release()

    def _forget(self, run):
        def later():
            run.done.wait(60)
            with self.lock:
                if self.pods.get((run.ns, run.name)) is run:
                    del self.pods[(run.ns, run.name)]
            run.cleanup()
        threading.Thread(target=later, daemon=True).start()

    # -- logs -----------------------------------------------------------------------------

    def log_of(self, ns, pod):
        with self.lock:
            run = self.pods.get((ns, pod))
        return run.log if run else None

    def container_log(self, ns, pod, container, params):
        """(HTTP status, body) for GET containerLogs."""
        with self.lock:
            run = self.pods.get((ns, pod))
        if run is None:
            return 404, f'pod "{pod}" in namespace "{ns}" not found on this node\n'.encode()
        if container != run.container["name"]:
            return 404, f"container {container} is not in pod {pod}\n".encode()
        waiting = run.waiting_reason()
        if waiting:
            return 400, (f'container "{container}" in pod "{pod}" is waiting to start: '
                         f"{waiting}").encode()
        if params.get("previous") in ("true", "1"):
            return 400, (f'previous terminated container "{container}" in pod "{pod}" not '
                         "found\n").encode()
        return 200, run.log.select(params)

    # -- for tests --------------------------------------------------------------------------

    def processes(self):
        """pids of the pod processes still running."""
        with self.lock:
            return [r.proc.pid for r in self.pods.values()
                    if r.proc is not None and r.proc.poll() is None]


def main(argv=None):
    """python3 tests/e2e/kubelet.py --kubeconfig-url URL --token-file F --ca CA --workdir D
    [--pc-bin BIN] [--selector S] [--namespace NS]: the kubelet as its own process
    (bench/job-scale), until SIGTERM."""
    import argparse
    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--url", required=True)
    p.add_argument("--token-file", required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--pc-bin")
    p.add_argument("--selector", default=DEFAULT_SELECTOR)
    p.add_argument("--namespace")
    p.add_argument("--env", action="append", default=[], help="NAME=VALUE of the image")
    a = p.parse_args(argv)
    token = pathlib.Path(a.token_file).read_text().split()[0].split(",")[0]
    env = dict(e.split("=", 1) for e in a.env)
    k = TestKubelet(a.url, token, a.ca, a.workdir, a.pc_bin, a.selector, a.namespace, env=env)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    k.start()
    print(json.dumps({"ready": True, "node": k.node_name, "port": k.logs.port}), flush=True)
    done.wait()
    k.stop()


if __name__ == "__main__":
    main()
