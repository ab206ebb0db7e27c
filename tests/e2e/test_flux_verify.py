"""Issue 15, signatures: a Flux OCIRepository whose spec has `verify`, with the real
source-controller (v1.9, flux_fixtures.py) doing the verification.

  - a signed artifact (`pulumi-controller push --sign-key`, an OpenSSL key): the source
    says SourceVerified True, the Stack reports it through and applies;
  - the tag moved to an unsigned artifact: source-controller says verification failed
    and keeps the previous artifact in its status; the Stack refuses it (the artifact
    may predate the verification), VerificationError "source NS/app says verification
    failed: …", nothing applied, the old revision stays applied;
  - verify removed from the source: its condition goes, and so does the Stack's, which
    applies what the source now offers.

Real tier only: what is reported through is what the real source-controller writes
(its condition, its messages, the artifact it keeps after a failure); on the emulator
tier the source's status would be the test's own words, compared with nothing.  The
controller's rules over that status are unit-tested in tests/unit/test_stack_verify.c."""
import subprocess

import pytest

from flux_fixtures import SHARD_LABEL, new_token
from stack_fixtures import SOURCE_API, wait_until

pytestmark = [pytest.mark.parametrize("stack_world", ["real"], indirect=True),
              pytest.mark.usefixtures("isolated_docker_config")]

VERIFY = {"provider": "cosign", "secretRef": {"name": "cosign-keys"}}


def keypair(tmp_path):
    key, pub = tmp_path / "cosign.key", tmp_path / "cosign.pub"
    subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out",
                    str(key)], check=True, capture_output=True)
    subprocess.run(["openssl", "ec", "-in", str(key), "-pubout", "-out", str(pub)], check=True,
                   capture_output=True)
    return key, pub.read_text()


def push(w, tmp_path, repo, greeting, key=None):
    """repo:latest saying greeting, signed with key when given; the manifest digest."""
    d = tmp_path / f"push-{greeting}"
    d.mkdir()
    for rel, data in w.revision_files(greeting=greeting).items():
        (d / rel).write_bytes(data)
    sign = ["--sign-key", str(key)] if key else []
    r = subprocess.run([w.pc_bin, "push", f"oci://{w.registry.host}/{repo}:latest", "--path",
                        str(d), "--plain-http", *sign], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[0]


def source(w):
    return w._call(lambda c: c.get(SOURCE_API, "ocirepositories", "app", w.namespace))


def test_oci_repository_verification_is_reported_and_gates_the_artifact(stack_world, tmp_path):
    w = stack_world
    w.flux                      # the real CRDs and controllers, before the first object
    key, pub = keypair(tmp_path)
    w.secret("cosign-keys", {"cosign.pub": pub})
    repo = w.oci_repo("app")
    d1 = push(w, tmp_path, repo, "signed", key)
    spec = dict(w.real_source_spec("OCIRepository", "app"), verify=VERIFY)
    src = w.reconcile_source("OCIRepository", "app", spec)
    rev1 = src["status"]["artifact"]["revision"]
    assert rev1 == f"latest@{d1}"
    assert w.cond(src, "SourceVerified")["status"] == "True"

    w.apply_stack("demo", fluxSource={"sourceRef": {"apiVersion": SOURCE_API,
                                                    "kind": "OCIRepository", "name": "app"}})
    w.controller()
    obj = w.wait_ready("demo", revision=rev1)
    sv = w.cond(obj, "SourceVerified")
    assert (sv["status"], sv["reason"]) == ("True", "Succeeded"), sv
    assert sv["message"] == f"source {w.namespace}/app: verified signature of revision {rev1}"
    assert list(w.cloud_files().values()) == ["signed"]

    # an unsigned artifact under the tag: source-controller refuses it and keeps the old one
    mark = w.mark()
    push(w, tmp_path, repo, "unsigned")
    token = new_token()
    w._call(lambda c: c.patch(SOURCE_API, "ocirepositories", "app", {"metadata": {
        "labels": {SHARD_LABEL[0]: SHARD_LABEL[1]},
        "annotations": {"reconcile.fluxcd.io/requestedAt": token}}}, w.namespace, "merge"))

    def source_failed():
        cur = source(w)
        c = w.cond(cur, "SourceVerified")
        return cur if c and c["status"] == "False" else None
    cur = wait_until(source_failed, 120, what="source-controller's SourceVerified=False")
    assert cur["status"]["artifact"]["revision"] == rev1      # what it still offers
    theirs = w.cond(cur, "SourceVerified")["message"]

    obj = w.wait_condition("demo", "SourceVerified", "False", "VerificationError")
    sv = w.cond(obj, "SourceVerified")
    assert sv["message"].startswith(f"source {w.namespace}/app says verification failed: ")
    assert theirs in sv["message"]
    ready = w.cond(obj, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "VerificationError")
    wait_until(lambda: any(e["reason"] == "VerificationError" and e["type"] == "Warning"
                           for e in w.events("demo")), 60, what="a Warning event")
    w.settle("demo")
    assert w.updates(since=mark) == []
    assert w.stack("demo")["status"]["lastAppliedRevision"] == rev1
    assert list(w.cloud_files().values()) == ["signed"]

    # verify removed from the source: no SourceVerified anywhere, the new artifact applies
    spec.pop("verify")
    src = w.reconcile_source("OCIRepository", "app", spec)
    assert w.cond(src, "SourceVerified") is None
    rev2 = src["status"]["artifact"]["revision"]
    assert rev2 != rev1
    obj = w.wait_ready("demo", revision=rev2)
    wait_until(lambda: w.cond(w.stack("demo"), "SourceVerified") is None, 60,
               what="the Stack's SourceVerified removed")
    assert list(w.cloud_files().values()) == ["unsigned"]
