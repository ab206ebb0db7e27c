"""pytest fixtures that run the REAL programs built by `make deps-real` (scripts/
deps-real.sh, versions in tests/real/versions.env) so that scenarios can run
against them as well as against the emulator and the stand-in.

Kubernetes (etcd + kube-apiserver on 127.0.0.1, certificates, token file and
service-account keys made at test time, the project's CRDs applied):

    real_kube      session-scoped RealKube; the same shape as the emulator's KubeAPI:
                   .url .token .ca_file .kubeconfig .client .kubectl(*args)
                   .kubectl_bg(*args) .write_kubeconfig(path, token=..)
                   .apply_file(path) .create/.get/.patch_status
                   .stop(graceful=False) .start() .restart(graceful=False)
                   (restart = the real "watch dropped"; the default kills, graceful
                   sends SIGTERM, which an open watch holds up for ~60 s)
                   .proxy  FaultProxy in front: drop_all(), pause(), resume(),
                           set_latency(s), refuse(); .url goes through it,
                           .direct_url does not
                   .drop_watches()  = proxy.drop_all() (cuts every connection)
                   .direct_client   a new KubeClient that bypasses the proxy
                   .service_account_token(ns, sa, bound_secret) a TokenRequest token
                           of ServiceAccount sa (cluster-admin), bound to a new Secret;
                   .revoke(ns, bound_secret, token) deletes the Secret and waits
                           until the token gets 401; .token_status(token)
                   .delete_crds()  every CRD gone, discovery no longer lists them
    real_kubeapi   function-scoped: the session server, a fresh namespace for the
                   test (.namespace, also the kubeconfig's default), faults cleared
                   after the test.
    any_kubeapi    parametrized ["emulator", "real"]: the emulator's kubeapi wrapped
                   in EmulatorView (.namespace "default", kubectl(kubectl=<binary>),
                   direct_client, and service_account_token/revoke/token_status
                   made of its token file), or real_kubeapi: one test body, both
                   servers.
    bare_real_kube module-scoped RealKube started without CRDs (~4-8 s to start);
    bare_real_kubeapi  it with no CRD left (deleted first) and a fresh namespace;
    any_bare_kubeapi   parametrized: an emulator started with crds=False, or that.

Pulumi (the real CLI, the Pulumi YAML language host and the test provider
pulumi-resource-standin, a real provider of the stand-in's standin:index:File,
whose resources are files under $PULUMI_STANDIN_CLOUD/files):

    pulumi_cli     the same, parametrized over the stand-in ("standin") and the real
                   CLI ("real"): .kind says which
    real_pulumi    function-scoped RealPulumi (the real CLI only):
                   .binary  path of the real `pulumi`; .bin_dir (goes first on PATH)
                   .env     the environment to run it with: PATH, PULUMI_HOME (a fresh
                            one whose plugins/ is the prepared .real/pulumi-home/plugins),
                            PULUMI_SKIP_UPDATE_CHECK, PULUMI_STANDIN_CLOUD=.cloud_dir
                   .home .backend_dir .backend_url (file://) .cloud_dir
                   .program(name)  copies tests/real/programs/<name> to a fresh dir
                                   ("files": Pulumi YAML; "nodefiles": Node.js with
                                   a dynamic provider, node_modules linked in)
                   .run(*args, cwd=.., input=.., env=..) -> CompletedProcess

A missing binary fails the test with the command to run; a component declared
blocked in tests/real/versions.env (BLOCKED_*) makes the tests that need it skip
with that exact reason.  REAL_DIR overrides the .real/ location.
"""
import datetime
import ipaddress
import json
import os
import pathlib
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import yaml

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from faultproxy import FaultProxy  # noqa: E402
from kube_fixtures import plural_of, wait_for as _wait_for  # noqa: E402
from nginx_fixtures import free_port  # noqa: E402

REAL = pathlib.Path(os.environ.get("REAL_DIR", str(ROOT / ".real")))
REAL_BIN = REAL / "bin"
SPEC = ROOT / "tests" / "real"
PROGRAMS = SPEC / "programs"
TEST_USER = "pc-test-admin"


def read_env_file(path):
    """KEY=VALUE lines (shell syntax, optional double quotes) as a dict."""
    out = {}
    try:
        text = pathlib.Path(path).read_text()
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        out[key.strip()] = value
    return out


