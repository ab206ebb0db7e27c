"""Smoke tests of the REAL kube-apiserver fixture (tests/e2e/real_fixtures.py):
kubectl against it, the project's CRDs, a watch that survives an apiserver
restart by reconnecting, and the fault proxy in front of it.  Every test but the
fault-proxy one runs twice, against the emulator (tests/e2e/kubeapi) and against
the real server (fixture `any_kubeapi`), so a difference between the two fails here.

Observed outputs are recorded in docs/conformance.md."""
import http.client
import json
import os
import ssl

import pytest

from real_fixtures import REAL_BIN, VERSIONS, EmulatorView, crd_files, wait_for

KUBECTLS = {"built": str(REAL_BIN / "kubectl"), "debian": "/usr/bin/kubectl"}


@pytest.mark.parametrize("which", sorted(KUBECTLS))
def test_kubectl_apply_get_patch_delete(any_kubeapi, which):
    kubectl = KUBECTLS[which]
    if not os.access(kubectl, os.X_OK):
        pytest.fail(f"{kubectl} is missing (run `make deps` / `make deps-real`)")
    k = any_kubeapi
    ver = json.loads(k.kubectl("version", "-o", "json", kubectl=kubectl).stdout)
    if isinstance(k, EmulatorView):
        assert ver["serverVersion"]["gitVersion"].startswith("v1.")
    else:
        assert ver["serverVersion"]["gitVersion"] == VERSIONS["KUBERNETES_VERSION"]

    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "smoke", "labels": {"app": "smoke"}}, "data": {"a": "1"}}
    out = k.kubectl("apply", "--server-side", "--field-manager=smoke", "-f", "-",
                    input=json.dumps(cm), kubectl=kubectl)
    assert out.stdout.strip() == "configmap/smoke serverside-applied"
    got = json.loads(k.kubectl("get", "configmap", "smoke", "-o", "json",
                               "--show-managed-fields", kubectl=kubectl).stdout)
    assert got["data"] == {"a": "1"}
    assert got["metadata"]["namespace"] == k.namespace
    assert got["metadata"]["managedFields"][0]["manager"] == "smoke"
    assert got["metadata"]["managedFields"][0]["operation"] == "Apply"
    rv1 = int(got["metadata"]["resourceVersion"])

    out = k.kubectl("patch", "configmap", "smoke", "--type=merge", "-p", '{"data":{"b":"2"}}',
                    kubectl=kubectl)
    assert out.stdout.strip() == "configmap/smoke patched"
    got = json.loads(k.kubectl("get", "configmap", "smoke", "-o", "json", kubectl=kubectl).stdout)
    assert got["data"] == {"a": "1", "b": "2"}
    assert int(got["metadata"]["resourceVersion"]) > rv1

    # A conflicting server-side apply from another manager is refused.
    cm["data"] = {"a": "other"}
    out = k.kubectl("apply", "--server-side", "--field-manager=intruder", "-f", "-",
                    input=json.dumps(cm), check=False, kubectl=kubectl)
    assert out.returncode == 1
    assert "conflict" in out.stderr.lower() and ".data.a" in out.stderr

    out = k.kubectl("delete", "configmap", "smoke", kubectl=kubectl)
    assert out.stdout.strip() == 'configmap "smoke" deleted' or \
        out.stdout.strip().startswith('configmap "smoke" deleted')
    out = k.kubectl("get", "configmap", "smoke", check=False, kubectl=kubectl)
    assert out.returncode == 1
    assert 'configmaps "smoke" not found' in out.stderr


def test_crds_applied_and_generation(any_kubeapi):
    files = crd_files()
    if not files:
        pytest.fail("no CRD manifests under deploy/crds/ or tests/e2e/crds/")
    assert_crds_and_generation(any_kubeapi)


def assert_crds_and_generation(k):
    """The comparison itself (also run by test_real_selfcheck.py against an emulator
    with a deliberate bug, to show that it fails then)."""
    crds = json.loads(k.kubectl("get", "crd", "-o", "json").stdout)["items"]
    by_name = {c["metadata"]["name"]: c for c in crds}
    for c in by_name.values():
        conds = {x["type"]: x["status"] for x in c["status"]["conditions"]}
        assert conds.get("Established") == "True", c["metadata"]["name"]
    # A Flux OCIRepository: a spec change bumps generation, a status change does
    # not (the emulator must do the same).
    crd = by_name.get("ocirepositories.source.toolkit.fluxcd.io")
    assert crd is not None, f"the OCIRepository CRD is not installed: {sorted(by_name)}"
    group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
    plural = crd["spec"]["names"]["plural"]
    version = next(v["name"] for v in crd["spec"]["versions"] if v.get("storage"))
    obj = {"apiVersion": f"{group}/{version}", "kind": kind, "metadata": {"name": "gen"},
           "spec": {"interval": "1m", "url": "oci://registry.invalid/app"}}
    created = k.client.create(obj, plural, namespace=k.namespace)
    assert created["metadata"]["generation"] == 1
    patched = k.client.patch(f"{group}/{version}", plural, "gen", {"spec": {"interval": "2m"}},
                             k.namespace)
    assert patched["metadata"]["generation"] == 2, "generation after a spec change"
    st = k.client.patch(f"{group}/{version}", plural, "gen",
                        {"status": {"observedGeneration": 2}}, k.namespace,
                        subresource="status")
    assert st["metadata"]["generation"] == 2


