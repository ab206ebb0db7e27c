"""End-to-end tests of the C Kubernetes client (src/kube/) through the
kube_tool driver (tests/tools/kube_tool.c), each against both the API-server
emulator and the real kube-apiserver (fixture `any_kubeapi`): every request kind
and its error, credentials from client certificates (files and inline data),
exec plugins and tokens (rotated: ServiceAccount tokens on the real server), and
Event aggregation.  Against a TLS server of the tests' own that records request
headers: tokens with CR/LF (exec plugin, kubeconfig, token file) inject nothing,
insecure-skip-tls-verify is warned about (and refused with a CA), and a redirect to
another host is not followed.
"""
import base64
import json
import os
import stat
import subprocess

import pytest
import yaml

from kube_fixtures import wait_for
from test_kubeapi_api import FLUX_SOURCE


def tool(pc_tools, *args, env=None):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([os.path.join(pc_tools, "kube_tool"), *map(str, args)],
                          capture_output=True, text=True, timeout=120, env=full_env)


def last_codes(kubeapi, path, n):
    """The status codes of the last n requests to path.  The emulator logs a code
    just after sending the response, so the client may have it first: wait."""
    def recorded():
        codes = [r.get("code") for r in kubeapi.requests() if r.get("path") == path][-n:]
        return codes if len(codes) == n and None not in codes else None
    return wait_for(recorded, 10, what=f"the codes of the last {n} requests to {path}")


def ok_steps(proc):
    return [line[3:] for line in proc.stdout.splitlines() if line.startswith("ok ")]


def test_requests_and_their_errors(any_kubeapi, pc_tools, tmp_path):
    kubeapi = any_kubeapi
    kc = kubeapi.write_kubeconfig(tmp_path / "kc", namespace=kubeapi.namespace) \
        if kubeapi.kind == "real" else kubeapi.write_kubeconfig(tmp_path / "kc")
    p = tool(pc_tools, "crud", kc, kubeapi.namespace)
    assert p.returncode == 0, p.stdout + p.stderr
    steps = ok_steps(p)
    assert steps[:9] == ["create", "create-conflict", "update", "update-stale", "merge-patch",
                         "json-patch", "apply", "apply-create", "status"]
    assert steps[9] == "list pages=2"   # limit=1: followed the continue token
    assert steps[10] == "delete"
    if kubeapi.kind == "emulator":
        # What went over the wire, as the server saw it (the emulator's request log;
        # the real server has none, its answers above are the comparison).
        reqs = [r for r in kubeapi.requests() if "/stacks" in r.get("path", "")]
        kinds = {(r["method"], r.get("content_type") or r.get("contentType")) for r in reqs}
        assert ("PATCH", "application/apply-patch+yaml") in kinds
        assert ("PATCH", "application/json-patch+json") in kinds
        assert ("PATCH", "application/merge-patch+json") in kinds
    # tool-b is left, made by apply with the tool's field manager
    obj = kubeapi.get("pulumi.com/v1", "stacks", "tool-b", kubeapi.namespace)
    assert obj["spec"]["stack"] == "new"
    assert any(m["manager"] == "kube-tool" and m["operation"] == "Apply"
               for m in obj["metadata"]["managedFields"])


def test_wrong_token_is_a_clear_auth_error(any_kubeapi, pc_tools, tmp_path):
    kc = any_kubeapi.write_kubeconfig(tmp_path / "kc", token="definitely-wrong")
    p = tool(pc_tools, "whoami", kc)
    assert p.returncode == 1
    assert "401" in p.stderr and "Unauthorized" in p.stderr
    assert "definitely-wrong" not in p.stderr


