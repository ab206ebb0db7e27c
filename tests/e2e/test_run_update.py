"""`pulumi-controller run-update` (issue 16, the pod side; /work/wt/JOBS.md "run-update"),
run directly as a process the way a Job's pod runs it: PULUMI_CONTROLLER_UPDATE in the
environment, the secret values in the variables it names, a service-account directory
(token + API CA, as the kubelet mounts it) for the outputs Secret, a work dir and a
termination-log file.  Both tiers: the emulator with the pulumi stand-in, the real
kube-apiserver with the real pulumi CLI.

Cases: a Flux artifact whose up succeeds (outputs Secret written in the controller's
format, termination message ok); a failing program (exit 1, message, class); an OCI source
pulled by manifest digest (and a layer that is not the one resolved, and verify, both
refused; an unsigned manifest accepted on the signature of the index the controller passes,
only when that index selects it); inputs that are not valid (exit 2, the field named); a digest mismatch (refused,
no pulumi process started)."""
import json
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import urllib.parse

import pytest

from stack_fixtures import PASSPHRASE, SOURCE_API, wait_until
from test_oci_sign import OCI_INDEX, OCI_MANIFEST, put_sig_manifest, sign_openssl

pytestmark = pytest.mark.usefixtures("isolated_docker_config")

TERMINATION_MAX = 3584
DB_PASSWORD = "db-Pw-run-update-93c1"


