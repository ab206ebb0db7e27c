"""`pulumi-controller fetch` against nginx on loopback: the artifact pipeline
(download → verify → unpack) as the controller uses it for Flux sources."""
import os
import subprocess
import threading

import pytest

from artifacts import flux_tarball, sha256, tree
from nginx_fixtures import holds_open, partial_staging, staging_names, wait_until

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
    # A malformed --digest is bad usage (2), as in `unpack` and as documented.
    assert r.returncode == 2
    assert "unsupported algorithm" in r.stderr
    assert nginx.requests("/" + name) == []
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
    # A URL or --host-override that cannot be parsed is bad usage too.
    r = run_pc("fetch", "http://[::1/a.tar.gz", "--digest", sha256(b"x"), "--out", tmp_path / "o")
    assert r.returncode == 2 and "cannot be parsed" in r.stderr, r.stderr
    r = run_pc("fetch", "http://x/a.tar.gz", "--digest", sha256(b"x"), "--out", tmp_path / "o",
               "--host-override", "http://[bad")
    assert r.returncode == 2 and "cannot be parsed" in r.stderr, r.stderr
    r = run_pc("fetch", "--help")
    assert r.returncode == 0 and "--digest" in r.stdout and "--max-size" in r.stdout


def test_url_credentials_never_printed(run_pc, nginx, artifact, tmp_path):
    """userinfo and query strings stay out of errors and of info/debug lines."""
    name, data = artifact
    base = f"http://alice:hunter2@127.0.0.1:{nginx.port}"
    r = run_pc("fetch", f"{base}/artifacts/missing.tar.gz?token=s3cr3t", "--digest", sha256(b"x"),
               "--out", tmp_path / "a", "--log-level", "debug")
    assert r.returncode == 1
    assert "404" in r.stderr
    r2 = run_pc("fetch", f"{base}/artifacts/{name}?token=s3cr3t#frag", "--digest", sha256(data),
                "--out", tmp_path / "b", "--log-level", "debug")
    assert r2.returncode == 0, r2.stderr
    r3 = run_pc("fetch", f"{base}/artifacts/{name}?token=s3cr3t", "--digest", sha256(data),
                "--store", tmp_path / "store", "--log-level", "debug", "--log-format", "json")
    assert r3.returncode == 0, r3.stderr
    for out in (r.stderr, r2.stderr, r3.stderr, r3.stdout):
        assert "hunter2" not in out and "alice" not in out and "s3cr3t" not in out, out
    assert f"127.0.0.1:{nginx.port}/artifacts/missing.tar.gz" in r.stderr


def test_presigned_redirect_target_not_printed(run_pc, scripted_server, tmp_path):
    """A redirect to object storage carries a signature in its query; the
    error about its broken body names the storage URL without it."""
    data = flux_tarball(FILES)

    def handler(conn, req, n):
        if b"/blob" not in req.split(b"\r\n", 1)[0]:
            conn.sendall(b"HTTP/1.1 302 Found\r\nContent-Length: 0\r\nConnection: close\r\n"
                         b"Location: /blob?X-Amz-Credential=AKIDEXAMPLE&X-Amz-Signature=SIGSECRET\r\n\r\n")
            return
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
                     + data[: len(data) // 2])

    srv = scripted_server(handler)
    r = run_pc("fetch", srv.url("artifact.tar.gz"), "--digest", sha256(data), "--out", tmp_path / "o",
               "--retries", "0", "--log-level", "debug")
    assert r.returncode == 1
    assert "SIGSECRET" not in r.stderr and "AKIDEXAMPLE" not in r.stderr, r.stderr
    assert f"127.0.0.1:{srv.port}/blob" in r.stderr
    assert_clean(str(tmp_path / "o"))


def _endless_after(data):
    """A handler that sends data, then zeros without end (no Content-Length)."""
    def handler(conn, req, n):
        conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + data)
        chunk = b"\0" * 65536
        for _ in range(100000):  # ~6.5 GB: "forever" for a test
            conn.sendall(chunk)
    return handler


