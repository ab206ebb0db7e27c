"""`pulumi-controller fetch` against nginx on loopback: the artifact pipeline
(download → verify → unpack) as the controller uses it for Flux sources."""
import os
import subprocess
import threading

import pytest

from artifacts import flux_tarball, sha256, tree

FILES = {
    "Pulumi.yaml": (b"name: demo\nruntime: yaml\n", 0o600),
    "bin/run.sh": (b"#!/bin/sh\necho hi\n", 0o700),
    "nested/deep/data.json": (b'{"a": 1}\n' * 100, 0o600),
}


@pytest.fixture
def artifact(nginx, request):
    name = request.node.name.replace("[", "_").replace("]", "") + ".tar.gz"
    data = flux_tarball(FILES)
    nginx.put(name, data)
    return name, data


def assert_clean(out):
    """Nothing at the output, no staging directory left beside it."""
    assert not os.path.exists(out)
    parent = os.path.dirname(out)
    leftovers = [n for n in os.listdir(parent) if ".tmp-" in n]
    assert leftovers == []


def assert_extracted(out):
    t = tree(out)
    for name, (content, mode) in FILES.items():
        assert t[name] == (content, mode), name


def test_success(run_pc, nginx, artifact, tmp_path):
    name, data = artifact
    out = tmp_path / "out"
    r = run_pc("fetch", nginx.url("artifacts/" + name), "--digest", sha256(data), "--out", out)
    assert r.returncode == 0, r.stderr
    assert_extracted(out)


def test_legacy_bare_hex_digest(run_pc, nginx, artifact, tmp_path):
    name, data = artifact
    out = tmp_path / "out"
    r = run_pc("fetch", nginx.url("artifacts/" + name), "--digest", sha256(data)[7:], "--out", out)
    assert r.returncode == 0, r.stderr
    assert_extracted(out)


def test_not_found(run_pc, nginx, tmp_path):
    out = tmp_path / "out"
    url = nginx.url("artifacts/missing.tar.gz")
    r = run_pc("fetch", url, "--digest", sha256(b"x"), "--out", out)
    assert r.returncode == 1
    assert url in r.stderr and "404" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert_clean(str(out))
    # 404 is not retried.
    assert [s for s, _ in nginx.requests("/missing.tar.gz")] == [404]


def test_500_then_200_is_retried(run_pc, nginx, artifact, tmp_path):
    name, data = artifact
    out = tmp_path / "out"
    healer = threading.Thread(target=lambda: (nginx.wait_for_request("/flaky/" + name, 500), nginx.heal(name)))
    healer.start()
    r = run_pc("fetch", nginx.url("flaky/" + name), "--digest", sha256(data), "--out", out, "--retries", "5")
    healer.join()
    assert r.returncode == 0, r.stderr
    statuses = [s for s, _ in nginx.requests("/flaky/" + name)]
    assert statuses[0] == 500 and statuses[-1] == 200
    assert_extracted(out)


def test_5xx_exhausts_retries(run_pc, nginx, artifact, tmp_path):
    name, data = artifact
    out = tmp_path / "out"
    r = run_pc("fetch", nginx.url("flaky/" + name), "--digest", sha256(data), "--out", out, "--retries", "2")
    assert r.returncode == 1
    assert "HTTP 500" in r.stderr
    assert [s for s, _ in nginx.requests("/flaky/" + name)] == [500, 500, 500]
    assert_clean(str(out))


def test_digest_mismatch(run_pc, nginx, artifact, tmp_path):
    name, data = artifact
    out = tmp_path / "out"
    url = nginx.url("artifacts/" + name)
    wrong = sha256(data + b"x")
    r = run_pc("fetch", url, "--digest", wrong, "--out", out)
    assert r.returncode == 1
    assert "digest mismatch" in r.stderr and url in r.stderr and wrong in r.stderr
    assert_clean(str(out))


def test_bad_digest_syntax(run_pc, nginx, artifact, tmp_path):
    name, _ = artifact
    out = tmp_path / "out"
    r = run_pc("fetch", nginx.url("artifacts/" + name), "--digest", "md5:abcd", "--out", out)
    assert r.returncode == 1
    assert "unsupported algorithm" in r.stderr
    assert_clean(str(out))


def test_body_cut_short(run_pc, broken_server, tmp_path):
    data = flux_tarball(FILES)
    srv = broken_server(data)
    out = tmp_path / "out"
    r = run_pc("fetch", srv.url(), "--digest", sha256(data), "--out", out, "--retries", "1")
    assert r.returncode == 1
    assert srv.url() in r.stderr
    # The broken body was retried once from the start, then given up.
    assert srv.connections == 2
    assert_clean(str(out))


def test_over_unpacked_size_limit(run_pc, nginx, tmp_path):
    data = flux_tarball({"big.bin": os.urandom(1 << 20)})
    nginx.put("big.tar.gz", data)
    out = tmp_path / "out"
    r = run_pc("fetch", nginx.url("artifacts/big.tar.gz"), "--digest", sha256(data), "--out", out,
               "--max-size", "100Ki")
    assert r.returncode == 1
    assert "big.bin" in r.stderr and "limit" in r.stderr
    assert_clean(str(out))


def test_over_download_size_limit(run_pc, nginx, tmp_path):
    data = flux_tarball({"big.bin": os.urandom(1 << 20)})
    nginx.put("big2.tar.gz", data)
    out = tmp_path / "out"
    r = run_pc("fetch", nginx.url("artifacts/big2.tar.gz"), "--digest", sha256(data), "--out", out,
               "--max-download-size", "64Ki")
    assert r.returncode == 1
    assert "limit of 65536 bytes" in r.stderr
    assert_clean(str(out))


