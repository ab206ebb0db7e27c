"""Stack scenario 10 (issue 11): the classic manifest (programs/classic-stack.yaml, a
verbatim copy of reference/classic-stack.yaml: v1alpha1, programRef {repo, ref}, envs
from a Secret, destroyOnDelete, cloud: secretsmanager) applies unchanged and is acted on
through the GitRepository the controller creates, whose status the test writes as
source-controller would.  Both tiers.

The manifest names no backend and no passphrase: the backend is what `pulumi login` left
in PULUMI_HOME (as the CLI resolves it), and the first update fails for want of a
passphrase until the test adds one in the same classic `envs` form."""
import hashlib
import json
import pathlib

HERE = pathlib.Path(__file__).resolve().parent
MANIFEST = HERE / "programs" / "classic-stack.yaml"
NAME = "production-network"
SOURCE = f"{NAME}-program"
ACCESS_KEY = "AKIA-Classic-Test-0042"
SECRET_KEY = "classic-Secret-Access-Key-7c7c"


def digest(value):
    return hashlib.sha256(value.encode()).hexdigest()


def test_classic_manifest_is_acted_on(stack_world):
    w = stack_world
    w.secret("aws-creds", {"access-key-id": ACCESS_KEY, "secret-access-key": SECRET_KEY})
    w.login()
    w.kubectl("apply", "-f", MANIFEST)
    # A Stack in a Flux shard: its GitRepository must reach the same sharded source-controller.
    w.kubectl("label", "stack", NAME, "sharding.fluxcd.io/key=shard-a")
    w.controller()

    # The GitRepository the controller made for programRef, owned by the Stack.
    repo = w._wait(NAME, lambda: w._call(lambda c: c.list(
        "source.toolkit.fluxcd.io/v1", "gitrepositories", w.namespace))["items"] and
        w._call(lambda c: c.get("source.toolkit.fluxcd.io/v1", "gitrepositories", SOURCE,
                                w.namespace)), 120, f"GitRepository {SOURCE}")
    stack = w.stack(NAME)
    assert stack["apiVersion"] in ("pulumi.com/v1alpha1", "pulumi.com/v1")
    assert repo["spec"]["url"] == "ssh://git@github.com/acme/pulumi-network.git"
    assert repo["spec"]["ref"] == {"tag": "v2.1.0"}
    assert repo["spec"]["interval"] in ("60s", "1m", "1m0s")
    owner, = repo["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == \
        ("Stack", NAME, stack["metadata"]["uid"], True)
    assert repo["metadata"]["labels"]["pulumi.com/stack-name"] == NAME
    assert repo["metadata"]["labels"]["sharding.fluxcd.io/key"] == "shard-a"

    obj = w.wait_condition(NAME, "Ready", "False", "ArtifactNotReady")
    ev = w.wait_event(NAME, "BackendIgnored")
    assert ev[0]["type"] == "Warning" and "secretsmanager" in ev[0]["message"]
    msg = w.cond(obj, "Ready")["message"]
    assert "backend" in msg and "secretsProvider" in msg

    # source-controller would now store the tag's artifact.
    src = w.flux_source("GitRepository", SOURCE, w.artifact(w.program_files("stack-classic")),
                        revision="v2.1.0@sha1:" + "ab" * 20, create=False)
    obj = w.wait_condition(NAME, "Ready", "False", "UpdateFailed")
    assert "passphrase" in w.cond(obj, "Ready")["message"].lower()
    ran = [r for r in w.cli_invocations() if "AWS_ACCESS_KEY_ID" in r["env"]]
    assert ran and ran[-1]["env_sha256"]["AWS_ACCESS_KEY_ID"] == digest(ACCESS_KEY)
    assert ran[-1]["env_sha256"]["AWS_SECRET_ACCESS_KEY"] == digest(SECRET_KEY)

    # The passphrase (and the test provider's cloud) in the same classic envs form.
    patch = {"spec": {"envs": {
        "PULUMI_CONFIG_PASSPHRASE": {"valueFrom": {"secretKeyRef": {
            "name": "pulumi-passphrase", "key": "passphrase"}}},
        "PULUMI_STANDIN_CLOUD": {"value": str(w.cloud_dir)}}}}
    w.kubectl("patch", "stack", NAME, "--type", "merge", "-p", json.dumps(patch))
    obj = w.wait_ready(NAME, revision=src["revision"])
    assert obj["status"]["outputs"]["region"] == "us-east-1"
    assert list(w.cloud_files().values()) == ["us-east-1"]
    assert list((w.backend_dir / ".pulumi" / "stacks" / "pulumi-network").glob("*.json"))

    # destroyOnDelete
    w.kubectl("delete", "stack", NAME, "--wait=false")
    w.wait_gone(NAME, timeout=240)
    assert w.cloud_files() == {}
    assert "DestroySucceeded" in w.event_reasons(NAME)
    w.assert_no_secret(ACCESS_KEY, SECRET_KEY)


def test_cloud_url_credentials_are_never_shown(stack_world):
    """spec.cloud in the Ready message and the BackendIgnored Event (which notifications
    forward) without its userinfo or query: a classic `cloud` may be an s3:// URL with
    keys in it, shadowed by spec.backend, or a URL of a scheme that is no backend."""
    w = stack_world
    key, secret, token = "AKIA-Cloud-Key-77", "Cloud-Secret-88", "Cloud-Tok-99"
    w.controller()
    src = w.flux_source("GitRepository", "app", w.artifact())
    git = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "name": "app"}
    clouds = {"shadowed": f"s3://{key}:{secret}@minio.example:9000/state?region=eu&secret_key={token}",
              "ignored": f"postgres://{key}:{secret}@db.example/state?token={token}"}
    for name, cloud in clouds.items():
        w.apply_stack(name, fluxSource={"sourceRef": git}, cloud=cloud)
    shown = []
    for name, host in (("shadowed", "s3://minio.example:9000/state"), ("ignored", "postgres://db.example/state")):
        obj = w.wait_ready(name, revision=src["revision"])
        msg = w.cond(obj, "Ready")["message"]
        assert f'spec.cloud "{host}"' in msg, msg
        ev = w.wait_event(name, "BackendIgnored")
        shown += [msg] + [e["message"] for e in ev]
    for text in shown:
        for value in (key, secret, token):
            assert value not in text, text
