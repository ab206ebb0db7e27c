"""Issue 15, signatures, Stack side: `ociSource.verify {provider: cosign, secretRef}`.

A Stack whose ociSource verifies applies only revisions whose manifest is signed by a key
of its Secret (any `*.pub` key), and says so in its SourceVerified condition:

  - a signed artifact (the `.sig` tag and the Sigstore bundle referrer, signed by
    `pulumi-controller push --sign-key` with OpenSSL-made keys, and by the real cosign)
    is applied, SourceVerified True naming the key and the scheme; the check is not
    repeated for the same digest and keys, and is when the keys Secret changes;
  - unsigned: SignatureNotFound; signed by another key: VerificationError; a signature
    whose payload names another digest (copied onto this digest's .sig tag):
    VerificationError; nothing applied, a Warning event;
  - a tag moved to an unsigned artifact after a signed one was applied: refused, the old
    revision stays applied and in status.artifact;
  - the keys Secret missing, then without a usable key, then fixed: the Stack applies;
  - verify removed: the condition goes;
  - keyless verify and another provider are refused by the API server (the CRD).

Both tiers (stack_world); the registry is docker-registry (registry_fixtures.registry_plain),
which has no referrers API, so bundles are found through the sha256-<hex> referrers tag.
"""
import os
import pathlib
import subprocess

import pytest

from kube_fixtures import KubeError
from stack_fixtures import wait_until

pytestmark = pytest.mark.usefixtures("isolated_docker_config")

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
REAL_COSIGN = pathlib.Path(os.environ.get("REAL_DIR", "/work/main/.real")) / "bin" / "cosign"


def keypair(tmp_path, name):
    """An ECDSA P-256 key made by OpenSSL: (private key file, public PEM text)."""
    key = tmp_path / f"{name}.key"
    pub = tmp_path / f"{name}.pub"
    subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out",
                    str(key)], check=True, capture_output=True)
    subprocess.run(["openssl", "ec", "-in", str(key), "-pubout", "-out", str(pub)], check=True,
                   capture_output=True)
    return key, pub.read_text()


def push(run_pc, registry, w, tmp_path, repo, tag, greeting, key=None, fmt="sig"):
    """Pushes stack-basic saying `greeting` as repo:tag, signed with key when given;
    returns the manifest digest."""
    d = tmp_path / f"push-{tag}-{greeting}"
    d.mkdir()
    for rel, data in w.revision_files(greeting=greeting).items():
        (d / rel).write_bytes(data)
    sign = ["--sign-key", key, "--sign-format", fmt] if key else []
    r = run_pc("push", registry.ref(repo, tag), "--path", d, "--plain-http",
               "--revision", f"main@sha1:{greeting}", *sign)
    assert r.returncode == 0, r.stderr
    digest = r.stdout.strip().splitlines()[0]
    assert digest.startswith("sha256:"), r.stdout
    return digest


def sig_tag(digest):
    return digest.replace(":", "-") + ".sig"


def verify_source(registry, repo, tag, secret="cosign-keys", interval="2s"):
    return {"url": f"oci://{registry.host}/{repo}", "ref": {"tag": tag}, "insecure": True,
            "interval": interval, "verify": {"provider": "cosign", "secretRef": {"name": secret}}}


def verified_lines(w):
    return w.ctl.find("signature verified")


def assert_refused(w, name, reason, *fragments):
    """Waits for SourceVerified False and Ready False with reason, the message naming
    fragments, and a Warning event of that reason; returns the Stack."""
    def refused():
        obj = w.stack(name)
        sv = w.cond(obj, "SourceVerified")
        if sv and sv["status"] == "False" and sv["reason"] == reason and \
                all(f in sv["message"] for f in fragments):
            return obj
        return None
    obj = wait_until(refused, 120, what=f"SourceVerified False {reason} naming {fragments}")
    ready = w.cond(obj, "Ready")
    assert ready["status"] == "False" and ready["reason"] == reason, ready
    assert ready["message"].startswith(w.cond(obj, "SourceVerified")["message"]), ready
    wait_until(lambda: any(e["reason"] == reason and e["type"] == "Warning"
                           for e in w.events(name)), 60, what=f"Warning event {reason}")
    return obj


