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


_SPECIAL = set("=!(),<>")
_KEY_MSG = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
            "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
_VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, "
              "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. "
              "'MyValue',  or 'my_value',  or '12345', regex used for validation is "
              "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
_OPERATORS = {"in": "in", "notin": "notin", "=": "=", "==": "=", "!=": "!=", ">": ">",
              "<": "<"}


def _tokens(text):
    """apimachinery's lexer: (kind, literal) with kind ident, op, (, ), ",", ! or end."""
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif text.startswith(("==", "!="), i):
            out.append(("op", text[i:i + 2]))
            i += 2
        elif ch in "=<>":
            out.append(("op", ch))
            i += 1
        elif ch in "(),!":
            out.append((ch, ch))
            i += 1
        else:
            j = i
            while j < len(text) and not text[j].isspace() and text[j] not in _SPECIAL:
                j += 1
            out.append(("ident", text[i:j]))
            i = j
    out.append(("end", ""))
    return out


class _Parser:
    """The recursive descent of apimachinery/pkg/labels/selector.go, with its messages."""

    def __init__(self, text):
        self.toks = _tokens(text)
        self.pos = 0

    def peek(self):
        return self.toks[self.pos]

    def take(self):
        tok = self.toks[self.pos]
        self.pos = min(self.pos + 1, len(self.toks) - 1)
        return tok

    def parse(self):
        reqs = []
        while True:
            kind, lit = self.peek()
            if kind == "end":
                return reqs
            if kind not in ("ident", "!"):
                raise ValueError(f"found '{lit}', expected: !, identifier, or 'end of string'")
            try:
                reqs.append(self.requirement())
            except ValueError as exc:
                raise ValueError(f"unable to parse requirement: {exc}") from None
            kind, lit = self.take()
            if kind == "end":
                return reqs
            if kind != ",":
                raise ValueError(f"found '{lit}', expected: ',' or 'end of string'")
            if self.peek()[0] not in ("ident", "!"):
                raise ValueError(f"found '{self.peek()[1]}', expected: identifier after ','")

    def requirement(self):
        negate = False
        kind, lit = self.take()
        if kind == "!":
            negate = True
            kind, lit = self.take()
            if kind != "ident":
                raise ValueError(f"found '{lit}', expected: identifier after '!'")
        if kind != "ident":
            raise ValueError(f"found '{lit}', expected: identifier")
        key = lit
        if not _KEY.match(key) or len(key.split("/")[-1]) > 63:
            raise ValueError(f'key: Invalid value: "{key}": {_KEY_MSG}')
        if self.peek()[0] in ("end", ","):
            return ("!" if negate else "exists", key, None)
        if negate:
            raise ValueError(f"found '{self.peek()[1]}', expected: ',' or 'end of string'")
        kind, lit = self.take()
        if (kind, lit) not in (("op", "="), ("op", "=="), ("op", "!="), ("op", ">"),
                               ("op", "<"), ("ident", "in"), ("ident", "notin")):
            raise ValueError(f"found '{lit}', expected: in, notin, =, ==, !=, gt, lt")
        op = _OPERATORS[lit]
        if op in ("in", "notin"):
            return (op, key, self.values())
        kind, lit = self.peek()
        value = ""
        if kind == "ident":
            value = self.take()[1]
        elif kind not in ("end", ","):
            raise ValueError(f"found '{lit}', expected: identifier")
        if op in (">", "<"):
            if not re.match(r"^-?\d+$", value):
                raise ValueError("for 'Gt', 'Lt' operators, the value must be an integer")
            return (op, key, int(value))
        self._check_value(value, 0)
        return (op, key, value)

    def values(self):
        kind, lit = self.take()
        if kind != "(":
            raise ValueError(f"found '{lit}' expected: '('")
        kind, lit = self.peek()
        if kind == ")":
            self.take()
            return {""}
        if kind not in ("ident", ","):
            raise ValueError(f"found '{lit}', expected: ',', ')' or identifier")
        values = []
        while True:
            kind, lit = self.peek()
            if kind == "ident":
                values.append(self.take()[1])
                kind, lit = self.peek()
                if kind == ")":
                    break
                if kind != ",":
                    raise ValueError(f"found '{lit}', expected: ',' or ')'")
                self.take()
            elif kind == ",":
                values.append("")
                self.take()
            elif kind == ")":
                values.append("")
                break
            else:
                raise ValueError(f"found '{lit}', expected: ',', or identifier")
        kind, lit = self.take()
        if kind != ")":
            raise ValueError(f"found '{lit}', expected: ')'")
        for i, v in enumerate(values):
            self._check_value(v, i)
        return set(values)

    @staticmethod
    def _check_value(value, index):
        if len(value) > 63 or not _VALUE.match(value):
            raise ValueError(f'values[{index}]: Invalid value: "{value}": {_VALUE_MSG}')


class LabelSelector:
    """A parsed label selector; match(labels_dict) -> bool."""

    def __init__(self, text):
        self.text = text or ""
        try:
            self.reqs = _Parser(self.text).parse()
        except ValueError as exc:
            raise bad_request(str(exc)) from None

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


def _split_terms(text):
    """Field selector terms: comma-separated (a backslash escapes a comma)."""
    terms, cur, escaped = [], "", False
    for ch in text:
        if escaped:
            cur += ch
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == ",":
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    terms.append(cur)
    return [t.strip() for t in terms]


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
