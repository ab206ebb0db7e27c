"""`pulumi-controller run-update` (issue 16, the pod side; /work/wt/JOBS.md "run-update"),
run directly as a process the way a Job's pod runs it: PULUMI_CONTROLLER_UPDATE in the
environment, the secret values in the variables it names, a service-account directory
(token + API CA, as the kubelet mounts it) for the outputs Secret, a work dir and a
termination-log file.  Both tiers: the emulator with the pulumi stand-in, the real
kube-apiserver with the real pulumi CLI.

Cases: a Flux artifact whose up succeeds (outputs Secret written in the controller's
format, termination message ok); a failing program (exit 1, message, class); an OCI source
pulled by manifest digest (and a layer that is not the one resolved, and verify, both
refused); inputs that are not valid (exit 2, the field named); a digest mismatch (refused,
no pulumi process started)."""
import json
import os
import subprocess
import urllib.parse

import pytest

from stack_fixtures import PASSPHRASE, SOURCE_API

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
        self.work = self.dir / "work"
        self.work.mkdir(parents=True)
        self.term = self.dir / "termination-log"
        self.sa = self.dir / "serviceaccount"
        self.sa.mkdir()
        api = world.api
        url = urllib.parse.urlsplit(getattr(api, "direct_url", None) or api.url)
        self.host, self.port = url.hostname, str(url.port)
        if world.cli.kind == "real":
            # The plugins the image would carry (the controller's PULUMI_HOME has them).
            (self.work / "pulumi-home").mkdir()
            (self.work / "pulumi-home" / "plugins").symlink_to(world.cli.home / "plugins")

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

    def run(self, update, env=None, timeout=300):
        """Runs run-update; returns (CompletedProcess, termination message or None)."""
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
        r = subprocess.run([self.w.pc_bin, "run-update", "--work-dir", str(self.work),
                            "--termination-log", str(self.term),
                            "--service-account-dir", str(self.sa),
                            "--pulumi", str(self.w.pulumi_bin)],
                           capture_output=True, text=True, timeout=timeout, env=full)
        for mark in ("ERROR: AddressSanitizer", "runtime error:", "LeakSanitizer"):
            assert mark not in r.stderr, r.stderr
        msg = None
        if self.term.exists():
            raw = self.term.read_bytes()
            assert len(raw) <= TERMINATION_MAX
            msg = json.loads(raw.decode("utf-8"))
        return r, msg


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
    r, msg = pod.run(update, env={"PC_DB_PASSWORD": DB_PASSWORD, "PC_REGION": "eu-north"})
    assert r.returncode == 0, r.stderr
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


def push(run_pc, registry, w, tmp_path, repo, tag):
    d = tmp_path / f"push-{tag}"
    d.mkdir()
    for rel, data in w.program_files("stack-basic").items():
        (d / rel).write_bytes(data)
    r = run_pc("push", registry.ref(repo, tag), "--path", d, "--plain-http",
               "--source", "https://git.example.test/app", "--revision", "main@sha1:abcd")
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


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
    # verify asked for: this build cannot check signatures, so it refuses to run
    r, msg = pod.run(pod.update(dict(src, verify=True)))
    assert r.returncode == 1 and msg["class"] == "source", msg
    assert "cannot verify" in msg["message"] and w.cli_invocations() == []
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
    r, msg = pod.run("{not json")
    assert r.returncode == 2 and "not a JSON object" in r.stderr
    assert msg["status"] == "internal"
    assert pod.w.cli_invocations() == []