@pytest.mark.parametrize("fmt,scheme", [("sig", "cosign .sig"), ("bundle", "sigstore bundle")])
def test_signed_artifact_is_applied_and_verified_once(stack_world, run_pc, registry_plain,
                                                      tmp_path, fmt, scheme):
    w = stack_world
    repo = f"stacks-{w.id}/signed"
    key, pub = keypair(tmp_path, "cosign")
    d1 = push(run_pc, registry_plain, w, tmp_path, repo, "stable", "signed", key, fmt)
    w.secret("cosign-keys", {"cosign.pub": pub, "README": "not a key"})
    w.apply_stack("demo", ociSource=verify_source(registry_plain, repo, "stable"))
    w.controller()
    obj = w.wait_ready("demo", revision=f"stable@{d1}")
    sv = w.cond(obj, "SourceVerified")
    assert sv["status"] == "True" and sv["reason"] == "Succeeded", sv
    assert sv["message"] == f"verified signature of revision stable@{d1} with cosign.pub ({scheme})"
    assert list(w.cloud_files().values()) == ["signed"]

    # the same digest and keys: resolved again (a reconcile request), not verified again
    assert len(verified_lines(w)) == 1
    w.patch_stack("demo", {"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": "1"}}})
    wait_until(lambda: w.stack("demo")["status"].get("lastHandledReconcileAt") == "1", 60,
               what="request handled")
    w.settle("demo")
    assert len(verified_lines(w)) == 1

    # a changed keys Secret is verified again (and another key beside it is fine)
    _, other = keypair(tmp_path, "other")
    w.secret("cosign-keys", {"cosign.pub": pub, "other.pub": other})
    wait_until(lambda: len(verified_lines(w)) == 2, 60, what="verified again")

    # verify removed: the condition goes, the Stack stays Ready
    w.patch_stack("demo", {"spec": {"ociSource": {"verify": None}}})
    obj = w.wait_ready("demo", revision=f"stable@{d1}")
    wait_until(lambda: w.cond(w.stack("demo"), "SourceVerified") is None, 60,
               what="SourceVerified removed")


def test_unsigned_artifact_is_refused(stack_world, run_pc, registry_plain, tmp_path):
    w = stack_world
    repo = f"stacks-{w.id}/unsigned"
    _, pub = keypair(tmp_path, "cosign")
    d1 = push(run_pc, registry_plain, w, tmp_path, repo, "stable", "unsigned")
    w.secret("cosign-keys", {"cosign.pub": pub})
    w.apply_stack("demo", ociSource=verify_source(registry_plain, repo, "stable"))
    w.controller()
    obj = assert_refused(w, "demo", "SignatureNotFound", f"stable@{d1}", "not signed")
    assert w.cond(obj, "Reconciling")["status"] == "True"     # retried: signing may follow
    w.settle("demo")
    assert w.updates() == [] and w.cloud_files() == {}
    assert "lastAppliedRevision" not in obj["status"]


def test_wrong_key_is_refused_until_the_secret_has_the_right_one(stack_world, run_pc,
                                                                 registry_plain, tmp_path):
    w = stack_world
    repo = f"stacks-{w.id}/wrongkey"
    key, pub = keypair(tmp_path, "signer")
    _, wrong = keypair(tmp_path, "wrong")
    d1 = push(run_pc, registry_plain, w, tmp_path, repo, "stable", "wrongkey", key)
    w.secret("cosign-keys", {"cosign.pub": wrong})
    w.apply_stack("demo", ociSource=verify_source(registry_plain, repo, "stable", interval="1h"))
    w.controller()
    obj = assert_refused(w, "demo", "VerificationError", f"stable@{d1}", "cosign .sig")
    assert w.cond(obj, "Stalled")["status"] == "True"
    w.settle("demo")
    assert w.updates() == []

    # the keys fixed: the Secret's change queues the Stack (interval 1h), which applies
    w.secret("cosign-keys", {"cosign.pub": wrong, "signer.pub": pub})
    obj = w.wait_ready("demo", revision=f"stable@{d1}", timeout=120)
    assert "with signer.pub (cosign .sig)" in w.cond(obj, "SourceVerified")["message"]
    assert list(w.cloud_files().values()) == ["wrongkey"]


def test_signature_naming_another_digest_is_refused(stack_world, run_pc, registry_plain,
                                                    tmp_path):
    """A valid signature of artifact A copied onto B's .sig tag: the signature checks out
    with the key, but its payload names A's digest, not the one pulled."""
    w = stack_world
    repo = f"stacks-{w.id}/copied"
    key, pub = keypair(tmp_path, "cosign")
    da = push(run_pc, registry_plain, w, tmp_path, repo, "a", "signed-a", key)
    db = push(run_pc, registry_plain, w, tmp_path, repo, "b", "unsigned-b")
    status, _, body = registry_plain.raw("GET", f"/v2/{repo}/manifests/{sig_tag(da)}",
                                         headers={"Accept": MANIFEST}, repo=repo)
    assert status == 200, body
    registry_plain.put_manifest(repo, sig_tag(db), body, MANIFEST)
    w.secret("cosign-keys", {"cosign.pub": pub})
    w.apply_stack("demo", ociSource=verify_source(registry_plain, repo, "b"))
    w.controller()
    assert_refused(w, "demo", "VerificationError", f"b@{db}", "cosign .sig",
                   f"names digest {da}, not the manifest {db}")
    w.settle("demo")
    assert w.updates() == [] and w.cloud_files() == {}