def test_server_stalls(run_pc, nginx, artifact, tmp_path):
    name, data = artifact
    out = tmp_path / "out"
    r = run_pc("fetch", nginx.url("slow/" + name), "--digest", sha256(data), "--out", out,
               "--timeout", "1", "--retries", "0")
    assert r.returncode == 1
    assert "timed out" in r.stderr or "Timeout" in r.stderr
    assert_clean(str(out))


def test_redirect_followed(run_pc, nginx, artifact, tmp_path):
    name, data = artifact
    out = tmp_path / "out"
    r = run_pc("fetch", nginx.url("redirect/" + name), "--digest", sha256(data), "--out", out)
    assert r.returncode == 0, r.stderr
    assert_extracted(out)
    assert [s for s, _ in nginx.requests("/redirect/" + name)] == [302]


def test_redirect_loop_is_bounded(run_pc, nginx, tmp_path):
    out = tmp_path / "out"
    r = run_pc("fetch", nginx.url("loop"), "--digest", sha256(b""), "--out", out)
    assert r.returncode == 1
    assert "redirects" in r.stderr
    assert len(nginx.requests("/loop")) <= 11
    assert_clean(str(out))


def test_hostile_archive_refused(run_pc, nginx, tmp_path):
    import gzip
    import io
    import tarfile
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        ti = tarfile.TarInfo("ok.txt")
        ti.size = 2
        tar.addfile(ti, io.BytesIO(b"ok"))
        ti = tarfile.TarInfo("../escape.txt")
        ti.size = 4
        tar.addfile(ti, io.BytesIO(b"evil"))
    data = gzip.compress(raw.getvalue())
    nginx.put("evil.tar.gz", data)
    out = tmp_path / "sub" / "out"
    r = run_pc("fetch", nginx.url("artifacts/evil.tar.gz"), "--digest", sha256(data), "--out", out)
    assert r.returncode == 1
    assert "../escape.txt" in r.stderr
    assert not (tmp_path / "sub" / "escape.txt").exists()
    assert not (tmp_path / "escape.txt").exists()
    assert_clean(str(out))


def test_tls_with_ca_file(run_pc, nginx, artifact, tmp_path):
    name, data = artifact
    url = nginx.url("artifacts/" + name, tls=True)
    r = run_pc("fetch", url, "--digest", sha256(data), "--out", tmp_path / "a", "--retries", "0")
    assert r.returncode == 1
    assert "TLS" in r.stderr or "certificate" in r.stderr
    assert_clean(str(tmp_path / "a"))
    r = run_pc("fetch", url, "--digest", sha256(data), "--out", tmp_path / "b", "--ca-file", nginx.ca)
    assert r.returncode == 0, r.stderr
    assert_extracted(tmp_path / "b")


def test_host_override(run_pc, nginx, artifact, tmp_path):
    """Outside the cluster the advertised host does not resolve; the override
    (flag or SOURCE_CONTROLLER_LOCALHOST, as kustomize-controller) replaces
    host[:port] and keeps the path."""
    name, data = artifact
    url = f"http://source-controller.flux-system.svc.cluster.local./artifacts/{name}"
    override = f"127.0.0.1:{nginx.port}"
    r = run_pc("fetch", url, "--digest", sha256(data), "--out", tmp_path / "a", "--host-override", override)
    assert r.returncode == 0, r.stderr
    assert_extracted(tmp_path / "a")
    r = run_pc("fetch", url, "--digest", sha256(data), "--out", tmp_path / "b",
               env={"SOURCE_CONTROLLER_LOCALHOST": override})
    assert r.returncode == 0, r.stderr
    assert_extracted(tmp_path / "b")
    assert [s for s, _ in nginx.requests("/" + name)] == [200, 200]


def test_store_reuses_without_network(run_pc, nginx, artifact, tmp_path):
    name, data = artifact
    store = tmp_path / "store"
    url = nginx.url("artifacts/" + name)
    r1 = run_pc("fetch", url, "--digest", sha256(data), "--store", store)
    assert r1.returncode == 0, r1.stderr
    path = r1.stdout.strip()
    assert path == str(store / "artifacts" / "sha256" / sha256(data)[7:])
    assert_extracted(path)
    # Second time: served from the store.  The URL is unreachable on purpose.
    r2 = run_pc("fetch", "http://127.0.0.1:9/nothing-listens-here", "--digest", sha256(data), "--store", store,
                "--retries", "0")
    assert r2.returncode == 0, r2.stderr
    assert r2.stdout.strip() == path
    assert len(nginx.requests("/" + name)) == 1


def test_store_concurrent_requests_share_one_download(pc_bin, nginx, tmp_path):
    data = flux_tarball({"blob.bin": os.urandom(3 << 20)}, level=0)
    nginx.put("shared.tar.gz", data)
    store = tmp_path / "store"
    url = nginx.url("paced/shared.tar.gz")  # ~1.5 s at 2 MiB/s: the requests overlap
    procs = [subprocess.Popen([pc_bin, "fetch", url, "--digest", sha256(data), "--store", str(store)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    results = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), results
    assert len({out.strip() for out, _ in results}) == 1
    assert [s for s, _ in nginx.requests("/shared.tar.gz")] == [200]
    leftovers = [n for n in os.listdir(store / "artifacts" / "sha256") if n.startswith(".")]
    assert leftovers == []


def test_usage_errors(run_pc, tmp_path):
    r = run_pc("fetch", "http://x/a.tar.gz", "--out", tmp_path / "o")
    assert r.returncode == 2
    r = run_pc("fetch", "--help")
    assert r.returncode == 0 and "--digest" in r.stdout and "--max-size" in r.stdout
