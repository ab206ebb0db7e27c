"""cosign signatures against a real registry (Debian's docker-registry 2.8,
which has no referrers API, so the bundle scheme goes through the
sha256-<hex> referrers tag), with the real cosign (.real/bin/cosign, built
by `make deps-real`) as the independent party in both directions:

* artifacts signed by `cosign sign --key` (the bundle format, cosign v3's
  default, and the legacy .sig tag) verify with `pulumi-controller verify`;
* artifacts signed by `pulumi-controller push --sign-key` verify with
  `cosign verify --key --insecure-ignore-tlog`;
* refusals: a tampered payload, a wrong key, a payload naming another
  digest, a signature copied from another tag, a missing signature and
  garbage signature manifests, each refused by both verifiers.

No cluster and no pulumi are involved (these are the CLI and the library
against a registry), so there is no [emulator]/[real] tier to run: the
registry and cosign are the real components here.  The cosign cases skip,
with the reason, only when .real/bin/cosign is absent; the rest run always.
"""
import base64
import hashlib
import json
import os
import pathlib
import re
import subprocess

import pytest

from nginx_fixtures import free_port
from real_fixtures import REAL_BIN
from registry_fixtures import make_tree

pytestmark = pytest.mark.usefixtures("isolated_docker_config")

COSIGN = REAL_BIN / "cosign"
COSIGN_PASSWORD = "e2e-cosign-pw"
SIMPLESIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
SIG_ANNOTATION = "dev.cosignproject.cosign/signature"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


def need_cosign():
    if not os.access(COSIGN, os.X_OK):
        pytest.skip(f"{COSIGN} is not built (`make deps-real` builds it): the cosign interop "
                    "cases need the real cosign")
    return str(COSIGN)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """An OpenSSL P-256 pair (what push --sign-key takes), a second one (the
    wrong key) and a cosign-made pair (cosign.key is cosign's encrypted format)."""
    d = tmp_path_factory.mktemp("keys")
    out = {}
    for name in ("signer", "wrong"):
        key, pub = d / f"{name}.key", d / f"{name}.pub"
        subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout",
                        "-out", key], check=True, capture_output=True)
        subprocess.run(["openssl", "ec", "-in", key, "-pubout", "-out", pub], check=True,
                       capture_output=True)
        out[name] = (key, pub)
    if os.access(COSIGN, os.X_OK):
        subprocess.run([str(COSIGN), "generate-key-pair"], cwd=d, check=True, capture_output=True,
                       env=cosign_env(d))
        out["cosign"] = (d / "cosign.key", d / "cosign.pub")
    out["dir"] = d
    return out


def cosign_env(home):
    # HOME in the test's directory: cosign keeps nothing in the user's.
    return dict(os.environ, HOME=str(home), COSIGN_PASSWORD=COSIGN_PASSWORD,
                COSIGN_YES="true")


def cosign(keys, *args):
    return subprocess.run([need_cosign(), *map(str, args)], capture_output=True, text=True,
                          timeout=120, env=cosign_env(keys["dir"]))


def cosign_sign(keys, reg, repo, digest, *extra):
    # No transparency log: key-based and offline, as the controller verifies.
    r = cosign(keys, "sign", "--key", keys["cosign"][0], "--use-signing-config=false",
               "--tlog-upload=false", "--allow-http-registry", *extra, f"{reg.host}/{repo}@{digest}")
    assert r.returncode == 0, r.stderr


def cosign_verify(keys, reg, repo, digest, pub):
    return cosign(keys, "verify", "--key", pub, "--insecure-ignore-tlog", "--allow-http-registry",
                  f"{reg.host}/{repo}@{digest}")


