"""Structural-schema pruning and validation of custom resources.

Like kube-apiserver for CRDs: fields the openAPIV3Schema does not declare
are dropped (or refused with fieldValidation=Strict), unless a node carries
x-kubernetes-preserve-unknown-fields; nulls in non-nullable fields are
dropped; missing properties with a default get it; type, required, enum,
bounds, length and pattern are checked and reported as 422 causes.
x-kubernetes-validations rules (CEL, cel.py) are evaluated on the pruned
nodes after that, unless a type error blocks them, as the apiserver does.
metadata is reduced to ObjectMeta's fields.
"""
import json
import re

from . import cel
from .errors import clone

OBJECT_META = {"name", "generateName", "namespace", "selfLink", "uid", "resourceVersion",
               "generation", "creationTimestamp", "deletionTimestamp",
               "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences",
               "finalizers", "managedFields"}


def _type_ok(value, typ, schema):
    if schema.get("x-kubernetes-int-or-string"):
        return isinstance(value, (int, str)) and not isinstance(value, bool)
    if typ is None:
        return True
    if typ == "object":
        return isinstance(value, dict)
    if typ == "array":
        return isinstance(value, list)
    if typ == "string":
        return isinstance(value, str)
    if typ == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if typ == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if typ == "boolean":
        return isinstance(value, bool)
    return True


def _json_type(value):
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else "null"


def _render(value):
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return '"' + type(value).__name__.replace("dict", "object").replace("list", "array") + '"'
    return str(value)


_COMPILED = {}


def _compiled(rule):
    if rule not in _COMPILED:
        _COMPILED[rule] = cel.compile_rule(rule)
    return _COMPILED[rule]


# a rule's `reason` -> how field.Error renders it (the default is FieldValueInvalid)
_RULE_REASONS = {"FieldValueForbidden": "Forbidden: {m}",
                 "FieldValueRequired": "Required value: {m}",
                 "FieldValueDuplicate": "Duplicate value: {m}"}


_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")

# schema errors after which kube-apiserver does not evaluate CEL rules, and what it says
_BLOCKING = ("FieldValueTypeInvalid", "FieldValueNotSupported")
_NOT_CHECKED = ("FieldValueInvalid", "<nil>", "Invalid value: null: some validation rules were "
                "not checked because the object was invalid; correct the existing errors to "
                "complete validation")


