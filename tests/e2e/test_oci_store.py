"""`pull --store`: OCI layers in the shared artifact store, with the Flux
store's lock and staging rules (oci_store_pull): one download per layer
digest, lock waits that can be cancelled, no staging left by SIGTERM."""
import os
import signal
import subprocess
import threading

import pytest

from nginx_fixtures import holds_open, partial_staging, staging_names, wait_until
from registry_fixtures import serve_artifact, small_artifact

pytestmark = pytest.mark.usefixtures("isolated_docker_config")


def _layer(blobs):
    return [d for d, b in blobs.items() if b[:2] == b"\x1f\x8b"][0]


def _slow_blob(reg, repo, digest, data, release):
    """The blob route sends half the layer, then waits for `release`."""
    def route(h):
        def chunks():
            yield data[: len(data) // 2]
            release.wait(60)
            yield data[len(data) // 2:]
        return 200, {"Content-Length": str(len(data))}, chunks()
    reg.routes[f"/v2/{repo}/blobs/{digest}"] = route


def _held_artifact(fake_registry, repo, size):
    """A registry serving <repo>:v1 whose layer stops halfway until the
    returned event is set: (registry, layer digest, event)."""
    manifest, mdigest, blobs = small_artifact({"f.bin": os.urandom(size)})
    reg = fake_registry()
    serve_artifact(reg, repo, "v1", manifest, mdigest, blobs)
    layer = _layer(blobs)
    release = threading.Event()
    _slow_blob(reg, repo, layer, blobs[layer], release)
    return reg, layer, release


def test_concurrent_pulls_download_the_layer_once(pc_bin, fake_registry, tmp_path):
    reg, layer, release = _held_artifact(fake_registry, "s/app", 200 << 10)
    store = tmp_path / "store"
    procs = [subprocess.Popen([pc_bin, "pull", f"oci://{reg.host}/s/app:v1", "--store", str(store),
                               "--plain-http"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    # All three have their manifest before the one download is let go.
    wait_until(lambda: len([p for (_, p, _) in reg.requests if "/manifests/" in p]) >= 3, "manifests")
    release.set()
    results = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), results
    assert len([p for (_, p, _) in reg.requests if p.endswith(layer)]) == 1
    paths = {line for out, _ in results for line in out.splitlines() if line.startswith("path: ")}
    assert paths == {f"path: {store}/artifacts/sha256/{layer[7:]}"}
    assert sorted(o.count("cached: true") for o, _ in results) == [0, 1, 1]
    assert staging_names(store / "artifacts" / "sha256") == []


def test_lock_wait_is_cancelled_by_sigterm(pc_bin, fake_registry, tmp_path):
    import fcntl
    manifest, mdigest, blobs = small_artifact()
    reg = fake_registry()
    serve_artifact(reg, "s/lock", "v1", manifest, mdigest, blobs)
    layer = _layer(blobs)
    d = tmp_path / "store" / "artifacts" / "sha256"
    d.mkdir(parents=True)
    lock = d / f".{layer[7:]}.lock"
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        p = subprocess.Popen([pc_bin, "pull", f"oci://{reg.host}/s/lock:v1", "--store", str(tmp_path / "store"),
                              "--plain-http"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_until(lambda: holds_open(p.pid, lock), "pull never opened the store lock")
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=20)
    assert p.returncode == -signal.SIGTERM, err
    assert "canceled" in err
    assert not any(p.endswith(layer) for (_, p, _) in reg.requests)


@pytest.mark.parametrize("mode", ["out", "store"])
def test_sigterm_mid_layer_leaves_no_staging(pc_bin, fake_registry, tmp_path, mode):
    reg, layer, release = _held_artifact(fake_registry, "s/kill", 300 << 10)
    store = tmp_path / "store"
    parent = tmp_path if mode == "out" else store / "artifacts" / "sha256"
    target = ["--out", str(tmp_path / "o")] if mode == "out" else ["--store", str(store)]
    p = subprocess.Popen([pc_bin, "pull", f"oci://{reg.host}/s/kill:v1", *target, "--plain-http"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: partial_staging(parent), "no partial staging appeared")
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=20)
    finally:
        release.set()
    assert p.returncode == -signal.SIGTERM, err
    assert staging_names(parent) == []
    assert not (tmp_path / "o").exists()
    assert not (parent / layer[7:]).exists()


def test_trickling_layer_is_bounded_in_time(run_pc, fake_registry, tmp_path):
    """A registry that sends a byte now and then (above the stall
    threshold) cannot hold a pull for longer than --max-time."""
    manifest, mdigest, blobs = small_artifact({"f.bin": os.urandom(64 << 10)})
    reg = fake_registry()
    serve_artifact(reg, "s/slow", "v1", manifest, mdigest, blobs)
    layer = _layer(blobs)
    data = blobs[layer]

    def route(h):
        def chunks():
            yield data[:1024]
            for b in data[1024:]:
                reg.stop_event.wait(0.2)
                yield bytes([b])
        return 200, {"Content-Length": str(len(data))}, chunks()
    reg.routes[f"/v2/s/slow/blobs/{layer}"] = route
    r = run_pc("pull", f"oci://{reg.host}/s/slow:v1", "--out", tmp_path / "o", "--plain-http",
               "--retries", "0", "--max-time", "2s", timeout=60)
    assert r.returncode == 1, r.stderr
    assert "timed out" in r.stderr, r.stderr
    assert not (tmp_path / "o").exists() and staging_names(tmp_path) == []