class Pod:
    """What the kubelet gives run-update: its environment, the service-account files,
    an emptyDir work dir and the termination-log file."""

    def __init__(self, world, tmp_path, name="demo"):
        self.w = world
        self.name = name
        self.dir = tmp_path / "pod"
        self.dir.mkdir()
        self.term = self.dir / "termination-log"
        self.sa = self.dir / "serviceaccount"
        self.sa.mkdir()
        api = world.api
        url = urllib.parse.urlsplit(getattr(api, "direct_url", None) or api.url)
        self.host, self.port = url.hostname, str(url.port)
        self.fresh_work("work")

    def fresh_work(self, name):
        """A new, empty work dir (each Job's pod has its own emptyDir)."""
        self.work = self.dir / name
        self.work.mkdir()

    def stack(self):
        """The Stack object and the outputs Secret the controller creates before the Job
        (no controller runs here: nothing reconciles the Stack), and the pod's
        service-account files."""
        api = self.w.api
        token = api.service_account_token(self.w.namespace, "run-update", f"ru-{self.w.id}")
        (self.sa / "token").write_text(token)
        (self.sa / "ca.crt").write_text(open(api.ca_file).read())
        (self.sa / "namespace").write_text(self.w.namespace)
        obj = self.w.apply_stack(self.name, fluxSource={"sourceRef": {
            "apiVersion": SOURCE_API, "kind": "GitRepository", "name": "unused"}})
        owner = {"apiVersion": "pulumi.com/v1", "kind": "Stack", "name": self.name,
                 "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
        self.w.client.create({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                              "metadata": {"name": f"{self.name}-outputs",
                                           "namespace": self.w.namespace,
                                           "ownerReferences": [owner]}}, "secrets")
        return owner

    def update(self, source, **fields):
        u = {"v": 1, "operation": "up", "namespace": self.w.namespace, "name": self.name,
             "stack": "dev", "fingerprint": "0123456789abcdef", "source": source,
             "dir": None, "backend": self.w.backend_url, "secretsProvider": "passphrase",
             "config": {}, "structuredConfig": [], "secretConfig": {}, "configFromEnv": {},
             "env": ["PULUMI_CONFIG_PASSPHRASE", "PULUMI_STANDIN_CLOUD"],
             "refresh": False, "targets": [], "policyPacks": [],
             "outputsSecret": f"{self.name}-outputs", "timeoutSeconds": 600}
        u.update(fields)
        return u

    def start(self, update, env=None, pulumi_flag=True, extra=()):
        """Starts run-update as the kubelet would; returns the Popen.  Without
        pulumi_flag, --pulumi is left out and the recording wrapper is first on PATH;
        extra flags go last."""
        if self.term.exists():
            self.term.unlink()
        full = {k: v for k, v in os.environ.items()
                if not k.startswith(("PULUMI_", "KUBECONFIG", "KUBERNETES_"))}
        full.update({
            "PULUMI_CONTROLLER_UPDATE": update if isinstance(update, str) else json.dumps(update),
            "KUBERNETES_SERVICE_HOST": self.host, "KUBERNETES_SERVICE_PORT": self.port,
            "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
            "PULUMI_STANDIN_CLOUD": str(self.w.cloud_dir),
        })
        full.update(env or {})
        flags = ["--pulumi", str(self.w.pulumi_bin)]
        if self.w.cli.kind == "real":
            # The plugins the image would carry (the controller's PULUMI_HOME has them).
            flags += ["--plugins-dir", os.path.realpath(self.w.cli.home / "plugins")]
        if not pulumi_flag:
            flags = flags[2:]
            full["PATH"] = os.pathsep.join([os.path.dirname(self.w.pulumi_bin), "/usr/bin", "/bin"])
        return subprocess.Popen([self.w.pc_bin, "run-update", "--work-dir", str(self.work),
                                 "--termination-log", str(self.term),
                                 "--service-account-dir", str(self.sa), *flags,
                                 *map(str, extra)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=full)

    def finish(self, proc, timeout=300):
        """Waits for proc; returns (CompletedProcess, termination message or None)."""
        out, err = proc.communicate(timeout=timeout)
        r = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        for mark in ("ERROR: AddressSanitizer", "runtime error:", "LeakSanitizer"):
            assert mark not in r.stderr, r.stderr
        msg = None
        if self.term.exists():
            raw = self.term.read_bytes()
            assert len(raw) <= TERMINATION_MAX
            msg = json.loads(raw.decode("utf-8"))
        return r, msg

    def run(self, update, env=None, timeout=300, pulumi_flag=True, extra=()):
        """Runs run-update; returns (CompletedProcess, termination message or None)."""
        return self.finish(self.start(update, env, pulumi_flag, extra), timeout)


@pytest.fixture
def pod(stack_world, tmp_path):
    return Pod(stack_world, tmp_path)


def flux_source(w, artifact, revision="main@sha1:1234"):
    return {"kind": "artifact", "url": w.publish(artifact), "digest": artifact.digest,
            "revision": revision}


def test_flux_artifact_up_writes_outputs_and_result(pod):
    w = pod.w
    owner = pod.stack()
    a = w.artifact(w.program_files("stack-secrets"))
    update = pod.update(flux_source(w, a), secretConfig={"dbPassword": "PC_DB_PASSWORD"},
                        configFromEnv={"region": "PC_REGION"})
    # no --pulumi: the image's pulumi is the first on the pod's PATH (the wrapper here)
    r, msg = pod.run(update, env={"PC_DB_PASSWORD": DB_PASSWORD, "PC_REGION": "eu-north"},
                     pulumi_flag=False)
    assert r.returncode == 0, r.stderr
    assert w.updates("dev"), "the pulumi on PATH did not run"
    assert msg["v"] == 1 and msg["status"] == "ok" and msg["class"] == "ok", msg
    assert msg["outputs"] == "written" and msg["lock"] is None
    assert msg["changes"].get("create", 0) >= 1, msg
    # the program saw the secret value and the ConfigMap value
    assert DB_PASSWORD in w.cloud_files().values()
    sec = w.outputs_secret(pod.name)
    assert sec["decoded"] == {"region": "eu-north", "secretOut": DB_PASSWORD}
    # the controller's format (stack_outputs_write): labels, owner, secret keys listed
    md = sec["metadata"]
    assert md["annotations"]["pulumi.com/secrets"] == '["secretOut"]'
    assert md["labels"] == {"reconcile.fluxcd.io/watch": "Enabled",
                            "pulumi.com/stack-name": pod.name}
    assert md["ownerReferences"] == [owner]
    assert sec["type"] == "Opaque"
    # no secret value in the log, the termination message or any pulumi argv
    for v in (DB_PASSWORD, PASSPHRASE):
        assert v not in r.stderr and v not in r.stdout and v not in json.dumps(msg)
        for inv in w.cli_invocations():
            assert v not in " ".join(inv["argv"])
    # the logs are JSON lines on stderr naming the Stack
    last = json.loads(r.stderr.strip().splitlines()[-1])
    assert last["msg"] == "run-update finished" and last["name"] == pod.name


def test_failing_program_exits_1_with_its_message(pod):
    w = pod.w
    pod.stack()
    a = w.artifact(w.program_files("stack-fail"))
    r, msg = pod.run(pod.update(flux_source(w, a)))
    assert r.returncode == 1, r.stderr
    assert msg["status"] not in ("ok", "internal") and msg["class"] == "failed", msg
    assert msg["message"], msg
    assert msg["outputs"] == "none"
    assert w.outputs_secret(pod.name).get("data") in (None, {})


def test_digest_mismatch_is_refused_and_nothing_runs(pod):
    w = pod.w
    a = w.artifact()
    src = flux_source(w, a)
    w.corrupt(a)                     # nginx now serves other bytes under the URL
    r, msg = pod.run(pod.update(src))
    assert r.returncode == 1
    assert msg["class"] == "source" and "digest" in msg["message"], msg
    assert w.cli_invocations() == []                   # no pulumi process at all
    # neither a tree nor a staging directory: only the store entry's lock file
    left = [p.name for p in (pod.work / "artifacts").glob("sha256/*")]
    assert all(n.startswith(".") and n.endswith(".lock") for n in left), left


def push(run_pc, registry, w, tmp_path, repo, tag, sign_key=None):
    d = tmp_path / f"push-{tag}"
    d.mkdir()
    for rel, data in w.program_files("stack-basic").items():
        (d / rel).write_bytes(data)
    sign = ["--sign-key", sign_key] if sign_key else []
    r = run_pc("push", registry.ref(repo, tag), "--path", d, "--plain-http",
               "--source", "https://git.example.test/app", "--revision", f"main@sha1:{tag}", *sign)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[0]


def keypair(tmp_path):
    """An ECDSA P-256 key made by OpenSSL: (private key file, directory holding the
    public key as cosign.pub, as the verify Secret's volume does)."""
    key, keys = tmp_path / "signer.key", tmp_path / "keys"
    keys.mkdir()
    subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out",
                    str(key)], check=True, capture_output=True)
    subprocess.run(["openssl", "ec", "-in", str(key), "-pubout", "-out", str(keys / "cosign.pub")],
                   check=True, capture_output=True)
    (keys / "README").write_text("not a key\n")
    return key, keys