def push(run_pc, reg, repo, src, *extra, env=None):
    r = run_pc("push", reg.ref(repo, "v1"), "--path", src, *reg.pc_args(), *extra, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def verify(run_pc, reg, ref, *pubs):
    args = []
    for p in pubs:
        args += ["--key", p]
    return run_pc("verify", ref, *args, *reg.pc_args())


def fields(stdout):
    return dict(line.split(": ", 1) for line in stdout.strip().splitlines()[1:])


def sig_tag(digest):
    return "sha256-" + digest.split(":", 1)[1] + ".sig"


def get_json(reg, repo, reference, accept=OCI_MANIFEST):
    st, _, body = reg.raw("GET", f"/v2/{repo}/manifests/{reference}", headers={"Accept": accept})
    assert st == 200, (st, body)
    return json.loads(body)


def refused(r, *needles):
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    for n in needles:
        assert n in r.stderr, r.stderr


# -- the real cosign signs, the controller verifies ------------------------------------

def test_cosign_bundle_signature_verifies(run_pc, registry_plain, keys, tmp_path):
    need_cosign()
    digest = push(run_pc, registry_plain, "sign/cosign-bundle", make_tree(tmp_path / "s", seed="cb"))
    cosign_sign(keys, registry_plain, "sign/cosign-bundle", digest)
    r = verify(run_pc, registry_plain, registry_plain.ref("sign/cosign-bundle", "v1"), keys["cosign"][1])
    assert r.returncode == 0, r.stderr
    got = fields(r.stdout)
    assert got["scheme"] == "sigstore bundle"
    assert got["key"] == "cosign.pub"
    # Debian's registry has no referrers API: cosign wrote the referrers tag.
    index = get_json(registry_plain, "sign/cosign-bundle", "sha256-" + digest[7:], OCI_INDEX)
    assert got["signature"] in [m["digest"] for m in index["manifests"]]
    refused(verify(run_pc, registry_plain, registry_plain.ref("sign/cosign-bundle", "v1"),
                   keys["wrong"][1]), "sigstore bundle", "does not verify with the key(s) wrong.pub")


def test_cosign_legacy_signature_verifies(run_pc, registry_plain, keys, tmp_path):
    need_cosign()
    digest = push(run_pc, registry_plain, "sign/cosign-sig", make_tree(tmp_path / "s", seed="cs"))
    cosign_sign(keys, registry_plain, "sign/cosign-sig", digest, "--new-bundle-format=false")
    r = verify(run_pc, registry_plain, registry_plain.ref("sign/cosign-sig", "v1"),
               keys["wrong"][1], keys["cosign"][1])
    assert r.returncode == 0, r.stderr
    assert fields(r.stdout) == {"scheme": "cosign .sig", "signature": sig_tag(digest), "key": "cosign.pub"}


# -- the controller signs, the real cosign verifies ------------------------------------

@pytest.mark.parametrize("fmt,scheme", [("sig", "cosign .sig"), ("bundle", "sigstore bundle")])
def test_push_sign_key_verifies_with_cosign_and_controller(run_pc, registry_plain, keys, tmp_path,
                                                           fmt, scheme):
    repo = f"sign/pc-{fmt}"
    digest = push(run_pc, registry_plain, repo, make_tree(tmp_path / "s", seed=fmt),
                  "--sign-key", keys["signer"][0], "--sign-format", fmt)
    r = verify(run_pc, registry_plain, registry_plain.ref(repo, "v1"), keys["signer"][1])
    assert r.returncode == 0, r.stderr
    assert fields(r.stdout)["scheme"] == scheme
    if not os.access(COSIGN, os.X_OK):
        pytest.skip(f"{COSIGN} is not built: the controller's own round trip passed; "
                    "the cosign half needs `make deps-real`")
    r = cosign_verify(keys, registry_plain, repo, digest, keys["signer"][1])
    assert r.returncode == 0, r.stderr
    assert "verified against the specified public key" in r.stderr
    assert digest in r.stdout
    r = cosign_verify(keys, registry_plain, repo, digest, keys["wrong"][1])
    assert r.returncode != 0


KEYGEN = {
    "p384": ["openssl", "ecparam", "-name", "secp384r1", "-genkey", "-noout", "-out"],
    "p521": ["openssl", "ecparam", "-name", "secp521r1", "-genkey", "-noout", "-out"],
    "rsa3072": ["openssl", "genrsa", "-out"],
    "ed25519": ["openssl", "genpkey", "-algorithm", "ed25519", "-out"],
}
# What `cosign verify --key` needs to check a P-384 or P-521 signature: cosign
# signs those with SHA-384 / SHA-512 (so does push --sign-key) but verifies
# with SHA-256 unless told.
COSIGN_DIGEST = {"p384": "sha384", "p521": "sha512"}


@pytest.mark.parametrize("kt", sorted(KEYGEN))
def test_other_key_types_interoperate_with_cosign(run_pc, registry_plain, keys, tmp_path, kt):
    """push --sign-key with each other key type cosign supports verifies with
    cosign, and cosign's signatures with the same key (imported) verify with
    the controller, in both formats.  Ed25519 one way only: cosign signs
    Ed25519ph, which OpenSSL 3.0 cannot verify (docs/signing.md)."""
    need_cosign()
    key, pub = tmp_path / f"{kt}.key", tmp_path / f"{kt}.pub"
    subprocess.run(KEYGEN[kt] + [key] + (["3072"] if kt.startswith("rsa") else []), check=True,
                   capture_output=True)
    subprocess.run(["openssl", "pkey", "-in", key, "-pubout", "-out", pub], check=True, capture_output=True)
    digest_flag = ["--signature-digest-algorithm", COSIGN_DIGEST[kt]] if kt in COSIGN_DIGEST else []
    src = make_tree(tmp_path / "s", seed=kt)
    ours = push(run_pc, registry_plain, f"kt/pc-{kt}", src, "--sign-key", key, "--sign-format", "both")
    for bundle in ("true", "false"):
        r = cosign(keys, "verify", "--key", pub, *digest_flag, "--insecure-ignore-tlog", "--allow-http-registry",
                   f"--new-bundle-format={bundle}", f"{registry_plain.host}/kt/pc-{kt}@{ours}")
        assert r.returncode == 0, (bundle, r.stderr)
    if kt == "ed25519":
        return
    theirs = push(run_pc, registry_plain, f"kt/cosign-{kt}", src, "--reproducible")
    r = subprocess.run([need_cosign(), "import-key-pair", "--key", key,
                        "--output-key-prefix", tmp_path / f"cosign-{kt}"],
                       capture_output=True, text=True, env=cosign_env(keys["dir"]), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for fmt in ("--new-bundle-format=true", "--new-bundle-format=false"):
        r = cosign(keys, "sign", "--key", tmp_path / f"cosign-{kt}.key",
                   "--use-signing-config=false", "--tlog-upload=false", "--allow-http-registry", fmt,
                   f"{registry_plain.host}/kt/cosign-{kt}@{theirs}")
        assert r.returncode == 0, r.stderr
    r = verify(run_pc, registry_plain, registry_plain.ref(f"kt/cosign-{kt}", digest=theirs), pub)
    assert r.returncode == 0, r.stderr
    assert fields(r.stdout)["scheme"] == "sigstore bundle"
    # The .sig signature alone (the bundle's referrers tag removed) verifies too.
    registry_plain.put_manifest(f"kt/cosign-{kt}", "sha256-" + theirs[7:],
                                {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}, OCI_INDEX)
    r = verify(run_pc, registry_plain, registry_plain.ref(f"kt/cosign-{kt}", digest=theirs), pub)
    assert r.returncode == 0, r.stderr
    assert fields(r.stdout)["scheme"] == "cosign .sig"


@pytest.mark.parametrize("mode", ["registry_basic", "registry_token"])
def test_sign_and_verify_with_registry_auth(run_pc, request, keys, tmp_path, mode):
    """TLS plus basic or token auth: signing pushes with push scope, verifying
    reads the referrers, tags and blobs with pull scope."""
    reg = request.getfixturevalue(mode)
    src = make_tree(tmp_path / "s", seed=mode)
    r = run_pc("push", reg.ref("sign/auth", "v1"), "--path", src, "--sign-key", keys["signer"][0],
               "--sign-format", "both", *reg.pc_args(), input=reg.pc_input())
    assert r.returncode == 0, r.stderr
    r = run_pc("verify", reg.ref("sign/auth", "v1"), "--key", keys["signer"][1], *reg.pc_args(),
               input=reg.pc_input())
    assert r.returncode == 0, r.stderr
    assert fields(r.stdout)["scheme"] == "sigstore bundle"
    r = run_pc("verify", reg.ref("sign/auth", "v1"), "--key", keys["signer"][1], *reg.pc_args(creds=False))
    assert r.returncode == 3, r.stderr   # anonymous: the registry refuses to answer
    assert "authentication" in r.stderr


def test_signing_twice_keeps_both_signatures(run_pc, registry_plain, keys, tmp_path):
    """A second signer adds a layer to the .sig manifest instead of replacing the first."""
    src = make_tree(tmp_path / "s", seed="twice")
    digest = push(run_pc, registry_plain, "sign/twice", src, "--sign-key", keys["signer"][0],
                  "--reproducible")
    push(run_pc, registry_plain, "sign/twice", src, "--sign-key", keys["wrong"][0], "--reproducible")
    layers = get_json(registry_plain, "sign/twice", sig_tag(digest))["layers"]
    assert len(layers) == 2
    for pub in (keys["signer"][1], keys["wrong"][1]):
        assert verify(run_pc, registry_plain, registry_plain.ref("sign/twice", "v1"), pub).returncode == 0


def test_encrypted_keys(run_pc, registry_plain, keys, tmp_path):
    """An encrypted PKCS#8 key opens with COSIGN_PASSWORD or a password file;
    cosign's own key format is refused with what to do instead."""
    enc = tmp_path / "enc.key"
    subprocess.run(["openssl", "pkcs8", "-topk8", "-in", keys["signer"][0], "-out", enc,
                    "-passout", "pass:k3y-pass-77"], check=True, capture_output=True)
    src = make_tree(tmp_path / "s", seed="enc")
    push(run_pc, registry_plain, "sign/enc", src, "--sign-key", enc,
         env={"COSIGN_PASSWORD": "k3y-pass-77"})
    pwfile = tmp_path / "pw"
    pwfile.write_text("k3y-pass-77\n")
    push(run_pc, registry_plain, "sign/enc2", src, "--sign-key", enc, "--sign-key-password-file", pwfile)
    assert verify(run_pc, registry_plain, registry_plain.ref("sign/enc2", "v1"),
                  keys["signer"][1]).returncode == 0
    r = run_pc("push", registry_plain.ref("sign/enc3", "v1"), "--path", src, "--sign-key", enc,
               *registry_plain.pc_args(), env={"COSIGN_PASSWORD": "wrong-pass"})
    assert r.returncode == 2, r.stderr
    assert "password" in r.stderr and "wrong-pass" not in r.stderr
    # Nothing was pushed: the key is loaded first.
    st, _, _ = registry_plain.raw("GET", "/v2/sign/enc3/manifests/v1", headers={"Accept": OCI_MANIFEST})
    assert st == 404
    if "cosign" in keys:
        r = run_pc("push", registry_plain.ref("sign/enc3", "v1"), "--path", src, "--sign-key",
                   keys["cosign"][0], *registry_plain.pc_args(), env={"COSIGN_PASSWORD": COSIGN_PASSWORD})
        assert r.returncode == 2
        assert "cosign's encrypted key format" in r.stderr


# -- refusals: each one by the controller, and by cosign when it is there ---------------

def both_refuse(run_pc, reg, keys, repo, digest, pub, *needles):
    refused(verify(run_pc, reg, reg.ref(repo, digest=digest), pub), *needles)
    if os.access(COSIGN, os.X_OK):
        r = cosign_verify(keys, reg, repo, digest, pub)
        assert r.returncode != 0, r.stderr


def signed_artifact(run_pc, reg, keys, repo, tmp_path, seed, fmt="sig"):
    return push(run_pc, reg, repo, make_tree(tmp_path / seed, seed=seed),
                "--sign-key", keys["signer"][0], "--sign-format", fmt)


def test_refuses_wrong_key(run_pc, registry_plain, keys, tmp_path):
    digest = signed_artifact(run_pc, registry_plain, keys, "refuse/wrong-key", tmp_path, "wk")
    both_refuse(run_pc, registry_plain, keys, "refuse/wrong-key", digest, keys["wrong"][1],
                "cosign .sig", "does not verify with the key(s) wrong.pub")


def test_refuses_tampered_payload(run_pc, registry_plain, keys, tmp_path):
    """The payload rewritten (and its descriptor with it) to name another digest:
    the signature no longer covers the bytes."""
    repo = "refuse/tampered"
    digest = signed_artifact(run_pc, registry_plain, keys, repo, tmp_path, "tp")
    other = signed_artifact(run_pc, registry_plain, keys, repo + "-other", tmp_path, "tp2")
    m = get_json(registry_plain, repo, sig_tag(digest))
    layer = m["layers"][0]
    st, _, payload = registry_plain.raw("GET", f"/v2/{repo}/blobs/{layer['digest']}")
    assert st == 200
    forged = payload.replace(digest.encode(), other.encode())
    assert forged != payload
    layer["digest"] = registry_plain.put_blob(repo, forged)
    layer["size"] = len(forged)
    registry_plain.put_manifest(repo, sig_tag(digest), m, OCI_MANIFEST)
    both_refuse(run_pc, registry_plain, keys, repo, digest, keys["signer"][1],
                "payload was changed")


def test_refuses_payload_naming_another_digest(run_pc, registry_plain, keys, tmp_path):
    """A payload the right key really signed, but for another digest."""
    repo = "refuse/other-digest"
    digest = push(run_pc, registry_plain, repo, make_tree(tmp_path / "s", seed="od"))
    other = "sha256:" + "ab" * 32
    payload = json.dumps({"critical": {"identity": {"docker-reference": f"{registry_plain.host}/{repo}"},
                                       "image": {"docker-manifest-digest": other},
                                       "type": "cosign container image signature"},
                          "optional": None}, separators=(",", ":")).encode()
    put_sig_manifest(registry_plain, repo, digest, payload, sign_openssl(keys["signer"][0], payload, tmp_path))
    both_refuse(run_pc, registry_plain, keys, repo, digest, keys["signer"][1],
                "names digest " + other, "not the manifest " + digest)


def test_refuses_signature_copied_from_another_tag(run_pc, registry_plain, keys, tmp_path):
    """A's valid signatures put on B: the .sig manifest copied to B's .sig tag,
    and A's bundle referrer listed in B's referrers tag."""
    repo = "refuse/copied"
    a = push(run_pc, registry_plain, repo, make_tree(tmp_path / "a", seed="ca"),
             "--sign-key", keys["signer"][0], "--sign-format", "both")
    b = push(run_pc, registry_plain, repo, make_tree(tmp_path / "b", seed="cb"))
    registry_plain.put_manifest(repo, sig_tag(b), get_json(registry_plain, repo, sig_tag(a)), OCI_MANIFEST)
    index = get_json(registry_plain, repo, "sha256-" + a[7:], OCI_INDEX)
    registry_plain.put_manifest(repo, "sha256-" + b[7:], index, OCI_INDEX)
    both_refuse(run_pc, registry_plain, keys, repo, b, keys["signer"][1],
                "sigstore bundle", "the referrer's subject is " + a,
                "cosign .sig", "names digest " + a)


def test_refuses_missing_signature(run_pc, registry_plain, keys, tmp_path):
    repo = "refuse/unsigned"
    digest = push(run_pc, registry_plain, repo, make_tree(tmp_path / "s", seed="un"))
    both_refuse(run_pc, registry_plain, keys, repo, digest, keys["signer"][1], "no signature found")


@pytest.mark.parametrize("kind", ["not-simplesigning", "bad-base64", "garbage-payload"])
def test_refuses_garbage_signature_manifest(run_pc, registry_plain, keys, tmp_path, kind):
    repo = f"refuse/garbage-{kind}"
    digest = push(run_pc, registry_plain, repo, make_tree(tmp_path / "s", seed=kind))
    junk = os.urandom(300)
    if kind == "not-simplesigning":
        layer = {"mediaType": "application/vnd.oci.image.layer.v1.tar", "size": len(junk),
                 "digest": registry_plain.put_blob(repo, junk)}
        needle = "no application/vnd.dev.cosign.simplesigning.v1+json layer"
    elif kind == "bad-base64":
        layer = {"mediaType": SIMPLESIGNING, "size": len(junk), "digest": registry_plain.put_blob(repo, junk),
                 "annotations": {SIG_ANNOTATION: "%%% not base64 %%%"}}
        needle = "not valid base64"
    else:
        sig = sign_openssl(keys["signer"][0], junk, tmp_path)
        layer = {"mediaType": SIMPLESIGNING, "size": len(junk), "digest": registry_plain.put_blob(repo, junk),
                 "annotations": {SIG_ANNOTATION: sig}}
        needle = "payload is not a JSON object"
    cfg = registry_plain.put_blob(repo, b"{}")
    registry_plain.put_manifest(repo, sig_tag(digest), {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "size": 2, "digest": cfg},
        "layers": [layer]}, OCI_MANIFEST)
    both_refuse(run_pc, registry_plain, keys, repo, digest, keys["signer"][1], "cosign .sig", needle)


def test_garbage_referrers_tag_is_no_referrers(run_pc, registry_plain, keys, tmp_path):
    """The spec: a referrers tag that is not a valid index means no referrers;
    the .sig signature still verifies."""
    repo = "refuse/garbage-index"
    digest = signed_artifact(run_pc, registry_plain, keys, repo, tmp_path, "gi")
    junk = registry_plain.put_blob(repo, b"junk")
    cfg = registry_plain.put_blob(repo, b"{}")
    registry_plain.put_manifest(repo, "sha256-" + digest[7:], {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "size": 2, "digest": cfg},
        "layers": [{"mediaType": "x/y", "size": 4, "digest": junk}]}, OCI_MANIFEST)
    r = verify(run_pc, registry_plain, registry_plain.ref(repo, "v1"), keys["signer"][1])
    assert r.returncode == 0, r.stderr
    assert fields(r.stdout)["scheme"] == "cosign .sig"


