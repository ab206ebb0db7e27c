"""Bad input for pull and push: tampered or missing blobs, oversized or lying
manifests, unusable indexes, wrong layer types, unreachable or stalling
registries, hostile layers and malformed references.  Every failure must
exit non-zero with a message naming the cause and leave nothing at --out."""
import hashlib
import io
import json
import shutil
import socket
import tarfile

import pytest

from registry_fixtures import make_tree, serve_artifact, small_artifact

pytestmark = pytest.mark.usefixtures("isolated_docker_config")

MT = "application/vnd.oci.image.manifest.v1+json"


def push(run_pc, reg, repo, tag, tmp_path, seed):
    src = make_tree(tmp_path / f"src-{seed}", seed=seed)
    r = run_pc("push", reg.ref(repo, tag), "--path", src, "--plain-http")
    assert r.returncode == 0, r.stderr
    digest = r.stdout.strip()
    _, _, body = reg.raw("GET", f"/v2/{repo}/manifests/{tag}", headers={"Accept": MT})
    return digest, json.loads(body)


def pull_fails(run_pc, ref, out, *extra):
    r = run_pc("pull", ref, "--out", out, "--plain-http", "--retries", "0", *extra)
    assert r.returncode == 1, r.stdout + r.stderr
    assert not out.exists(), "something was left at --out"
    assert r.stderr.startswith("pull: ")
    # nothing staged beside it either
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.tmp")]
    return r.stderr


def test_blob_altered_in_storage_is_refused(run_pc, registry_plain, tmp_path):
    _, m = push(run_pc, registry_plain, "bad/altered", "v1", tmp_path, "altered")
    layer = m["layers"][0]["digest"]
    path = registry_plain.blob_path(layer)
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid] ^= 0xFF
    path.write_bytes(bytes(data))
    err = pull_fails(run_pc, registry_plain.ref("bad/altered", "v1"), tmp_path / "out")
    assert "digest mismatch" in err and layer in err


def test_missing_layer(run_pc, registry_plain, tmp_path):
    _, m = push(run_pc, registry_plain, "bad/missing", "v1", tmp_path, "missing")
    layer = m["layers"][0]["digest"]
    shutil.rmtree(registry_plain.blob_path(layer).parent)
    err = pull_fails(run_pc, registry_plain.ref("bad/missing", "v1"), tmp_path / "out")
    assert layer in err and ("404" in err or "BLOB_UNKNOWN" in err)


def test_missing_tag(run_pc, registry_plain, tmp_path):
    push(run_pc, registry_plain, "bad/tagless", "v1", tmp_path, "tagless")
    err = pull_fails(run_pc, registry_plain.ref("bad/tagless", "v2"), tmp_path / "out")
    assert "bad/tagless:v2" in err and "404" in err


def test_no_matching_layer_media_type(run_pc, registry_plain, tmp_path):
    push(run_pc, registry_plain, "bad/mt", "v1", tmp_path, "mt")
    err = pull_fails(run_pc, registry_plain.ref("bad/mt", "v1"), tmp_path / "out",
                     "--media-type", "application/vnd.example.nope")
    assert "application/vnd.example.nope" in err
    assert "application/vnd.cncf.flux.content.v1.tar+gzip" in err  # says what there is
    # An artifact whose only layer is not a tar: refused without --media-type.
    data = b"just some json"
    blob = registry_plain.put_blob("bad/nontar", data)
    cfg = registry_plain.put_blob("bad/nontar", b"{}")
    registry_plain.put_manifest("bad/nontar", "v1", {
        "schemaVersion": 2, "mediaType": MT,
        "config": {"mediaType": "application/vnd.example.config+json", "digest": cfg, "size": 2},
        "layers": [{"mediaType": "application/vnd.example.data", "digest": blob, "size": len(data)}]}, MT)
    err = pull_fails(run_pc, registry_plain.ref("bad/nontar", "v1"), tmp_path / "out2")
    assert "no layer with a tar media type" in err and "application/vnd.example.data" in err