def test_client_certificate_files_and_data(any_kubeapi, pc_tools, tmp_path):
    """Against the real server too: there, success itself shows the certificate
    authenticated (anonymous requests get 403 under RBAC); the emulator's request log
    also names the user."""
    kubeapi = any_kubeapi
    emulator = kubeapi.kind == "emulator"
    kc = kubeapi.write_kubeconfig(tmp_path / "kc", client_cert=("pc-user", ["system:masters"]))
    p = tool(pc_tools, "whoami", kc)
    assert p.returncode == 0, p.stderr
    if emulator:
        assert users_of(kubeapi, "/api/v1/namespaces/default") == ["cert:pc-user"]
    # The same credentials inline (*-data), as kind and minikube write them.
    doc = yaml.safe_load(open(kc))
    user = doc["users"][0]["user"]
    for key in ("client-certificate", "client-key"):
        user[key + "-data"] = base64.b64encode(open(user.pop(key), "rb").read()).decode()
    cluster = doc["clusters"][0]["cluster"]
    cluster["certificate-authority-data"] = base64.b64encode(
        open(cluster.pop("certificate-authority"), "rb").read()).decode()
    inline = tmp_path / "kc-inline"
    inline.write_text(yaml.safe_dump(doc))
    p = tool(pc_tools, "whoami", inline)
    assert p.returncode == 0, p.stderr
    if emulator:
        assert users_of(kubeapi, "/api/v1/namespaces/default") == ["cert:pc-user"] * 2
    # A client certificate the server's CA did not sign is refused (by the emulator at
    # the handshake).
    other = tmp_path / "other-ca"
    other.mkdir()
    user["client-certificate-data"], user["client-key-data"] = self_signed_pair(other)
    inline.write_text(yaml.safe_dump(doc))
    p = tool(pc_tools, "whoami", inline)
    assert p.returncode == 1
    assert user["client-key-data"] not in p.stderr


def users_of(kubeapi, path):
    """Who the server authenticated for each request to path, in order."""
    return [r.get("user") for r in kubeapi.requests() if r.get("path") == path]