# -- the command line ------------------------------------------------------------------

def test_verify_usage_and_exit_codes(run_pc, registry_plain, keys, tmp_path):
    r = run_pc("verify", "--help")
    assert r.returncode == 0 and "--key FILE" in r.stdout and "Exit status" in r.stdout
    assert run_pc("verify", registry_plain.ref("x/y", "v1")).returncode == 2   # no --key
    bad = tmp_path / "bad.pub"
    bad.write_text("not a key\n")
    r = run_pc("verify", registry_plain.ref("x/y", "v1"), "--key", bad, *registry_plain.pc_args())
    assert r.returncode == 2 and "bad.pub" in r.stderr
    # Nothing listening: the registry could not be asked (3), not "unsigned" (1).
    r = run_pc("verify", f"oci://127.0.0.1:{free_port()}/x/y:v1", "--key", keys["signer"][1],
               "--plain-http", "--retries", "0")
    assert r.returncode == 3, r.stderr
    r = run_pc("push", "--help")
    assert "--sign-key FILE" in r.stdout and "COSIGN_PASSWORD" in r.stdout


def test_every_flag_documented(run_pc):
    docs = pathlib.Path(__file__).resolve().parents[2] / "docs"
    cli, oci = (docs / "cli.md").read_text(), (docs / "oci.md").read_text()
    assert "## verify" in cli and "## push --sign-key" in cli
    for flag in set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", run_pc("verify", "--help").stdout)):
        assert f"`{flag}" in cli, f"verify {flag} is not in docs/cli.md"
    for flag in ("--sign-key", "--sign-key-password-file", "--sign-format"):
        assert flag in run_pc("push", "--help").stdout
        assert f"`{flag}" in cli and f"`{flag}" in oci, flag


