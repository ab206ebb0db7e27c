"""A small Docker-registry token server for the e2e tests (token auth over TLS).

It implements what distribution's token auth needs from an issuer
(distribution docs ``spec/auth/token.md``):

* ``GET /token?service=S&scope=repository:NAME:ACTIONS`` with optional HTTP
  Basic credentials -> ``{"token", "access_token", "expires_in", "issued_at"}``;
* ``POST /token`` with ``grant_type=refresh_token`` (the OAuth2 flow used
  with an identity token) -> the same, ``access_token`` included.

Tokens are JWTs signed RS256 with a key made by ``openssl``; the signing
certificate (self-signed, also made by openssl) is carried in the header's
``x5c`` and is the registry's ``rootcertbundle``.  Signing uses
python3-cryptography.  Anonymous requests get a token with no access, so
the registry answers them with 401 - like a private registry.

Every request is recorded (path, method, whether Authorization was sent,
the scopes asked for) so tests can count token fetches.
"""
import base64
import http.server
import json
import pathlib
import ssl
import subprocess
import threading
import time
import urllib.parse
import uuid

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def make_signing_key(d):
    """RSA key + self-signed certificate for signing tokens (openssl CLI)."""
    d = pathlib.Path(d)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=pulumi-controller test token issuer",
                    "-keyout", str(d / "token.key"), "-out", str(d / "token.crt")],
                   check=True, capture_output=True)
    return d / "token.key", d / "token.crt"


class TokenIssuer:
    def __init__(self, base, port, service, issuer, users, tls_cert=None, tls_key=None,
                 refresh_tokens=None, ttl=300):
        self.base = pathlib.Path(base)
        self.port = port
        self.service = service
        self.issuer = issuer
        self.users = dict(users)                # user -> password
        self.refresh_tokens = dict(refresh_tokens or {})   # token -> user
        self.ttl = ttl
        self.key_path, self.cert_path = make_signing_key(self.base)
        self.key = serialization.load_pem_private_key(self.key_path.read_bytes(), password=None)
        pem = self.cert_path.read_bytes()
        der = ssl.PEM_cert_to_DER_cert(pem.decode())
        self.x5c = base64.b64encode(der).decode()
        self.requests = []
        self.lock = threading.Lock()
        self.tls = (tls_cert, tls_key) if tls_cert else None
        self.server = None
        self.thread = None

    @property
    def realm(self):
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.port}/token"

    def sign(self, subject, access):
        now = int(time.time())
        header = {"typ": "JWT", "alg": "RS256", "x5c": [self.x5c]}
        claims = {"iss": self.issuer, "sub": subject, "aud": self.service, "exp": now + self.ttl,
                  "nbf": now - 10, "iat": now, "jti": uuid.uuid4().hex, "access": access}
        signing_input = (b64url(json.dumps(header).encode()) + "." +
                         b64url(json.dumps(claims).encode())).encode()
        sig = self.key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
        return signing_input.decode() + "." + b64url(sig)

    @staticmethod
    def access_for(scopes):
        access = []
        for scope in scopes:
            for part in scope.split(" "):
                bits = part.split(":")
                if len(bits) != 3 or bits[0] != "repository":
                    continue
                access.append({"type": "repository", "name": bits[1],
                               "actions": [a for a in bits[2].split(",") if a]})
        return access

    def record(self, **kw):
        with self.lock:
            self.requests.append(kw)

    def start(self):
        issuer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def reply(self, status, obj):
                body = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def basic_user(self):
                h = self.headers.get("Authorization", "")
                if not h.startswith("Basic "):
                    return None, False
                try:
                    user, _, pw = base64.b64decode(h[6:]).decode().partition(":")
                except Exception:
                    return None, True
                return (user if issuer.users.get(user) == pw else None), True

            def grant(self, user, scopes):
                access = issuer.access_for(scopes) if user else []
                tok = issuer.sign(user or "", access)
                self.reply(200, {"token": tok, "access_token": tok, "expires_in": issuer.ttl,
                                 "issued_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})

            def do_GET(self):
                u = urllib.parse.urlparse(self.path)
                q = urllib.parse.parse_qs(u.query)
                user, sent = self.basic_user()
                issuer.record(method="GET", path=u.path, auth=sent, scopes=q.get("scope", []),
                              service=q.get("service", [""])[0])
                if u.path != "/token":
                    return self.reply(404, {"error": "not found"})
                if sent and user is None:
                    return self.reply(401, {"details": "invalid credentials"})
                self.grant(user, q.get("scope", []))

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                form = urllib.parse.parse_qs(self.rfile.read(n).decode())
                u = urllib.parse.urlparse(self.path)
                issuer.record(method="POST", path=u.path, auth="Authorization" in self.headers,
                              scopes=form.get("scope", []), grant=form.get("grant_type", [""])[0])
                if u.path != "/token":
                    return self.reply(404, {"error": "not found"})
                if form.get("grant_type", [""])[0] != "refresh_token":
                    return self.reply(400, {"error": "unsupported_grant_type"})
                user = issuer.refresh_tokens.get(form.get("refresh_token", [""])[0])
                if user is None:
                    return self.reply(401, {"error": "invalid_grant"})
                self.grant(user, form.get("scope", []))

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        if self.tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(str(self.tls[0]), str(self.tls[1]))
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