def test_index_with_no_usable_manifest(run_pc, registry_plain, tmp_path):
    it = "application/vnd.oci.image.index.v1+json"
    registry_plain.put_manifest("bad/index", "empty", {"schemaVersion": 2, "mediaType": it,
                                                       "manifests": []}, it)
    err = pull_fails(run_pc, registry_plain.ref("bad/index", "empty"), tmp_path / "out")
    assert "no usable manifest" in err


def test_manifest_over_the_limit(run_pc, fake_registry, tmp_path):
    reg = fake_registry()
    big = json.dumps({"schemaVersion": 2, "mediaType": MT, "layers": [],
                      "annotations": {"pad": "x" * (4 << 20)}}).encode()
    reg.routes["/v2/bad/big/manifests/v1"] = lambda h: (200, {"Content-Type": MT}, big)
    err = pull_fails(run_pc, f"oci://{reg.host}/bad/big:v1", tmp_path / "out")
    assert "larger than the limit" in err and "4194304" in err


def test_manifest_digest_header_lies(run_pc, fake_registry, tmp_path):
    manifest, mdigest, blobs = small_artifact()
    reg = fake_registry()
    serve_artifact(reg, "bad/lie", "v1", manifest, mdigest, blobs)
    wrong = "sha256:" + "0" * 64
    reg.routes["/v2/bad/lie/manifests/v1"] = \
        lambda h: (200, {"Content-Type": MT, "Docker-Content-Digest": wrong}, manifest)
    err = pull_fails(run_pc, f"oci://{reg.host}/bad/lie:v1", tmp_path / "out")
    assert "digest mismatch" in err and wrong in err
    # Pinned by digest: the bytes must hash to it even without a header.
    reg.routes[f"/v2/bad/lie/manifests/{wrong}"] = lambda h: (200, {"Content-Type": MT}, manifest)
    err = pull_fails(run_pc, f"oci://{reg.host}/bad/lie@{wrong}", tmp_path / "out")
    assert "digest mismatch" in err


def test_layer_size_lies(run_pc, fake_registry, tmp_path):
    manifest, mdigest, blobs = small_artifact()
    m = json.loads(manifest)
    m["layers"][0]["size"] -= 5
    manifest = json.dumps(m).encode()
    mdigest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    reg = fake_registry()
    serve_artifact(reg, "bad/size", "v1", manifest, mdigest, blobs)
    err = pull_fails(run_pc, f"oci://{reg.host}/bad/size:v1", tmp_path / "out")
    assert "size mismatch" in err or "more bytes than" in err


def test_content_type_disagrees_with_body(run_pc, fake_registry, tmp_path):
    manifest, mdigest, blobs = small_artifact()
    reg = fake_registry()
    serve_artifact(reg, "bad/ct", "v1", manifest, mdigest, blobs)
    reg.routes["/v2/bad/ct/manifests/v1"] = lambda h: (
        200, {"Content-Type": "application/vnd.oci.image.index.v1+json"}, manifest)
    err = pull_fails(run_pc, f"oci://{reg.host}/bad/ct:v1", tmp_path / "out")
    assert "Content-Type" in err