# -- helpers that forge what a hostile registry could hold ----------------------------

def sign_openssl(key, data, tmp_path):
    p = tmp_path / "to-sign"
    p.write_bytes(data)
    sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", key, p], check=True,
                         capture_output=True).stdout
    return base64.b64encode(sig).decode()


def put_sig_manifest(reg, repo, digest, payload, sig_b64):
    pd = reg.put_blob(repo, payload)
    cfg = json.dumps({"rootfs": {"type": "layers", "diff_ids": [pd]}}).encode()
    cd = reg.put_blob(repo, cfg)
    reg.put_manifest(repo, sig_tag(digest), {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "size": len(cfg), "digest": cd},
        "layers": [{"mediaType": SIMPLESIGNING, "size": len(payload), "digest": pd,
                    "annotations": {SIG_ANNOTATION: sig_b64}}]}, OCI_MANIFEST)
    assert hashlib.sha256(payload).hexdigest() == pd[7:]


# -- hostile registries (registry_fixtures.FakeRegistry) --------------------------------

def hostile(fake_registry, repo):
    """A registry serving one artifact manifest; returns (fake, digest)."""
    fake = fake_registry()
    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                       "config": {"mediaType": "application/vnd.cncf.flux.config.v1+json", "size": 2,
                                  "digest": "sha256:" + "0" * 64},
                       "layers": []}).encode()
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    fake.routes[f"/v2/{repo}/manifests/{digest}"] = lambda h: (200, {
        "Content-Type": OCI_MANIFEST, "Docker-Content-Digest": digest}, body)
    return fake, digest