VERSIONS = read_env_file(SPEC / "versions.env")


def blocked_reason(component):
    """The reason versions.env gives for a component that cannot be built, or None."""
    return VERSIONS.get("BLOCKED_" + component.upper().replace("-", "_"))


def real_binary(name, component=None, where=None):
    """Path of a program built by deps-real (in .real/bin unless where= says);
    fails (never skips) when it is missing, unless versions.env declares the
    component blocked."""
    reason = blocked_reason(component or name)
    if reason:
        pytest.skip(f"blocked dependency: {reason}")
    path = (where or REAL_BIN) / name
    if not os.access(path, os.X_OK):
        manifest = read_env_file(REAL / "manifest.env")
        extra = ""
        if manifest.get("FAILED"):
            extra = (f"; the last `make deps-real` failed to build: {manifest['FAILED']} "
                     f"(logs in {REAL / 'logs'})")
        pytest.fail(f"{path} is not built: run `make deps-real`{extra}")
    return str(path)


def wait_for(predicate, timeout=30.0, interval=0.05, what="condition"):
    """kube_fixtures.wait_for with the longer default a real apiserver needs."""
    return _wait_for(predicate, timeout=timeout, interval=interval, what=what)


def _log_tail(path, n=3000):
    try:
        return pathlib.Path(path).read_text(errors="replace")[-n:]
    except OSError:
        return ""


# -- certificates and keys ------------------------------------------------------------

