"""The emulator process: state directory, TLS setup, start, graceful stop.

The state directory holds the test PKI (ca.crt, server.crt/key), the token
file (one bearer token a line), kubeconfig (for kubectl and the C client),
ready.json (written once the port is bound: {"port", "pid", "url"}) and,
after a graceful stop (SIGTERM, SIGINT or POST /__admin/shutdown),
state.json with every object and the event history, which the next start
loads: a restart keeps objects, resourceVersions and the history lists read;
watches from before it get 410, as a real apiserver's fresh watch cache
answers, unless --keep-watch-history.
"""
import json
import os
import secrets
import ssl
import threading
import time

from . import tlsgen
from .server import Faults, Handler, RequestLog, Server, Server6, Settings
from .store import Store


def write_atomic(path, text, mode=0o600):
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def kubeconfig_text(url, ca_file, token=None, token_file=None, client_cert=None,
                    client_key=None, namespace="default"):
    user = {}
    if token is not None:
        user["token"] = token
    if token_file is not None:
        user["tokenFile"] = token_file
    if client_cert is not None:
        user["client-certificate"] = client_cert
        user["client-key"] = client_key
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "kubeapi",
           "clusters": [{"name": "kubeapi", "cluster": {"server": url,
                                                        "certificate-authority": ca_file}}],
           "users": [{"name": "kubeapi", "user": user}],
           "contexts": [{"name": "kubeapi", "context": {"cluster": "kubeapi", "user": "kubeapi",
                                                        "namespace": namespace}}]}
    return json.dumps(doc, indent=2) + "\n"


class Emulator:
    def __init__(self, state_dir, host="127.0.0.1", port=0, token_file=None, minor=32,
                 history=10000, verbose=False, keep_watch_history=False):
        os.makedirs(state_dir, exist_ok=True)
        self.state_dir = state_dir
        self.verbose = verbose
        self.token_file = token_file or os.path.join(state_dir, "tokens")
        self.issued_file = os.path.join(state_dir, "issued-tokens")
        self.issue_lock = threading.Lock()
        if not os.path.exists(self.token_file):
            write_atomic(self.token_file, secrets.token_hex(16) + "\n")
        self.store = Store(history)
        state_path = os.path.join(state_dir, "state.json")
        if os.path.exists(state_path):
            with open(state_path) as f:
                self.store.load(json.load(f), keep_watch_history)
        else:
            self.store.bootstrap()
        self.ca_file, _ = tlsgen.make_ca(state_dir)
        cert, key = tlsgen.make_server_cert(state_dir)
        self.settings = Settings(minor)
        self.faults = Faults()
        self.log = RequestLog()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        ctx.load_verify_locations(self.ca_file)
        ctx.verify_mode = ssl.CERT_OPTIONAL
        ctx.set_alpn_protocols(["http/1.1"])
        self.httpd = (Server6 if ":" in host else Server)((host, port), Handler)
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True,
                                            do_handshake_on_connect=False)
        self.httpd.emu = self
        self.host = host
        self.port = self.httpd.server_address[1]
        self.stopping = threading.Event()

    @property
    def url(self):
        return f"https://{self.address()}"

    def address(self):
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def tokens(self):
        """The token file's tokens and those TokenRequest issued (kept in the state
        directory, so they outlive a restart as signed tokens do)."""
        out = set()
        for path in (self.token_file, self.issued_file):
            try:
                with open(path) as f:
                    out |= {line.strip() for line in f
                            if line.strip() and not line.startswith("#")}
            except OSError:
                pass
        return out

    def issue_token(self, subject):
        """A new bearer token for subject (a TokenRequest), accepted from now on."""
        token = "sa-" + secrets.token_hex(24)
        with self.issue_lock:
            with open(self.issued_file, "a") as f:
                f.write(f"{token}\n")
        return token

    def git_version(self):
        return f"v1.{self.settings.minor}.0"

    def version_info(self):
        minor = str(self.settings.minor)
        return {"major": "1", "minor": minor, "emulationMajor": "1", "emulationMinor": minor,
                "minCompatibilityMajor": "1",
                "minCompatibilityMinor": str(self.settings.minor - 1),
                "gitVersion": self.git_version(), "gitCommit": "0" * 40,
                "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                "goVersion": "go1.23.0", "compiler": "gc", "platform": "linux/amd64"}

    def request_stop(self):
        self.stopping.set()

    def crash(self):
        """Saves the state (as etcd would keep it) and exits at once: open connections are
        cut, not ended, as when an apiserver process dies."""
        self.store.lock.acquire()
        try:
            os.unlink(os.path.join(self.state_dir, "ready.json"))
        except OSError:
            pass
        write_atomic(os.path.join(self.state_dir, "state.json"), json.dumps(self.store.dump()))
        os._exit(3)

    def run(self):
        """Serves until asked to stop, then persists the state and returns."""
        try:
            with open(self.token_file) as f:
                first = next((line.strip() for line in f
                              if line.strip() and not line.startswith("#")), "")
        except OSError:
            first = ""
        write_atomic(os.path.join(self.state_dir, "kubeconfig"),
                     kubeconfig_text(self.url, self.ca_file, token=first))
        thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                  daemon=True)
        thread.start()
        write_atomic(os.path.join(self.state_dir, "ready.json"),
                     json.dumps({"port": self.port, "pid": os.getpid(), "url": self.url}))
        while not self.stopping.wait(0.5):
            pass
        self.httpd.shutdown()
        self.httpd.server_close()
        os.unlink(os.path.join(self.state_dir, "ready.json"))
        # Watches end cleanly, as on a real apiserver's shutdown; give their threads a
        # moment to write the end of the chunked body.
        with self.store.lock:
            self.store.closing = True
            self.store.close_watches(("close", "eof"))
        deadline = time.monotonic() + 5
        while self.store.watchers and time.monotonic() < deadline:
            time.sleep(0.01)
        # Hold the store lock until exit so no write can be acknowledged after the dump.
        self.store.lock.acquire()
        write_atomic(os.path.join(self.state_dir, "state.json"), json.dumps(self.store.dump()))