def signed_index(reg, repo, tag, amd64, arm64, key, tmp_path):
    """A multi-platform index (linux/amd64 -> amd64, linux/arm64 -> arm64) pushed as
    repo:tag and signed, as cosign does, on the index's digest only; returns that digest."""
    entries = []
    for digest, arch in ((arm64, "arm64"), (amd64, "amd64")):
        _, _, body = reg.raw("GET", f"/v2/{repo}/manifests/{digest}", headers={"Accept": OCI_MANIFEST})
        entries.append({"mediaType": OCI_MANIFEST, "digest": digest, "size": len(body),
                        "platform": {"os": "linux", "architecture": arch}})
    index = reg.put_manifest(repo, tag, {"schemaVersion": 2, "mediaType": OCI_INDEX,
                                         "manifests": entries}, OCI_INDEX)
    payload = json.dumps({"critical": {"identity": {"docker-reference": f"{reg.host}/{repo}"},
                                       "image": {"docker-manifest-digest": index},
                                       "type": "cosign container image signature"},
                          "optional": None}, separators=(",", ":")).encode()
    put_sig_manifest(reg, repo, index, payload, sign_openssl(key, payload, tmp_path))
    return index


def test_oci_source_by_manifest_digest(pod, run_pc, registry_plain, tmp_path):
    w = pod.w
    pod.stack()
    repo = f"run-update-{w.id}/app"
    digest = push(run_pc, registry_plain, w, tmp_path, repo, "v1")
    url = f"oci://{registry_plain.host}/{repo}"
    src = {"kind": "oci", "url": url, "manifestDigest": digest, "revision": f"v1@{digest}",
           "mediaType": None, "insecure": True, "verify": False}
    # a layer digest other than the manifest's: refused before any pulumi run
    wrong = dict(src, layerDigest="sha256:" + "0" * 64)
    r, msg = pod.run(pod.update(wrong))
    assert r.returncode == 1 and msg["class"] == "source", (r.stderr, msg)
    assert "layer" in msg["message"] and w.cli_invocations() == []
    # verify asked for: without keys, and with keys but no signature, nothing runs
    r, msg = pod.run(pod.update(dict(src, verify=True)))
    assert r.returncode == 1 and msg["class"] == "source", msg
    assert "--verify-keys-dir" in msg["message"] and w.cli_invocations() == []
    key, keys = keypair(tmp_path)
    r, msg = pod.run(pod.update(dict(src, verify=True)), extra=["--verify-keys-dir", keys])
    assert r.returncode == 1 and msg["class"] == "source", msg
    assert "no signature" in msg["message"] and w.cli_invocations() == []
    # signed by `push --sign-key`: checked again in the pod, then run
    signed = push(run_pc, registry_plain, w, tmp_path, repo, "v2", sign_key=key)
    ssrc = dict(src, manifestDigest=signed, revision=f"v2@{signed}", verify=True)
    r, msg = pod.run(pod.update(ssrc), extra=["--verify-keys-dir", keys])
    assert r.returncode == 0, r.stderr
    assert "signature verified" in r.stderr and msg["status"] == "ok", msg
    # the same digest against another key: refused
    (tmp_path / "other").mkdir()
    _, other = keypair(tmp_path / "other")
    r, msg = pod.run(pod.update(ssrc), extra=["--verify-keys-dir", other])
    assert r.returncode == 1 and msg["class"] == "source", msg
    assert len(w.updates("dev")) == 1, w.cli_invocations()
    # the unsigned manifest, named by an index that is signed (the controller accepted
    # it on the index's signature): verified on the index the controller passes...
    index = signed_index(registry_plain, repo, "multi", digest, signed, key, tmp_path)
    isrc = dict(src, verify=True, revision=f"multi@{digest}", indexDigest=index)
    r, msg = pod.run(pod.update(isrc), extra=["--verify-keys-dir", keys])
    assert r.returncode == 0, r.stderr
    assert "signature verified" in r.stderr and index in r.stderr and msg["status"] == "ok", msg
    assert len(w.updates("dev")) == 2, w.cli_invocations()
    # ...never without it (the manifest itself is unsigned)...
    r, msg = pod.run(pod.update(dict(isrc, indexDigest=None)), extra=["--verify-keys-dir", keys])
    assert r.returncode == 1 and "no signature" in msg["message"], msg
    # ...nor by a signed index that selects another manifest: both digests named
    elsewhere = signed_index(registry_plain, repo, "multi-other", signed, digest, key, tmp_path)
    r, msg = pod.run(pod.update(dict(isrc, indexDigest=elsewhere)), extra=["--verify-keys-dir", keys])
    assert r.returncode == 1 and msg["class"] == "source", msg
    assert digest in msg["message"] and elsewhere in msg["message"] and signed in msg["message"], msg
    runs = len(w.updates("dev"))
    assert runs == 2, w.cli_invocations()
    # the manifest by its digest
    r, msg = pod.run(pod.update(src))
    assert r.returncode == 0, r.stderr
    assert msg["status"] == "ok" and msg["outputs"] == "written", msg
    assert list(w.cloud_files().values()) == ["hello"]
    assert w.outputs_secret(pod.name)["decoded"]["message"] == "hello"


