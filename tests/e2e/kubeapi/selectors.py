"""Label and field selectors with apimachinery's grammar.

Label selectors: comma-joined terms (AND) of the forms k=v, k==v, k!=v,
k in (a,b), k notin (a,b), k, !k, k>n, k<n (apimachinery/pkg/labels).
Field selectors: f=v, f==v, f!=v; which fields are allowed depends on the
resource (the registry passes them in), anything else is a 400.
"""
import re

from .errors import bad_request

_KEY = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?/)?"
                  r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _split_terms(text):
    """Splits on commas that are not inside parentheses."""
    terms, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    terms.append(cur)
    return [t.strip() for t in terms]


def _check_key(key, raw):
    if not key or not _KEY.match(key) or len(key.split("/")[-1]) > 63:
        raise bad_request(f"unable to parse requirement: invalid label key \"{key}\": "
                          f"in selector \"{raw}\"")


def _check_value(value, raw):
    if len(value) > 63 or not _VALUE.match(value):
        raise bad_request(f"unable to parse requirement: invalid label value: \"{value}\": "
                          f"in selector \"{raw}\"")


class LabelSelector:
    """A parsed label selector; match(labels_dict) -> bool."""

    def __init__(self, text):
        self.text = text or ""
        self.reqs = []
        if not self.text.strip():
            return
        for term in _split_terms(self.text):
            if not term:
                raise bad_request(f"found '', expected: identifier in selector \"{self.text}\"")
            self.reqs.append(self._parse(term))

    def _parse(self, term):
        raw = self.text
        m = re.match(r"^(\S+?)\s+(in|notin)\s*\((.*)\)$", term)
        if m:
            key, op, vals = m.group(1), m.group(2), m.group(3)
            _check_key(key, raw)
            values = [v.strip() for v in vals.split(",")] if vals.strip() else []
            for v in values:
                _check_value(v, raw)
            return (op, key, set(values))
        for op in ("==", "!=", "=", ">", "<"):
            if op in term:
                key, value = term.split(op, 1)
                key, value = key.strip(), value.strip()
                _check_key(key, raw)
                if op in (">", "<"):
                    if not re.match(r"^-?\d+$", value):
                        raise bad_request(f"unable to parse requirement: for 'Gt', 'Lt' "
                                          f"operators, the value must be an integer: \"{raw}\"")
                    return (op, key, int(value))
                _check_value(value, raw)
                return ("=" if op == "==" else op, key, value)
        if term.startswith("!"):
            key = term[1:].strip()
            _check_key(key, raw)
            return ("!", key, None)
        _check_key(term, raw)
        return ("exists", term, None)

    def empty(self):
        return not self.reqs

    def match(self, labels):
        labels = labels or {}
        for op, key, val in self.reqs:
            has = key in labels
            cur = labels.get(key)
            if op == "=" and not (has and cur == val):
                return False
            if op == "!=" and has and cur == val:
                return False
            if op == "in" and not (has and cur in val):
                return False
            if op == "notin" and has and cur in val:
                return False
            if op == "exists" and not has:
                return False
            if op == "!" and has:
                return False
            if op in (">", "<"):
                if not has or not re.match(r"^-?\d+$", cur or ""):
                    return False
                if op == ">" and not int(cur) > val:
                    return False
                if op == "<" and not int(cur) < val:
                    return False
        return True


def _field_value(obj, path):
    cur = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


class FieldSelector:
    """A parsed field selector; allowed is the set of supported field labels,
    aliases maps a supported label to the object path it reads."""

    def __init__(self, text, allowed, aliases=None):
        self.text = text or ""
        self.reqs = []
        self.aliases = aliases or {}
        if not self.text.strip():
            return
        for term in _split_terms(self.text):
            for op in ("==", "!=", "="):
                if op in term:
                    field, value = term.split(op, 1)
                    field = field.strip()
                    break
            else:
                raise bad_request(f"invalid selector: '{self.text}'; can't understand '{term}'")
            if field not in allowed:
                raise bad_request(f'field label not supported: {field}')
            self.reqs.append(("!=" if op == "!=" else "=", field, value))

    def empty(self):
        return not self.reqs

    def match(self, obj):
        for op, field, value in self.reqs:
            cur = _field_value(obj, self.aliases.get(field, field))
            if (cur == value) != (op == "="):
                return False
        return True