class Walker:
    def __init__(self, body_prefix=""):
        self.unknown = []
        self.errors = []
        self.rule_errors = []   # CEL failures, reported after the schema's own errors
        # a status subresource write validates status on its own: the "in body" text
        # names conditions[0].reason, the field status.conditions[0].reason
        self.body_prefix = body_prefix

    def in_body(self, path):
        if self.body_prefix and path.startswith(self.body_prefix):
            return path[len(self.body_prefix):]
        return path

    def walk(self, value, schema, path):
        """Returns the pruned value (a new object; the input is not changed)."""
        if not isinstance(schema, dict):
            return value
        typ = schema.get("type")
        if not _type_ok(value, typ, schema):
            got = f'"{_json_type(value)}"'     # the apiserver names the type, not the value
            self.errors.append(("FieldValueTypeInvalid", path,
                                f"Invalid value: {got}: {self.in_body(path)} in body must be "
                                f"of type {typ}: {got}"))
            return value
        if schema.get("format") == "date-time" and isinstance(value, str) and \
                not _DATE_TIME.match(value):
            self.errors.append(("FieldValueTypeInvalid", path,
                                f'Invalid value: "{value}": {self.in_body(path)} in body must '
                                f'be of type date-time: "{value}"'))
            return value
        if "enum" in schema and value not in schema["enum"]:
            allowed = ", ".join(_render(e) for e in schema["enum"])
            self.errors.append(("FieldValueNotSupported", path,
                                f"Unsupported value: {_render(value)}: supported values: "
                                f"{allowed}"))
        self._bounds(value, schema, path)
        if isinstance(value, dict):
            out = self._object(value, schema, path)
        elif isinstance(value, list):
            items = schema.get("items")
            out = [self.walk(v, items, f"{path}[{i}]") for i, v in enumerate(value)]
            self._list_type(out, schema, path)
        else:
            out = value
        self._rules(out, schema, path)
        return out

    def _list_type(self, items, schema, path):
        """x-kubernetes-list-type map and set: a repeated key (or item) is refused, as
        the apiserver's structurallisttype check renders it (Go's %#v of the keys)."""
        kind = schema.get("x-kubernetes-list-type")
        if kind not in ("map", "set"):
            return
        seen = set()
        for i, item in enumerate(items):
            if kind == "map" and isinstance(item, dict):
                keys = schema.get("x-kubernetes-list-map-keys") or []
                ident = json.dumps([item.get(k) for k in keys])
                shown = json.dumps({k: item[k] for k in keys if k in item},
                                   separators=(",", ":"))
            else:
                ident = shown = json.dumps(item, sort_keys=True, separators=(",", ":"))
            if ident in seen:
                self.errors.append(("FieldValueDuplicate", f"{path}[{i}]",
                                    f"Duplicate value: {shown}"))
            seen.add(ident)

    def _rules(self, value, schema, path):
        """kube-apiserver's CEL validation of one node: a false rule is a cause at the
        node (or its fieldPath) with the rule's message ("failed rule: <rule>" without
        one), showing the node's value only when it is a scalar."""
        for rule in schema.get("x-kubernetes-validations") or []:
            compiled = _compiled(rule["rule"])
            if cel.uses_old_self(compiled):
                continue    # transition rules need the old object; not emulated
            where = path + rule.get("fieldPath", "") if rule.get("fieldPath") else path
            try:
                ok = cel.evaluate(compiled, value) is True
                message = rule.get("message") or f"failed rule: {rule['rule']}"
            except cel.CelError as e:
                ok, message = False, str(e)
            if ok:
                continue
            reason = rule.get("reason") or "FieldValueInvalid"
            shown = "" if isinstance(value, (dict, list)) else _render(value) + ": "
            text = _RULE_REASONS.get(reason, "Invalid value: {v}{m}").format(v=shown, m=message)
            self.rule_errors.append((reason, where.lstrip("."), text))

    def _bounds(self, value, schema, path):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if "minimum" in schema and value < schema["minimum"]:
                self.errors.append(("FieldValueInvalid", path,
                                    f"Invalid value: {value}: {self.in_body(path)} in body "
                                    f"should be greater than or equal to {schema['minimum']}"))
            if "maximum" in schema and value > schema["maximum"]:
                self.errors.append(("FieldValueInvalid", path,
                                    f"Invalid value: {value}: {self.in_body(path)} in body "
                                    f"should be less than or equal to {schema['maximum']}"))
        if isinstance(value, str):
            # kube-openapi's string validator stops at the first failure, in this order
            where = self.in_body(path)
            if "maxLength" in schema and len(value) > schema["maxLength"]:
                self.errors.append(("FieldValueTooLong", path,
                                    f"Too long: may not be more than {schema['maxLength']} "
                                    "bytes"))
            elif "minLength" in schema and len(value) < schema["minLength"]:
                self.errors.append(("FieldValueInvalid", path,
                                    f"Invalid value: \"{value}\": {where} in body should be at "
                                    f"least {schema['minLength']} chars long"))
            elif "pattern" in schema and not re.search(schema["pattern"], value):
                self.errors.append(("FieldValueInvalid", path,
                                    f"Invalid value: \"{value}\": {where} in body should match "
                                    f"'{schema['pattern']}'"))

    def _object(self, value, schema, path):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        keep_unknown = schema.get("x-kubernetes-preserve-unknown-fields") or extra is True
        out = {}
        for key, sub in value.items():
            sub_path = f"{path}.{key}" if path else key
            if sub is None and not (props.get(key) or {}).get("nullable"):
                continue
            if key in props:
                out[key] = self.walk(sub, props[key], sub_path)
            elif isinstance(extra, dict):
                out[key] = self.walk(sub, extra, sub_path)
            elif keep_unknown:
                out[key] = sub
            elif schema.get("x-kubernetes-embedded-resource") and key in ("apiVersion", "kind",
                                                                          "metadata"):
                out[key] = sub
            else:
                self.unknown.append(sub_path)
        for key, sub in props.items():
            if key not in out and isinstance(sub, dict) and "default" in sub:
                out[key] = self.walk(clone(sub["default"]), sub,
                                     f"{path}.{key}" if path else key)
        for req in schema.get("required") or []:
            if req not in out:
                self.errors.append(("FieldValueRequired", f"{path}.{req}" if path else req,
                                    "Required value"))
        return out