BAD_INPUTS = [
    (lambda u: u.update(v=2), "v must be 1"),
    (lambda u: u.update(operation="apply"), "operation"),
    (lambda u: u.pop("namespace"), "namespace is required"),
    (lambda u: u.update(name="../x"), "name"),
    (lambda u: u["source"].update(digest="md5:abc"), "source.digest"),
    (lambda u: u["source"].update(kind="git"), "source.kind"),
    (lambda u: u.update(dir="../escape"), "dir"),
    (lambda u: u.update(secretConfig={"k": "not a name"}), "secretConfig.k"),
    (lambda u: u.update(targets="urn"), "targets"),
    (lambda u: u.update(timeoutSeconds=0), "timeoutSeconds"),
    (lambda u: u.update(outputsSecret="other"), "outputsSecret"),
]


def test_bad_input_exits_2_naming_the_field(pod):
    for change, field in BAD_INPUTS:
        u = pod.update({"kind": "artifact", "url": "http://127.0.0.1:1/x.tar.gz",
                        "digest": "sha256:" + "a" * 64})
        change(u)
        r, msg = pod.run(u)
        assert r.returncode == 2, (field, r.stderr)
        assert "PULUMI_CONTROLLER_UPDATE" in r.stderr and field in r.stderr, r.stderr
        assert msg["class"] == "internal" and field in msg["message"], msg
    # the pod's environment lacks a variable the input names
    u = pod.update({"kind": "artifact", "url": "http://127.0.0.1:1/x.tar.gz",
                    "digest": "sha256:" + "a" * 64}, configFromEnv={"region": "PC_UNSET_REGION"})
    r, msg = pod.run(u)
    assert r.returncode == 2 and "configFromEnv.region" in r.stderr, r.stderr
    assert "PC_UNSET_REGION" in msg["message"] and msg["class"] == "internal", msg
    r, msg = pod.run("{not json")
    assert r.returncode == 2 and "not a JSON object" in r.stderr
    assert msg["status"] == "internal"
    assert pod.w.cli_invocations() == []


