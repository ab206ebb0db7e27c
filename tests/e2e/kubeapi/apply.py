"""Field ownership (metadata.managedFields) and server-side apply.

Fields are tracked as leaf paths of fieldsV1 tokens ("f:spec", "f:size";
"v:<json>" for an item of a set such as metadata.finalizers; "k:<json>" for
an ownerReferences entry keyed by uid).  Every other list is atomic, which is
how the apiserver treats custom resources without list-type markers.

An Update (PUT, merge/JSON/strategic patch) gives its manager the paths whose
values it changed and takes them from every other manager.  An Apply merges
the configuration, refuses (409 FieldManagerConflict) to change a value that
another manager owns unless force=true, and removes the fields this manager
applied before and no longer applies when nobody else owns them.
"""
import json
import time

from .errors import ApiError, clone

SET_LISTS = {("f:metadata", "f:finalizers")}
KEYED_LISTS = {("f:metadata", "f:ownerReferences"): "uid"}
META_OWNED = {"labels", "annotations", "finalizers", "ownerReferences"}


def now_rfc3339():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _walk(value, prefix, out):
    if prefix in SET_LISTS and isinstance(value, list):
        for item in value:
            out.add(prefix + ("v:" + json.dumps(item, sort_keys=True),))
        return
    if prefix in KEYED_LISTS and isinstance(value, list):
        key = KEYED_LISTS[prefix]
        for item in value:
            if isinstance(item, dict):
                out.add(prefix + ("k:" + json.dumps({key: item.get(key)}),))
        return
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _walk(v, prefix + ("f:" + k,), out)
        return
    out.add(prefix)


def _scoped_roots(obj, scope):
    """(value, path prefix) of the parts of an object within scope: 'all', 'main'
    (no status) or 'status'; of metadata only the fields a manager can own."""
    for k, v in (obj or {}).items():
        if k in ("apiVersion", "kind"):
            continue
        if k == "metadata":
            if scope != "status":
                for mk, mv in (v or {}).items():
                    if mk in META_OWNED:
                        yield mv, ("f:metadata", "f:" + mk)
            continue
        if (scope == "status" and k != "status") or (scope == "main" and k == "status"):
            continue
        yield v, ("f:" + k,)


def field_paths(obj, scope):
    """Leaf paths of an object within scope: 'all', 'main' (no status) or 'status'."""
    out = set()
    for value, prefix in _scoped_roots(obj, scope):
        _walk(value, prefix, out)
    return out


def _walk_nodes(value, prefix, out):
    if isinstance(value, dict) and value:
        out.add(prefix + (".",))
        for k, v in value.items():
            _walk_nodes(v, prefix + ("f:" + k,), out)
    elif isinstance(value, list) and value and (prefix in SET_LISTS or prefix in KEYED_LISTS):
        out.add(prefix + (".",))


def node_paths(obj, scope):
    """The maps (and set or keyed lists) of an object as "<path>/." tokens: an Update
    that creates one owns it, which fieldsV1 writes as {".": {}}."""
    out = set()
    for value, prefix in _scoped_roots(obj, scope):
        _walk_nodes(value, prefix, out)
    return out


def get_at(obj, path):
    """(found, value) at a path ("." stands for the node itself)."""
    cur = obj
    for tok in path:
        kind, rest = tok[:2], tok[2:]
        if tok == ".":
            continue
        if kind == "f:":
            if not isinstance(cur, dict) or rest not in cur:
                return False, None
            cur = cur[rest]
        elif kind == "v:":
            item = json.loads(rest)
            if not isinstance(cur, list) or item not in cur:
                return False, None
            cur = item
        elif kind == "k:":
            key = json.loads(rest)
            if not isinstance(cur, list):
                return False, None
            match = [i for i in cur if isinstance(i, dict)
                     and all(i.get(a) == b for a, b in key.items())]
            if not match:
                return False, None
            cur = match[0]
    return True, cur


def remove_at(obj, path):
    if path[-1] == ".":         # ownership of a node, not a field to remove
        return
    parent_found, parent = get_at(obj, path[:-1])
    if not parent_found:
        return
    tok = path[-1]
    kind, rest = tok[:2], tok[2:]
    if kind == "f:" and isinstance(parent, dict):
        parent.pop(rest, None)
    elif kind == "v:" and isinstance(parent, list):
        item = json.loads(rest)
        while item in parent:
            parent.remove(item)
    elif kind == "k:" and isinstance(parent, list):
        key = json.loads(rest)
        parent[:] = [i for i in parent if not (isinstance(i, dict) and
                                                all(i.get(a) == b for a, b in key.items()))]


