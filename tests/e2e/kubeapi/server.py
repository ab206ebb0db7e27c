"""The HTTPS front of the emulator: authentication, routing, watch streams, admin.

Requests are served by http.server's ThreadingHTTPServer over TLS (HTTP/1.1;
no h2 in ALPN, so Go and libcurl clients stay on HTTP/1.1), one thread per
connection.  Watches are chunked bodies of newline-terminated JSON events,
flushed as they are produced; several queued events share one chunk, as the
real server does when its channel has more than one.

Authentication: a bearer token listed in the token file (re-read on every
request, so tests can rotate tokens), or a client certificate signed by the
emulator's CA.  /version and the health endpoints are also open to anonymous
requests (system:public-info-viewer); everything else gets RBAC's 403 for
system:anonymous, and a wrong token 401.

/__admin/ endpoints (no auth, never subject to injected faults) drive the
fault knobs; docs/testing.md lists them.
"""
import collections
import json
import os
import random
import re
import socket
import ssl
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import yaml

from . import errors as E
from . import partial
from . import pods
from . import protobuf
from . import tables
from . import typed
from .store import meta

PUBLIC_PATHS = {"/version", "/version/", "/healthz", "/readyz", "/livez"}
BODY_LIMIT = 3 * 1024 * 1024


# Settings kept by the store rather than in Settings (break_generation is a deliberate
# bug for the conformance self-check, see store.Store).
STORE_SETTINGS = ("history_limit", "break_generation")


class Settings:
    """Knobs tests may change at run time through /__admin/config."""

    def __init__(self, minor):
        self.minor = minor
        self.watch_list = True          # accept sendInitialEvents (the WatchList gate)
        self.bookmark_interval = 60.0   # seconds between periodic bookmarks
        self.expired_mode = "event"     # too-old watch RV: "event" (ERROR in 200) or "http"
        self.latency = 0.0              # added to every API request, seconds
        self.fragment_watch = False     # split each watch write into random small chunks
        self.aggregated_discovery = True    # answer /api and /apis in apidiscovery format
        self.watch_gate = threading.Event()  # cleared by hold_watches: streams go silent
        self.watch_gate.set()

    @property
    def hold_watches(self):
        return not self.watch_gate.is_set()

    @hold_watches.setter
    def hold_watches(self, hold):
        if hold:
            self.watch_gate.clear()
        else:
            self.watch_gate.set()

    def as_dict(self):
        out = {k: v for k, v in vars(self).items() if k != "watch_gate"}
        out["hold_watches"] = self.hold_watches
        return out


class Faults:
    def __init__(self):
        self.lock = threading.Lock()
        self.rules = []

    def add(self, rule):
        with self.lock:
            self.rules.append(rule)

    def clear(self):
        with self.lock:
            self.rules = []

    def take(self, method, path, is_watch, label_selector=""):
        with self.lock:
            for rule in self.rules:
                if rule["count"] <= 0:
                    continue
                if rule.get("method") and rule["method"].upper() != method:
                    continue
                if rule.get("path") and not re.search(rule["path"], path):
                    continue
                if rule.get("selector") and not re.search(rule["selector"], label_selector):
                    continue
                if rule.get("watch") is not None and bool(rule["watch"]) != is_watch:
                    continue
                rule["count"] -= 1
                return dict(rule)
            self.rules = [r for r in self.rules if r["count"] > 0]
        return None


class RequestLog:
    def __init__(self, size=50000):
        self.lock = threading.Lock()
        self.entries = collections.deque(maxlen=size)
        self.seq = 0

    def add(self, entry):
        with self.lock:
            self.seq += 1
            entry["seq"] = self.seq
            self.entries.append(entry)
            return entry

    def since(self, seq):
        with self.lock:
            return [dict(e) for e in self.entries if e["seq"] > seq]


