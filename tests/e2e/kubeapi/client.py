"""A small Kubernetes client for the tests (standard library only).

It speaks to the emulator (or any API server) with a bearer token over TLS:
paths are built from (apiVersion, plural, namespace, name), errors raise
KubeError carrying the Status.  One persistent connection per thread.
"""
import http.client
import json
import socket
import ssl
import threading
from urllib.parse import urlencode, urlsplit


class KubeError(Exception):
    def __init__(self, code, status, headers=None):
        self.code = code
        self.status = status if isinstance(status, dict) else {"message": str(status)}
        self.reason = self.status.get("reason")
        self.headers = headers or {}
        super().__init__(f"{code} {self.reason}: {self.status.get('message')}")


class WatchBroken(ConnectionError):
    """The server cut a watch in the middle of its chunked body (no clean end)."""


def resource_path(api_version, plural, namespace=None, name=None, subresource=None):
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{plural}"
    if name:
        base += f"/{name}"
    if subresource:
        base += f"/{subresource}"
    return base


class KubeClient:
    def __init__(self, url, token=None, ca_file=None, user_agent="kubeapi-test-client/1.0",
                 timeout=30):
        u = urlsplit(url)
        self.host, self.port = u.hostname, u.port or 443
        self.token = token
        self.ctx = ssl.create_default_context(cafile=ca_file)
        self.user_agent = user_agent
        self.timeout = timeout
        self.local = threading.local()

    def _conn(self, fresh=False):
        c = getattr(self.local, "conn", None)
        if c is None or fresh:
            c = http.client.HTTPSConnection(self.host, self.port, context=self.ctx,
                                            timeout=self.timeout)
            c.connect()
            c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.local.conn = c
        return c

    def _headers(self, content_type=None, accept="application/json"):
        h = {"Accept": accept, "User-Agent": self.user_agent}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        if content_type:
            h["Content-Type"] = content_type
        return h

    def raw(self, method, path, body=None, content_type=None, params=None, headers=None):
        """(status, headers, parsed body or text) without raising on HTTP errors."""
        if params:
            path += "?" + urlencode({k: v for k, v in params.items() if v is not None})
        data = None
        if body is not None:
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
            if isinstance(data, str):
                data = data.encode()
        h = self._headers(content_type or ("application/json" if data is not None else None))
        h.update(headers or {})
        for attempt in (0, 1):
            conn = self._conn(fresh=attempt > 0)
            try:
                conn.request(method, path, body=data, headers=h)
                resp = conn.getresponse()
                text = resp.read()
                break
            except (http.client.RemoteDisconnected, ConnectionError, BrokenPipeError,
                    http.client.CannotSendRequest, http.client.ResponseNotReady,
                    ssl.SSLEOFError):   # a kept-alive connection cut (a proxy's drop_all)
                conn.close()
                self.local.conn = None
                if attempt:
                    raise
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = text.decode(errors="replace")
        return resp.status, dict(resp.getheaders()), parsed

    def request(self, method, path, body=None, content_type=None, params=None):
        code, headers, parsed = self.raw(method, path, body, content_type, params)
        if code >= 400:
            raise KubeError(code, parsed, headers)
        return parsed

    # -- typed helpers ------------------------------------------------------------------

    def get(self, api_version, plural, name, namespace=None, subresource=None):
        return self.request("GET", resource_path(api_version, plural, namespace, name,
                                                 subresource))

    def list(self, api_version, plural, namespace=None, **params):
        return self.request("GET", resource_path(api_version, plural, namespace), params=params)

    def create(self, obj, plural, namespace=None, **params):
        ns = namespace or (obj.get("metadata") or {}).get("namespace")
        return self.request("POST", resource_path(obj["apiVersion"], plural, ns), obj,
                            params=params)

    def update(self, obj, plural, subresource=None, **params):
        m = obj["metadata"]
        return self.request("PUT", resource_path(obj["apiVersion"], plural, m.get("namespace"),
                                                 m["name"], subresource), obj, params=params)

    def patch(self, api_version, plural, name, patch, namespace=None, patch_type="merge",
              subresource=None, **params):
        ctype = {"merge": "application/merge-patch+json",
                 "json": "application/json-patch+json",
                 "strategic": "application/strategic-merge-patch+json",
                 "apply": "application/apply-patch+yaml"}[patch_type]
        return self.request("PATCH", resource_path(api_version, plural, namespace, name,
                                                   subresource), patch, ctype, params=params)

    def apply(self, obj, plural, field_manager="test", force=True, subresource=None):
        m = obj["metadata"]
        return self.patch(obj["apiVersion"], plural, m["name"], obj, m.get("namespace"),
                          "apply", subresource, fieldManager=field_manager,
                          force="true" if force else "false")

    def delete(self, api_version, plural, name, namespace=None, options=None):
        return self.request("DELETE", resource_path(api_version, plural, namespace, name),
                            options)

    def watch(self, api_version, plural, namespace=None, timeout=30, **params):
        """Yields watch events (dicts) until the server ends the stream cleanly; raises
        WatchBroken when the connection is cut instead."""
        params = dict(params, watch="true")
        path = resource_path(api_version, plural, namespace) + "?" + urlencode(params)
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx,
                                           timeout=timeout)
        try:
            conn.request("GET", path, headers=self._headers())
            resp = conn.getresponse()
            if resp.status != 200:
                body = resp.read()
                raise KubeError(resp.status, json.loads(body) if body else None)
            buf = b""
            while True:
                try:
                    chunk = resp.read1(65536)
                except http.client.IncompleteRead as exc:
                    raise WatchBroken("the watch body was cut before its end") from exc
                if not chunk:
                    return
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        finally:
            conn.close()