def test_tag_moved_to_an_unsigned_artifact_keeps_the_old_revision(stack_world, run_pc,
                                                                  registry_plain, tmp_path):
    w = stack_world
    repo = f"stacks-{w.id}/moved"
    key, pub = keypair(tmp_path, "cosign")
    d1 = push(run_pc, registry_plain, w, tmp_path, repo, "stable", "first", key)
    w.secret("cosign-keys", {"cosign.pub": pub})
    w.apply_stack("demo", ociSource=verify_source(registry_plain, repo, "stable"))
    w.controller()
    w.wait_ready("demo", revision=f"stable@{d1}")

    mark = w.mark()
    d2 = push(run_pc, registry_plain, w, tmp_path, repo, "stable", "moved")
    assert d2 != d1
    obj = assert_refused(w, "demo", "SignatureNotFound", f"stable@{d2}",
                         f"revision stable@{d1} stays applied")
    assert obj["status"]["lastAppliedRevision"] == f"stable@{d1}"
    assert obj["status"]["artifact"]["revision"] == f"stable@{d1}"
    w.settle("demo")
    assert w.updates(since=mark) == []
    assert list(w.cloud_files().values()) == ["first"]

    # the tag moved again, to a signed artifact: applied
    d3 = push(run_pc, registry_plain, w, tmp_path, repo, "stable", "third", key)
    w.wait_ready("demo", revision=f"stable@{d3}", timeout=120)
    assert list(w.cloud_files().values()) == ["third"]


def test_keys_secret_missing_then_unusable_then_fixed(stack_world, run_pc, registry_plain,
                                                      tmp_path):
    w = stack_world
    repo = f"stacks-{w.id}/keys"
    key, pub = keypair(tmp_path, "cosign")
    d1 = push(run_pc, registry_plain, w, tmp_path, repo, "stable", "keys", key)
    w.apply_stack("demo", ociSource=verify_source(registry_plain, repo, "stable", interval="1h"))
    w.controller()
    assert_refused(w, "demo", "ReferenceNotFound", "cosign-keys", "spec.ociSource.verify.secretRef")

    w.secret("cosign-keys", {"cosign.key": "not public", "notes.txt": "x"})
    obj = assert_refused(w, "demo", "PublicKeysInvalid", "no key ending in .pub")
    assert w.cond(obj, "Stalled")["status"] == "True"
    w.secret("cosign-keys", {"cosign.pub": "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"})
    assert_refused(w, "demo", "PublicKeysInvalid", "cosign.pub")
    w.settle("demo")
    assert w.updates() == []

    w.secret("cosign-keys", {"cosign.pub": pub})
    obj = w.wait_ready("demo", revision=f"stable@{d1}", timeout=120)
    assert w.cond(obj, "SourceVerified")["status"] == "True"
    assert list(w.cloud_files().values()) == ["keys"]


@pytest.mark.parametrize("new_bundle_format", [False, True], ids=["sig", "bundle"])
def test_artifact_signed_by_the_real_cosign(stack_world, run_pc, registry_plain, tmp_path,
                                            new_bundle_format):
    """The independent party: `cosign sign --key` (no transparency log) of a pushed
    artifact, in cosign v2's .sig format and in v3's bundle format."""
    if not REAL_COSIGN.exists():
        pytest.skip(f"{REAL_COSIGN} is not built (make deps-real)")
    w = stack_world
    repo = f"stacks-{w.id}/cosign"
    d1 = push(run_pc, registry_plain, w, tmp_path, repo, "stable", "by-cosign")
    # HOME in the test's directory: cosign keeps nothing in the user's
    env = dict(os.environ, COSIGN_PASSWORD="pw-for-test", HOME=str(tmp_path), COSIGN_YES="true",
               SIGSTORE_NO_CACHE="true")
    subprocess.run([str(REAL_COSIGN), "generate-key-pair"], cwd=tmp_path, env=env, check=True,
                   capture_output=True, timeout=120)
    # key-based and offline (no transparency log), as the controller verifies
    r = subprocess.run([str(REAL_COSIGN), "sign", "--key", "cosign.key", "--use-signing-config=false",
                        "--tlog-upload=false", "--allow-http-registry",
                        f"--new-bundle-format={'true' if new_bundle_format else 'false'}",
                        f"{registry_plain.host}/{repo}@{d1}"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    w.secret("cosign-keys", {"cosign.pub": (tmp_path / "cosign.pub").read_text()})
    w.apply_stack("demo", ociSource=verify_source(registry_plain, repo, "stable"))
    w.controller()
    obj = w.wait_ready("demo", revision=f"stable@{d1}")
    scheme = "sigstore bundle" if new_bundle_format else "cosign .sig"
    assert w.cond(obj, "SourceVerified")["message"].endswith(f"with cosign.pub ({scheme})")
    assert list(w.cloud_files().values()) == ["by-cosign"]


@pytest.mark.parametrize("verify,message", [
    ({"provider": "cosign"}, "spec.ociSource.verify.secretRef: Required value"),
    ({"provider": "notation", "secretRef": {"name": "k"}},
     'spec.ociSource.verify.provider: Unsupported value: "notation": supported values: "cosign"'),
])
def test_the_server_refuses_what_cannot_be_verified(stack_world, registry_plain, verify, message):
    """docs/stack-api.md, "What the API server refuses": keyless and notation never reach
    the controller."""
    w = stack_world
    src = dict(verify_source(registry_plain, "stacks/refused", "v1"), verify=verify)
    with pytest.raises(KubeError) as err:
        w.apply_stack("demo", ociSource=src)
    assert err.value.code == 422
    assert message in str(err.value), str(err.value)