def make_pki(d):
    """A CA, a serving certificate for 127.0.0.1/localhost and a service-account
    key pair, as PEM files in d; returns their paths."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import NameOID

    d = pathlib.Path(d)
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=2)

    def pem_key(key):
        return key.private_bytes(serialization.Encoding.PEM,
                                 serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pc-test-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.DNSName("kubernetes.default.svc"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    paths = {"ca": d / "ca.crt", "cert": d / "apiserver.crt", "key": d / "apiserver.key",
             "sa_key": d / "sa.key", "sa_pub": d / "sa.pub", "ca_key": d / "ca.key"}
    paths["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    # kept for client certificates (write_kubeconfig(client_cert=...)), as the emulator's
    paths["ca_key"].write_bytes(pem_key(ca_key))
    paths["cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths["key"].write_bytes(pem_key(key))
    paths["sa_key"].write_bytes(pem_key(sa_key))
    paths["sa_pub"].write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    for p in ("key", "sa_key", "ca_key"):
        os.chmod(paths[p], 0o600)
    return {k: str(v) for k, v in paths.items()}


def kubeconfig_text(url, ca_file, token=None, token_file=None, namespace="default"):
    user = {}
    if token is not None:
        user["token"] = token
    if token_file is not None:
        user["tokenFile"] = token_file
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "real",
           "clusters": [{"name": "real", "cluster": {"server": url, "certificate-authority": ca_file}}],
           "users": [{"name": "real", "user": user}],
           "contexts": [{"name": "real", "context": {"cluster": "real", "user": "real",
                                                     "namespace": namespace}}]}
    return json.dumps(doc, indent=2) + "\n"


def crd_files():
    """CRD manifests under deploy/crds/ and tests/e2e/crds/ (absent directories are fine)."""
    out = []
    for path in sorted((ROOT / "deploy" / "crds").glob("*.yaml")) + \
            sorted((HERE / "crds").glob("*.yaml")):
        with open(path) as f:
            if any(isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition"
                   for d in yaml.safe_load_all(f)):
                out.append(path)
    return out


# -- the real Kubernetes API server ---------------------------------------------------

class RealKube:
    """etcd + kube-apiserver on loopback, with a FaultProxy in front."""

    def __init__(self, workdir, crds=True):
        self.workdir = pathlib.Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.etcd_bin = real_binary("etcd")
        self.apiserver_bin = real_binary("kube-apiserver")
        self.kubectl_bin = real_binary("kubectl")
        self.version = VERSIONS.get("KUBERNETES_VERSION", "")
        self.pki = make_pki(self.workdir)
        self.ca_file = self.pki["ca"]
        self.token = secrets.token_hex(16)
        self.token_file = str(self.workdir / "tokens.csv")
        # token,user,uid,"group1,group2": system:masters is cluster-admin under RBAC.
        pathlib.Path(self.token_file).write_text(
            f'{self.token},{TEST_USER},{TEST_USER},"system:masters"\n')
        os.chmod(self.token_file, 0o600)
        self.cache_dir = self.workdir / "kubectl-cache"
        self.etcd_proc = self.proc = None
        self.etcd_port, self.etcd_peer_port = free_port(), free_port()
        self.port = free_port()
        self._client = None
        self.start_etcd()
        self.start()
        self.proxy = FaultProxy("127.0.0.1", self.port)
        self.kubeconfig = self.write_kubeconfig(self.workdir / "kubeconfig")
        self.direct_kubeconfig = str(self.workdir / "kubeconfig.direct")
        pathlib.Path(self.direct_kubeconfig).write_text(
            kubeconfig_text(self.direct_url, self.ca_file, token=self.token))
        if crds:
            self.apply_crds()

    # -- addresses ----------------------------------------------------------------------

    @property
    def url(self):
        """Through the fault proxy (transparent until a fault is set)."""
        return f"https://127.0.0.1:{self.proxy.port}"

    @property
    def direct_url(self):
        return f"https://127.0.0.1:{self.port}"

    @property
    def client(self):
        if self._client is None:
            from kubeapi.client import KubeClient  # the suite's small HTTP client
            self._client = KubeClient(self.url, self.token, self.ca_file)
        return self._client

    @property
    def direct_client(self):
        """A new client that bypasses the fault proxy: a test's own writes keep going
        while the proxy cuts, refuses or stalls the program under test."""
        from kubeapi.client import KubeClient
        return KubeClient(self.direct_url, self.token, self.ca_file)

    # -- processes ----------------------------------------------------------------------

    def start_etcd(self, timeout=60):
        data = self.workdir / "etcd-data"
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        self.etcd_log = self.workdir / "etcd.log"
        with open(self.etcd_log, "ab") as log:
            self.etcd_proc = subprocess.Popen(
                [self.etcd_bin, "--name", "default", "--data-dir", str(data),
                 "--listen-client-urls", client, "--advertise-client-urls", client,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"default={peer}", "--initial-cluster-state", "new"],
                stdout=log, stderr=log, cwd=str(self.workdir), start_new_session=True)

        def healthy():
            if self.etcd_proc.poll() is not None:
                raise AssertionError(f"etcd exited with {self.etcd_proc.returncode}:\n"
                                     f"{_log_tail(self.etcd_log)}")
            try:
                with urllib.request.urlopen(client + "/health", timeout=2) as r:
                    return json.loads(r.read()).get("health") == "true"
            except (OSError, ValueError):
                return False
        wait_for(healthy, timeout, what=f"etcd on {client}")

    def start(self, timeout=180):
        """Starts kube-apiserver on self.port (kept across restarts) and waits for /readyz."""
        assert self.proc is None, "kube-apiserver already running"
        self.log_path = self.workdir / "kube-apiserver.log"
        args = [self.apiserver_bin,
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                "--storage-backend=etcd3",
                "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
                # A loopback advertise address is refused by the default endpoint
                # reconciler ("may not be in the loopback range").
                "--endpoint-reconciler-type=none",
                f"--secure-port={self.port}",
                f"--tls-cert-file={self.pki['cert']}",
                f"--tls-private-key-file={self.pki['key']}",
                f"--cert-dir={self.workdir / 'certs'}",
                f"--token-auth-file={self.token_file}",
                f"--client-ca-file={self.pki['ca']}",
                "--authorization-mode=RBAC",
                f"--service-account-key-file={self.pki['sa_pub']}",
                f"--service-account-signing-key-file={self.pki['sa_key']}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--service-cluster-ip-range=10.96.0.0/24",
                "--profiling=false"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=log, cwd=str(self.workdir),
                                         start_new_session=True)
        ctx = ssl.create_default_context(cafile=self.ca_file)

        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"kube-apiserver exited with {self.proc.returncode}:\n"
                                     f"{_log_tail(self.log_path)}")
            req = urllib.request.Request(self.direct_url + "/readyz",
                                         headers={"Authorization": "Bearer " + self.token})
            try:
                with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
                    return r.status == 200 and r.read().strip() == b"ok"
            except (OSError, urllib.error.URLError):
                return False
        wait_for(ready, timeout, interval=0.2, what=f"kube-apiserver /readyz on {self.direct_url}")
        self.wait_custom_resources_served(timeout)

    def wait_custom_resources_served(self, timeout=120):
        """Neither /readyz nor a CRD's Established condition means its storage is
        ready: right after a (re)start or a CRD's creation a request for its kind
        gets 429 `storage is (re)initializing` for a moment.  Returns when every
        installed CRD's kind can be listed."""
        ctx = ssl.create_default_context(cafile=self.ca_file)

        def get(path):
            req = urllib.request.Request(self.direct_url + path,
                                         headers={"Authorization": "Bearer " + self.token})
            try:
                with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as e:
                return e.code, None
            except (OSError, urllib.error.URLError, ValueError):
                return 0, None

        def lists():
            status, crds = get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
            if status != 200:
                return None
            for crd in crds["items"]:
                spec = crd["spec"]
                version = next(v["name"] for v in spec["versions"] if v.get("storage"))
                if get(f"/apis/{spec['group']}/{version}/{spec['names']['plural']}?limit=1")[0] != 200:
                    return None
            return True
        wait_for(lists, timeout, interval=0.2, what="every custom resource to be listable")

    def stop(self, graceful=False, timeout=90):
        """Stops kube-apiserver; etcd and its data stay.  graceful=False kills it
        (SIGKILL: every connection is reset at once, like a crash); graceful=True
        sends SIGTERM and waits -- note that an open watch then holds the real
        server's shutdown for about 60 s (observed; see docs/conformance.md)."""
        if self.proc is None:
            return
        if graceful:
            _terminate(self.proc, timeout)
        else:
            _kill(self.proc)
        self.proc = None

    def restart(self, graceful=False):
        """The real "watch dropped": every connection ends, the data stays, and the
        new server's watch cache starts at the current revision (older
        resourceVersions get 410 Expired)."""
        self.stop(graceful=graceful)
        self._client = None      # its kept-alive connection died with the server
        self.start()

    def close(self):
        if getattr(self, "proxy", None) is not None:
            self.proxy.close()
        self.stop()  # a kill: nothing of the server's is worth a 60 s graceful wait
        if self.etcd_proc is not None:
            _terminate(self.etcd_proc, 30)  # etcd stops at once on SIGTERM
            self.etcd_proc = None

    def drop_watches(self, mode="abort"):
        """Cuts every connection through the proxy (the closest real equivalent of the
        emulator's knob; a clean end of a watch is what restart() gives).  The
        fixture's own client kept a connection through the proxy too: it gets a new one."""
        dropped = self.proxy.drop_all()
        self._client = None
        return dropped

    # -- kubeconfig and kubectl ---------------------------------------------------------

    def write_kubeconfig(self, path, token=None, token_file=None, namespace="default", url=None,
                         client_cert=None):
        """A kubeconfig for this server; client_cert=(user, groups) mints a client
        certificate (CN=user, O=groups) signed by the test CA, which
        --client-ca-file trusts, and uses it instead of a token."""
        if token is None and token_file is None and client_cert is None:
            token = self.token
        text = kubeconfig_text(url or self.url, self.ca_file, token, token_file, namespace)
        if client_cert is not None:
            from kubeapi import tlsgen
            user, groups = client_cert
            crt, key = tlsgen.make_client_cert(str(self.workdir), user, groups)
            doc = json.loads(text)
            doc["users"][0]["user"] = {"client-certificate": crt, "client-key": key}
            text = json.dumps(doc, indent=2) + "\n"
        pathlib.Path(path).write_text(text)
        return str(path)

    def _kubectl_argv(self, args, kubeconfig, kubectl):
        return [kubectl or self.kubectl_bin, "--kubeconfig", kubeconfig or self.kubeconfig,
                "--cache-dir", str(self.cache_dir), *map(str, args)]

    def kubectl(self, *args, check=True, timeout=120, env=None, input=None, kubeconfig=None,
                kubectl=None):
        """Runs kubectl (the one built with the server unless kubectl= names another)."""
        full_env = dict(os.environ, HOME=str(self.workdir))
        full_env.update(env or {})
        proc = subprocess.run(self._kubectl_argv(args, kubeconfig, kubectl), capture_output=True,
                              text=True, timeout=timeout, env=full_env, input=input)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(map(str, args))} failed "
                                 f"({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def kubectl_bg(self, *args, env=None, kubeconfig=None, kubectl=None):
        full_env = dict(os.environ, HOME=str(self.workdir))
        full_env.update(env or {})
        return subprocess.Popen(self._kubectl_argv(args, kubeconfig, kubectl),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=full_env)

    def apply_file(self, path, field_manager="real-fixture"):
        return self.kubectl("apply", "--server-side", "--force-conflicts",
                            f"--field-manager={field_manager}", "-f", str(path))

    def apply_crds(self):
        files = crd_files()
        for path in files:
            self.apply_file(path)
        if files:
            self.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=120s")
            self.wait_custom_resources_served()
        return files

    def delete_crds(self, timeout=120):
        """Deletes every CRD (the server's own finalizer removes their objects) and
        waits until discovery no longer lists their groups."""
        doc = json.loads(self.kubectl("get", "crd", "-o", "json").stdout)
        groups = {c["spec"]["group"] for c in doc["items"]}
        if not groups:
            return
        self.kubectl("delete", "crd", "--all", "--wait=true", f"--timeout={timeout}s",
                     timeout=timeout + 30)

        def gone():
            served = {g["name"] for g in self.direct_client.request("GET", "/apis")["groups"]}
            return not (served & groups)
        wait_for(gone, timeout, what=f"discovery to drop {sorted(groups)}")

    # -- ServiceAccount tokens: how a credential is rotated on the real server ----------
    # (--token-auth-file is read once at start; the server issues and checks these itself)

    def service_account_token(self, namespace, sa, bound_secret):
        """A token for ServiceAccount `sa` (made on first use, bound to cluster-admin:
        the authorizer is RBAC) from the TokenRequest API, bound to a new Secret
        `bound_secret`: revoke() deletes the Secret, which invalidates the token.
        Returns once the token is accepted (a new binding takes a moment to reach
        the authorizer)."""
        c = self.direct_client
        _create_if_missing(c, {"apiVersion": "v1", "kind": "ServiceAccount",
                               "metadata": {"name": sa, "namespace": namespace}},
                           "serviceaccounts")
        _create_if_missing(c, {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": f"pc-test:{namespace}:{sa}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}]},
            "clusterrolebindings")
        secret = c.create({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                           "metadata": {"name": bound_secret, "namespace": namespace}},
                          "secrets")
        ref = {"apiVersion": "v1", "kind": "Secret", "name": bound_secret,
               "uid": secret["metadata"]["uid"]}
        token = c.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{sa}/token",
                          {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                           "spec": {"expirationSeconds": 3600, "boundObjectRef": ref}}
                          )["status"]["token"]
        wait_for(lambda: self.token_status(token) == 200, what=f"a token of {namespace}/{sa}")
        return token

    def revoke(self, namespace, bound_secret, token):
        """Deletes the Secret `token` is bound to and waits until a direct request
        with it gets 401 (the server caches a good token for up to 10 s)."""
        self.direct_client.delete("v1", "secrets", bound_secret, namespace)
        wait_for(lambda: self.token_status(token) == 401, what="the revoked token to be refused")

    def token_status(self, token):
        """The status of a direct request with `token` (not through the proxy) to a
        path that needs it both valid and authorized (cluster-wide Secrets)."""
        from kubeapi.client import KubeClient
        return KubeClient(self.direct_url, token, self.ca_file).raw(
            "GET", "/api/v1/secrets", params={"limit": 1})[0]

    # -- the same helpers as the emulator's KubeAPI -------------------------------------

    def create(self, obj, plural=None):
        return self.client.create(obj, plural or self.plural_of(obj["apiVersion"], obj["kind"]))

    def plural_of(self, api_version, kind):
        return plural_of(self.client, api_version, kind)

    def get(self, api_version, plural, name, namespace=None):
        return self.client.get(api_version, plural, name, namespace)

    def patch_status(self, api_version, plural, name, status, namespace=None):
        return self.client.patch(api_version, plural, name, {"status": status}, namespace,
                                 subresource="status")


