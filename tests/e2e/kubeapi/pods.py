"""What kube-apiserver does for Pods beyond storing them, as far as the test kubelet
(tests/e2e/kubelet.py) needs it: ServiceAccount admission, the TokenRequest
subresource (serviceaccounts/{name}/token) and pods/{name}/log.

- admit_pod: the ServiceAccount admission plugin.  An empty serviceAccountName
  becomes "default"; the ServiceAccount must exist (403 otherwise, as the plugin
  answers); unless automountServiceAccountToken is false (pod, else ServiceAccount)
  a projected volume kube-api-access-<5> (token, kube-root-ca.crt's ca.crt, the
  namespace) is added and mounted read-only at the service-account directory in
  every container that mounts nothing there.
- token_request: mints a bearer token the emulator then accepts (Emulator.issue_token);
  the TokenRequest answer carries it with its expirationTimestamp.  The token is
  opaque (no JWT): nothing in the suite decodes it.
- grace_seconds: a running pod's deletion is graceful (deletionTimestamp and
  deletionGracePeriodSeconds set, the object kept) until its kubelet deletes it
  again with gracePeriodSeconds 0.
- pod_log: as kube-apiserver's pods/log, checks the pod and its container, then
  proxies GET /containerLogs/{ns}/{pod}/{container} to the kubelet named by the
  Node of spec.nodeName (its InternalIP and status.daemonEndpoints.kubeletEndpoint
  .Port, over HTTPS without verifying the kubelet's certificate, as the real server
  does when --kubelet-certificate-authority is not given) and relays the text.
"""
import datetime
import http.client
import random
import ssl
from urllib.parse import urlencode

from . import errors as E

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
GENERATE_CHARS = "bcdfghjklmnpqrstvwxz2456789"
LOG_PARAMS = ("follow", "previous", "sinceSeconds", "sinceTime", "tailLines", "limitBytes",
              "timestamps", "insecureSkipTLSVerifyBackend")


def _forbidden(message):
    return E.ApiError(403, "Forbidden", message)


