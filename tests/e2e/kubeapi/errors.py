"""metav1.Status objects and the API error type the emulator raises.

Every failure leaves the server as a Status body with the reason, message
and details kube-apiserver would use (apimachinery/pkg/api/errors), so the
client under test parses exactly what it will meet in a real cluster.
"""


class ApiError(Exception):
    """An error answered as a metav1.Status; headers are extra HTTP headers."""

    def __init__(self, code, reason, message, details=None, headers=None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self):
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "message": self.message, "code": self.code}
        if self.reason:         # the storage layer's plain errors come without one
            body["reason"] = self.reason
        if self.details is not None:
            body["details"] = self.details
        return body


def qualified(rtype):
    """'widgets.example.com' or 'configmaps': how errors name a resource."""
    return f"{rtype.plural}.{rtype.group}" if rtype.group else rtype.plural


def qualified_kind(rtype):
    return f"{rtype.kind}.{rtype.group}" if rtype.group else rtype.kind


def _details(rtype, name, kind=None):
    d = {}
    if name:
        d["name"] = name
    if rtype.group:
        d["group"] = rtype.group
    d["kind"] = kind or rtype.plural
    return d


def not_found(rtype, name):
    return ApiError(404, "NotFound", f'{qualified(rtype)} "{name}" not found',
                    _details(rtype, name))


def namespace_not_found(ns):
    return ApiError(404, "NotFound", f'namespaces "{ns}" not found',
                    {"name": ns, "kind": "namespaces"})


def already_exists(rtype, name):
    return ApiError(409, "AlreadyExists", f'{qualified(rtype)} "{name}" already exists',
                    _details(rtype, name))


def conflict(rtype, name, why="the object has been modified; please apply your changes "
             "to the latest version and try again", by_kind=False):
    """409 Conflict; precondition failures name the kind (Stack.pulumi.com), stale
    updates the resource (stacks.pulumi.com)."""
    what = qualified_kind(rtype) if by_kind else qualified(rtype)
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {what} "{name}": {why}',
                    _details(rtype, name, kind=rtype.kind if by_kind else None))


def invalid(rtype, name, causes, by_resource=False):
    """causes: list of (reason, field, message) as field.Error renders them.  Most
    validation names the kind (Stack.pulumi.com); the update precondition names the
    resource (stacks.pulumi.com)."""
    text = ", ".join(f"{f}: {m}" if f else m for _, f, m in causes)
    if len(causes) > 1:
        text = "[" + text + "]"
    details = _details(rtype, name, kind=None if by_resource else rtype.kind)
    details["causes"] = [{"reason": r, "message": m, "field": f} for r, f, m in causes]
    what = qualified(rtype) if by_resource else qualified_kind(rtype)
    return ApiError(422, "Invalid", f'{what} "{name}" is invalid: {text}', details)


def invalid_list_options(causes, kind="ListOptions"):
    """422 for bad list/watch (or PatchOptions) parameters, as the handlers report them."""
    text = ", ".join(f"{f}: {m}" for _, f, m in causes)
    return ApiError(422, "Invalid", f'{kind}.meta.k8s.io "" is invalid: {text}',
                    {"group": "meta.k8s.io", "kind": kind,
                     "causes": [{"reason": r, "message": m, "field": f} for r, f, m in causes]})


def bad_request(message):
    return ApiError(400, "BadRequest", message)


def forbidden_terminating(rtype, name, ns):
    return ApiError(403, "Forbidden",
                    f'{qualified(rtype)} "{name}" is forbidden: unable to create new content '
                    f'in namespace {ns} because it is being terminated',
                    dict(_details(rtype, name), causes=[{
                        "reason": "NamespaceTerminating",
                        "message": f"namespace {ns} is being terminated",
                        "field": "metadata.namespace"}]))


def expired(message):
    return ApiError(410, "Expired", message)


def unsupported_media(types):
    return ApiError(415, "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media types "
                    "include: " + ", ".join(types))


def method_not_allowed():
    return ApiError(405, "MethodNotAllowed",
                    "the server does not allow this method on the requested resource", {})


class PlainNotFound(Exception):
    """A path no API handler serves: kube-apiserver's mux answers "404 page not found"
    as text/plain, not a Status (unknown groups, CRD groups' unknown resources)."""


def path_not_found():
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def unauthorized():
    return ApiError(401, "Unauthorized", "Unauthorized")


_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def forbidden_anonymous(method, path, params):
    """RBAC's 403 for system:anonymous outside the public paths: a path that names a
    resource is reported with its verb, resource, group and scope; any other path with
    the lower-cased method (handlers/responsewriters forbiddenMessage)."""
    user = 'User "system:anonymous"'
    parts = [p for p in path.split("/") if p]
    head = 2 if parts[:1] == ["api"] else 3 if parts[:1] == ["apis"] else None
    rest = parts[head:] if head else []
    if not rest:
        return ApiError(403, "Forbidden",
                        f'forbidden: {user} cannot {method.lower()} path "{path}"', {})
    group = parts[1] if parts[0] == "apis" else ""
    ns = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        ns, rest = rest[1], rest[2:]
    resource, name = rest[0], (rest[1] if len(rest) > 1 else "")
    if len(rest) > 2:
        resource += "/" + rest[2]
    if method == "GET":
        verb = "get" if name else ("watch" if params.get("watch") in ("1", "true")
                                   else "list")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = _VERBS.get(method, method.lower())
    scope = f'in the namespace "{ns}"' if ns else "at the cluster scope"
    why = f'{user} cannot {verb} resource "{resource}" in API group "{group}" {scope}'
    qualified_res = f"{rest[0]}.{group}" if group else rest[0]
    details = {"name": name} if name else {}
    if group:
        details["group"] = group
    details["kind"] = rest[0]
    subject = f'{qualified_res} "{name}"' if name else qualified_res
    return ApiError(403, "Forbidden", f"{subject} is forbidden: {why}", details)


def too_large_rv(requested, current):
    return ApiError(504, "Timeout",
                    f"Timeout: Too large resource version: {requested}, current: {current}",
                    {"causes": [{"reason": "ResourceVersionTooLarge",
                                 "message": "Too large resource version"}],
                     "retryAfterSeconds": 1})


def success(rtype, name, uid):
    d = _details(rtype, name)
    d["uid"] = uid
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": d}


def clone(value):
    """A deep copy of JSON data; several times faster than copy.deepcopy."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) for v in value]
    return value