# -- inside a Job, through the test kubelet (tests/e2e/kubelet.py) ----------------------

def runner_rbac(w, sa, secret):
    """The ServiceAccount of the Job's pod and a Role allowing get/update on the one
    outputs Secret (the emulator authorizes every token; the real server checks it)."""
    c = w.client
    c.create({"apiVersion": "v1", "kind": "ServiceAccount",
              "metadata": {"name": sa, "namespace": w.namespace}}, "serviceaccounts")
    c.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
              "metadata": {"name": sa, "namespace": w.namespace},
              "rules": [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": [secret],
                         "verbs": ["get", "update"]}]}, "roles")
    c.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
              "metadata": {"name": sa, "namespace": w.namespace},
              "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sa},
              "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": w.namespace}]},
             "rolebindings")


def update_job(pod, update, owner, plugins_dir):
    """The Job as JOBS.md describes the controller's, for `update`.  Its pulumi is the
    image's (the kubelet's PATH for the world: the recording wrapper first); on the
    real tier the image's plugins are at plugins_dir."""
    w = pod.w
    plugins = ["--plugins-dir", plugins_dir] if plugins_dir else []
    labels = {"app.kubernetes.io/managed-by": "pulumi-controller",
              "pulumi.com/stack-name": pod.name, "pulumi.com/operation": "up",
              "pulumi.com/fingerprint": "0123456789"}
    secret_env = [{"name": env, "valueFrom": {"secretKeyRef": {"name": "db-creds", "key": key}}}
                  for key, env in update["secretConfig"].items()]
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": f"{pod.name}-up-0123456789", "namespace": w.namespace,
                     "labels": labels, "ownerReferences": [owner]},
        "spec": {
            "backoffLimit": 0, "activeDeadlineSeconds": 600, "ttlSecondsAfterFinished": 3600,
            "template": {"metadata": {"labels": labels}, "spec": {
                "restartPolicy": "Never", "serviceAccountName": "stack-runner",
                "automountServiceAccountToken": True,
                "containers": [{
                    "name": "update", "image": "pulumi-controller:test",
                    "command": ["pulumi-controller", "run-update"],
                    "args": ["--work-dir", "/work", "--termination-log", "/tmp/termination-log",
                             "--service-account-dir",
                             "/var/run/secrets/kubernetes.io/serviceaccount", *plugins],
                    "terminationMessagePath": "/tmp/termination-log",
                    "terminationMessagePolicy": "File",
                    "env": [{"name": "PULUMI_CONTROLLER_UPDATE", "value": json.dumps(update)},
                            {"name": "PULUMI_CONFIG_PASSPHRASE", "valueFrom": {"secretKeyRef": {
                                "name": "pulumi-passphrase", "key": "passphrase"}}}] + secret_env,
                    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"},
                                     {"name": "work", "mountPath": "/work"}]}],
                "volumes": [{"name": "tmp", "emptyDir": {}}, {"name": "work", "emptyDir": {}}]}}}}