def admit_pod(store, ns, pod):
    """ServiceAccount admission of a new Pod (changes pod in place)."""
    spec = pod.setdefault("spec", {})
    sa_name = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    spec["serviceAccountName"] = sa_name
    spec["serviceAccount"] = sa_name
    sa = store.objects.get(("", "serviceaccounts"), {}).get((ns, sa_name))
    name = (pod.get("metadata") or {}).get("name") or \
        (pod.get("metadata") or {}).get("generateName", "")
    if sa is None:
        raise _forbidden(f'pods "{name}" is forbidden: error looking up service account '
                         f'{ns}/{sa_name}: serviceaccount "{sa_name}" not found')
    automount = spec.get("automountServiceAccountToken")
    if automount is None:
        automount = sa.get("automountServiceAccountToken")
    if automount is False:
        return pod
    containers = (spec.get("initContainers") or []) + (spec.get("containers") or [])
    if all(any(m.get("mountPath") == SA_DIR for m in c.get("volumeMounts") or [])
           for c in containers):
        return pod
    vol_name = "kube-api-access-" + "".join(random.choice(GENERATE_CHARS) for _ in range(5))
    spec.setdefault("volumes", []).append({"name": vol_name, "projected": {
        "defaultMode": 420,
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt",
                           "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}})
    for c in containers:
        mounts = c.setdefault("volumeMounts", [])
        if not any(m.get("mountPath") == SA_DIR for m in mounts):
            mounts.append({"name": vol_name, "readOnly": True, "mountPath": SA_DIR})
    return pod


def token_request(emu, ns, sa_name, body):
    """The TokenRequest answer for ServiceAccount ns/sa_name (201), minting a token."""
    store = emu.store
    with store.lock:
        sa = store.objects.get(("", "serviceaccounts"), {}).get((ns, sa_name))
    if sa is None:
        raise E.ApiError(404, "NotFound", f'serviceaccounts "{sa_name}" not found',
                         {"name": sa_name, "kind": "serviceaccounts"})
    if not isinstance(body, dict):
        raise E.bad_request("the request body is not a TokenRequest")
    spec = dict(body.get("spec") or {})
    seconds = int(spec.get("expirationSeconds") or 3600)
    if seconds < 600:
        raise E.ApiError(422, "Invalid", 'TokenRequest.authentication.k8s.io "' + sa_name +
                         '" is invalid: spec.expirationSeconds: Invalid value: ' +
                         f"{seconds}: may not specify a duration less than 10 minutes")
    spec["expirationSeconds"] = seconds
    spec.setdefault("audiences", ["https://kubernetes.default.svc.cluster.local"])
    token = emu.issue_token(f"system:serviceaccount:{ns}:{sa_name}")
    expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)
    return {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": sa_name, "namespace": ns,
                         "creationTimestamp": None},
            "spec": spec,
            "status": {"token": token,
                       "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}}


def grace_seconds(pod, options):
    """The grace period of a Pod's deletion, as the pod strategy's CheckGracefulDelete
    decides it: the DeleteOptions', else spec.terminationGracePeriodSeconds (30); none
    for a pod no node runs (unscheduled, or already Succeeded/Failed)."""
    spec = pod.get("spec") or {}
    if not spec.get("nodeName") or \
            (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return 0
    grace = options.get("gracePeriodSeconds")
    if grace is None:
        grace = spec.get("terminationGracePeriodSeconds", 30)
    return max(0, int(grace))


def _kubelet_address(store, node_name):
    node = store.objects.get(("", "nodes"), {}).get(("", node_name))
    if node is None:
        raise E.ApiError(404, "NotFound", f'nodes "{node_name}" not found',
                         {"name": node_name, "kind": "nodes"})
    status = node.get("status") or {}
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    host = addresses.get("InternalIP") or addresses.get("Hostname")
    port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
    if not host or not port:
        raise E.bad_request(f'node "{node_name}" has no kubelet address')
    return host, int(port)


def _container_check(pod, container):
    """The pods/log checks kube-apiserver makes before it asks the kubelet."""
    spec = pod.get("spec") or {}
    names = [c.get("name") for c in spec.get("containers") or []]
    name = pod["metadata"]["name"]
    if container is None:
        if len(names) != 1:
            raise E.bad_request(f"a container name must be specified for pod {name}, "
                                f"choose one of: {names}")
        container = names[0]
    elif container not in names:
        raise E.bad_request(f"container {container} is not valid for pod {name}")
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == container and "waiting" in (cs.get("state") or {}):
            reason = cs["state"]["waiting"].get("reason") or "ContainerCreating"
            raise E.bad_request(f'container "{container}" in pod "{name}" is waiting to '
                                f"start: {reason}")
    return container


def pod_log(store, ns, name, params):
    """(status, content type, body) of GET pods/{name}/log."""
    with store.lock:
        pod = store.objects.get(("", "pods"), {}).get((ns, name))
        if pod is None:
            raise E.ApiError(404, "NotFound", f'pods "{name}" not found',
                             {"name": name, "kind": "pods"})
        container = _container_check(pod, params.get("container"))
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name:
            raise E.bad_request(f'pod {name} does not have a host assigned')
        host, port = _kubelet_address(store, node_name)
    query = {k: params[k] for k in LOG_PARAMS if k in params}
    path = f"/containerLogs/{ns}/{name}/{container}"
    if query:
        path += "?" + urlencode(query)
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=60)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
    except OSError as exc:
        raise E.ApiError(500, "InternalError", f"Get \"https://{host}:{port}{path}\": "
                         f"{exc}") from None
    finally:
        conn.close()
    if resp.status != 200:
        raise E.ApiError(resp.status if resp.status < 500 else 500,
                         "BadRequest" if resp.status == 400 else "InternalError",
                         body.decode(errors="replace").strip())
    return body