def test_hostile_layer_is_refused(run_pc, fake_registry, tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name in ("ok.txt", "../escape.txt"):
            ti = tarfile.TarInfo(name)
            ti.size = 2
            tf.addfile(ti, io.BytesIO(b"hi"))
    layer = buf.getvalue()
    ld = "sha256:" + hashlib.sha256(layer).hexdigest()
    cfg = b"{}"
    cd = "sha256:" + hashlib.sha256(cfg).hexdigest()
    manifest = json.dumps({"schemaVersion": 2, "mediaType": MT,
                           "config": {"mediaType": "application/vnd.cncf.flux.config.v1+json",
                                      "digest": cd, "size": 2},
                           "layers": [{"mediaType": "application/vnd.cncf.flux.content.v1.tar+gzip",
                                       "digest": ld, "size": len(layer)}]}).encode()
    md = "sha256:" + hashlib.sha256(manifest).hexdigest()
    reg = fake_registry()
    serve_artifact(reg, "bad/hostile", "v1", manifest, md, {ld: layer, cd: cfg})
    err = pull_fails(run_pc, f"oci://{reg.host}/bad/hostile:v1", tmp_path / "out")
    assert "../escape.txt" in err
    assert not (tmp_path / "escape.txt").exists()


def test_registry_down(run_pc, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    err = pull_fails(run_pc, f"oci://127.0.0.1:{port}/down/app:v1", tmp_path / "out")
    assert f"127.0.0.1:{port}" in err
    assert "onnect" in err  # "Couldn't connect" / "Connection refused"


def test_registry_stalls(run_pc, fake_registry, tmp_path):
    reg = fake_registry()
    reg.routes["/v2/stall/app/manifests/v1"] = "stall"
    err = pull_fails(run_pc, f"oci://{reg.host}/stall/app:v1", tmp_path / "out", "--timeout", "1s")
    assert "timed out" in err and "stall/app" in err


def test_blob_stalls_midway(run_pc, fake_registry, tmp_path):
    manifest, mdigest, blobs = small_artifact()
    reg = fake_registry()
    serve_artifact(reg, "stall/blob", "v1", manifest, mdigest, blobs)
    layer = json.loads(manifest)["layers"][0]["digest"]
    reg.routes[f"/v2/stall/blob/blobs/{layer}"] = "stall"
    err = pull_fails(run_pc, f"oci://{reg.host}/stall/blob:v1", tmp_path / "out", "--timeout", "1s")
    assert "timed out" in err and layer in err


def test_destination_not_empty(run_pc, registry_plain, tmp_path):
    push(run_pc, registry_plain, "bad/dest", "v1", tmp_path, "dest")
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    r = run_pc("pull", registry_plain.ref("bad/dest", "v1"), "--out", out, "--plain-http")
    assert r.returncode == 1 and "not empty" in r.stderr
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    # An existing empty directory is fine.
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run_pc("pull", registry_plain.ref("bad/dest", "v1"), "--out", empty, "--plain-http")
    assert r.returncode == 0, r.stderr
    assert (empty / "Pulumi.yaml").exists()


@pytest.mark.parametrize("ref,why", [
    ("oci://", "missing repository"),
    ("https://127.0.0.1:5000/a/b:v1", "only the oci:// scheme"),
    ("oci://127.0.0.1:5000", "missing repository"),
    ("oci://127.0.0.1:5000/UPPER/case:v1", "bad repository name"),
    ("oci://127.0.0.1:5000/a//b:v1", "bad repository name"),
    ("oci://127.0.0.1:5000/a/b:-bad", "bad tag"),
    ("oci://127.0.0.1:5000/a/b@sha256:1234", "sha256"),
    ("oci://127.0.0.1:99999/a/b:v1", "bad registry host"),
    ("oci://127.0.0.1:5000/a/b:v 1", "whitespace"),
])
def test_malformed_references(run_pc, tmp_path, ref, why):
    r = run_pc("pull", ref, "--out", tmp_path / "out", "--plain-http")
    assert r.returncode == 2, r.stderr
    assert "invalid OCI reference" in r.stderr or why in r.stderr
    assert why in r.stderr


def test_usage_errors(run_pc, tmp_path):
    r = run_pc("pull", "oci://127.0.0.1:1/a/b:v1")
    assert r.returncode == 2 and "--out" in r.stderr
    r = run_pc("push", "oci://127.0.0.1:1/a/b:v1")
    assert r.returncode == 2 and "--path" in r.stderr
    r = run_pc("push", "oci://127.0.0.1:1/a/b@sha256:" + "a" * 64, "--path", tmp_path)
    assert r.returncode == 2 and "not to a digest" in r.stderr
    r = run_pc("pull", "oci://127.0.0.1:1/a/b:v1", "--out", tmp_path / "o", "--semver", ">=1 <")
    assert r.returncode == 1 or r.returncode == 2
    r = run_pc("push", "oci://127.0.0.1:1/a/b:v1", "--path", tmp_path, "--annotation", "novalue")
    assert r.returncode == 2 and "KEY=VALUE" in r.stderr
    for cmd in ("pull", "push"):
        r = run_pc(cmd, "--help")
        assert r.returncode == 0 and "Usage: pulumi-controller " + cmd in r.stdout
        assert "--plain-http" in r.stdout and "--docker-config" in r.stdout


def test_push_failures(run_pc, registry_plain, tmp_path):
    r = run_pc("push", registry_plain.ref("bad/push", "v1"), "--path", tmp_path / "nope", "--plain-http")
    assert r.returncode == 1 and "not a directory" in r.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    src = make_tree(tmp_path / "src", seed="pushdown")
    r = run_pc("push", f"oci://127.0.0.1:{port}/down/app:v1", "--path", src, "--plain-http",
               "--retries", "0")
    assert r.returncode == 1 and f"127.0.0.1:{port}" in r.stderr


def test_limits(run_pc, registry_plain, tmp_path):
    digest, m = push(run_pc, registry_plain, "bad/limits", "v1", tmp_path, "limits")
    size = m["layers"][0]["size"]
    err = pull_fails(run_pc, registry_plain.ref("bad/limits", "v1"), tmp_path / "o1",
                     "--max-download-size", str(size - 1))
    assert "download limit" in err and str(size) in err
    err = pull_fails(run_pc, registry_plain.ref("bad/limits", "v1"), tmp_path / "o2", "--max-size", "100")
    assert "limit" in err
    err = pull_fails(run_pc, registry_plain.ref("bad/limits", "v1"), tmp_path / "o3", "--max-entries", "2")
    assert "limit" in err or "entries" in err


def _challenge_registry(fake_registry, realm_path="/token", realm=None):
    """A registry that answers every /v2/ request with a Bearer challenge."""
    reg = fake_registry()
    realm = realm or f"http://{reg.host}{realm_path}"
    challenge = f'Bearer realm="{realm}",service="s",scope="repository:t/app:pull"'
    for path in ("/v2/", "/v2/t/app/manifests/v1"):
        reg.routes[path] = lambda h: (401, {"WWW-Authenticate": challenge}, b"")
    return reg


def test_oversized_token_response_is_named_as_such(run_pc, fake_registry, tmp_path):
    reg = _challenge_registry(fake_registry)
    reg.routes["/token"] = lambda h: (200, {"Content-Type": "application/json"},
                                      b'{"token":"' + b"x" * (2 << 20) + b'"}')
    err = pull_fails(run_pc, f"oci://{reg.host}/t/app:v1", tmp_path / "out")
    assert "token response" in err and "1048576" in err, err
    assert "4194304" not in err  # not the manifest's limit


def test_token_with_crlf_is_refused_not_sent(run_pc, fake_registry, tmp_path):
    """A token service cannot add request headers through its token."""
    reg = _challenge_registry(fake_registry)
    reg.routes["/token"] = lambda h: (200, {"Content-Type": "application/json"},
                                      json.dumps({"token": "abc\r\nX-Injected: yes"}).encode())
    err = pull_fails(run_pc, f"oci://{reg.host}/t/app:v1", tmp_path / "out")
    assert "token" in err and "refused" in err, err
    assert not any("X-Injected" in h for (_, _, h) in reg.requests)


def test_registry_token_with_control_characters_is_refused(run_pc, fake_registry, tmp_path):
    reg = _challenge_registry(fake_registry)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"auths": {reg.host: {"registrytoken": "t\nX-Injected: yes"}}}))
    r = run_pc("pull", f"oci://{reg.host}/t/app:v1", "--out", tmp_path / "out", "--plain-http",
               "--docker-config", cfg)
    assert r.returncode == 1 and "registry token" in r.stderr, r.stderr
    assert reg.requests == []