@pytest.fixture
def cleanup():
    fns = []
    yield fns
    for fn in fns:
        fn()


def test_inside_a_job_through_the_kubelet(pod, kubelet_for, cleanup):
    w = pod.w
    owner = pod.stack()
    runner_rbac(w, "stack-runner", f"{pod.name}-outputs")
    w.secret("db-creds", {"dbPassword": DB_PASSWORD})
    kubelet = kubelet_for(w)
    a = w.artifact(w.program_files("stack-secrets"))
    update = pod.update(flux_source(w, a), secretConfig={"dbPassword": "PC_SECRET_0"})
    plugins_dir = None
    if w.cli.kind == "real":
        # The image's plugin cache: the controller's, seen at a path outside /tmp and
        # /work (the pod's mount paths, which the kubelet rewrites in every arg).
        image = pathlib.Path(tempfile.mkdtemp(dir="/var/tmp", prefix="pc-job-image-"))
        cleanup.append(lambda: shutil.rmtree(image))
        (image / "plugins").symlink_to(os.path.realpath(w.cli.home / "plugins"))
        plugins_dir = str(image / "plugins")
    job = update_job(pod, update, owner, plugins_dir)
    w.client.create(job, "jobs")

    def finished():
        j = w.client.get("batch/v1", "jobs", job["metadata"]["name"], w.namespace)
        done = [c["type"] for c in j.get("status", {}).get("conditions") or []
                if c["type"] in ("Complete", "Failed") and c["status"] == "True"]
        return done and (done[0], j)
    try:
        kind, j = wait_until(finished, timeout=120, what="the Job to finish")
    finally:
        pods = w.client.list("v1", "pods", w.namespace, labelSelector=(
            f"batch.kubernetes.io/job-name={job['metadata']['name']}"))
        for p in pods["items"]:
            print("pod", p["metadata"]["name"], json.dumps(p.get("status")))
            log = kubelet.log_of(w.namespace, p["metadata"]["name"])
            print(log.text() if log else None)
        print("\n".join(kubelet.notes))
    state = pods["items"][0]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert kind == "Complete", state
    assert state["exitCode"] == 0
    msg = json.loads(state["message"])
    assert msg["status"] == "ok" and msg["outputs"] == "written" and msg["class"] == "ok", msg
    sec = w.outputs_secret(pod.name)
    assert sec["decoded"] == {"region": "nowhere", "secretOut": DB_PASSWORD}
    assert sec["metadata"]["ownerReferences"] == [owner]
    # the secret value is in no Job or Pod spec
    assert DB_PASSWORD not in json.dumps(j) and DB_PASSWORD not in json.dumps(pods)