def self_signed_pair(directory):
    """A client certificate and key (base64 PEM) from a CA the emulator does not trust."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    import datetime
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "intruder")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    pem_cert = cert.public_bytes(serialization.Encoding.PEM)
    pem_key = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return base64.b64encode(pem_cert).decode(), base64.b64encode(pem_key).decode()


def exec_certificate_plugin(kubeapi, tmp_path, user):
    """A kubeconfig whose user is an exec plugin that answers with a client
    certificate (clientCertificateData/clientKeyData) for `user`, signed by the
    server's CA (the emulator's, or the real fixture's test CA).  The plugin appends
    one 'x' to the returned file per run."""
    doc = yaml.safe_load(open(kubeapi.write_kubeconfig(tmp_path / "kc-files",
                                                      client_cert=(user, ["system:masters"]))))
    files = doc["users"][0]["user"]
    calls = tmp_path / "plugin-calls"
    plugin = tmp_path / "cert-plugin.py"
    plugin.write_text(
        "#!/usr/bin/python3\n"
        "import json\n"
        f"open({str(calls)!r}, 'a').write('x')\n"
        f"cert = open({files['client-certificate']!r}).read()\n"
        f"key = open({files['client-key']!r}).read()\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',\n"
        "    'status': {'clientCertificateData': cert, 'clientKeyData': key,\n"
        "               'expirationTimestamp': '2099-01-01T00:00:00Z'}}))\n")
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    doc["users"][0]["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                                        "command": str(plugin), "interactiveMode": "Never"}}
    kc = tmp_path / "kc-exec-cert"
    kc.write_text(yaml.safe_dump(doc))
    return str(kc), calls


def test_exec_plugin_returning_a_client_certificate(any_kubeapi, pc_tools, tmp_path):
    kubeapi = any_kubeapi
    kc, calls = exec_certificate_plugin(kubeapi, tmp_path, "pc-exec")
    proc = subprocess.Popen([os.path.join(pc_tools, "kube_tool"), "loop", kc],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        for n in (1, 2, 3):
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == f"ok {n}"
    finally:
        proc.stdin.close()
        assert proc.wait(30) == 0, proc.stderr.read()
    assert calls.read_text() == "x"               # one run; the certificate is reused
    if kubeapi.kind == "emulator":
        assert users_of(kubeapi, "/api/v1/namespaces/default") == ["cert:pc-exec"] * 3


def test_exec_credential_plugin(any_kubeapi, pc_tools, tmp_path):
    kubeapi = any_kubeapi
    plugin = tmp_path / "plugin.py"
    seen = tmp_path / "exec-info.json"
    plugin.write_text(
        "#!/usr/bin/python3\n"
        "import json, os, sys\n"
        f"open({str(seen)!r}, 'w').write(os.environ['KUBERNETES_EXEC_INFO'] + '\\n' + os.environ.get('PLUGIN_MODE', ''))\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',\n"
        f"    'status': {{'token': {kubeapi.token!r}, 'expirationTimestamp': '2099-01-01T00:00:00Z'}}}}))\n")
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    doc = json.loads(open(kubeapi.write_kubeconfig(tmp_path / "base")).read())
    doc["users"][0]["user"] = {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
        "args": ["--flag"], "env": [{"name": "PLUGIN_MODE", "value": "test"}],
        "interactiveMode": "Never", "provideClusterInfo": True}}
    kc = tmp_path / "kc"
    kc.write_text(yaml.safe_dump(doc))
    p = tool(pc_tools, "whoami", kc)
    assert p.returncode == 0, p.stderr
    info, mode = seen.read_text().split("\n")
    info = json.loads(info)
    assert info["kind"] == "ExecCredential" and info["spec"]["interactive"] is False
    assert info["spec"]["cluster"]["server"] == kubeapi.url
    assert mode == "test"
    # A failing plugin is an auth error naming the plugin, not a crash.
    plugin.write_text("#!/bin/sh\nexit 3\n")
    p = tool(pc_tools, "whoami", kc)
    assert p.returncode == 1 and "exec plugin" in p.stderr and "exit status 3" in p.stderr


def test_exec_credential_cached_until_refused(any_kubeapi, pc_tools, tmp_path):
    """The plugin's token is reused until the server refuses it; a 401 runs the
    plugin again and the request is retried with the new token.  The tokens are
    ServiceAccount tokens on the real server, token-file lines on the emulator."""
    kubeapi, ns = any_kubeapi, any_kubeapi.namespace
    calls = tmp_path / "calls"
    current = tmp_path / "current-token"
    old = kubeapi.service_account_token(ns, "pc-exec", "pc-exec-token-1")
    current.write_text(old)
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "#!/usr/bin/python3\n"
        "import json\n"
        f"open({str(calls)!r}, 'a').write('x')\n"
        f"tok = open({str(current)!r}).read()\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',\n"
        "                  'status': {'token': tok}}))\n")
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    doc = json.loads(open(kubeapi.write_kubeconfig(tmp_path / "base")).read())
    doc["users"][0]["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                                        "command": str(plugin), "interactiveMode": "Never"}}
    kc = tmp_path / "kc"
    kc.write_text(yaml.safe_dump(doc))
    proc = subprocess.Popen([os.path.join(pc_tools, "kube_tool"), "loop", str(kc)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        def ask():
            proc.stdin.write("go\n")
            proc.stdin.flush()
            return proc.stdout.readline().strip()
        assert ask() == "ok 1"
        assert ask() == "ok 2"
        assert calls.read_text() == "x"           # one run, token reused
        current.write_text(kubeapi.service_account_token(ns, "pc-exec", "pc-exec-token-2"))
        kubeapi.revoke(ns, "pc-exec-token-1", old)
        assert kubeapi.token_status(old) == 401
        assert ask() == "ok 3"                    # 401 -> plugin again -> retried
        assert calls.read_text() == "xx"
    finally:
        proc.stdin.close()
        assert proc.wait(30) == 0, proc.stderr.read()


def test_repeated_events_are_aggregated(any_kubeapi, pc_tools, tmp_path):
    kubeapi, ns = any_kubeapi, any_kubeapi.namespace
    kubeapi.create({"apiVersion": "pulumi.com/v1", "kind": "Stack",
                    "metadata": {"name": "ev", "namespace": ns},
                    "spec": {"stack": "dev", "fluxSource": FLUX_SOURCE}})
    kc = kubeapi.write_kubeconfig(tmp_path / "kc")
    p = tool(pc_tools, "event", kc, ns, "ev", 5)
    assert p.returncode == 0, p.stderr
    events = [e for e in kubeapi.client.list("v1", "events", ns)["items"]
              if e["involvedObject"]["name"] == "ev"]
    by_reason = {e["reason"]: e for e in events}
    assert sorted(by_reason) == ["Other", "UpdateFailed"]
    failed = by_reason["UpdateFailed"]
    assert failed["count"] == 5
    assert failed["type"] == "Warning"
    assert failed["involvedObject"]["kind"] == "Stack"
    assert failed["involvedObject"]["uid"]
    assert failed["source"]["component"] == "pulumi-controller"
    assert failed["reportingComponent"] == "pulumi-controller"
    assert by_reason["Other"]["count"] == 1
    # kubectl describe finds them the way it looks them up
    out = kubeapi.kubectl("get", "events", "-n", ns, "--field-selector",
                          "involvedObject.name=ev,involvedObject.kind=Stack", "-o", "json")
    assert len(json.loads(out.stdout)["items"]) == 2


def test_in_cluster_config_and_token_rotation(any_kubeapi, pc_tools, tmp_path):
    """The service-account files of a pod, with the kubelet's symlink swap
    (..data -> ..<timestamp>) for rotation; a 401 makes the client re-read.  The
    tokens are ServiceAccount tokens on the real server (the client talks to it
    directly, as a pod does), token-file lines on the emulator."""
    kubeapi, ns = any_kubeapi, any_kubeapi.namespace
    sa = tmp_path / "serviceaccount"
    sa.mkdir()

    def project(token, generation):
        data = sa / f"..{generation}"
        data.mkdir()
        (data / "token").write_text(token)
        (data / "ca.crt").write_text(open(kubeapi.ca_file).read())
        (data / "namespace").write_text("pulumi-system")
        tmp = sa / "..data_tmp"
        os.symlink(data.name, tmp)
        os.replace(tmp, sa / "..data")            # the atomic swap
        for name in ("token", "ca.crt", "namespace"):
            if not (sa / name).is_symlink():
                os.symlink(f"..data/{name}", sa / name)

    old = kubeapi.service_account_token(ns, "pc-pod", "pc-pod-token-1")
    project(old, 1)
    env = dict(os.environ, KUBERNETES_SERVICE_HOST="127.0.0.1",
               KUBERNETES_SERVICE_PORT=str(kubeapi.port))
    proc = subprocess.Popen([os.path.join(pc_tools, "kube_tool"), "incluster", str(sa)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == \
            f"server https://127.0.0.1:{kubeapi.port} namespace pulumi-system"

        def ask():
            proc.stdin.write("go\n")
            proc.stdin.flush()
            return proc.stdout.readline().strip()
        assert ask() == "ok 1"
        # the kubelet rotates ... and the old token dies
        project(kubeapi.service_account_token(ns, "pc-pod", "pc-pod-token-2"), 2)
        kubeapi.revoke(ns, "pc-pod-token-1", old)
        assert kubeapi.token_status(old) == 401
        assert ask() == "ok 2"                    # 401, re-read, retried: no error surfaces
        if kubeapi.kind == "emulator":            # its request log; the real server has none
            assert last_codes(kubeapi, "/api/v1/namespaces/default", 2) == [401, 200]
    finally:
        proc.stdin.close()
        assert proc.wait(30) == 0, proc.stderr.read()


# -- hostile credentials and TLS settings, against a TLS server of the test's own ----------

class HeaderRecorder:
    """An HTTPS server on loopback (certificate from the emulator's tlsgen) that
    records the header block of every request it receives and answers each GET
    with a Namespace, so a request that arrives also succeeds."""

    def __init__(self, directory, redirect_to=None):
        import http.server
        import ssl
        import threading
        from kubeapi import tlsgen
        self.ca_file, _ = tlsgen.make_ca(str(directory))
        crt, key = tlsgen.make_server_cert(str(directory))
        self.requests = []
        self.redirect_to = redirect_to
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                recorder.requests.append(list(self.headers.items()))
                if recorder.redirect_to is not None:
                    self.send_response(307)
                    self.send_header("Location", recorder.redirect_to + self.path)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = json.dumps({"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": "default"}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(crt, key)
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def header_names(self):
        return [name.lower() for headers in self.requests for name, _ in headers]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def header_recorder(tmp_path):
    directory = tmp_path / "recorder-tls"
    directory.mkdir()
    server = HeaderRecorder(directory)
    yield server
    server.close()


def recorder_kubeconfig(path, server, user, cluster_extra=None):
    cluster = {"server": server.url, "certificate-authority": server.ca_file}
    cluster.update(cluster_extra or {})
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
           "clusters": [{"name": "c", "cluster": cluster}],
           "users": [{"name": "u", "user": user}],
           "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def token_plugin(path, token):
    """An exec plugin that answers with `token` as its ExecCredential's status.token."""
    path.write_text(
        "#!/usr/bin/python3\n"
        "import json\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',\n"
        f"                  'status': {{'token': {token!r}}}}}))\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(path),
                     "interactiveMode": "Never"}}