def _open_watch(k, path, rv, timeout=60):
    """Starts a watch on the real server; returns (connection, response)."""
    ctx = ssl.create_default_context(cafile=k.ca_file)
    host, port = k.url.rsplit("/", 1)[-1].split(":")
    conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=timeout)
    conn.request("GET", f"{path}?watch=1&resourceVersion={rv}&allowWatchBookmarks=false",
                 headers={"Authorization": "Bearer " + k.token, "Accept": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()[:500]
    return conn, resp


def _stream_ended(resp):
    """True when the watch body ends (EOF or a reset) rather than giving an event."""
    try:
        return _next_event(resp) is None
    except (OSError, http.client.HTTPException):
        return True


def _next_event(resp):
    line = resp.readline()
    if not line:
        return None
    return json.loads(line)


def test_watch_survives_apiserver_restart(any_kubeapi):
    k = any_kubeapi
    path = f"/api/v1/namespaces/{k.namespace}/configmaps"
    listed = k.client.request("GET", path)
    rv = listed["metadata"]["resourceVersion"]
    conn, resp = _open_watch(k, path, rv)
    k.kubectl("create", "configmap", "before", "--from-literal=x=1")
    ev = _next_event(resp)
    assert ev["type"] == "ADDED" and ev["object"]["metadata"]["name"] == "before"
    last_rv = ev["object"]["metadata"]["resourceVersion"]
    # Any later write (here to another resource) moves etcd's revision past last_rv.
    k.kubectl("create", "secret", "generic", "bump", "--from-literal=y=1")

    k.restart()
    # The stream ends: EOF or a reset, never another event.
    assert _stream_ended(resp)
    conn.close()

    # Reconnecting from the last resourceVersion seen: the restarted server's watch
    # cache starts at etcd's current revision, so a resourceVersion older than that
    # is "too old" (410 as an ERROR event on a 200 stream) ...
    k.kubectl("create", "configmap", "after", "--from-literal=x=2")
    conn, resp = _open_watch(k, path, last_rv)
    ev = _next_event(resp)
    assert ev["type"] == "ERROR", ev
    status = ev["object"]
    assert (status["code"], status["reason"]) == (410, "Expired")
    assert status["message"].startswith(f"too old resource version: {last_rv} (")
    conn.close()

    # ... so a client relists (seeing what it missed) and watches from the list.
    listed = k.client.request("GET", path)
    assert {i["metadata"]["name"] for i in listed["items"]} == {"before", "after"}
    conn, resp = _open_watch(k, path, listed["metadata"]["resourceVersion"])
    k.kubectl("create", "configmap", "third", "--from-literal=x=3")
    ev = _next_event(resp)
    assert ev["type"] == "ADDED" and ev["object"]["metadata"]["name"] == "third"
    conn.close()


def test_fault_proxy_drop_and_pause(real_kubeapi):
    k = real_kubeapi
    proxy = k.proxy
    path = f"/api/v1/namespaces/{k.namespace}/configmaps"
    rv = k.client.request("GET", path)["metadata"]["resourceVersion"]
    conn, resp = _open_watch(k, path, rv)
    proxy.wait_connections(1)
    assert proxy.drop_all() >= 1
    assert _stream_ended(resp)
    conn.close()

    # Paused: a request through the proxy gets no answer within its timeout ...
    proxy.pause()
    ctx = ssl.create_default_context(cafile=k.ca_file)
    c = http.client.HTTPSConnection("127.0.0.1", proxy.port, context=ctx, timeout=2)
    with pytest.raises((TimeoutError, OSError)):
        c.request("GET", "/readyz", headers={"Authorization": "Bearer " + k.token})
        c.getresponse().read()
    c.close()
    # ... and the server itself is still fine.
    assert k.kubectl("get", "--raw", "/readyz", kubeconfig=k.direct_kubeconfig).stdout == "ok"
    proxy.resume()
    assert k.kubectl("get", "--raw", "/readyz").stdout == "ok"

    # Latency: every chunk is delayed; a request still succeeds.
    proxy.set_latency(0.2)
    assert k.kubectl("get", "--raw", "/readyz").stdout == "ok"
    proxy.set_latency(0)

    # Refusing: kubectl reports the connection failure.
    proxy.refuse(True)
    out = k.kubectl("get", "--raw", "/readyz", "--request-timeout=5s", check=False)
    assert out.returncode != 0
    proxy.refuse(False)
    wait_for(lambda: k.kubectl("get", "--raw", "/readyz", check=False).returncode == 0,
             30, what="requests through the proxy again")
