"""The PATCH body formats: JSON merge patch, JSON patch and a small strategic merge.

merge_patch follows RFC 7386 (null deletes, lists replaced whole).
json_patch follows RFC 6902 (add, remove, replace, move, copy, test); a
failing operation raises PatchFailed (the server answers 422), a malformed
document raises PatchMalformed (400).
strategic_merge is RFC 7386 plus the list merge keys of the few built-in
fields the emulator serves (finalizers as a set, ownerReferences by uid,
ServiceAccount secrets by name) and the $patch: delete/replace directives.
"""

from .errors import clone


class PatchFailed(Exception):
    pass


class PatchMalformed(Exception):
    pass


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return clone(patch)
    result = clone(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _unescape(token):
    return token.replace("~1", "/").replace("~0", "~")


def _pointer(path):
    if path == "":
        return []
    if not isinstance(path, str) or not path.startswith("/"):
        raise PatchMalformed(f"invalid JSON pointer: {path!r}")
    return [_unescape(t) for t in path[1:].split("/")]


def _parent(doc, tokens, path):
    cur = doc
    for t in tokens[:-1]:
        if isinstance(cur, dict):
            if t not in cur:
                raise PatchFailed(f"doc is missing path: \"{path}\": missing value")
            cur = cur[t]
        elif isinstance(cur, list):
            try:
                cur = cur[int(t)]
            except (ValueError, IndexError):
                raise PatchFailed(f"doc is missing path: \"{path}\": missing value")
        else:
            raise PatchFailed(f"doc is missing path: \"{path}\": missing value")
    return cur


def _get(doc, path):
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list):
        try:
            return parent[int(last)]
        except (ValueError, IndexError):
            pass
    raise PatchFailed(f"doc is missing path: \"{path}\": missing value")


def _add(doc, path, value):
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        else:
            try:
                idx = int(last)
            except ValueError:
                raise PatchFailed(f"add operation: invalid index {last!r} in \"{path}\"")
            if idx < 0 or idx > len(parent):
                raise PatchFailed(f"add operation does not apply: doc is missing path: \"{path}\"")
            parent.insert(idx, value)
    else:
        raise PatchFailed(f"add operation does not apply: doc is missing path: \"{path}\"")
    return doc


def _remove(doc, path):
    tokens = _pointer(path)
    if not tokens:
        raise PatchFailed("remove operation: cannot remove the whole document")
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list):
        try:
            return parent.pop(int(last))
        except (ValueError, IndexError):
            pass
    raise PatchFailed(f"remove operation does not apply: doc is missing path: \"{path}\": "
                      "missing value")


def json_patch(target, ops):
    if not isinstance(ops, list):
        raise PatchMalformed("json patch must be a list of operations")
    if len(ops) > 10000:
        raise PatchMalformed(f"The allowed maximum operations in a JSON patch is 10000, "
                             f"got {len(ops)}")
    doc = clone(target)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchMalformed("json patch operation lacks 'op' or 'path'")
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchMalformed(f"{kind} operation lacks 'value'")
        if kind == "add":
            doc = _add(doc, path, clone(op["value"]))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            tokens = _pointer(path)
            if not tokens:
                doc = clone(op["value"])
            else:
                parent = _parent(doc, tokens, path)
                if isinstance(parent, list):
                    parent[int(tokens[-1])] = clone(op["value"])
                else:
                    parent[tokens[-1]] = clone(op["value"])
        elif kind == "move":
            value = _remove(doc, op.get("from", ""))
            doc = _add(doc, path, value)
        elif kind == "copy":
            doc = _add(doc, path, clone(_get(doc, op.get("from", ""))))
        elif kind == "test":
            if _get(doc, path) != op["value"]:
                raise PatchFailed(f"testing value {path} failed: test failed")
        else:
            raise PatchMalformed(f"Unexpected kind: {kind}")
    return doc


# Lists that strategic merge merges instead of replacing: path -> merge key
# (None: a set of scalars).
_MERGE_LISTS = {
    ("metadata", "finalizers"): None,
    ("metadata", "ownerReferences"): "uid",
    ("secrets",): "name",
    ("imagePullSecrets",): "name",
}


def strategic_merge(target, patch, path=()):
    if not isinstance(patch, dict):
        return clone(patch)
    if patch.get("$patch") == "replace":
        return {k: v for k, v in clone(patch).items() if k != "$patch"}
    result = clone(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        sub = path + (key,)
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and value.get("$patch") == "delete":
            result.pop(key, None)
        elif isinstance(value, list) and sub in _MERGE_LISTS:
            result[key] = _merge_list(result.get(key) or [], value, _MERGE_LISTS[sub])
        else:
            result[key] = strategic_merge(result.get(key), value, sub)
    return result


def _merge_list(current, patch, key):
    out = clone(current)
    for item in patch:
        if key is None:
            if item not in out:
                out.append(item)
            continue
        if not isinstance(item, dict):
            raise PatchMalformed("strategic merge list item is not an object")
        idx = next((i for i, c in enumerate(out) if c.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
        elif idx is None:
            out.append(clone(item))
        else:
            out[idx] = merge_patch(out[idx], item)
    return out