def test_each_job_starts_from_an_empty_work_dir(pod):
    """Every Job's pod has a fresh emptyDir: a second update and a destroy find the stack
    (and its secrets provider state) in the backend alone; preview writes no outputs."""
    w = pod.w
    pod.stack()
    r, msg = pod.run(pod.update(flux_source(w, w.artifact())))
    assert r.returncode == 0 and msg["outputs"] == "written", r.stderr
    again = w.artifact(w.revision_files(greeting="again"))
    for op in ("preview", "up"):
        pod.fresh_work(f"work-{op}")
        r, msg = pod.run(pod.update(flux_source(w, again, "main@sha1:5678"), operation=op))
        assert r.returncode == 0, r.stderr
        assert msg["status"] == "ok" and msg["changes"].get("update") == 1, msg
        want = "none" if op == "preview" else "written"
        assert msg["outputs"] == want, msg
        assert list(w.cloud_files().values()) == ["hello" if op == "preview" else "again"]
    assert w.outputs_secret(pod.name)["decoded"]["message"] == "again"
    # the drift check (local mode's refresh): nothing drifted
    pod.fresh_work("work-refresh")
    r, msg = pod.run(pod.update(flux_source(w, again, "main@sha1:5678"), operation="refresh"))
    assert r.returncode == 0 and msg["status"] == "ok" and msg["outputs"] == "none", msg
    assert w.updates("dev", commands=("refresh",))[-1]["argv"].count("--preview-only") == 1
    pod.fresh_work("work-destroy")
    r, msg = pod.run(pod.update(flux_source(w, again, "main@sha1:5678"), operation="destroy"))
    assert r.returncode == 0, r.stderr
    assert msg["status"] == "ok" and msg["outputs"] == "none", msg
    assert w.cloud_files() == {}


def test_a_refresh_that_finds_drift_succeeds_and_names_the_resources(pod):
    """The drift check in a Job (docs/job-runner.md "Drift checks"): an edited cloud file is
    drift; run-update exits 0 (the check did its job, so the Job is Complete) with status
    changes-not-expected and the drifted resource in "drift"; an up with refresh reports
    what its refresh found there too, and puts it back."""
    w = pod.w
    pod.stack()
    art = w.artifact(w.revision_files("stack-plan"))
    r, _ = pod.run(pod.update(flux_source(w, art)))
    assert r.returncode == 0, r.stderr
    path, = (w.cloud_dir / "files").iterdir()
    path.write_text("tampered")
    pod.fresh_work("work-refresh")
    r, msg = pod.run(pod.update(flux_source(w, art), operation="refresh"))
    assert r.returncode == 0, r.stderr
    assert (msg["status"], msg["class"], msg["outputs"]) == ("changes-not-expected", "ok", "none"), msg
    assert [d["urn"].rsplit("::", 1)[-1] for d in msg["drift"]["resources"]] == ["note"], msg
    assert msg["drift"]["omitted"] == 0
    assert path.read_text() == "tampered"                 # a check changes nothing
    pod.fresh_work("work-repair")
    r, msg = pod.run(pod.update(flux_source(w, art), refresh=True))
    assert r.returncode == 0 and msg["status"] == "ok", msg
    assert [d["urn"].rsplit("::", 1)[-1] for d in msg["drift"]["resources"]] == ["note"], msg
    assert path.read_text() == "hello"


def test_sigterm_interrupts_the_cli_and_releases_the_lock(pod):
    """A deleted pod or the Job's deadline: SIGTERM reaches run-update, which cancels the
    CLI the way the controller does (SIGINT, the CLI releases its lock) and reports it."""
    w = pod.w
    pod.stack()
    update = pod.update(flux_source(w, w.artifact()),
                        env=["PULUMI_CONFIG_PASSPHRASE", "PULUMI_STANDIN_CLOUD",
                             "PULUMI_STANDIN_SLOW_MS"])
    # Each resource step takes 5 s (the stand-in finishes the step it is in before it
    # sees the cancel, as the real CLI does with a running provider call).
    proc = pod.start(update, env={"PULUMI_STANDIN_SLOW_MS": "5000"})
    try:
        wait_until(lambda: w.updates("dev") and w.locks(), timeout=120,
                   what="the up to hold its lock")
    finally:
        proc.send_signal(signal.SIGTERM)
    r, msg = pod.finish(proc, timeout=120)
    assert r.returncode == 1, r.stderr
    assert msg["status"] == "canceled" and msg["outputs"] == "none", msg
    assert w.locks() == []