def to_fields_v1(paths):
    tree = {}
    for p in sorted(paths):
        node = tree
        for tok in p:
            node = node.setdefault(tok, {})
    for p in paths:          # a path that is both owned and a parent gets "."
        node = tree
        for tok in p:
            node = node.get(tok)
        if node:
            node["."] = {}
    return tree


def from_fields_v1(tree, prefix=()):
    out = set()
    if not isinstance(tree, dict):
        return out
    for tok, sub in tree.items():
        if tok == ".":
            out.add(prefix + (".",))
            continue
        if not sub:
            out.add(prefix + (tok,))
        else:
            out |= from_fields_v1(sub, prefix + (tok,))
    return out


def _overlaps(p, q):
    n = min(len(p), len(q))
    return p[:n] == q[:n]


def path_text(path):
    s = ""
    for tok in path:
        kind, rest = tok[:2], tok[2:]
        if kind == "f:":
            s += "." + rest
        elif kind == "v:":
            s += "[=" + rest + "]"
        else:
            s += "[" + ",".join(f"{a}={json.dumps(b)}" for a, b in json.loads(rest).items()) + "]"
    return s


class Managed:
    """The managedFields entries of one object as path sets."""

    def __init__(self, entries):
        self.entries = []
        for e in entries or []:
            self.entries.append({"manager": e.get("manager", ""),
                                 "operation": e.get("operation", "Update"),
                                 "apiVersion": e.get("apiVersion", ""),
                                 "time": e.get("time"),
                                 "subresource": e.get("subresource", ""),
                                 "paths": from_fields_v1(e.get("fieldsV1"))})

    def find(self, manager, operation, subresource):
        for e in self.entries:
            if (e["manager"], e["operation"], e["subresource"]) == (manager, operation,
                                                                   subresource):
                return e
        return None

    def entry(self, manager, operation, subresource, api_version):
        e = self.find(manager, operation, subresource)
        if e is None:
            e = {"manager": manager, "operation": operation, "apiVersion": api_version,
                 "time": None, "subresource": subresource, "paths": set()}
            self.entries.append(e)
        return e

    def render(self):
        out = []
        for e in self.entries:
            if not e["paths"]:
                continue
            r = {"manager": e["manager"], "operation": e["operation"],
                 "apiVersion": e["apiVersion"], "time": e["time"] or now_rfc3339(),
                 "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(e["paths"])}
            if e["subresource"]:
                r["subresource"] = e["subresource"]
            out.append(r)
        return out

    def owned_elsewhere(self, path, exclude):
        return any(e is not exclude and any(_overlaps(path, q) for q in e["paths"])
                   for e in self.entries)


def record_update(old, new, managed, manager, api_version, subresource, scope):
    """Gives `manager` (operation Update) the paths that changed from old to new."""
    old_paths = field_paths(old, scope) if old else set()
    new_paths = field_paths(new, scope)
    changed = {p for p in new_paths
               if p not in old_paths or get_at(old, p) != get_at(new, p)}
    changed |= node_paths(new, scope) - (node_paths(old, scope) if old else set())
    removed = old_paths - new_paths
    touched = changed | removed
    for e in managed.entries:       # a node that is gone is owned by nobody
        e["paths"] = {q for q in e["paths"]
                      if q[-1] != "." or get_at(new, q[:-1])[0]}
    if not touched:
        return
    for e in managed.entries:
        e["paths"] = {q for q in e["paths"]
                      if not any(_overlaps(q, t) for t in touched)}
    mine = managed.entry(manager, "Update", subresource, api_version)
    mine["paths"] |= changed
    mine["time"] = now_rfc3339()
    mine["apiVersion"] = api_version


def _merge(live, config, prefix):
    if prefix in SET_LISTS and isinstance(config, list):
        out = list(live) if isinstance(live, list) else []
        out += [i for i in config if i not in out]
        return out
    if prefix in KEYED_LISTS and isinstance(config, list):
        key = KEYED_LISTS[prefix]
        out = clone(live) if isinstance(live, list) else []
        for item in config:
            idx = next((i for i, c in enumerate(out)
                        if isinstance(c, dict) and c.get(key) == item.get(key)), None)
            if idx is None:
                out.append(clone(item))
            else:
                out[idx] = clone(item)
        return out
    if isinstance(config, dict) and isinstance(live, dict):
        out = clone(live)
        for k, v in config.items():
            out[k] = _merge(live.get(k), v, prefix + ("f:" + k,))
        return out
    return clone(config)


def apply(rtype, name, live, config, managed, manager, api_version, subresource, scope,
          force):
    """Merges an apply configuration into live (None when creating).

    Returns the merged object; updates `managed` in place; raises a 409
    ApiError listing the conflicts when another manager owns a changed value.
    """
    base = live or {}
    scoped = {}
    for k, v in config.items():
        if k in ("apiVersion", "kind"):
            scoped[k] = v
        elif k == "metadata":
            scoped[k] = v if scope != "status" else {
                mk: mv for mk, mv in (v or {}).items() if mk in ("name", "namespace")}
        elif (scope == "main" and k == "status") or (scope == "status" and k != "status"):
            continue
        else:
            scoped[k] = v
    merged = {k: v for k, v in clone(base).items()}
    for k, v in scoped.items():
        if k == "metadata":
            meta = clone(base.get("metadata") or {})
            for mk, mv in (v or {}).items():
                if mk in META_OWNED:
                    meta[mk] = _merge(meta.get(mk), mv, ("f:metadata", "f:" + mk))
                elif mk not in meta:
                    meta[mk] = clone(mv)
            merged["metadata"] = meta
        elif k not in ("apiVersion", "kind"):
            merged[k] = _merge(base.get(k), v, ("f:" + k,))
    new_paths = field_paths(scoped, scope)
    mine = managed.entry(manager, "Apply", subresource, api_version)
    conflicts = []
    for e in managed.entries:
        if e["manager"] == manager:
            continue
        for q in list(e["paths"]):
            for p in new_paths:
                if not _overlaps(p, q):
                    continue
                short = p if len(p) <= len(q) else q
                if get_at(base, short) != get_at(merged, short):
                    conflicts.append((e, q))
                break
    if conflicts and not force:
        raise _conflict_error(conflicts)
    for e, q in conflicts:
        e["paths"].discard(q)
    for p in mine["paths"] - new_paths:
        if not managed.owned_elsewhere(p, mine) and not any(_overlaps(p, n) for n in new_paths):
            remove_at(merged, p)
            _drop_empty_parents(merged, p, managed, new_paths)
    mine["paths"] = new_paths
    mine["time"] = now_rfc3339()
    mine["apiVersion"] = api_version
    return merged


def _drop_empty_parents(obj, path, managed, new_paths):
    for i in range(len(path) - 1, 1, -1):
        parent = path[:i]
        found, val = get_at(obj, parent)
        if not found or val not in ({}, []):
            return
        if parent in new_paths or managed.owned_elsewhere(parent, None):
            return
        remove_at(obj, parent)


def _conflict_error(conflicts):
    by_manager = {}
    for e, q in conflicts:
        label = f'"{e["manager"]}"'
        if e["operation"] == "Update":
            label += f' using {e["apiVersion"]}'
        by_manager.setdefault(label, []).append(path_text(q))
    n = len(conflicts)
    if n == 1:
        (label, fields), = by_manager.items()
        text = f"Apply failed with 1 conflict: conflict with {label}: {fields[0]}"
    else:
        parts = []
        for label, fields in by_manager.items():
            parts.append(f"conflicts with {label}:\n" + "\n".join(f"- {f}" for f in fields))
        text = f"Apply failed with {n} conflicts: " + "\n".join(parts)
    causes = [{"reason": "FieldManagerConflict",
               "message": f'conflict with "{e["manager"]}"' +
               (f' using {e["apiVersion"]}' if e["operation"] == "Update" else ""),
               "field": path_text(q)} for e, q in conflicts]
    return ApiError(409, "Conflict", text, {"causes": causes})


def strip_times(entries):
    return [{k: v for k, v in e.items() if k != "time"} for e in entries or []]


__all__ = ["Managed", "apply", "record_update", "field_paths", "strip_times"]