def test_token_realm_credentials_never_printed(run_pc, fake_registry, tmp_path):
    reg = fake_registry()
    realm = f"http://alice:hunter2@{reg.host}/token?key=s3cr3t"
    reg.routes["/v2/"] = reg.routes["/v2/t/app/manifests/v1"] = lambda h: (
        401, {"WWW-Authenticate": f'Bearer realm="{realm}",service="s"'}, b"")
    reg.routes["/token"] = lambda h: (500, {}, b"down")
    err = pull_fails(run_pc, f"oci://{reg.host}/t/app:v1", tmp_path / "out", "--log-level", "debug")
    assert "hunter2" not in err and "s3cr3t" not in err and "alice" not in err, err
    assert f"{reg.host}/token" in err


def test_reference_with_newline_is_one_escaped_line(run_pc, tmp_path):
    r = run_pc("pull", "oci://example.com/repo:v1\nINJECTED line", "--out", tmp_path / "o")
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "\\n" in r.stderr


def test_digest_with_newline_is_one_escaped_line(run_pc, tmp_path):
    r = run_pc("pull", "oci://example.com/repo@sha256:" + "a" * 10 + "\nfake: line", "--out", tmp_path / "o")
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_bad_semver_range_is_usage(run_pc, fake_registry, tmp_path):
    reg = fake_registry()
    r = run_pc("pull", f"oci://{reg.host}/t/app", "--semver", ">=1.0.0 <<2", "--out", tmp_path / "o",
               "--plain-http")
    assert r.returncode == 2, r.stderr
    assert reg.requests == []  # refused before asking the registry anything