@pytest.mark.parametrize("stack_world", ["emulator"], indirect=True)
def test_outputs_secret_conflict_is_read_again_once(pod):
    """A 409 on the outputs Secret's PUT: run-update reads it again and writes once more;
    a second 409 leaves the update a success whose outputs "failed".  Emulator only: the
    409 is the emulator's injected fault (fail_next); the real kube-apiserver has no such
    knob, and no concurrent writer can be timed between the pod's GET and PUT
    (FIDELITY.md)."""
    w = pod.w
    pod.stack()
    a = w.artifact()
    w.api.fail_next(count=1, code=409, method="PUT", path=rf"/secrets/{pod.name}-outputs$")
    r, msg = pod.run(pod.update(flux_source(w, a)))
    assert r.returncode == 0 and msg["outputs"] == "written", (r.stderr, msg)
    assert "writing it again" in r.stderr
    assert w.outputs_secret(pod.name)["decoded"]["message"] == "hello"
    pod.fresh_work("work-2")
    w.api.fail_next(count=2, code=409, method="PUT", path=rf"/secrets/{pod.name}-outputs$")
    r, msg = pod.run(pod.update(flux_source(w, w.artifact(w.revision_files(greeting="two")))))
    assert r.returncode == 0, r.stderr
    assert msg["status"] == "ok" and msg["outputs"] == "failed", msg
    assert "outputs Secret was not written" in msg["message"]
    assert w.outputs_secret(pod.name)["decoded"]["message"] == "hello"


def test_help_lists_every_flag_and_docs_describe_them(pc_bin, tmp_path):
    """No cluster involved: --help, the top-level listing, docs/cli.md's section, and
    the usage errors that come before the input is read."""
    import re
    r = subprocess.run([pc_bin, "run-update", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("Usage: pulumi-controller run-update")
    assert "Exit status:" in r.stdout and "PULUMI_CONTROLLER_UPDATE" in r.stdout
    top = subprocess.run([pc_bin, "--help"], capture_output=True, text=True).stdout
    assert "run-update" in top
    doc = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    section = doc.split("## run-update", 1)[1]
    flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", r.stdout))
    assert {"--work-dir", "--termination-log", "--oci-secret-dir", "--verify-keys-dir",
            "--service-account-dir", "--pulumi", "--plugins-dir"} <= flags
    for flag in flags:
        assert f"`{flag}" in section, f"run-update {flag} is not in docs/cli.md"
    env = {"PATH": "/usr/bin:/bin"}
    for args in (["--termination-log", str(tmp_path / "t")], ["--work-dir", str(tmp_path)],
                 ["--work-dir", str(tmp_path), "--termination-log", str(tmp_path / "t"), "extra"],
                 ["--no-such-flag"]):
        r = subprocess.run([pc_bin, "run-update", *args], capture_output=True, text=True, env=env)
        assert r.returncode == 2, (args, r.stderr)


def test_update_timeout_is_class_timeout(pod):
    """timeoutSeconds bounds each CLI call: a step slower than that ends as a timeout."""
    w = pod.w
    pod.stack()
    update = pod.update(flux_source(w, w.artifact()), timeoutSeconds=3,
                        env=["PULUMI_CONFIG_PASSPHRASE", "PULUMI_STANDIN_CLOUD",
                             "PULUMI_STANDIN_SLOW_MS"])
    r, msg = pod.run(update, env={"PULUMI_STANDIN_SLOW_MS": "30000"})
    assert r.returncode == 1, r.stderr
    assert msg["status"] == "timeout" and msg["class"] == "timeout", msg
    assert msg["outputs"] == "none"