def _create_if_missing(client, obj, plural):
    from kubeapi.client import KubeError
    try:
        client.create(obj, plural)
    except KubeError as e:
        if e.code != 409:
            raise


def _kill(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _terminate(proc, timeout):
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


class NamespacedKube:
    """The session's RealKube seen by one test: its own namespace (the kubeconfig's
    default) and every attribute of the server."""

    kind = "real"

    def __init__(self, kube, namespace, workdir):
        self._kube = kube
        self.namespace = namespace
        self.kubeconfig = kube.write_kubeconfig(pathlib.Path(workdir) / "kubeconfig",
                                                namespace=namespace)

    def __getattr__(self, name):
        return getattr(self._kube, name)

    def kubectl(self, *args, kubeconfig=None, **kw):
        return self._kube.kubectl(*args, kubeconfig=kubeconfig or self.kubeconfig, **kw)

    def kubectl_bg(self, *args, kubeconfig=None, **kw):
        return self._kube.kubectl_bg(*args, kubeconfig=kubeconfig or self.kubeconfig, **kw)


@pytest.fixture(scope="session")
def real_kube(tmp_path_factory):
    kube = RealKube(tmp_path_factory.mktemp("real-kube"))
    try:
        yield kube
    finally:
        kube.close()


def _namespaced(kube, tmp_path):
    """kube seen by one test (a fresh namespace), its faults cleared afterwards."""
    ns = "t-" + secrets.token_hex(4)
    kube.kubectl("create", "namespace", ns)
    yield NamespacedKube(kube, ns, tmp_path)
    kube.proxy.clear()
    kube._client = None     # a test may have cut or paused its connection
    if kube.proc is None:
        kube.start()
    kube.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.fixture
def real_kubeapi(real_kube, tmp_path):
    """The session's real API server with a fresh namespace for this test."""
    yield from _namespaced(real_kube, tmp_path)


@pytest.fixture(scope="module")
def bare_real_kube(tmp_path_factory):
    """A real server of the module's own, started without the project's CRDs (the
    session's has them all and other tests rely on that); about 8 s to start."""
    kube = RealKube(tmp_path_factory.mktemp("bare-kube"), crds=False)
    try:
        yield kube
    finally:
        kube.close()


@pytest.fixture
def bare_real_kubeapi(bare_real_kube, tmp_path):
    """The module's bare real server with no CRD at all (whatever an earlier test
    applied is deleted first) and a fresh namespace."""
    bare_real_kube.delete_crds()
    yield from _namespaced(bare_real_kube, tmp_path)


class EmulatorView:
    """The emulator's KubeAPI with the real fixture's extras: a namespace (the
    emulator is fresh per test, so "default") and kubectl(kubectl=<binary>)."""

    kind = "emulator"

    def __init__(self, api):
        self._api = api
        self.namespace = "default"
        self._sa_tokens = {}

    def __getattr__(self, name):
        return getattr(self._api, name)

    @property
    def direct_client(self):
        """The emulator's faults are server-side, so its one client is the "direct" one."""
        return self._api.client

    # ServiceAccount tokens as the real server's (RealKube.service_account_token): here
    # one more line in the emulator's token file, which it reads on every request.

    def service_account_token(self, namespace, sa, bound_secret):
        self._sa_tokens[bound_secret] = secrets.token_hex(16)
        self._api.set_tokens([self._api.token, *self._sa_tokens.values()])
        return self._sa_tokens[bound_secret]

    def revoke(self, namespace, bound_secret, token):
        del self._sa_tokens[bound_secret]
        self._api.set_tokens([self._api.token, *self._sa_tokens.values()])
        wait_for(lambda: self.token_status(token) == 401, what="the revoked token to be refused")

    def token_status(self, token):
        """The status of a request with `token` to /api (the emulator authenticates
        every path alike and has no authorizer; the rotation tests' request-log
        checks look at other paths)."""
        from kubeapi.client import KubeClient
        return KubeClient(self.url, token, self.ca_file).raw("GET", "/api")[0]

    def kubectl(self, *args, kubectl=None, check=True, timeout=120, input=None, **kw):
        if kubectl is None:
            return self._api.kubectl(*args, check=check, timeout=timeout, input=input, **kw)
        env = dict(os.environ, HOME=str(self._api.workdir))
        proc = subprocess.run([kubectl, "--kubeconfig", self._api.kubeconfig, "--cache-dir",
                               str(self._api.cache_dir), *map(str, args)], capture_output=True,
                              text=True, timeout=timeout, env=env, input=input)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(map(str, args))} failed "
                                 f"({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc


