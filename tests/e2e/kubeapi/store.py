"""The object store: resourceVersions, history, watchers and the write rules.

One global integer resourceVersion counts every write, as etcd's revision
does; a bounded history of events lets a watch resume from an old
resourceVersion and lets a paginated list read a consistent snapshot.  Once
an event falls out of the history (or the admin endpoint compacts it), asking
for a resourceVersion at or before it gives 410 Expired.

The write rules follow the generic registry and the CRD strategies of
kube-apiserver (reference/kube-api.md §2): generation, the status
subresource, optimistic concurrency, finalizers and deletionTimestamp, field
ownership, and the controllers a bare apiserver relies on but which every
cluster runs (namespace and CRD cleanup, a background garbage collector,
CRD establishment), here done synchronously.

Stored objects are never mutated: every write stores a fresh dict, so
watchers and history share them without copying.
"""
import base64
import binascii
import bisect
import collections
import copy

import json
import random
import re
import threading
import time
import uuid

from . import apply as ssa
from . import errors as E
from . import pods
from . import typed
from .errors import clone
from .patches import (PatchFailed, PatchMalformed, json_patch, merge_patch,
                      strategic_merge)
from .registry import Registry
from .schema import prune_builtin, prune_custom_resource, rule_compile_errors
from .selectors import FieldSelector, LabelSelector

POD_KEY = ("", "pods")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                            r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
# apimachinery's validation messages, word for word
DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
QUALIFIED_NAME_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
CONFIG_KEY_MSG = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
    "'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
    "'[-._a-zA-Z0-9]+')")
GENERATE_CHARS = "bcdfghjklmnpqrstvwxz2456789"
CRD_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
CRD_KEY = ("apiextensions.k8s.io", "customresourcedefinitions")
NS_KEY = ("", "namespaces")
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
BLOCK_TIMEOUT = 3.0     # how long a read waits for a resourceVersion newer than the store


_B64 = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")


def _base64_error_offset(text):
    """Where Go's base64.StdEncoding reports bad input in text, or None when it decodes:
    at a character outside the alphabet, else at the start of the incomplete quantum."""
    for i, ch in enumerate(text):
        if ch not in _B64 and ch != "=":
            return i
    try:
        base64.b64decode(text, validate=True)
        return None
    except binascii.Error:
        return len(text) - (len(text) % 4 or 4)


def copy_with_kind(rtype, kind):
    """The same resource type under another kind (to name a wrong kind in an error)."""
    other = copy.copy(rtype)
    other.kind = kind
    return other


def now_rfc3339():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def meta(obj):
    return obj.get("metadata") or {}


class Event:
    __slots__ = ("rv", "type", "key", "obj", "old")

    def __init__(self, rv, etype, key, obj, old):
        self.rv, self.type, self.key, self.obj, self.old = rv, etype, key, obj, old

    def to_json(self):
        return {"rv": self.rv, "type": self.type, "key": list(self.key), "obj": self.obj,
                "old": self.old}


class Watcher:
    """One open watch: the server thread drains `items`, the store fills it."""

    def __init__(self, rtype, namespace, labels, fields, bookmarks, info):
        self.rtype = rtype
        self.key = rtype.key
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.bookmarks = bookmarks
        self.info = info
        self.items = collections.deque()
        self.cond = threading.Condition()
        self.queued_rv = 0          # the resourceVersion of the last event queued

    def push(self, item):
        with self.cond:
            if item[0] == "event":
                self.queued_rv = max(self.queued_rv,
                                     int(meta(item[2]).get("resourceVersion") or 0))
            elif item[0] == "bookmark":
                self.queued_rv = max(self.queued_rv, item[1])
            self.items.append(item)
            self.cond.notify()

    def take(self, timeout):
        """All queued items, waiting up to timeout for the first."""
        with self.cond:
            if not self.items:
                self.cond.wait(timeout)
            out = list(self.items)
            self.items.clear()
            return out

    def matches(self, obj):
        m = meta(obj)
        if self.namespace and m.get("namespace") != self.namespace:
            return False
        return self.labels.match(m.get("labels")) and self.fields.match(obj)

    def offer(self, ev):
        if ev.type == "DELETED":
            if self.matches(ev.obj):
                self.push(("event", "DELETED", ev.obj))
            return
        new_match = self.matches(ev.obj)
        old_match = ev.old is not None and self.matches(ev.old)
        if new_match and old_match:
            self.push(("event", "MODIFIED", ev.obj))
        elif new_match:
            self.push(("event", "ADDED", ev.obj))
        elif old_match:
            gone = clone(ev.old)
            gone["metadata"]["resourceVersion"] = str(ev.rv)
            self.push(("event", "DELETED", gone))