def test_exec_plugin_token_cannot_inject_headers(header_recorder, pc_tools, tmp_path):
    """A plugin whose token carries CR/LF would add a request header of its choosing
    to every request; it is refused with a message naming the plugin (not the token)
    and nothing reaches the server.  The same plugin with a clean token gets through,
    so the server is the one the client would have reached."""
    plugin = tmp_path / "plugin.py"
    kc = recorder_kubeconfig(tmp_path / "kc", header_recorder,
                             token_plugin(plugin, "tok-1\r\nX-Injected: 1"))
    p = tool(pc_tools, "whoami", kc)
    assert p.returncode == 1
    assert "exec plugin" in p.stderr and str(plugin) in p.stderr
    assert "status.token" in p.stderr and "control character" in p.stderr
    assert "tok-1" not in p.stderr and "Injected" not in p.stderr
    assert "x-injected" not in header_recorder.header_names()
    assert header_recorder.requests == []
    # the control: a clean token arrives as the one Authorization header
    token_plugin(plugin, "tok-1")
    p = tool(pc_tools, "whoami", kc)
    assert p.returncode == 0, p.stderr
    assert len(header_recorder.requests) == 1
    auth = [v for k, v in header_recorder.requests[0] if k.lower() == "authorization"]
    assert auth == ["Bearer tok-1"]
    assert "x-injected" not in header_recorder.header_names()


