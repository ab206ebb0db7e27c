"""push and pull against a real registry (Debian's docker-registry), and
interop with an independent client (skopeo) in both directions."""
import hashlib
import json
import os
import pathlib
import subprocess

import pytest

from registry_fixtures import make_tree, tree_snapshot

pytestmark = pytest.mark.usefixtures("isolated_docker_config")

FLUX_CONFIG = "application/vnd.cncf.flux.config.v1+json"
FLUX_CONTENT = "application/vnd.cncf.flux.content.v1.tar+gzip"


def push(run_pc, reg, repo, tag, path, *extra):
    r = run_pc("push", reg.ref(repo, tag), "--path", path, *reg.pc_args(), *extra,
               input=reg.pc_input())
    assert r.returncode == 0, r.stderr
    digest = r.stdout.strip()
    assert digest.startswith("sha256:") and len(digest) == 71, r.stdout
    return digest


def pull(run_pc, reg, ref, out, *extra):
    return run_pc("pull", ref, "--out", out, *reg.pc_args(), *extra, input=reg.pc_input())


def parse_pull(stdout):
    return dict(line.split(": ", 1) for line in stdout.strip().splitlines())


def test_round_trip_is_byte_for_byte_with_modes(run_pc, registry_plain, tmp_path):
    src = make_tree(tmp_path / "src", seed="roundtrip")
    digest = push(run_pc, registry_plain, "rt/app", "v1", src, "--source", "https://git.example/x",
                  "--revision", "main@sha1:0123456789abcdef0123456789abcdef01234567")
    r = pull(run_pc, registry_plain, registry_plain.ref("rt/app", "v1"), tmp_path / "out")
    assert r.returncode == 0, r.stderr
    got = parse_pull(r.stdout)
    assert got["revision"] == f"v1@{digest}"
    assert tree_snapshot(tmp_path / "out") == tree_snapshot(src)