def test_bytes_after_the_layer_archive_are_bounded(run_pc, fake_registry, tmp_path):
    """A layer whose declared size includes megabytes after the tar end is
    refused after 1 MiB instead of being hashed to the end."""
    manifest, mdigest, blobs = small_artifact()
    layer_digest = [d for d, b in blobs.items() if b[:2] == b"\x1f\x8b"][0]
    padded = blobs[layer_digest] + b"\0" * (3 << 20)
    d = "sha256:" + hashlib.sha256(padded).hexdigest()
    m = json.loads(manifest)
    m["layers"][0].update(digest=d, size=len(padded))
    manifest = json.dumps(m).encode()
    mdigest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    blobs = {d: padded}
    reg = fake_registry()
    serve_artifact(reg, "t/pad", "v1", manifest, mdigest, blobs)
    err = pull_fails(run_pc, f"oci://{reg.host}/t/pad:v1", tmp_path / "out")
    assert "after the end of the archive" in err, err


def test_plain_http_and_skip_verify_are_distinct_flags(run_pc, tmp_path):
    h = run_pc("pull", "--help").stdout
    assert "--plain-http" in h and "--insecure-skip-tls-verify" in h
    assert "insecure: true" in h  # says which one Flux's insecure is
    r = run_pc("pull", "oci://example.com/r:v1", "--out", tmp_path / "o", "--plain-http",
               "--insecure-skip-tls-verify")
    assert r.returncode == 2 and "exclude each other" in r.stderr


def test_endless_tag_lists_are_bounded_in_bytes(run_pc, fake_registry, tmp_path):
    """Pages of huge junk "tags" with a next link forever: refused after
    16 MiB in all, not read for 1,000 pages (gigabytes kept in memory)."""
    reg = fake_registry()
    junk = json.dumps({"name": "t/app", "tags": ["1.0.0", "x" * (2 << 20)]}).encode()

    def page(h):
        return 200, {"Content-Type": "application/json",
                     "Link": '</v2/t/app/tags/list?n=1000&last=x>; rel="next"'}, junk
    reg.routes["/v2/t/app/tags/list"] = page
    err = pull_fails(run_pc, f"oci://{reg.host}/t/app", tmp_path / "out", "--semver", "*")
    assert "bytes of tag lists" in err, err
    assert len([p for (_, p, _) in reg.requests if "/tags/list" in p]) <= 9



def test_endless_upload_session_body_is_bounded(run_pc, fake_registry, tmp_path):
    """A registry answering the upload POST with a 202 whose body never ends
    is refused after 1 MiB instead of being buffered until the timeout."""
    reg = fake_registry()
    reg.routes["/v2/"] = lambda h: (200, {}, b"{}")
    reg.routes["/v2/t/push/blobs/uploads/"] = lambda h: (
        202, {"Location": "/v2/t/push/blobs/uploads/u1"}, iter([b"x" * 65536] * 100000))
    src = tmp_path / "src"
    src.mkdir()
    (src / "Pulumi.yaml").write_text("name: x\nruntime: yaml\n")
    r = run_pc("push", f"oci://{reg.host}/t/push:v1", "--path", src, "--plain-http", "--retries", "0",
               timeout=60)
    assert r.returncode == 1, r.stderr
    assert "larger than the limit" in r.stderr, r.stderr