def serve_json(obj, media_type):
    body = json.dumps(obj).encode()
    return lambda h: (200, {"Content-Type": media_type,
                            "Docker-Content-Digest": "sha256:" + hashlib.sha256(body).hexdigest()}, body)


def test_hostile_referrers_error_is_transient(run_pc, fake_registry, keys):
    """A 5xx from the referrers API is 'could not ask' (3), never 'unsigned'."""
    fake, digest = hostile(fake_registry, "h/app")
    fake.routes[f"/v2/h/app/referrers/{digest}"] = lambda h: (500, {}, b"boom")
    r = run_pc("verify", f"oci://{fake.host}/h/app@{digest}", "--key", keys["signer"][1],
               "--plain-http", "--retries", "0")
    assert r.returncode == 3, r.stderr
    assert "HTTP 500" in r.stderr


def test_hostile_endless_payload_is_cut_at_the_limit(run_pc, fake_registry, keys):
    """A payload blob that never ends: refused at 1 MiB, no hang, no crash."""
    fake, digest = hostile(fake_registry, "h/app")
    blob = "sha256:" + "b" * 64
    fake.routes[f"/v2/h/app/manifests/{sig_tag(digest)}"] = serve_json({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "size": 2,
                   "digest": "sha256:" + "c" * 64},
        "layers": [{"mediaType": SIMPLESIGNING, "size": 250, "digest": blob,
                    "annotations": {SIG_ANNOTATION: base64.b64encode(b"x" * 70).decode()}}]}, OCI_MANIFEST)

    def endless(h):
        return 200, {"Content-Type": "application/octet-stream"}, iter(lambda: b"z" * 65536, None)
    fake.routes[f"/v2/h/app/blobs/{blob}"] = endless
    r = run_pc("verify", f"oci://{fake.host}/h/app@{digest}", "--key", keys["signer"][1],
               "--plain-http", "--retries", "0", timeout=60)
    assert r.returncode == 1, r.stderr
    assert "cosign .sig" in r.stderr and "limit of 1048576 bytes" in r.stderr