def prune_custom_resource(obj, schema, status_subresource=False):
    """(pruned object, unknown field paths, errors) for a CR against its schema."""
    w = Walker("status." if status_subresource else "")
    out = {}
    for key in ("apiVersion", "kind"):
        if key in obj:
            out[key] = obj[key]
    meta = obj.get("metadata") or {}
    out["metadata"] = {k: v for k, v in meta.items() if k in OBJECT_META}
    w.unknown.extend(f"metadata.{k}" for k in meta if k not in OBJECT_META)
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    if schema is None:
        out.update(body)
        return out, w.unknown, w.errors
    root = dict(schema)
    props = dict(root.get("properties") or {})
    for k in ("apiVersion", "kind", "metadata"):
        props.pop(k, None)
    root["properties"] = props
    root.pop("required", None)
    out.update(w.walk(body, root, ""))
    for req in schema.get("required") or []:
        if req not in out and req not in ("apiVersion", "kind", "metadata"):
            w.errors.append(("FieldValueRequired", req, "Required value"))
    if any(reason in _BLOCKING for reason, _, _ in w.errors):
        if any(schema_has_rules(schema)):
            w.errors.append(_NOT_CHECKED)
    else:
        w.errors.extend(w.rule_errors)
    return out, w.unknown, w.errors


def schema_has_rules(schema):
    """Yields True for each x-kubernetes-validations list in the schema (any() of it)."""
    if not isinstance(schema, dict):
        return
    if schema.get("x-kubernetes-validations"):
        yield True
    for sub in (schema.get("properties") or {}).values():
        yield from schema_has_rules(sub)
    for key in ("items", "additionalProperties"):
        yield from schema_has_rules(schema.get(key))


def rule_compile_errors(schema, path="spec.validation.openAPIV3Schema"):
    """(field, message) for each x-kubernetes-validations rule of a schema that does
    not compile (here: is outside the CEL that cel.py evaluates)."""
    out = []
    if not isinstance(schema, dict):
        return out
    for i, rule in enumerate(schema.get("x-kubernetes-validations") or []):
        try:
            _compiled(rule.get("rule", ""))
        except cel.CelError as e:
            shown = json.dumps({"Rule": rule.get("rule", ""), "Message": rule.get("message", ""),
                                "MessageExpression": rule.get("messageExpression", ""),
                                "Reason": rule.get("reason"),
                                "FieldPath": rule.get("fieldPath", ""),
                                "OptionalOldSelf": rule.get("optionalOldSelf")},
                               separators=(",", ":"))
            out.append((f"{path}.x-kubernetes-validations[{i}].rule",
                        f"{shown}: compilation failed: ERROR: <input>: {e}"))
    for key, sub in (schema.get("properties") or {}).items():
        out += rule_compile_errors(sub, f"{path}.properties[{key}]")
    for key in ("items", "additionalProperties"):
        out += rule_compile_errors(schema.get(key), f"{path}.{key}")
    return out


def prune_builtin(obj, top_fields):
    """Typed decoding drops unknown top-level fields of built-in kinds."""
    unknown = []
    out = {}
    for k, v in obj.items():
        if k in ("apiVersion", "kind"):
            out[k] = v
        elif k == "metadata":
            meta = v or {}
            out[k] = {mk: mv for mk, mv in meta.items() if mk in OBJECT_META}
            unknown.extend(f"metadata.{mk}" for mk in meta if mk not in OBJECT_META)
        elif top_fields is None or k in top_fields:
            out[k] = v
        else:
            unknown.append(k)
    return out, unknown