def test_bytes_after_the_archive_are_bounded(run_pc, scripted_server, tmp_path):
    """A body that goes on after the tar end marker is refused after 1 MiB
    instead of being hashed until the timeout (and then retried)."""
    data = flux_tarball(FILES)
    srv = scripted_server(_endless_after(data))
    out = tmp_path / "o"
    r = run_pc("fetch", srv.url(), "--digest", sha256(data), "--out", out, timeout=60)
    assert r.returncode == 1
    assert "after the end of the archive" in r.stderr, r.stderr
    assert len(srv.requests) == 1  # a limit is not retried
    assert_clean(str(out))


def test_trailing_padding_within_the_bound_is_fine(run_pc, nginx, tmp_path):
    data = flux_tarball(FILES) + b"\0" * 10240
    nginx.put("padded.tar.gz", data)
    r = run_pc("fetch", nginx.url("artifacts/padded.tar.gz"), "--digest", sha256(data), "--out", tmp_path / "o")
    assert r.returncode == 0, r.stderr
    assert_extracted(tmp_path / "o")


def test_max_artifact_size_flag_and_default(run_pc, nginx, tmp_path):
    data = flux_tarball({"big.bin": os.urandom(1 << 20)})
    nginx.put("big3.tar.gz", data)
    r = run_pc("fetch", nginx.url("artifacts/big3.tar.gz"), "--digest", sha256(data), "--out", tmp_path / "o",
               "--max-artifact-size", "64Ki")
    assert r.returncode == 1
    assert "limit of 65536 bytes" in r.stderr
    assert_clean(str(tmp_path / "o"))
    h = run_pc("fetch", "--help")
    assert "--max-artifact-size" in h.stdout and "default 512Mi" in h.stdout


def _hold_lock(store, data):
    """Takes the store lock of data's entry as a stalled fetch would."""
    import fcntl
    d = store / "artifacts" / "sha256"
    d.mkdir(parents=True, exist_ok=True)
    f = open(d / f".{sha256(data)[7:]}.lock", "w")
    fcntl.flock(f, fcntl.LOCK_EX)
    return f


def test_lock_wait_honours_timeout(run_pc, nginx, artifact, tmp_path):
    name, data = artifact
    store = tmp_path / "store"
    held = _hold_lock(store, data)
    try:
        r = run_pc("fetch", nginx.url("artifacts/" + name), "--digest", sha256(data), "--store", store,
                   "--timeout", "1", timeout=60)
    finally:
        held.close()
    assert r.returncode == 1
    assert "still holds" in r.stderr and ".lock" in r.stderr, r.stderr
    assert nginx.requests("/" + name) == []