def test_hostile_referrer_flood_is_bounded(run_pc, fake_registry, keys):
    """5000 referrers, none real: at most 64 are fetched, and the refusal says why."""
    fake, digest = hostile(fake_registry, "h/app")
    entries = [{"mediaType": OCI_MANIFEST, "size": 100, "digest": "sha256:%064x" % i,
                "artifactType": "application/vnd.dev.sigstore.bundle.v0.3+json"} for i in range(5000)]
    fake.routes[f"/v2/h/app/referrers/{digest}"] = serve_json(
        {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}, OCI_INDEX)
    r = run_pc("verify", f"oci://{fake.host}/h/app@{digest}", "--key", keys["signer"][1],
               "--plain-http", "--retries", "0", timeout=60)
    assert r.returncode == 1, r.stderr
    assert "sigstore bundle" in r.stderr and "the referrer manifest is missing" in r.stderr
    with fake.lock:
        fetched = [p for (_, p, _) in fake.requests if "/manifests/sha256:" in p and digest not in p]
    assert 0 < len(fetched) <= 64


def test_hostile_huge_or_lying_signature_manifest(run_pc, fake_registry, keys):
    """A .sig manifest past 4 MiB, then one whose bytes are not its digest: both refused
    as unusable, each naming the scheme."""
    fake, digest = hostile(fake_registry, "h/app")
    huge = b'{"layers":[' + b'{},' * (2 << 20) + b'{}]}'
    fake.routes[f"/v2/h/app/manifests/{sig_tag(digest)}"] = lambda h: (200, {"Content-Type": OCI_MANIFEST}, huge)
    r = run_pc("verify", f"oci://{fake.host}/h/app@{digest}", "--key", keys["signer"][1],
               "--plain-http", "--retries", "0", timeout=60)
    assert r.returncode == 1, r.stderr
    assert "cosign .sig" in r.stderr and "unusable" in r.stderr and "limit" in r.stderr
    fake.routes[f"/v2/h/app/manifests/{sig_tag(digest)}"] = lambda h: (200, {
        "Content-Type": OCI_MANIFEST, "Docker-Content-Digest": "sha256:" + "e" * 64}, b'{"layers":[]}')
    r = run_pc("verify", f"oci://{fake.host}/h/app@{digest}", "--key", keys["signer"][1],
               "--plain-http", "--retries", "0", timeout=60)
    assert r.returncode == 1, r.stderr
    assert "unusable" in r.stderr and "digest mismatch" in r.stderr