def test_manifest_is_flux_format(run_pc, registry_plain, tmp_path):
    src = make_tree(tmp_path / "src", seed="format")
    digest = push(run_pc, registry_plain, "fmt/app", "latest", src, "--source", "https://s",
                  "--revision", "v1@sha1:abc", "--annotation", "team=platform",
                  "--annotation", "org.opencontainers.image.source=https://override")
    st, hdrs, body = registry_plain.raw(
        "GET", "/v2/fmt/app/manifests/latest",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    assert st == 200
    assert "sha256:" + hashlib.sha256(body).hexdigest() == digest
    m = json.loads(body)
    assert m["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert m["config"]["mediaType"] == FLUX_CONFIG
    assert [layer["mediaType"] for layer in m["layers"]] == [FLUX_CONTENT]
    ann = m["annotations"]
    assert ann["org.opencontainers.image.revision"] == "v1@sha1:abc"
    assert ann["org.opencontainers.image.source"] == "https://override"
    assert ann["team"] == "platform"
    assert ann["org.opencontainers.image.created"].endswith("Z")
    # The layer: tar+gzip, relative names, no leading directory, zeroed owners.
    layer = registry_plain.blob_path(m["layers"][0]["digest"])
    listing = subprocess.run(["tar", "-tvzf", str(layer)], capture_output=True, text=True,
                             check=True).stdout
    names = subprocess.run(["tar", "-tzf", str(layer)], capture_output=True, text=True,
                           check=True).stdout.split()
    assert "Pulumi.yaml" in names and "src/lib/util.ts" in names
    assert not any(n.startswith(("/", "./")) or n in (".", "./") for n in names)
    assert all(" 0/0 " in line for line in listing.splitlines())
    assert names == sorted(names)


def test_reproducible_gives_one_digest(run_pc, registry_plain, tmp_path):
    src = make_tree(tmp_path / "src", seed="repro")
    args = ["--source", "https://s", "--revision", "r1", "--reproducible"]
    d1 = push(run_pc, registry_plain, "repro/app", "a", src, *args)
    # Touch every file: times must not matter.
    for p in pathlib.Path(src).rglob("*"):
        os.utime(p, (1_000_000, 1_000_000))
    d2 = push(run_pc, registry_plain, "repro/app", "b", src, *args)
    assert d1 == d2
    st, _, body = registry_plain.raw("GET", "/v2/repro/app/manifests/a",
                                     headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    assert json.loads(body)["annotations"]["org.opencontainers.image.created"] == "1970-01-01T00:00:00Z"
    # Without --reproducible the created time (so the digest) differs from the epoch one.
    d3 = push(run_pc, registry_plain, "repro/app", "c", src, "--source", "https://s", "--revision", "r1")
    assert d3 != d1


def test_push_skips_blobs_the_registry_has(run_pc, registry_plain, tmp_path):
    src = make_tree(tmp_path / "src", seed="dedupe")
    push(run_pc, registry_plain, "dedupe/app", "one", src, "--reproducible")
    r = run_pc("push", registry_plain.ref("dedupe/app", "two"), "--path", src, "--reproducible",
               "--plain-http", "--log-level", "info", "--log-format", "json")
    assert r.returncode == 0, r.stderr
    logs = [json.loads(line) for line in r.stderr.splitlines() if line.startswith("{")]
    pushed = [rec for rec in logs if rec.get("msg") == "pushed"]
    assert pushed and pushed[0]["layer_uploaded"] == "false"


def test_ignore_paths(run_pc, registry_plain, tmp_path):
    src = make_tree(tmp_path / "src", seed="ignore")
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (src / "bundle.zip").write_bytes(b"PK")
    (src / "node_modules" / "x").mkdir(parents=True)
    (src / "node_modules" / "x" / "i.js").write_text("x")
    push(run_pc, registry_plain, "ign/app", "default", src)
    r = pull(run_pc, registry_plain, registry_plain.ref("ign/app", "default"), tmp_path / "o1")
    assert r.returncode == 0, r.stderr
    got = tree_snapshot(tmp_path / "o1")
    assert ".git" not in got and "bundle.zip" not in got and "node_modules/x/i.js" in got
    push(run_pc, registry_plain, "ign/app", "custom", src, "--ignore-paths", "node_modules/,*.key")
    r = pull(run_pc, registry_plain, registry_plain.ref("ign/app", "custom"), tmp_path / "o2")
    assert r.returncode == 0, r.stderr
    got = tree_snapshot(tmp_path / "o2")
    assert "node_modules" not in got and "private.key" not in got
    assert ".git/HEAD" in got and "bundle.zip" in got


def test_skopeo_reads_what_we_push(run_pc, registry_plain, tmp_path):
    src = make_tree(tmp_path / "src", seed="skopeo-read")
    digest = push(run_pc, registry_plain, "interop/ours", "v1", src)
    ref = f"docker://{registry_plain.host}/interop/ours:v1"
    raw = subprocess.run(["skopeo", "inspect", *registry_plain.skopeo_args(""), "--raw", ref],
                         capture_output=True, check=True).stdout
    assert "sha256:" + hashlib.sha256(raw).hexdigest() == digest
    layer_digest = json.loads(raw)["layers"][0]["digest"]
    layout = tmp_path / "layout"
    subprocess.run(["skopeo", "copy", *registry_plain.skopeo_args("src"), ref, f"oci:{layout}:v1"],
                   capture_output=True, check=True)
    blob = layout / "blobs" / "sha256" / layer_digest.split(":")[1]
    assert "sha256:" + hashlib.sha256(blob.read_bytes()).hexdigest() == layer_digest
    out = tmp_path / "x"
    out.mkdir()
    subprocess.run(["tar", "-xzf", str(blob), "-C", str(out)], check=True)
    assert (out / "src" / "lib" / "util.ts").read_text() == (src / "src" / "lib" / "util.ts").read_text()


def _write_layout(d, files, layer_media_type):
    """An OCI image layout written by hand: one manifest, one layer (tar+gzip)."""
    import io
    import tarfile
    d = pathlib.Path(d)
    blobs = d / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(data):
        h = hashlib.sha256(data).hexdigest()
        (blobs / h).write_bytes(data)
        return {"digest": "sha256:" + h, "size": len(data)}

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, (data, mode) in files.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mode = mode
            tf.addfile(ti, io.BytesIO(data))
    layer = dict(mediaType=layer_media_type, **put(buf.getvalue()))
    config = dict(mediaType=FLUX_CONFIG, **put(b'{"created":"2024-01-01T00:00:00Z"}'))
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": config, "layers": [layer],
                "annotations": {"org.opencontainers.image.revision": "hand@sha1:feed"}}
    mbytes = json.dumps(manifest).encode()
    mdesc = dict(mediaType="application/vnd.oci.image.manifest.v1+json", **put(mbytes),
                 annotations={"org.opencontainers.image.ref.name": "v9"})
    (d / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [mdesc]}))
    (d / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    return mdesc["digest"], layer["digest"]


def test_we_pull_what_skopeo_pushes(run_pc, registry_basic, tmp_path):
    files = {"main.py": (b"print('hi')\n", 0o644), "bin/tool": (b"#!/bin/sh\n", 0o755),
             "conf/secret.yaml": (b"a: b\n", 0o600)}
    mdigest, ldigest = _write_layout(tmp_path / "layout", files, FLUX_CONTENT)
    subprocess.run(["skopeo", "copy", *registry_basic.skopeo_args("dest"),
                    f"oci:{tmp_path / 'layout'}:v9",
                    f"docker://{registry_basic.host}/interop/theirs:v9"],
                   capture_output=True, check=True)
    r = pull(run_pc, registry_basic, registry_basic.ref("interop/theirs", "v9"), tmp_path / "out")
    assert r.returncode == 0, r.stderr
    got = parse_pull(r.stdout)
    assert got == {"revision": f"v9@{mdigest}", "digest": ldigest}
    snap = tree_snapshot(tmp_path / "out")
    for name, (data, mode) in files.items():
        assert snap[name] == ("file", mode, data)


def test_pull_by_digest_and_semver(run_pc, registry_plain, tmp_path):
    digests = {}
    for tag in ["1.0.0", "1.2.0", "1.2.5", "1.3.0-rc.1", "2.0.0", "v1.2.9", "latest", "junk"]:
        src = make_tree(tmp_path / f"src-{tag}", seed=tag)
        digests[tag] = push(run_pc, registry_plain, "semver/app", tag, src)
    cases = {">=1.2.0 <2.0.0": "v1.2.9", "~1.2": "v1.2.9", "^1": "v1.2.9", "1.x": "v1.2.9",
             "1.2.0 - 1.2.5": "1.2.5", ">=1.3.0-0 <2.0.0": "1.3.0-rc.1", "*": "2.0.0"}
    for i, (rng, want) in enumerate(cases.items()):
        out = tmp_path / f"out{i}"
        r = pull(run_pc, registry_plain, registry_plain.ref("semver/app"), out, "--semver", rng)
        assert r.returncode == 0, (rng, r.stderr)
        assert parse_pull(r.stdout)["revision"] == f"{want}@{digests[want]}", rng
        assert f"seed = '{want}'" in (out / "index.ts").read_text()
    r = pull(run_pc, registry_plain, registry_plain.ref("semver/app"), tmp_path / "none",
             "--semver", ">=3")
    assert r.returncode == 1 and "matches the semver range" in r.stderr
    assert not (tmp_path / "none").exists()
    out = tmp_path / "bydigest"
    r = pull(run_pc, registry_plain, registry_plain.ref("semver/app", digest=digests["1.0.0"]), out)
    assert r.returncode == 0, r.stderr
    assert parse_pull(r.stdout)["revision"] == digests["1.0.0"]


def test_tag_list_pagination(run_pc, registry_plain, tmp_path, fake_registry):
    # The real registry pages only when asked; a scripted one forces 3 pages.
    reg = fake_registry()
    pages = {"/v2/pg/app/tags/list": (["0.1.0", "1.0.0"], "/v2/pg/app/tags/list2?n=2&last=1.0.0"),
             "/v2/pg/app/tags/list2": (["1.5.0", "junk"], "/v2/pg/app/tags/list3?n=2&last=junk"),
             "/v2/pg/app/tags/list3": (["1.4.0"], None)}
    for path, (tags, nxt) in pages.items():
        def route(h, tags=tags, nxt=nxt):
            hdrs = {"Content-Type": "application/json"}
            if nxt:
                hdrs["Link"] = f'<{nxt}>; rel="next"'
            return 200, hdrs, json.dumps({"name": "pg/app", "tags": tags}).encode()
        reg.routes[path] = route
    r = run_pc("pull", f"oci://{reg.host}/pg/app", "--out", tmp_path / "o", "--plain-http",
               "--semver", "^1", "--retries", "0")
    # The chosen tag's manifest does not exist there: the error names it.
    assert r.returncode == 1
    assert "pg/app:1.5.0" in r.stderr, r.stderr
    seen = [p for (_, p, _) in reg.requests]
    assert any(p.startswith("/v2/pg/app/tags/list3") for p in seen)


def test_pull_through_index_picks_linux_amd64(run_pc, registry_plain, tmp_path):
    a = make_tree(tmp_path / "arm", seed="arm64")
    b = make_tree(tmp_path / "amd", seed="amd64")
    da = push(run_pc, registry_plain, "idx/app", "arm", a)
    db = push(run_pc, registry_plain, "idx/app", "amd", b)
    sizes = {}
    for tag in ("arm", "amd"):
        _, _, body = registry_plain.raw("GET", f"/v2/idx/app/manifests/{tag}",
                                        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
        sizes[tag] = len(body)
    mt = "application/vnd.oci.image.manifest.v1+json"
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [
                 {"mediaType": mt, "digest": da, "size": sizes["arm"],
                  "platform": {"os": "linux", "architecture": "arm64"}},
                 {"mediaType": mt, "digest": db, "size": sizes["amd"],
                  "platform": {"os": "linux", "architecture": "amd64"}}]}
    idx_digest = registry_plain.put_manifest("idx/app", "multi", index,
                                             "application/vnd.oci.image.index.v1+json")
    r = pull(run_pc, registry_plain, registry_plain.ref("idx/app", "multi"), tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert parse_pull(r.stdout)["revision"] == f"multi@{idx_digest}"
    assert "linux/amd64" in r.stderr and db in r.stderr
    assert "seed = 'amd64'" in (tmp_path / "out" / "index.ts").read_text()


def _run_on_pty(argv):
    """Runs argv with stderr on a pseudo-terminal; returns (rc, stdout, tty output)."""
    import pty
    import select
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            proc.kill()
            break
        try:
            data = os.read(master, 65536)
        except OSError:   # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    out = proc.stdout.read().decode()
    rc = proc.wait(timeout=60)
    os.close(master)
    return rc, out, b"".join(chunks).decode(errors="replace")


def test_progress_only_on_a_terminal(pc_bin, run_pc, registry_plain, tmp_path):
    src = make_tree(tmp_path / "src", seed="progress", big=3 << 20)
    ref = registry_plain.ref("progress/app", "v1")
    rc, out, tty = _run_on_pty([pc_bin, "push", ref, "--path", str(src), "--plain-http"])
    assert rc == 0, tty
    assert "layer" in tty and "MiB/s" in tty
    rc, out, tty = _run_on_pty([pc_bin, "pull", ref, "--out", str(tmp_path / "o1"), "--plain-http"])
    assert rc == 0, tty
    assert out.startswith("revision: v1@sha256:")
    assert "\r" in tty and "MiB/s" in tty
    # Not a terminal: stderr stays empty.
    r = run_pc("pull", ref, "--out", tmp_path / "o2", "--plain-http")
    assert r.returncode == 0 and r.stderr == ""


def test_pull_into_the_artifact_store(pc_bin, run_pc, registry_plain, tmp_path):
    src = make_tree(tmp_path / "src", seed="store", big=1 << 20)
    push(run_pc, registry_plain, "store/app", "v1", src)
    store = tmp_path / "store"
    args = [pc_bin, "pull", registry_plain.ref("store/app", "v1"), "--store", str(store), "--plain-http"]
    # Two at once: both succeed and agree, one tree results.
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    results = [parse_pull(o) for o, _ in outs]
    assert results[0]["path"] == results[1]["path"]
    path = pathlib.Path(results[0]["path"])
    assert path.parent == store / "artifacts" / "sha256"
    assert path.name == results[0]["digest"].split(":")[1]
    assert tree_snapshot(path) == tree_snapshot(src)
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no staging left over
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 0 and parse_pull(r.stdout)["cached"] == "true"


def test_oci_image_layers_tar_and_zstd(run_pc, registry_plain, tmp_path):
    import io
    import tarfile

    def tar_of(name, data):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mode = 0o644
            tf.addfile(ti, io.BytesIO(data))
        return buf.getvalue()
    plain = tar_of("which.txt", b"plain tar\n")
    zst = subprocess.run(["zstd", "-q", "-c"], input=tar_of("which.txt", b"zstd tar\n"),
                         capture_output=True, check=True).stdout
    repo = "mt/image"
    dp = registry_plain.put_blob(repo, plain)
    dz = registry_plain.put_blob(repo, zst)
    cfg = registry_plain.put_blob(repo, b"{}")
    mt = "application/vnd.oci.image.manifest.v1+json"
    registry_plain.put_manifest(repo, "v1", {
        "schemaVersion": 2, "mediaType": mt,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfg, "size": 2},
        "layers": [
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd", "digest": dz, "size": len(zst)},
            {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": dp, "size": len(plain)}]}, mt)
    r = run_pc("pull", registry_plain.ref(repo, "v1"), "--out", tmp_path / "a", "--plain-http")
    assert r.returncode == 0, r.stderr
    assert parse_pull(r.stdout)["digest"] == dp          # tar preferred over tar+zstd
    assert (tmp_path / "a" / "which.txt").read_bytes() == b"plain tar\n"
    r = run_pc("pull", registry_plain.ref(repo, "v1"), "--out", tmp_path / "b", "--plain-http",
               "--media-type", "application/vnd.oci.image.layer.v1.tar+zstd")
    assert r.returncode == 0, r.stderr
    assert parse_pull(r.stdout)["digest"] == dz
    assert (tmp_path / "b" / "which.txt").read_bytes() == b"zstd tar\n"