def test_lock_wait_is_cancelled_by_sigterm(pc_bin, nginx, artifact, tmp_path):
    import signal
    name, data = artifact
    store = tmp_path / "store"
    held = _hold_lock(store, data)
    try:
        p = subprocess.Popen([pc_bin, "fetch", nginx.url("artifacts/" + name), "--digest", sha256(data),
                              "--store", str(store)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lock = store / "artifacts" / "sha256" / f".{sha256(data)[7:]}.lock"
        wait_until(lambda: holds_open(p.pid, lock), "fetch never opened the lock")
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=20)
    finally:
        held.close()
    assert p.returncode == -signal.SIGTERM, err
    assert "canceled" in err


def _trickle(data):
    """Half the body, then one byte a second: a transfer to kill midway."""
    import time

    def handler(conn, req, n):
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
                     + data[: len(data) // 2])
        for b in data[len(data) // 2:]:
            time.sleep(1)
            conn.sendall(bytes([b]))
    return handler


@pytest.mark.parametrize("mode", ["out", "store"])
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_killed_mid_transfer_leaves_no_staging(pc_bin, scripted_server, tmp_path, mode, sig):
    import signal
    data = flux_tarball({"blob.bin": os.urandom(256 << 10)}, level=0)
    srv = scripted_server(_trickle(data))
    out = tmp_path / "o"
    store = tmp_path / "store"
    parent = tmp_path if mode == "out" else store / "artifacts" / "sha256"
    target = ["--out", str(out)] if mode == "out" else ["--store", str(store)]
    p = subprocess.Popen([pc_bin, "fetch", srv.url(), "--digest", sha256(data), *target],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: partial_staging(parent), "no partial staging appeared")
    p.send_signal(getattr(signal, sig))
    _, err = p.communicate(timeout=20)
    assert p.returncode == -getattr(signal, sig), err
    assert staging_names(parent) == []
    assert not out.exists()


def test_store_sweeps_stale_staging_but_not_live_one(run_pc, nginx, artifact, tmp_path):
    name, data = artifact
    store = tmp_path / "store"
    d = store / "artifacts" / "sha256"
    d.mkdir(parents=True)
    other = sha256(b"another artifact")[7:]
    busy = sha256(b"being downloaded")[7:]
    for hexd in (sha256(data)[7:], other, busy):
        (d / f".{hexd}.tmp-abc123").mkdir()
        (d / f".{hexd}.tmp-abc123" / "partial").write_bytes(b"x")
    held = _hold_lock(store, b"being downloaded")
    try:
        r = run_pc("fetch", nginx.url("artifacts/" + name), "--digest", sha256(data), "--store", store)
    finally:
        held.close()
    assert r.returncode == 0, r.stderr
    assert sorted(staging_names(d)) == [f".{busy}.tmp-abc123"]
    assert_extracted(d / sha256(data)[7:])


def test_endless_error_body_is_not_read_to_the_end(run_pc, scripted_server, tmp_path):
    """A 500 whose body never ends: judged on its status after the first
    64 KiB, and retried, instead of being read until the timeout each time."""
    def handler(conn, req, n):
        conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\n\r\nbroken ")
        for _ in range(1000000):
            conn.sendall(b"x" * 65536)
    srv = scripted_server(handler)
    r = run_pc("fetch", srv.url(), "--digest", sha256(b"x"), "--out", tmp_path / "o", "--retries", "1",
               timeout=60)
    assert r.returncode == 1
    assert "HTTP 500" in r.stderr and "broken" in r.stderr, r.stderr
    assert srv.connections == 2
    assert_clean(str(tmp_path / "o"))


def test_retry_after_cannot_stretch_the_timeout(run_pc, scripted_server, tmp_path):
    """503 with Retry-After: 20 on every attempt: --timeout 2 ends the fetch
    (with the 503 as the reason) instead of three 20 s waits."""
    def handler(conn, req, n):
        conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 20\r\nContent-Length: 4\r\n"
                     b"Connection: close\r\n\r\nbusy")
    srv = scripted_server(handler)
    r = run_pc("fetch", srv.url(), "--digest", sha256(b"x"), "--out", tmp_path / "o", "--timeout", "2",
               timeout=30)
    assert r.returncode == 1
    assert "HTTP 503" in r.stderr, r.stderr
    assert srv.connections == 1
    assert_clean(str(tmp_path / "o"))


def test_refused_entry_is_the_report_when_much_follows(run_pc, nginx, tmp_path):
    """A hostile entry early in a large artifact: the drain after it stops at
    the trailing bound, and the message still names the refused entry."""
    import gzip
    import io
    import tarfile
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        ti = tarfile.TarInfo("../evil.txt")
        ti.size = 4
        tar.addfile(ti, io.BytesIO(b"evil"))
        big = os.urandom(3 << 20)
        ti = tarfile.TarInfo("big.bin")
        ti.size = len(big)
        tar.addfile(ti, io.BytesIO(big))
    data = gzip.compress(raw.getvalue(), compresslevel=1)
    nginx.put("evil-big.tar.gz", data)
    out = tmp_path / "o"
    r = run_pc("fetch", nginx.url("artifacts/evil-big.tar.gz"), "--digest", sha256(data), "--out", out)
    assert r.returncode == 1
    assert "../evil.txt" in r.stderr, r.stderr
    assert_clean(str(out))