@pytest.fixture(params=["emulator", "real"])
def any_kubeapi(request):
    """The same test against the emulator (a fresh one, namespace "default") and
    against the real kube-apiserver (a fresh namespace)."""
    if request.param == "emulator":
        return EmulatorView(request.getfixturevalue("kubeapi"))
    return request.getfixturevalue("real_kubeapi")


@pytest.fixture(params=["emulator", "real"])
def any_bare_kubeapi(request):
    """any_kubeapi without CRDs: a fresh emulator started without them, or the
    module's bare real server (bare_real_kubeapi)."""
    if request.param == "emulator":
        return EmulatorView(request.getfixturevalue("kubeapi_factory")(crds=False))
    return request.getfixturevalue("bare_real_kubeapi")


# -- the real pulumi CLI --------------------------------------------------------------

STANDIN = HERE / "pulumi_standin" / "pulumi"


class RealPulumi:
    """A pulumi CLI with its own PULUMI_HOME, file:// backend and cloud directory.
    kind="real" (default) is the binary built by deps-real; kind="standin" is the
    Python stand-in (tests/e2e/pulumi_standin/pulumi) with the same layout, so one
    test can run against both (fixture `pulumi_cli`)."""

    def __init__(self, workdir, kind="real"):
        self.workdir = pathlib.Path(workdir)
        self.kind = kind
        self.version = VERSIONS.get("PULUMI_VERSION", "")
        self.home = self.workdir / "pulumi-home"
        self.home.mkdir(parents=True)
        if kind == "real":
            self.binary = real_binary("pulumi")
            real_binary("pulumi-language-yaml")
            real_binary("pulumi-resource-standin", component="standin-provider",
                        where=REAL / "provider")
            self.bin_dir = str(REAL_BIN)
            plugins = REAL / "pulumi-home" / "plugins"
            if not plugins.is_dir():
                pytest.fail(f"{plugins} is missing: run `make deps-real`")
            (self.home / "plugins").symlink_to(plugins)
        elif kind == "standin":
            self.binary = str(STANDIN)
            self.bin_dir = str(STANDIN.parent)
        else:
            raise ValueError(f"unknown pulumi CLI kind {kind!r}")
        self.backend_dir = self.workdir / "state"
        self.backend_dir.mkdir()
        self.backend_url = "file://" + str(self.backend_dir)
        self.cloud_dir = self.workdir / "cloud"
        self.cloud_dir.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_")}
        env.update({
            "PATH": self.bin_dir + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
            "PULUMI_HOME": str(self.home),
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_STANDIN_CLOUD": str(self.cloud_dir),
            "HOME": str(self.workdir),
        })
        self.env = env

    def program(self, name):
        """A fresh copy of tests/real/programs/<name>; returns its directory.  A
        Node.js program gets node_modules linked from .real/nodejs (npm ci by
        deps-real) and needs the Node.js language host."""
        src = PROGRAMS / name
        dst = self.workdir / "programs" / name
        shutil.copytree(src, dst)
        if (src / "package.json").exists() and self.kind == "real":
            real_binary("pulumi-language-nodejs")
            real_binary("pulumi-resource-pulumi-nodejs", component="pulumi-language-nodejs")
            modules = REAL / "nodejs" / "node_modules"
            if not (modules / "@pulumi" / "pulumi").is_dir():
                pytest.fail(f"{modules} has no @pulumi/pulumi: run `make deps-real`")
            (dst / "node_modules").symlink_to(modules)
        return dst

    def run(self, *args, cwd=None, input=None, env=None, timeout=300, check=False):
        full_env = dict(self.env)
        full_env.update(env or {})
        proc = subprocess.run([self.binary, *map(str, args)], cwd=str(cwd or self.workdir),
                              input=input, env=full_env, capture_output=True, text=True,
                              timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"pulumi {' '.join(map(str, args))} failed ({proc.returncode}):"
                                 f"\n{proc.stdout}\n{proc.stderr}")
        return proc


@pytest.fixture
def real_pulumi(tmp_path):
    return RealPulumi(tmp_path / "real-pulumi")


@pytest.fixture(params=["standin", "real"])
def pulumi_cli(request, tmp_path):
    """The same test against the stand-in and against the real CLI."""
    return RealPulumi(tmp_path / f"{request.param}-pulumi", kind=request.param)