def _fault_error(rule):
    code = int(rule.get("code", 500))
    headers = {}
    if rule.get("retry_after") is not None:
        headers["Retry-After"] = str(rule["retry_after"])
    if code == 429:
        err = E.ApiError(429, "TooManyRequests",
                         "Too many requests, please try again later.",
                         {"retryAfterSeconds": int(rule.get("retry_after") or 1)}, headers)
        err.headers.setdefault("Retry-After", str(rule.get("retry_after") or 1))
        return err
    if code == 410:
        return E.expired("too old resource version: 1 (2) (injected fault)")
    if code == 401:
        return E.unauthorized()
    if code == 503:
        return E.ApiError(503, "ServiceUnavailable", "The server is currently unable to "
                          "handle the request (injected fault)", {}, headers)
    if code == 504:
        return E.ApiError(504, "Timeout", "Timeout: request did not complete within the "
                          "allowed duration (injected fault)", {}, headers)
    return E.ApiError(code, "InternalError", "Internal error occurred: injected fault",
                      {"causes": [{"message": "injected fault"}]}, headers)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kubeapi-emulator"
    sys_version = ""

    def setup(self):
        # Headers and body leave in separate writes: without TCP_NODELAY, Nagle plus the
        # client's delayed ACK would add ~40 ms to every response.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.request.settimeout(15)
        self.request.do_handshake()
        self.request.settimeout(None)
        super().setup()

    def log_message(self, fmt, *args):
        if self.server.emu.verbose:
            sys.stderr.write("kubeapi: " + (fmt % args) + "\n")

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def do_DELETE(self):
        self._dispatch("DELETE")

    # -- plumbing ----------------------------------------------------------------------

    def _read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
                if len(data) > BODY_LIMIT:
                    raise E.ApiError(413, "RequestEntityTooLarge",
                                     "Request entity too large: limit is 3145728")
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True
            raise E.bad_request("invalid Content-Length") from None
        if length > BODY_LIMIT:
            raise E.ApiError(413, "RequestEntityTooLarge",
                             "Request entity too large: limit is 3145728")
        return self.rfile.read(length) if length else b""

    def _send(self, code, body, ctype="application/json", headers=None):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        for text in self.warnings:
            self.send_header("Warning", '299 - "' + text.replace('"', '\\"') + '"')
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self.entry["code"] = code

    def _send_error(self, err):
        if err.code == 413:           # the body was not read: the connection is unusable
            self.close_connection = True
        status = err.status()
        if getattr(err, "meta", None):
            status["metadata"] = err.meta
        self._send(err.code, status, headers=err.headers)

    def _dispatch(self, method):
        emu = self.server.emu
        url = urlsplit(self.path)
        path = url.path
        params = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        self.warnings = []
        emu.store.warnings.items = self.warnings
        entry = {"method": method, "path": path, "query": params,
                 "userAgent": self.headers.get("User-Agent", ""),
                 "contentType": self.headers.get("Content-Type", ""),
                 "accept": self.headers.get("Accept", ""),
                 "time": time.time(), "code": None, "user": None}
        # the request log is what the client under test sent: admin calls stay out of it
        self.entry = entry if path.startswith("/__admin/") else emu.log.add(entry)
        try:
            body = self._read_body()
            if path.startswith("/__admin/"):
                try:
                    return self._admin(method, path, params, body)
                except (ValueError, TypeError, AttributeError, KeyError) as exc:
                    raise E.bad_request(f"bad admin request: {exc!r}") from None
            self.entry["user"] = self._authenticate(method, path, params)
            rule = emu.faults.take(method, path, params.get("watch") in ("1", "true"),
                                   params.get("labelSelector", ""))
            if rule is not None:
                raise _fault_error(rule)
            if emu.settings.latency:
                time.sleep(emu.settings.latency)
            self._route(method, path, params, body)
        except E.ApiError as err:
            self._send_error(err)
        except E.PlainNotFound:
            self._send(404, b"404 page not found\n", "text/plain; charset=utf-8")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, socket.timeout):
            self.close_connection = True
        except Exception as exc:      # a bug in the emulator: say so loudly
            traceback.print_exc()
            self._send_error(E.ApiError(500, "InternalError",
                                        f"Internal error occurred: emulator bug: {exc!r}"))

    def _authenticate(self, method, path, params):
        """The first authenticator that succeeds wins, as in kube-apiserver's union
        (client certificate, then bearer token); a token that fails is a 401 even on
        the public paths, and only a request with no credentials is anonymous, which
        RBAC then forbids (403) everything but the public paths."""
        emu = self.server.emu
        cert = self.request.getpeercert() if hasattr(self.request, "getpeercert") else None
        if cert:
            for rdn in cert.get("subject", ()):
                for k, v in rdn:
                    if k == "commonName":
                        return "cert:" + v
        auth = self.headers.get("Authorization")
        if auth is not None:
            if auth.startswith("Bearer ") and auth[7:].strip() in emu.tokens():
                return emu.token_user(auth[7:].strip())
            raise E.unauthorized()
        if path in PUBLIC_PATHS:
            return "system:anonymous"
        raise E.forbidden_anonymous(method, path, params)

    def _decode(self, body, ctype, allow_yaml=True):
        ctype = (ctype or "").split(";")[0].strip().lower()
        if ctype == "application/vnd.kubernetes.protobuf":
            try:
                return protobuf.decode(body)
            except protobuf.ProtobufError:
                raise E.unsupported_media(["application/json", "application/yaml"]) from None
        if ctype and ctype not in ("application/json", "application/yaml", "text/yaml",
                                   "application/apply-patch+yaml", "*/*") \
                and not ctype.endswith("+json"):
            raise E.unsupported_media(["application/json", "application/yaml"])
        if not body:
            raise E.bad_request("the request body is empty")
        try:
            return json.loads(body)
        except ValueError:
            if not allow_yaml:
                raise E.bad_request("the request body is not valid JSON") from None
        try:
            return yaml.safe_load(body)
        except yaml.YAMLError as exc:
            raise E.bad_request(f"error decoding YAML: {exc}") from None

    # -- routing -----------------------------------------------------------------------

    def _route(self, method, path, params, body):
        emu = self.server.emu
        reg = emu.store.registry
        parts = [p for p in path.split("/") if p]
        if path in ("/version", "/version/"):
            return self._send(200, emu.version_info())
        if path in ("/healthz", "/readyz", "/livez"):
            return self._send(200, b"ok", "text/plain; charset=utf-8")
        if parts[:2] == ["openapi", "v3"]:
            return self._openapi(parts[2:])
        if not parts or parts[0] not in ("api", "apis"):
            raise E.PlainNotFound()
        with emu.store.lock:
            if parts in (["api"], ["apis"]):
                version = self._aggregated_version()
                if version:
                    ctype = f"application/json;g=apidiscovery.k8s.io;v={version};" \
                            "as=APIGroupDiscoveryList"
                    return self._send(200, reg.aggregated(parts == ["api"],
                                                          f"apidiscovery.k8s.io/{version}"),
                                      ctype)
            if parts == ["api"]:
                return self._send(200, reg.api_versions(emu.address()))
            if parts == ["apis"]:
                return self._send(200, reg.api_group_list())
            if parts[0] == "apis" and len(parts) == 2:
                doc = reg.api_group(parts[1])
                if doc is None:
                    raise E.PlainNotFound()
                return self._send(200, doc)
            if parts[0] == "api":
                group, version, rest = "", parts[1], parts[2:]
            else:
                group, version, rest = parts[1], parts[2], parts[3:]
            if not reg.has_gv(group, version):
                raise E.PlainNotFound()
            # Built-in groups answer unknown paths with a Status; the CRD handler's
            # groups fall through to the mux's plain-text 404.
            not_found = E.path_not_found if reg.is_builtin_gv(group, version) \
                else E.PlainNotFound
            if not rest:
                if method != "GET":
                    raise not_found()
                return self._send(200, reg.resource_list(group, version))
            ns = None
            if rest[0] == "namespaces" and len(rest) >= 3:
                inner = reg.lookup(group, version, rest[2])
                if inner is not None and inner.namespaced:
                    ns, rest = rest[1], rest[2:]
            rtype = reg.lookup(group, version, rest[0])
        if rtype is None or len(rest) > 3:
            raise not_found()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else ""
        if (rtype.namespaced and name and ns is None) or (not rtype.namespaced and ns):
            raise not_found()
        if sub == "log" and rtype.key == ("", "pods") and method == "GET":
            return self._send(200, pods.pod_log(self.server.emu.store, ns, name, params),
                              "text/plain")
        if sub == "token" and rtype.key == ("", "serviceaccounts") and method == "POST":
            return self._send(201, pods.token_request(self.server.emu, ns, name,
                                                      self._decode(body, self.headers.get(
                                                          "Content-Type", ""))))
        if sub and not (sub == "status" and rtype.status):
            raise not_found()
        if rtype.deprecation:
            self.warnings.append(rtype.deprecation)
        self._verb(method, rtype, ns, name, sub, params, body)

    def _aggregated_version(self):
        """The aggregated discovery version the Accept header asks for and the server
        offers (v2 from 1.30, v2beta1 up to 1.32), or None for legacy discovery."""
        if not self.server.emu.settings.aggregated_discovery:
            return None
        minor = self.server.emu.settings.minor
        for part in self.headers.get("Accept", "").split(","):
            params = dict(p.strip().split("=", 1) for p in part.split(";")[1:] if "=" in p)
            if params.get("g") != "apidiscovery.k8s.io" or \
                    params.get("as") != "APIGroupDiscoveryList":
                continue
            if params.get("v") == "v2" and minor >= 30:
                return "v2"
            if params.get("v") == "v2beta1" and 26 <= minor <= 32:
                return "v2beta1"
        return None

    def _manager(self, params):
        if params.get("fieldManager"):
            return params["fieldManager"]
        ua = self.headers.get("User-Agent", "unknown")
        return ua.split("/")[0] or "unknown"

    def _verb(self, method, rtype, ns, name, sub, params, body):
        store = self.server.emu.store
        ctype = self.headers.get("Content-Type", "")
        if method == "GET" and name is None:
            if params.get("watch") in ("1", "true"):
                return self._watch(rtype, ns, params)
            listed = store.list(rtype, ns, params)
            return self._send_read(rtype, listed, listing=True)
        if method == "GET":
            return self._send_read(rtype, store.get(rtype, ns, name, params))
        if rtype.virtual:
            if method != "POST" or name is not None:
                raise E.method_not_allowed()
            review = self._decode(body, ctype)
            if not isinstance(review, dict):
                raise E.bad_request("the request body is not a JSON object")
            review["status"] = {"allowed": True, "reason": "the emulator has no RBAC"}
            return self._send(201, review)
        if method == "POST" and name is None:
            if rtype.namespaced and ns is None:
                raise E.method_not_allowed()
            obj = store.create(rtype, ns, self._decode(body, ctype), params,
                               self._manager(params))
            return self._send(201, obj)
        if method == "PUT" and name is not None:
            obj = store.update(rtype, ns, name, self._decode(body, ctype), params,
                               self._manager(params), sub)
            return self._send(200, obj)
        if method == "PATCH" and name is not None:
            pt = ctype.split(";")[0].strip().lower()
            allowed = ["application/json-patch+json", "application/merge-patch+json",
                       "application/apply-patch+yaml"]
            if not rtype.crd:
                allowed.insert(2, "application/strategic-merge-patch+json")
            if pt not in allowed:
                raise E.unsupported_media(allowed)
            try:
                patch = json.loads(body) if pt != "application/apply-patch+yaml" \
                    else yaml.safe_load(body)
            except (ValueError, yaml.YAMLError) as exc:
                raise E.bad_request(f"error decoding patch: {exc}") from None
            obj, created = store.patch(rtype, ns, name, pt, patch, params,
                                       self._manager(params), sub)
            return self._send(201 if created else 200, obj)
        if method == "DELETE" and name is not None and not sub:
            return self._send(200, store.delete(rtype, ns, name,
                                                self._delete_options(body, params), params))
        if method == "DELETE" and name is None:
            if rtype.key == ("", "namespaces"):
                raise E.method_not_allowed()
            return self._send(200, store.delete_collection(
                rtype, ns, params, self._delete_options(body, params)))
        raise E.method_not_allowed()

    def _delete_options(self, body, params):
        if body:
            try:
                opts = json.loads(body)
            except ValueError:
                raise E.bad_request("the DeleteOptions body is not valid JSON") from None
            if not isinstance(opts, dict):
                raise E.bad_request("the DeleteOptions body is not an object")
            typed.check_delete_options(opts)
            return opts
        opts = {}
        if "propagationPolicy" in params:
            opts["propagationPolicy"] = params["propagationPolicy"]
        if "gracePeriodSeconds" in params:
            opts["gracePeriodSeconds"] = int(params["gracePeriodSeconds"])
        if params.get("orphanDependents") in ("true", "false"):
            opts["orphanDependents"] = params["orphanDependents"] == "true"
        return opts

    def _wants_table(self):
        accept = self.headers.get("Accept", "")
        first = accept.split(",")[0]
        return "as=Table" in first and "g=meta.k8s.io" in first

    def _wants_partial(self):
        return partial.requested(self.headers.get("Accept", ""))

    def _send_read(self, rtype, obj, listing=False):
        if self._wants_table():
            return self._send(200, tables.table(rtype, obj, listing))
        want = self._wants_partial()
        if want is not None:
            partial.check(want, rtype, listing)
            return self._send(200, partial.partial_list(obj) if listing else partial.partial(obj))
        return self._send(200, obj)

    def _openapi(self, rest):
        emu = self.server.emu
        reg = emu.store.registry
        with emu.store.lock:
            if not rest:
                return self._send(200, reg.openapi_root(emu.git_version()))
            if rest[0] == "api" and len(rest) == 2:
                doc = reg.openapi_gv_doc("", rest[1], emu.git_version())
            elif rest[0] == "apis" and len(rest) == 3:
                doc = reg.openapi_gv_doc(rest[1], rest[2], emu.git_version())
            else:
                doc = None
        if doc is None:
            raise E.path_not_found()
        return self._send(200, doc)

    # -- watch -------------------------------------------------------------------------

    def _write_chunk(self, data):
        emu = self.server.emu
        pieces = [data]
        if emu.settings.fragment_watch and len(data) > 1:
            pieces, rest = [], data
            while rest:
                n = random.randint(1, max(1, min(len(rest), 64)))
                pieces.append(rest[:n])
                rest = rest[n:]
        for piece in pieces:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()

    def _watch(self, rtype, ns, params):
        emu = self.server.emu
        store = emu.store
        if params.get("sendInitialEvents") is not None and not emu.settings.watch_list:
            raise E.invalid_list_options([(
                "FieldValueForbidden", "sendInitialEvents",
                "Forbidden: sendInitialEvents is forbidden for watch unless the WatchList "
                "feature gate is enabled")])
        info = {"resource": rtype.plural, "group": rtype.group, "namespace": ns,
                "params": params, "since": time.time()}
        if self._wants_partial() == "PartialObjectMetadataList":
            # kube-apiserver 1.37 answers 200 and sends no event (it cannot encode
            # one as a list); the emulator ends that stream at once
            return self._send_empty_watch()
        w, err = store.watch(rtype, ns, params, info)
        if err is not None and err.code == 410 and emu.settings.expired_mode == "http":
            raise err
        if w is None and err is None:       # timed out waiting for the resourceVersion
            return self._send_empty_watch()
        try:
            self._stream(rtype, params, w, err)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.close_connection = True
        finally:
            if w is not None:
                store.unwatch(w)

    def _send_empty_watch(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "0")
        self.end_headers()
        self.entry["code"] = 200

    def _stream(self, rtype, params, w, err):
        """Writes the watch response: headers at once, then events as they come."""
        emu = self.server.emu
        store = emu.store
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        for text in self.warnings:
            self.send_header("Warning", '299 - "' + text.replace('"', '\\"') + '"')
        self.end_headers()
        self.wfile.flush()
        self.entry["code"] = 200
        if err is not None:
            line = json.dumps({"type": "ERROR", "object": err.status()}).encode() + b"\n"
            self._write_chunk(line)
            self.wfile.write(b"0\r\n\r\n")
            return
        try:
            timeout = int(params.get("timeoutSeconds") or 0)
        except ValueError:
            timeout = 0
        if timeout <= 0:
            timeout = random.randint(1800, 3600)
        table = self._wants_table()
        metadata_only = self._wants_partial() is not None
        start = time.monotonic()
        deadline = start + timeout
        next_bookmark = start + emu.settings.bookmark_interval
        final_bookmark = w.bookmarks and timeout > 2
        while True:
            # a held watch writes nothing, not even its end, like a hung connection
            while not emu.settings.watch_gate.wait(1.0):
                pass
            now = time.monotonic()
            if now >= deadline:
                break
            if w.bookmarks and now >= next_bookmark:
                store.bookmark(w)
                next_bookmark = now + emu.settings.bookmark_interval
            if final_bookmark and deadline - now <= 2:
                store.bookmark(w)
                final_bookmark = False
            wake = deadline
            if w.bookmarks:
                wake = min(wake, next_bookmark)
            if final_bookmark:
                wake = min(wake, deadline - 2)
            items = w.take(max(0.005, wake - now))
            while items and not emu.settings.watch_gate.wait(1.0):
                pass
            out, end = [], None
            for item in items:
                if item[0] == "event":
                    obj = store.present(rtype, item[2])
                    if table:
                        obj = tables.table(rtype, obj, False)
                    elif metadata_only:
                        obj = partial.partial(obj)
                    out.append({"type": item[1], "object": obj})
                elif item[0] == "bookmark":
                    if not w.bookmarks:
                        continue
                    bm = {"kind": rtype.kind, "apiVersion": rtype.api_version,
                          "metadata": {"resourceVersion": str(item[1])}}
                    if item[2]:
                        bm["metadata"]["annotations"] = {"k8s.io/initial-events-end": "true"}
                    if metadata_only:
                        bm = partial.partial(bm)
                    out.append({"type": "BOOKMARK", "object": bm})
                elif item[0] == "error":
                    out.append({"type": "ERROR", "object": item[1]})
                    end = "eof"
                    break
                elif item[0] == "close":
                    end = item[1]
                    break
            if out:
                self._write_chunk(b"".join(json.dumps(e).encode() + b"\n" for e in out))
            if end == "abort":
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if end is not None:
                break
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # -- admin -------------------------------------------------------------------------

    def _admin(self, method, path, params, body):
        emu = self.server.emu
        store = emu.store
        try:
            args = json.loads(body) if body else {}
        except ValueError:
            raise E.bad_request("admin body must be JSON") from None
        op = path[len("/__admin/"):].strip("/")
        if op == "health":
            with store.lock:
                return self._send(200, {"resourceVersion": store.rv, "floor": store.floor,
                                        "watches": len(store.watchers), "pid": os.getpid()})
        if op == "watches":
            with store.lock:
                return self._send(200, {"items": [w.info for w in store.watchers]})
        if op == "requests":
            return self._send(200, {"items": emu.log.since(int(params.get("since") or 0))})
        if method != "POST":
            raise E.method_not_allowed()
        if op == "drop-watches":
            mode = args.get("mode", "abort")
            if mode not in ("abort", "eof"):
                raise E.bad_request("mode must be abort or eof")
            with store.lock:
                n = len(store.watchers)
                store.close_watches(("close", mode))
            return self._send(200, {"dropped": n})
        if op == "fail":
            rule = {"count": int(args.get("count", 1)), "code": int(args.get("code", 500)),
                    "retry_after": args.get("retry_after"), "method": args.get("method"),
                    "path": args.get("path"), "watch": args.get("watch"),
                    "selector": args.get("selector")}
            emu.faults.add(rule)
            return self._send(200, rule)
        if op == "clear-faults":
            emu.faults.clear()
            return self._send(200, {})
        if op == "expire":
            with store.lock:
                store.compact()
                n = 0
                if args.get("watches"):
                    n = len(store.watchers)
                    status = E.expired(f"too old resource version: {store.rv} "
                                       f"({store.rv + 1})").status()
                    store.close_watches(("error", status))
            return self._send(200, {"floor": store.floor, "watchesExpired": n})
        if op == "bookmark":
            with store.lock:
                for w in list(store.watchers):
                    store.bookmark(w, force=True)
            return self._send(200, {})
        if op == "config":
            for k, v in args.items():
                if k == "watch_gate" or (not hasattr(emu.settings, k) and
                                         k not in STORE_SETTINGS):
                    raise E.bad_request(f"unknown setting {k}")
                if k == "history_limit":
                    with store.lock:
                        store.history_limit = int(v)
                elif k == "break_generation":
                    with store.lock:
                        store.break_generation = bool(v)
                else:
                    setattr(emu.settings, k, v)
            return self._send(200, emu.settings.as_dict())
        if op == "objects":
            return self._send(200, self._bulk(args))
        if op == "crash":
            self._send(200, {})
            self.wfile.flush()
            emu.crash()
        if op == "shutdown":
            self._send(200, {})
            threading.Thread(target=emu.request_stop, daemon=True).start()
            return None
        raise E.path_not_found()

    def _bulk(self, args):
        """Creates many objects in one request (benchmarks, large fixtures)."""
        store = self.server.emu.store
        created = 0
        manager = args.get("fieldManager", "kubeapi-admin")
        for obj in args.get("items", []):
            av = obj.get("apiVersion", "")
            group, _, version = av.rpartition("/")
            with store.lock:
                rtype = next((t for t in store.registry.by_gv.get((group, version), {}).values()
                              if t.kind == obj.get("kind")), None)
            if rtype is None:
                raise E.bad_request(f"no resource for {av} {obj.get('kind')}")
            ns = meta(obj).get("namespace") or ("default" if rtype.namespaced else None)
            store.create(rtype, ns, obj, {}, manager)
            created += 1
        return {"created": created, "resourceVersion": store.rv}


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ssl.SSLError, ConnectionError, socket.timeout, OSError)):
            return
        super().handle_error(request, client_address)


class Server6(Server):
    address_family = socket.AF_INET6