class Store:
    def __init__(self, history_limit=10000):
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.registry = Registry()
        self.rv = 0
        self.objects = {}           # (group, plural) -> {(ns, name): obj}
        self.history = collections.deque()
        self.history_limit = history_limit
        # A deliberate bug, for proving that the comparisons with the real apiserver can
        # fail (tests/e2e/test_real_conformance_selfcheck.py): never bump generation on a
        # spec change.  Set through /__admin/config {"break_generation": true}; never on
        # otherwise.
        self.break_generation = False
        self.floor = 0              # oldest resourceVersion a watch or snapshot may start at
        self.watch_floor = 0        # where the watch cache starts (the last start-up)
        self.watchers = set()
        self.owners = {}            # owner uid -> set of (key, ns, name) of dependents
        self.finalizing = set()     # namespaces and CRDs whose contents are being deleted
        self.key_rv = {}            # (group, plural) -> resourceVersion of its last change
        self.sorted_cache = {}      # (group, plural) -> (key_rv, sorted keys, idents)
        self.closing = False        # set on shutdown: no new watches
        self.warnings = threading.local()

    # -- bootstrap and persistence ----------------------------------------------------

    def bootstrap(self):
        ns_type = self.registry.lookup("", "v1", "namespaces")
        for name in INITIAL_NAMESPACES:
            self.create(ns_type, None, {"apiVersion": "v1", "kind": "Namespace",
                                        "metadata": {"name": name}}, {}, "kube-apiserver")

    def dump(self):
        with self.lock:
            return {"rv": self.rv, "floor": self.floor,
                    "objects": [{"key": list(k), "items": list(v.values())}
                                for k, v in self.objects.items()],
                    "history": [e.to_json() for e in self.history]}

    def load(self, state, keep_watch_history=False):
        """Loads a saved state.  Like kube-apiserver's watch cache, which starts empty at
        the current revision, watches from before the restart then get 410 Expired unless
        keep_watch_history; lists and continue tokens still read the saved history (etcd
        keeps it)."""
        with self.lock:
            self.rv = state["rv"]
            self.floor = state["floor"]
            self.watch_floor = self.floor if keep_watch_history else self.rv
            for entry in state["objects"]:
                key = tuple(entry["key"])
                bucket = self.objects.setdefault(key, {})
                for obj in entry["items"]:
                    bucket[(meta(obj).get("namespace", ""), meta(obj)["name"])] = obj
                    self._index_owners(key, None, obj)
            for e in state["history"]:
                self.history.append(Event(e["rv"], e["type"], tuple(e["key"]), e["obj"],
                                          e["old"]))
            for crd in self.objects.get(CRD_KEY, {}).values():
                self.registry.set_crd(meta(crd)["name"], crd)

    # -- helpers ------------------------------------------------------------------------

    def warn(self, text):
        lst = getattr(self.warnings, "items", None)
        if lst is not None:
            lst.append(text)

    def present(self, rtype, obj):
        """The stored object as seen at the request's version."""
        if rtype.view is not None:
            return rtype.view.from_storage(obj)
        if obj.get("apiVersion") == rtype.api_version:
            return obj
        out = dict(obj)
        out["apiVersion"] = rtype.api_version
        return out

    def _bucket(self, key):
        return self.objects.setdefault(key, {})

    def _get(self, rtype, ns, name):
        return self.objects.get(rtype.key, {}).get((ns or "", name))

    def _wait_fresh(self, want, limit=BLOCK_TIMEOUT):
        """Blocks until the store reaches resourceVersion `want` (504 after 3 s)."""
        deadline = time.monotonic() + min(limit, BLOCK_TIMEOUT)
        while self.rv < want:
            left = deadline - time.monotonic()
            if left <= 0:
                raise E.too_large_rv(want, self.rv)
            self.changed.wait(left)

    def _parse_rv(self, text, what="resourceVersion"):
        try:
            v = int(text)
            if v < 0:
                raise ValueError
            return v
        except ValueError:
            raise E.bad_request(f'invalid resource version: {what}: Invalid value: "{text}": '
                                f'strconv.ParseUint: parsing "{text}": invalid syntax') from None

    def _commit(self, etype, key, obj, old):
        self.rv += 1
        m = dict(meta(obj))
        m["resourceVersion"] = str(self.rv)
        obj = dict(obj)
        obj["metadata"] = m
        ident = (m.get("namespace", ""), m["name"])
        if etype == "DELETED":
            self._bucket(key).pop(ident, None)
        else:
            self._bucket(key)[ident] = obj
        self._index_owners(key, old, obj if etype != "DELETED" else None)
        self.key_rv[key] = self.rv
        ev = Event(self.rv, etype, key, obj, old)
        self.history.append(ev)
        while len(self.history) > self.history_limit:
            self.floor = self.history.popleft().rv
        for w in list(self.watchers):
            if w.key == key:
                w.offer(ev)
        self.changed.notify_all()
        return obj

    def _index_owners(self, key, old, new):
        for obj, add in ((old, False), (new, True)):
            if obj is None:
                continue
            ident = (key, meta(obj).get("namespace", ""), meta(obj)["name"])
            for ref in meta(obj).get("ownerReferences") or []:
                deps = self.owners.setdefault(ref.get("uid"), set())
                if add:
                    deps.add(ident)
                else:
                    deps.discard(ident)

    def _uid_exists(self, uid):
        for bucket in self.objects.values():
            for obj in bucket.values():
                if meta(obj).get("uid") == uid:
                    return True
        return False

    def _check_gvk(self, rtype, body, where="data"):
        """apiVersion and kind as the decoders check them: typed kinds default a missing
        kind from the URL, custom resources (unstructured) need it."""
        if not isinstance(body, dict):
            raise E.bad_request("the request body is not a JSON object")
        av = body.get("apiVersion")
        kind = body.get("kind")
        if not kind and rtype.crd:
            text = json.dumps(body)
            raise E.bad_request(f"the object provided is unrecognized (must be of type "
                                f"{rtype.kind}): Object 'Kind' is missing in '{text}' "
                                f"({text[:32]} ...)")
        if av and av != rtype.api_version:
            raise E.bad_request(f"the API version in the {where} ({av}) does not match the "
                                f"expected API version ({rtype.api_version})")
        if kind and kind != rtype.kind:
            if rtype.crd:
                other = copy_with_kind(rtype, kind)
                raise E.invalid(other, (body.get("metadata") or {}).get("name", ""), [(
                    "FieldValueInvalid", "kind",
                    f'Invalid value: "{kind}": must be {rtype.kind}')])
            raise E.bad_request(f'{kind} in version "{rtype.version}" cannot be handled as a '
                                f"{rtype.kind}: converting ({rtype.version}.{kind}) to "
                                f"(core.{rtype.kind}): unknown conversion")
        typed.check_object(rtype, body)

    def _validate_meta(self, rtype, obj):
        m = meta(obj)
        name = m.get("name", "")
        causes = []
        if rtype.key == NS_KEY:
            if len(name) > 63 or not DNS_LABEL.match(name):
                causes.append(("FieldValueInvalid", "metadata.name",
                               f'Invalid value: "{name}": {DNS1123_LABEL_MSG}'))
        elif rtype.key != ("", "events"):
            if len(name) > 253 or not DNS_SUBDOMAIN.match(name):
                causes.append(("FieldValueInvalid", "metadata.name",
                               f'Invalid value: "{name}": {DNS1123_SUBDOMAIN_MSG}'))
        for k, v in (m.get("labels") or {}).items():
            if not QUALIFIED_NAME.match(k) or len(k.split("/")[-1]) > 63:
                causes.append(("FieldValueInvalid", "metadata.labels",
                               f'Invalid value: "{k}": {QUALIFIED_NAME_MSG}'))
            if len(v) > 63 or not LABEL_VALUE.match(v):
                causes.append(("FieldValueInvalid", "metadata.labels",
                               f'Invalid value: "{v}": {LABEL_VALUE_MSG}'))
        annotations = m.get("annotations") or {}
        for k in annotations:
            if not QUALIFIED_NAME.match(k):
                causes.append(("FieldValueInvalid", "metadata.annotations",
                               f'Invalid value: "{k}": {QUALIFIED_NAME_MSG}'))
        if sum(len(k) + len(v) for k, v in annotations.items()) > 256 * 1024:
            causes.append(("FieldValueTooLong", "metadata.annotations",
                           "Too long: must have at most 262144 bytes"))
        for i, ref in enumerate(m.get("ownerReferences") or []):
            for f in ("apiVersion", "kind", "name", "uid"):
                if not isinstance(ref, dict) or not ref.get(f):
                    causes.append(("FieldValueRequired",
                                   f"metadata.ownerReferences[{i}].{f}", "Required value"))
        for f in m.get("finalizers") or []:
            if not QUALIFIED_NAME.match(f):
                causes.append(("FieldValueInvalid", "metadata.finalizers",
                               f'Invalid value: "{f}": {QUALIFIED_NAME_MSG}'))
            elif rtype.crd and "/" not in f:
                self.warn(f'metadata.finalizers: "{f}": prefer a domain-qualified finalizer '
                          "name to avoid accidental conflicts with other finalizer writers")
        causes += self._validate_kind(rtype, obj)
        if causes:
            raise E.invalid(rtype, name, causes)

    @staticmethod
    def _validate_kind(rtype, obj):
        """The per-kind rules of built-ins a controller is likely to meet."""
        causes = []
        if rtype.key in (("", "secrets"), ("", "configmaps")):
            size = 0
            for field in ("data", "binaryData", "stringData"):
                for k, v in (obj.get(field) or {}).items():
                    if not CONFIG_KEY.match(k) or len(k) > 253:
                        causes.append(("FieldValueInvalid", f"{field}[{k}]",
                                       f'Invalid value: "{k}": {CONFIG_KEY_MSG}'))
                    size += len(v) * 3 // 4 if field != "stringData" and (
                        rtype.key == ("", "secrets") or field == "binaryData") else len(v)
            if size > 1024 * 1024:
                causes.append(("FieldValueTooLong",
                               "data" if rtype.key == ("", "secrets") else "[]",
                               "Too long: may not be more than 1048576 bytes"))
        return causes

    @staticmethod
    def _validate_event(obj, strict):
        """Event creation rules (pkg/apis/core/validation/events.go), on the core/v1 form:
        the legacy rules always, the strict ones for events.k8s.io."""
        causes = []
        ns = meta(obj).get("namespace") or ""
        ins = (obj.get("involvedObject") or {}).get("namespace") or ""
        mismatch = ("FieldValueInvalid", "involvedObject.namespace",
                    f'Invalid value: "{ins}": does not match event.namespace')
        if not obj.get("eventTime"):
            if (not ins and ns not in ("", "default")) or (ins and ins != ns):
                causes.append(mismatch)
        else:
            if not ins and ns not in ("default", "kube-system"):
                causes.append(mismatch)
            # the cause names the field as the request's version does (the other fields
            # keep their core/v1 names even for events.k8s.io)
            rc_field = "reportingController" if strict else "reportingComponent"
            rc = obj.get("reportingComponent") or ""
            if not rc:
                causes += [("FieldValueRequired", rc_field, "Required value"),
                           ("FieldValueInvalid", rc_field,
                            'Invalid value: "": name part must be non-empty')]
            if not QUALIFIED_NAME.match(rc):
                causes.append(("FieldValueInvalid", rc_field,
                               f'Invalid value: "{rc}": {QUALIFIED_NAME_MSG}'))
            for f in ("reportingInstance", "action", "reason"):
                value = obj.get(f) or ""
                if not value:
                    causes.append(("FieldValueRequired", f, "Required value"))
                elif len(value) > 128:
                    causes.append(("FieldValueInvalid", f, f'Invalid value: "{value}": can '
                                   "have at most 128 characters"))
            if len(obj.get("message") or "") > 1024:
                causes.append(("FieldValueInvalid", "message", 'Invalid value: "": can have '
                               "at most 1024 characters"))
        if not strict:
            return causes
        series = obj.get("series")
        if series is not None and ((series.get("count") or 0) < 2 or
                                   not series.get("lastObservedTime")):
            causes.append(("FieldValueInvalid", "series.count",
                           f'Invalid value: "{series.get("count")}": should be at least 2'))
        if not obj.get("eventTime"):
            causes.append(("FieldValueRequired", "eventTime", "Required value"))
        if obj.get("type") not in ("Normal", "Warning"):
            causes.append(("FieldValueInvalid", "type",
                           f'Invalid value: "": has invalid value: {obj.get("type", "")}'))
        for f in ("firstTimestamp", "lastTimestamp", "count"):
            if obj.get(f):
                causes.append(("FieldValueInvalid", f, 'Invalid value: "": needs to be unset'))
        source = obj.get("source") or {}
        if source.get("component") or source.get("host"):
            causes.append(("FieldValueInvalid", "source", 'Invalid value: "": needs to be unset'))
        return causes

    def _normalize(self, rtype, obj, params, creating):
        """Pruning, type defaults and validation; returns the object to store."""
        validation = params.get("fieldValidation", "Warn")
        errs = []
        if rtype.crd:
            obj, unknown, errs = prune_custom_resource(obj, rtype.schema, rtype.status)
        else:
            obj, unknown = prune_builtin(obj, rtype.top_fields)
        if unknown:
            # strict decoding fails before the schema's validation is reached
            if validation == "Strict":
                raise E.bad_request(f'{rtype.kind} in version "{rtype.version}" cannot be '
                                    f"handled as a {rtype.kind}: strict decoding error: " +
                                    ", ".join(f'unknown field "{u}"' for u in unknown))
            if validation == "Warn":
                for u in unknown:
                    self.warn(f'unknown field "{u}"')
        if errs:
            raise E.invalid(rtype, meta(obj).get("name", ""), errs)
        if rtype.key == ("", "secrets"):
            obj = self._normalize_secret(rtype, obj)
        elif rtype.key == NS_KEY:
            obj = clone(obj)
            spec = obj.setdefault("spec", {})
            spec.setdefault("finalizers", ["kubernetes"])
            labels = obj["metadata"].setdefault("labels", {})
            labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
            if creating:
                obj["status"] = {"phase": "Active"}
        elif rtype.key == CRD_KEY:
            obj = self._normalize_crd(rtype, obj)
        return obj

    def _normalize_secret(self, rtype, obj):
        obj = clone(obj)
        obj.setdefault("type", "Opaque")
        data = obj.get("data") or {}
        for v in data.values():
            bad = _base64_error_offset(v or "")
            if bad is not None:
                raise E.bad_request('Secret in version "v1" cannot be handled as a Secret: '
                                    f"illegal base64 data at input byte {bad}")
        for k, v in (obj.pop("stringData", None) or {}).items():
            data[k] = base64.b64encode(str(v).encode()).decode()
        if data:
            obj["data"] = data
        return obj

    def _normalize_crd(self, rtype, obj):
        obj = clone(obj)
        spec = obj.get("spec") or {}
        names = spec.get("names") or {}
        name = meta(obj).get("name", "")
        causes = []
        if not spec.get("group"):
            causes.append(("FieldValueRequired", "spec.group", "Required value"))
        if not names.get("plural") or not names.get("kind"):
            causes.append(("FieldValueRequired", "spec.names", "Required value: plural and kind"))
        if spec.get("scope") not in ("Namespaced", "Cluster"):
            causes.append(("FieldValueNotSupported", "spec.scope",
                           f'Unsupported value: "{spec.get("scope", "")}": supported values: '
                           '"Cluster", "Namespaced"'))
        if name != f"{names.get('plural')}.{spec.get('group')}":
            causes.append(("FieldValueInvalid", "metadata.name",
                           f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group'))
        versions = spec.get("versions") or []
        if sum(1 for v in versions if v.get("storage")) != 1:
            causes.append(("FieldValueInvalid", "spec.versions",
                           "Invalid value: must have exactly one version marked as storage "
                           "version"))
        for i, v in enumerate(versions):
            schema = (v.get("schema") or {}).get("openAPIV3Schema")
            # the real server names spec.validation, whichever version holds the rule
            for field, message in rule_compile_errors(schema):
                causes.append(("FieldValueInvalid", field, f"Invalid value: {message}"))
        if causes:
            raise E.invalid(rtype, name, causes)
        names.setdefault("singular", names["kind"].lower())
        names.setdefault("listKind", names["kind"] + "List")
        return obj

    def _crd_status(self, crd, old_status):
        spec = crd["spec"]
        stamp = now_rfc3339()
        storage = next(v["name"] for v in spec["versions"] if v.get("storage"))
        stored = list((old_status or {}).get("storedVersions") or [])
        if storage not in stored:
            stored.append(storage)
        conds = [{"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                  "message": "no conflicts found", "lastTransitionTime": stamp},
                 {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                  "message": "the initial names have been accepted",
                  "lastTransitionTime": stamp}]
        if old_status and old_status.get("conditions"):
            conds = old_status["conditions"]
        return {"acceptedNames": spec["names"], "conditions": conds, "storedVersions": stored}

    def _spec_changed(self, rtype, old, new):
        skip = {"metadata"} | ({"status"} if rtype.status else set())
        a = {k: v for k, v in old.items() if k not in skip | {"apiVersion", "kind"}}
        b = {k: v for k, v in new.items() if k not in skip | {"apiVersion", "kind"}}
        return a != b

    # -- reads --------------------------------------------------------------------------

    def get(self, rtype, ns, name, params):
        with self.lock:
            rv = params.get("resourceVersion")
            if rv not in (None, "", "0"):
                self._wait_fresh(self._parse_rv(rv))
            obj = self._get(rtype, ns, name)
            if obj is None:
                raise E.not_found(rtype, name)
            return self.present(rtype, obj)

    def _selectors(self, rtype, params):
        labels = LabelSelector(params.get("labelSelector"))
        fields = FieldSelector(params.get("fieldSelector"), rtype.field_labels,
                               rtype.field_aliases)
        return labels, fields

    def _state_at(self, key, rv):
        cur = dict(self.objects.get(key, {}))
        for ev in reversed(self.history):
            if ev.rv <= rv:
                break
            if ev.key != key:
                continue
            ident = (meta(ev.obj).get("namespace", ""), meta(ev.obj)["name"])
            if ev.type == "ADDED":
                cur.pop(ident, None)
            else:
                cur[ident] = ev.old
        return cur

    @staticmethod
    def _continue_token(rv, start):
        raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start + "\x00"})
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    def _decode_continue(self, token):
        """(resourceVersion, start key) of a continue token, or 400 worded as
        apiserver/pkg/storage/continue.go words it."""
        invalid = "invalid continue token: continue key is not valid"
        bad_rv = f"{invalid}: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
        alphabet = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        bad = next((i for i, ch in enumerate(token) if ch not in alphabet), None)
        if bad is None and len(token) % 4 == 1:
            bad = len(token) - 1
        if bad is not None:
            raise E.bad_request(f"{bad_rv}: illegal base64 data at input byte {bad}")
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            first = chr(raw[0]) if raw else ""
            raise E.bad_request(f"{invalid}: invalid character '{first}' looking for "
                                "beginning of value") from None
        if not isinstance(data, dict) or data.get("v") != "meta.k8s.io/v1":
            version = data.get("v") if isinstance(data, dict) else None
            raise E.bad_request("invalid continue token: continue key is not valid: got "
                                f"invalid encoded version {version or ''}".rstrip())
        try:
            rv, start = int(data["rv"]), data["start"]
        except (KeyError, TypeError, ValueError):
            raise E.bad_request(bad_rv) from None
        if rv == 0:
            raise E.bad_request(bad_rv)
        if not start:
            raise E.bad_request("invalid continue token: continue key is not valid: the "
                                "encoded start key is empty")
        return rv, start.rstrip("\x00")

    @staticmethod
    def _check_list_options(params):
        """ListOptions validation (apimachinery internalversion/validation)."""
        rv_text = params.get("resourceVersion")
        match = params.get("resourceVersionMatch")
        if match not in (None, "", "Exact", "NotOlderThan"):
            raise E.invalid_list_options([(
                "FieldValueNotSupported", "resourceVersionMatch",
                f'Unsupported value: "{match}": supported values: "Exact", "NotOlderThan"')])
        if match == "Exact" and rv_text == "0":
            raise E.invalid_list_options([(
                "FieldValueForbidden", "resourceVersionMatch",
                'Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion '
                '"0"')])
        if match and not rv_text:
            raise E.invalid_list_options([(
                "FieldValueForbidden", "resourceVersionMatch",
                "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is "
                "provided")])
        if params.get("sendInitialEvents") is not None:
            raise E.invalid_list_options([(
                "FieldValueForbidden", "sendInitialEvents",
                "Forbidden: sendInitialEvents is forbidden for list")])
        limit = params.get("limit")
        try:
            return int(limit) if limit not in (None, "") else 0
        except ValueError:
            raise E.bad_request(f'strconv.ParseInt: parsing "{limit}": invalid syntax') from None

    def _list_snapshot(self, params, limit):
        """(resourceVersion to read at, key to continue after) per the list table of
        reference/kube-api.md §1.2."""
        rv_text = params.get("resourceVersion")
        match = params.get("resourceVersionMatch")
        cont = params.get("continue")
        if cont:
            snap, start = self._decode_continue(cont)
            if rv_text:
                raise E.bad_request("specifying resource version is not allowed when using "
                                    "continue")
            if snap == -1:          # an inconsistent continuation: read the latest
                return self.rv, start
            if snap < self.floor:
                err = E.expired("The provided continue parameter is too old to display a "
                                "consistent list result. You can start a new list without "
                                "the continue parameter, or use the continue token in this "
                                "response to retrieve the remainder of the results. "
                                "Continuing with the provided token results in an "
                                "inconsistent list - objects that were created, modified, "
                                "or deleted between the time the first chunk was returned "
                                "and now may show up in the list.")
                err.meta = {"continue": self._continue_token(-1, start)}
                raise err
            return snap, start
        if rv_text in (None, "", "0"):
            return self.rv, ""
        want = self._parse_rv(rv_text)
        if want > self.rv:
            self._wait_fresh(want)
        if match == "Exact" or (not match and limit > 0):
            if want < self.floor:
                raise E.expired("The resourceVersion for the provided list is too old.")
            return want, ""
        return self.rv, ""

    def _sorted_keys(self, key, state, current):
        """The "ns/name" keys in etcd order (and the idents), cached for the current state
        so that paging through thousands of objects does not sort them for every page."""
        if current:
            cached = self.sorted_cache.get(key)
            if cached and cached[0] == self.key_rv.get(key):
                return cached[1], cached[2]
        pairs = sorted((f"{ns}/{name}", (ns, name)) for (ns, name) in state)
        texts, idents = [p[0] for p in pairs], [p[1] for p in pairs]
        if current:
            self.sorted_cache[key] = (self.key_rv.get(key), texts, idents)
        return texts, idents

    def list(self, rtype, ns, params):
        with self.lock:
            labels, fields = self._selectors(rtype, params)
            limit = self._check_list_options(params)
            snap, start = self._list_snapshot(params, limit)
            current = snap == self.rv
            state = self.objects.get(rtype.key, {}) if current \
                else self._state_at(rtype.key, snap)
            texts, idents = self._sorted_keys(rtype.key, state, current)
            lo, hi = 0, len(texts)
            if ns:                              # one namespace is one contiguous range
                lo, hi = bisect.bisect_left(texts, ns + "/"), bisect.bisect_left(texts, ns + "0")
            if start:
                lo = max(lo, bisect.bisect_right(texts, start))
            # As kube-apiserver 1.37: keys are read on until `limit` of them match the
            # selectors (or the range ends); a page continues when keys are left after
            # the last one read, whether or not any of them would match.
            items, end = [], lo
            while end < hi and (limit <= 0 or len(items) < limit):
                obj = state[idents[end]]
                if labels.match(meta(obj).get("labels")) and fields.match(obj):
                    items.append((texts[end], obj))
                end += 1
            lmeta = {"resourceVersion": str(snap)}
            if end < hi:
                lmeta["continue"] = self._continue_token(snap, texts[end - 1])
                if labels.empty() and fields.empty():
                    lmeta["remainingItemCount"] = hi - end
            out = []
            for _, obj in items:
                obj = self.present(rtype, obj)
                if not rtype.crd:       # typed lists leave kind/apiVersion off their items
                    obj = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
                out.append(obj)
            return {"kind": rtype.list_kind, "apiVersion": rtype.api_version,
                    "metadata": lmeta, "items": out}

    # -- watch --------------------------------------------------------------------------

    def watch(self, rtype, ns, params, info):
        """Registers a watcher and queues its first events.

        Returns (watcher, expired_status): a non-None status means the
        resourceVersion is too old and the caller must report it.
        """
        with self.lock:
            if self.closing:
                raise E.ApiError(503, "ServiceUnavailable", "apiserver is shutting down")
            labels, fields = self._selectors(rtype, params)
            rv_text = params.get("resourceVersion")
            bookmarks = params.get("allowWatchBookmarks") in ("true", "1")
            initial = params.get("sendInitialEvents")
            match = params.get("resourceVersionMatch")
            if initial is not None:
                if match != "NotOlderThan":
                    raise E.invalid_list_options([(
                        "FieldValueForbidden", "resourceVersionMatch",
                        "Forbidden: sendInitialEvents requires setting resourceVersionMatch to "
                        "NotOlderThan")])
                if initial == "true" and not bookmarks:
                    raise E.invalid_list_options([(
                        "FieldValueForbidden", "allowWatchBookmarks",
                        "Forbidden: sendInitialEvents requires setting allowWatchBookmarks to "
                        "true")])
            elif match:
                raise E.invalid_list_options([(
                    "FieldValueForbidden", "resourceVersionMatch",
                    "Forbidden: resourceVersionMatch is forbidden for watch unless "
                    "sendInitialEvents is provided")])
            w = Watcher(rtype, ns, labels, fields, bookmarks, info)
            if initial == "true" or (initial is None and rv_text in (None, "", "0")):
                if rv_text not in (None, "", "0"):
                    self._wait_fresh(self._parse_rv(rv_text))
                state = self.objects.get(rtype.key, {})
                for ident in self._sorted_keys(rtype.key, state, True)[1]:
                    obj = state[ident]
                    if w.matches(obj):
                        w.push(("event", "ADDED", obj))
                if initial == "true":
                    w.push(("bookmark", self.rv, True))
            else:
                start = self._parse_rv(rv_text) if rv_text not in (None, "", "0") else self.rv
                oldest = max(self.floor, self.watch_floor)
                if start < oldest:
                    return None, E.expired(f"too old resource version: {start} "
                                           f"({oldest + 1})")
                if start > self.rv:
                    try:
                        timeout = int(params.get("timeoutSeconds") or 0)
                    except ValueError:
                        timeout = 0
                    try:
                        self._wait_fresh(start, timeout if timeout > 0 else BLOCK_TIMEOUT)
                    except E.ApiError as err:
                        # a watch that times out first just ends, as kube-apiserver's does
                        return None, (err if not 0 < timeout < BLOCK_TIMEOUT else None)
                for ev in self.history:
                    if ev.rv > start and ev.key == rtype.key:
                        w.offer(ev)
            w.queued_rv = max(w.queued_rv, self.rv if initial == "true" or rv_text in
                              (None, "", "0") else self._parse_rv(rv_text))
            self.watchers.add(w)
            return w, None

    def unwatch(self, w):
        with self.lock:
            self.watchers.discard(w)

    def bookmark(self, w, force=False):
        """Queues a BOOKMARK at the current resourceVersion when it says something new
        (the store moved past what the watcher has seen), or always when forced."""
        with self.lock:
            if force or self.rv > w.queued_rv:
                w.push(("bookmark", self.rv, False))

    def close_watches(self, item, key=None):
        with self.lock:
            for w in list(self.watchers):
                if key is None or w.key == key:
                    w.push(item)

    def compact(self):
        """Forgets the history: every older resourceVersion is now expired."""
        with self.lock:
            self.history.clear()
            self.floor = self.rv

    # -- writes -------------------------------------------------------------------------

    def _check_namespace(self, rtype, ns, name):
        if not rtype.namespaced:
            return
        nsobj = self.objects.get(NS_KEY, {}).get(("", ns))
        if nsobj is None:
            raise E.namespace_not_found(ns)
        if meta(nsobj).get("deletionTimestamp"):
            raise E.forbidden_terminating(rtype, name, ns)

    def create(self, rtype, ns, body, params, manager, apply_config=None):
        with self.lock:
            if apply_config is None:
                self._check_gvk(rtype, body)
            obj = clone(body)
            if rtype.key == ("", "events"):
                if rtype.view is not None:
                    obj = rtype.view.to_storage(obj)
                if not isinstance(obj.get("metadata"), dict):
                    obj["metadata"] = {}
                obj["metadata"].setdefault("namespace", ns)
                causes = self._validate_event(obj, strict=rtype.view is not None)
                if causes:
                    core = self.registry.lookup("", "v1", "events")
                    raise E.invalid(core, obj["metadata"].get("name", ""), causes)
            m = obj.setdefault("metadata", {})
            if not isinstance(m, dict):
                raise E.bad_request("metadata must be an object")
            if rtype.namespaced:
                if m.get("namespace") and m["namespace"] != ns:
                    raise E.bad_request("the namespace of the provided object does not match "
                                        "the namespace sent on the request")
                m["namespace"] = ns
            else:
                m.pop("namespace", None)
            if not m.get("name"):
                if m.get("generateName"):
                    m["name"] = m["generateName"] + "".join(
                        random.choice(GENERATE_CHARS) for _ in range(5))
                else:
                    raise E.invalid(rtype, "", [("FieldValueRequired", "metadata.name",
                                                 "Required value: name or generateName is "
                                                 "required")])
            name = m["name"]
            rv = m.get("resourceVersion")
            if apply_config is None and isinstance(rv, str) and rv.isdigit() and int(rv):
                # the storage layer's plain error: 500 with no reason (StatusReasonUnknown)
                raise E.ApiError(500, "", "resourceVersion should not be set on objects "
                                 "to be created")
            obj["apiVersion"] = rtype.storage_api_version
            obj["kind"] = rtype.kind
            self._validate_meta(rtype, obj)
            self._check_namespace(rtype, ns, name)
            if self._get(rtype, ns, name) is not None:
                raise E.already_exists(rtype, name)
            if rtype.status and rtype.key != CRD_KEY:
                obj.pop("status", None)
            if rtype.key == ("", "pods"):
                pods.admit_pod(self, ns, obj)
            obj = self._normalize(rtype, obj, params, creating=True)
            m = obj["metadata"]
            for f in ("uid", "resourceVersion", "generation", "creationTimestamp",
                      "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink",
                      "managedFields"):
                m.pop(f, None)
            m["uid"] = str(uuid.uuid4())
            m["creationTimestamp"] = now_rfc3339()
            if rtype.generation:
                m["generation"] = 1
            if rtype.key == CRD_KEY:
                obj["status"] = self._crd_status(obj, None)
            managed = ssa.Managed(apply_config.get("managed") if apply_config else None)
            scope = "main" if rtype.status else "all"
            if apply_config is None:
                ssa.record_update(None, obj, managed, manager, rtype.api_version, "", scope)
            m["managedFields"] = managed.render()
            if params.get("dryRun") == "All":
                return self.present(rtype, dict(obj, metadata=dict(m, resourceVersion="")))
            stored = self._commit("ADDED", rtype.key, obj, None)
            if rtype.key == CRD_KEY:
                self.registry.set_crd(name, stored)
            return self.present(rtype, stored)

    def update(self, rtype, ns, name, body, params, manager, subresource=""):
        with self.lock:
            self._check_gvk(rtype, body)
            bm = body.get("metadata") or {}
            if bm.get("name") and bm["name"] != name:
                raise E.bad_request(f"the name of the object ({bm['name']}) does not match the "
                                    f"name on the URL ({name})")
            if rtype.namespaced and bm.get("namespace") and bm["namespace"] != ns:
                raise E.bad_request("the namespace of the provided object does not match the "
                                    "namespace sent on the request")
            old = self._get(rtype, ns, name)
            if old is None:
                raise E.not_found(rtype, name)
            rv = bm.get("resourceVersion")
            if not rv and not rtype.unconditional_update:
                raise E.invalid(rtype, name, [("FieldValueInvalid", "metadata.resourceVersion",
                                               "Invalid value: 0: must be specified for an "
                                               "update")], by_resource=True)
            return self._update(rtype, old, body, params, manager, subresource,
                                precondition=rv or None)

    def _merge_into_old(self, rtype, old, candidate, subresource):
        """The object an update asks for, after the strategy's rules: /status takes only
        status from the request, the main resource keeps the old status (with the status
        subresource) and the system-owned metadata."""
        if subresource == "status":
            new = clone(old)
            if "status" in candidate:
                new["status"] = clone(candidate["status"])
            else:
                new.pop("status", None)
            return new
        new = clone(candidate)
        if rtype.view is not None:
            new = rtype.view.to_storage(new)
        new["apiVersion"] = rtype.storage_api_version
        new["kind"] = rtype.kind
        if rtype.status:
            if "status" in old:
                new["status"] = clone(old["status"])
            else:
                new.pop("status", None)
        nm = new.setdefault("metadata", {})
        if not isinstance(nm, dict):
            raise E.bad_request("metadata must be an object")
        om = meta(old)
        for f in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
                  "deletionGracePeriodSeconds", "generation"):
            if f in om:
                nm[f] = om[f]
            else:
                nm.pop(f, None)
        if rtype.key == NS_KEY:      # spec.finalizers change only through /finalize
            new["spec"] = clone(old.get("spec") or {})
        self._validate_meta(rtype, new)
        return new

    def _update(self, rtype, old, candidate, params, manager, subresource, precondition=None,
                apply_managed=None):
        """The shared update path of PUT, PATCH and apply; `candidate` is the full new
        object as the client wants it."""
        name = meta(old)["name"]
        if precondition is not None and precondition != meta(old).get("resourceVersion"):
            raise E.conflict(rtype, name)
        om = meta(old)
        new = self._merge_into_old(rtype, old, candidate, subresource)
        new = self._normalize(rtype, new, params, creating=False)
        self._check_immutable(rtype, old, new)
        nm = new["metadata"]
        if om.get("deletionTimestamp"):
            added = set(nm.get("finalizers") or []) - set(om.get("finalizers") or [])
            if added:
                raise E.invalid(rtype, name, [(
                    "FieldValueForbidden", "metadata.finalizers",
                    "Forbidden: no new finalizers can be added if the object is being "
                    "deleted, found new finalizers []string{" +
                    ", ".join(json.dumps(a) for a in sorted(added)) + "}")])
        if rtype.generation and not self.break_generation and \
                self._spec_changed(rtype, old, new):
            nm["generation"] = om.get("generation", 0) + 1
        if rtype.key == CRD_KEY and subresource != "status":
            new["status"] = self._crd_status(new, old.get("status"))
        scope = "status" if subresource == "status" else ("main" if rtype.status else "all")
        if apply_managed is not None:
            managed = apply_managed
        else:
            managed = ssa.Managed(om.get("managedFields"))
            ssa.record_update(old, new, managed, manager, rtype.api_version, subresource, scope)
        nm["managedFields"] = managed.render()
        nm["resourceVersion"] = om.get("resourceVersion")
        if self._same(old, new):
            return self.present(rtype, old)
        if params.get("dryRun") == "All":
            return self.present(rtype, new)
        if om.get("deletionTimestamp") and not nm.get("finalizers"):
            gone = self._commit("DELETED", rtype.key, new, old)
            self._after_delete(rtype, gone)
            # The watch's DELETED event has the delete's version; the answer to the
            # write keeps the last stored one, as kube-apiserver's (the update that
            # emptied the finalizers is never stored, the object is deleted instead).
            answer = dict(gone, metadata=dict(meta(gone),
                                              resourceVersion=om.get("resourceVersion")))
            return self.present(rtype, answer)
        stored = self._commit("MODIFIED", rtype.key, new, old)
        if rtype.key == CRD_KEY:
            self.registry.set_crd(name, stored)
        return self.present(rtype, stored)

    @staticmethod
    def _check_immutable(rtype, old, new):
        """Secret.type, and the data of Secrets and ConfigMaps marked immutable."""
        name = meta(old)["name"]
        if rtype.key == ("", "secrets") and new.get("type") != old.get("type"):
            raise E.invalid(rtype, name, [("FieldValueInvalid", "type",
                                           f'Invalid value: "{new.get("type")}": field is '
                                           "immutable")])
        if rtype.key in (("", "secrets"), ("", "configmaps")) and old.get("immutable"):
            for f in ("data", "binaryData", "immutable"):
                if new.get(f) != old.get(f):
                    raise E.invalid(rtype, name, [("FieldValueForbidden", f,
                                                   "Forbidden: field is immutable when "
                                                   "`immutable` is set")])

    @staticmethod
    def _same(old, new):
        def norm(o):
            o = dict(o)
            m = dict(o.get("metadata") or {})
            m["managedFields"] = ssa.strip_times(m.get("managedFields"))
            m.pop("resourceVersion", None)
            o["metadata"] = m
            return o
        return norm(old) == norm(new)

    def patch(self, rtype, ns, name, ctype, body, params, manager, subresource=""):
        """Returns (object, created)."""
        with self.lock:
            if params.get("force") is not None and ctype != "application/apply-patch+yaml":
                raise E.invalid_list_options([("FieldValueForbidden", "force",
                                               "Forbidden: may not be specified for "
                                               "non-apply patch")], kind="PatchOptions")
            if ctype == "application/apply-patch+yaml":
                return self._apply(rtype, ns, name, body, params, subresource)
            old = self._get(rtype, ns, name)
            if old is None:
                raise E.not_found(rtype, name)
            current = self.present(rtype, old)
            want = list if ctype == "application/json-patch+json" else dict
            if not isinstance(body, want):
                raise E.bad_request(
                    f"error decoding patch: json: cannot unmarshal {typed.json_type(body)} "
                    "into Go value of type " + ("[]handlers.jsonPatchOp" if want is list
                                                else "map[string]interface {}"))
            try:
                if ctype == "application/merge-patch+json":
                    result = merge_patch(current, body)
                elif ctype == "application/json-patch+json":
                    result = json_patch(current, body)
                elif ctype == "application/strategic-merge-patch+json":
                    result = strategic_merge(current, body)
                else:
                    raise E.unsupported_media(["application/json-patch+json",
                                               "application/merge-patch+json",
                                               "application/apply-patch+yaml"])
            except PatchMalformed as exc:
                raise E.bad_request(str(exc)) from None
            except PatchFailed:         # the apiserver does not say which operation failed
                raise E.ApiError(422, "Invalid", "the server rejected our request due to an "
                                 "error in our request", {}) from None
            if not isinstance(result, dict):
                raise E.bad_request("the patch result is not an object")
            typed.check_object(rtype, result)
            rm = result.get("metadata") or {}
            if rm.get("name", name) != name:
                raise E.bad_request(f"the name of the object ({rm.get('name')}) does not "
                                    f"match the name on the URL ({name})")
            if result.get("apiVersion") != rtype.api_version or result.get("kind") != rtype.kind:
                raise E.bad_request("the patch may not change apiVersion or kind")
            rv = rm.get("resourceVersion")
            return self._update(rtype, old, result, params, manager, subresource,
                                precondition=rv if rv else None), False

    def _apply(self, rtype, ns, name, config, params, subresource):
        manager = params.get("fieldManager")
        if not manager:
            raise E.invalid_list_options([("FieldValueRequired", "fieldManager",
                                           "Required value: is required for apply patch")],
                                         kind="PatchOptions")
        if not isinstance(config, dict):
            raise E.bad_request("the apply configuration is not an object")
        self._check_gvk(rtype, config, where="patch")
        cm = config.get("metadata") or {}
        if cm.get("name") and cm["name"] != name:
            raise E.bad_request(f"the name of the object ({cm['name']}) does not match the "
                                f"name on the URL ({name})")
        if rtype.namespaced and cm.get("namespace") and cm["namespace"] != ns:
            raise E.bad_request("the namespace of the provided object does not match the "
                                "namespace sent on the request")
        if rtype.crd:
            # An apply configuration is converted to the schema's typed form first: a
            # field the schema does not declare is a 500, whatever fieldValidation says.
            _, unknown, _ = prune_custom_resource(config, rtype.schema)
            if unknown:
                raise E.ApiError(500, "", "failed to create typed patch object "
                                 f"({cm.get('namespace', '')}/{cm.get('name', '')}; "
                                 f"{rtype.api_version}, Kind={rtype.kind}): .{unknown[0]}: "
                                 "field not declared in schema")
        force = params.get("force") in ("true", "1")
        scope = "status" if subresource == "status" else ("main" if rtype.status else "all")
        old = self._get(rtype, ns, name)
        if old is None:
            if subresource == "status":
                raise E.not_found(rtype, name)
            managed = ssa.Managed(None)
            merged = ssa.apply(rtype, name, None, config, managed, manager, rtype.api_version,
                               "", scope, force)
            merged.setdefault("metadata", {})["name"] = name
            return self.create(rtype, ns, merged, params, manager,
                               apply_config={"managed": managed.render()}), True
        managed = ssa.Managed(meta(old).get("managedFields"))
        merged = ssa.apply(rtype, name, self.present(rtype, old), config, managed, manager,
                           rtype.api_version, subresource, scope, force)
        return self._update(rtype, old, merged, params, manager, subresource,
                            precondition=cm.get("resourceVersion") or None,
                            apply_managed=managed), False

    def delete(self, rtype, ns, name, options, params=None):
        with self.lock:
            old = self._get(rtype, ns, name)
            if old is None:
                raise E.not_found(rtype, name)
            om = meta(old)
            pre = options.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != om.get("uid"):
                raise E.conflict(rtype, name, f"the UID in the precondition ({pre['uid']}) does "
                                 f"not match the UID in record ({om.get('uid')}). The object "
                                 "might have been deleted and then recreated", by_kind=True)
            if pre.get("resourceVersion") and pre["resourceVersion"] != om.get("resourceVersion"):
                raise E.conflict(rtype, name, "the ResourceVersion in the precondition "
                                 f"({pre['resourceVersion']}) does not match the "
                                 f"ResourceVersion in record ({om.get('resourceVersion')}). The "
                                 "object might have been modified", by_kind=True)
            if (params or {}).get("dryRun") == "All" or "All" in (options.get("dryRun") or []):
                return self.present(rtype, old)
            policy = options.get("propagationPolicy")
            if options.get("orphanDependents") is True:
                policy = "Orphan"
            if policy == "Orphan":
                self._orphan_dependents(om.get("uid"))
            elif policy == "Foreground":
                self._delete_dependents(om.get("uid"))
            grace = pods.grace_seconds(old, options) if rtype.key == POD_KEY else 0
            if rtype.key == POD_KEY and om.get("deletionTimestamp") and grace == 0 and \
                    not om.get("finalizers"):
                pass            # the kubelet's final delete of a terminated pod
            elif rtype.key in (NS_KEY, CRD_KEY) or om.get("finalizers") or grace:
                if om.get("deletionTimestamp"):
                    if rtype.key == POD_KEY and grace < (om.get("deletionGracePeriodSeconds")
                                                         or 0):
                        new = clone(old)
                        new["metadata"]["deletionGracePeriodSeconds"] = grace
                        return self.present(rtype, self._commit("MODIFIED", rtype.key, new,
                                                                old))
                    return self.present(rtype, old)
                new = clone(old)
                nm = new["metadata"]
                if rtype.key == CRD_KEY:    # the CRD's delete adds its cleanup finalizer
                    nm["finalizers"] = (nm.get("finalizers") or []) + [CRD_FINALIZER]
                    new.setdefault("status", {}).setdefault("conditions", []).append({
                        "type": "Terminating", "status": "True",
                        "reason": "InstanceDeletionInProgress",
                        "message": "CustomResource deletion is in progress",
                        "lastTransitionTime": now_rfc3339()})
                nm["deletionTimestamp"] = now_rfc3339()
                nm["deletionGracePeriodSeconds"] = grace
                if "generation" in nm:
                    nm["generation"] += 1
                if rtype.key == NS_KEY:
                    new.setdefault("status", {})["phase"] = "Terminating"
                stored = self._commit("MODIFIED", rtype.key, new, old)
                self._run_cleanup(rtype, stored)
                current = self._get(rtype, ns, name)
                return self.present(rtype, current or stored)
            gone = self._commit("DELETED", rtype.key, old, old)
            self._after_delete(rtype, gone)
            return E.success(rtype, name, om.get("uid"))

    def delete_collection(self, rtype, ns, params, options):
        with self.lock:
            listed = self.list(rtype, ns, {k: v for k, v in params.items()
                                           if k in ("labelSelector", "fieldSelector")})
            for item in listed["items"]:
                try:
                    self.delete(rtype, ns or meta(item).get("namespace"), meta(item)["name"],
                                options, params)
                except E.ApiError:
                    pass
            return listed

    # -- the controllers a cluster runs, done synchronously --------------------------------

    def _run_cleanup(self, rtype, obj):
        """Namespace and CRD deletion: remove the contents, then the container."""
        if rtype.key == NS_KEY:
            self._finalize_namespace(meta(obj)["name"])
        elif rtype.key == CRD_KEY:
            self._finalize_crd(obj)

    def _finalize_namespace(self, ns):
        token = ("namespace", ns)
        if token in self.finalizing:      # a deletion below re-enters: the outer call checks
            return
        self.finalizing.add(token)
        try:
            for key, bucket in list(self.objects.items()):
                if key == NS_KEY:
                    continue
                for (ons, oname), obj in list(bucket.items()):
                    if ons != ns or meta(obj).get("deletionTimestamp"):
                        continue
                    t = self.registry.storage_type(key)
                    if t is not None:
                        self.delete(t, ons, oname, {})
        finally:
            self.finalizing.discard(token)
        if any(ons == ns for key, b in self.objects.items() if key != NS_KEY for ons, _ in b):
            return
        nsobj = self.objects.get(NS_KEY, {}).get(("", ns))
        if nsobj is None:
            return
        new = clone(nsobj)
        new.setdefault("spec", {})["finalizers"] = []
        stored = self._commit("MODIFIED", NS_KEY, new, nsobj)
        if not meta(stored).get("finalizers"):
            gone = self._commit("DELETED", NS_KEY, stored, stored)
            self._after_delete(self.registry.lookup("", "v1", "namespaces"), gone)

    def _finalize_crd(self, crd):
        spec = crd["spec"]
        key = (spec["group"], spec["names"]["plural"])
        t = self.registry.storage_type(key)
        token = ("crd", meta(crd)["name"])
        if token in self.finalizing:
            return
        self.finalizing.add(token)
        try:
            for (ons, oname), obj in list(self.objects.get(key, {}).items()):
                if t is not None and not meta(obj).get("deletionTimestamp"):
                    self.delete(t, ons or None, oname, {})
        finally:
            self.finalizing.discard(token)
        if self.objects.get(key):
            return
        current = self.objects.get(CRD_KEY, {}).get(("", meta(crd)["name"]))
        if current is None:
            return
        new = clone(current)
        fins = [f for f in meta(new).get("finalizers") or [] if f != CRD_FINALIZER]
        new["metadata"]["finalizers"] = fins
        crd_type = self.registry.lookup("apiextensions.k8s.io", "v1",
                                        "customresourcedefinitions")
        if fins:
            self._commit("MODIFIED", CRD_KEY, new, current)
            return
        gone = self._commit("DELETED", CRD_KEY, new, current)
        self._after_delete(crd_type, gone)

    def _after_delete(self, rtype, gone):
        m = meta(gone)
        if rtype.key == CRD_KEY:
            spec = gone["spec"]
            key = (spec["group"], spec["names"]["plural"])
            self.registry.set_crd(m["name"], None)
            self.objects.pop(key, None)
            self.close_watches(("close", "eof"), key=key)
        self._collect_garbage(m.get("uid"))
        ns = m.get("namespace")
        if ns:
            nsobj = self.objects.get(NS_KEY, {}).get(("", ns))
            if nsobj is not None and meta(nsobj).get("deletionTimestamp"):
                self._finalize_namespace(ns)
        for crd in list(self.objects.get(CRD_KEY, {}).values()):
            if meta(crd).get("deletionTimestamp") and \
                    (crd["spec"]["group"], crd["spec"]["names"]["plural"]) == rtype.key:
                self._finalize_crd(crd)

    def _dependents(self, uid):
        out = []
        for key, ns, name in list(self.owners.get(uid, ())):
            obj = self.objects.get(key, {}).get((ns, name))
            t = self.registry.storage_type(key)
            if obj is not None and t is not None:
                out.append((t, ns, name, obj))
        return out

    def _collect_garbage(self, uid):
        """Background cascade: dependents whose owners are all gone are deleted."""
        if not uid:
            return
        for t, ns, name, obj in self._dependents(uid):
            refs = meta(obj).get("ownerReferences") or []
            if any(self._uid_exists(r.get("uid")) for r in refs if r.get("uid") != uid):
                continue
            if meta(obj).get("deletionTimestamp"):
                continue
            try:
                self.delete(t, ns or None, name, {})
            except E.ApiError:
                pass
        self.owners.pop(uid, None)

    def _orphan_dependents(self, uid):
        for t, ns, name, obj in self._dependents(uid):
            new = clone(obj)
            refs = [r for r in meta(new).get("ownerReferences") or [] if r.get("uid") != uid]
            if refs:
                new["metadata"]["ownerReferences"] = refs
            else:
                new["metadata"].pop("ownerReferences", None)
            self._commit("MODIFIED", t.key, new, obj)

    def _delete_dependents(self, uid):
        for t, ns, name, obj in self._dependents(uid):
            try:
                self.delete(t, ns or None, name, {"propagationPolicy": "Foreground"})
            except E.ApiError:
                pass