def test_kubeconfig_token_cannot_inject_headers(header_recorder, pc_tools, tmp_path):
    kc = recorder_kubeconfig(tmp_path / "kc", header_recorder, {"token": "tok-1\r\nX-Injected: 1"})
    p = tool(pc_tools, "whoami", kc)
    assert p.returncode == 1
    assert "FAIL config" in p.stderr and "token" in p.stderr and "control character" in p.stderr
    assert "Injected" not in p.stderr
    token_file = tmp_path / "token"
    token_file.write_text("tok-1\nX-Injected: 1\n")
    kc = recorder_kubeconfig(tmp_path / "kc2", header_recorder, {"tokenFile": str(token_file)})
    p = tool(pc_tools, "whoami", kc)
    assert p.returncode == 1
    assert f"token file {token_file}" in p.stderr and "control character" in p.stderr
    assert "Injected" not in p.stderr
    assert header_recorder.requests == []


def warnings_of(stderr):
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    return [r for r in lines if r.get("level") == "warn"]


def test_tls_verification_off_is_warned_about(header_recorder, pc_tools, tmp_path):
    """insecure-skip-tls-verify alone works (the client reaches a server whose
    certificate it does not check) and says so once, loudly, naming the server;
    together with a CA it is refused as client-go refuses it."""
    user = {"token": "tok-1"}
    kc = tmp_path / "kc"
    recorder_kubeconfig(kc, header_recorder, user)
    doc = yaml.safe_load(kc.read_text())
    del doc["clusters"][0]["cluster"]["certificate-authority"]
    doc["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
    kc.write_text(yaml.safe_dump(doc))
    p = tool(pc_tools, "whoami", str(kc))
    assert p.returncode == 0, p.stderr
    warns = warnings_of(p.stderr)
    assert len(warns) == 1, p.stderr
    assert "TLS verification of the Kubernetes API server is off" in warns[0]["msg"]
    assert warns[0]["server"] == header_recorder.url + "/"
    assert "tok-1" not in p.stderr
    # verified: no warning
    p = tool(pc_tools, "whoami", recorder_kubeconfig(tmp_path / "kc-verified", header_recorder, user))
    assert p.returncode == 0, p.stderr
    assert warnings_of(p.stderr) == []
    # both: refused before any request
    n = len(header_recorder.requests)
    p = tool(pc_tools, "whoami", recorder_kubeconfig(tmp_path / "kc-both", header_recorder, user,
                                                     {"insecure-skip-tls-verify": True}))
    assert p.returncode == 1
    assert "specifying a root certificates file with the insecure flag is not allowed" in p.stderr
    assert len(header_recorder.requests) == n


def test_redirect_to_another_host_gets_no_token(header_recorder, pc_tools, tmp_path):
    """An API server that redirects (to another host, here "localhost" for
    "127.0.0.1") is not followed: the token went to the configured server only,
    and the message says why the request failed."""
    other = tmp_path / "other-tls"
    other.mkdir()
    for name in ("ca.crt", "ca.key"):
        (other / name).write_bytes((tmp_path / "recorder-tls" / name).read_bytes())
    elsewhere = HeaderRecorder(other)
    try:
        header_recorder.redirect_to = elsewhere.url.replace("127.0.0.1", "localhost")
        kc = recorder_kubeconfig(tmp_path / "kc", header_recorder, {"token": "tok-1"})
        p = tool(pc_tools, "whoami", kc)
        assert p.returncode == 1
        assert "307: the server answered with a redirect, which is not followed" in p.stderr
        assert "tok-1" not in p.stderr
        assert len(header_recorder.requests) == 1
        assert ("Authorization", "Bearer tok-1") in header_recorder.requests[0]
        assert elsewhere.requests == []
    finally:
        elsewhere.close()
