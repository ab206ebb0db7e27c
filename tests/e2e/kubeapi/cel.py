"""A small CEL (Common Expression Language) evaluator for CRD x-kubernetes-validations.

kube-apiserver evaluates each rule with `self` bound to the node the rule sits on
(after pruning) and refuses the object when a rule is false.  This covers the part
of CEL such rules use: literals, lists and maps, field selection and indexing,
the operators (! - * / % + < <= > >= == != in && || ?:), has(), size(), the
string functions contains/startsWith/endsWith/matches, int/string/double
conversions, and the macros all, exists, exists_one, filter and map.  A rule
outside that subset fails to compile (CelError), so a CRD that uses one is
refused instead of being checked wrongly.  Transition rules (oldSelf) are not
evaluated.  schema.py calls compile_rule and evaluate.
"""
import re


class CelError(Exception):
    """A rule that does not parse, or an evaluation error (no such key, bad types)."""


_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<num>\d+\.\d+(?:[eE][+-]?\d+)?|0x[0-9a-fA-F]+u?|\d+u?)
  | (?P<str>[rR]?(?:"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'))
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\|\||&&|==|!=|<=|>=|[<>!+\-*/%?:.,()\[\]{}])
""", re.VERBOSE)

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "0": "\0"}
_MACROS = {"all", "exists", "exists_one", "filter", "map"}


def _tokens(text):
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise CelError(f"Syntax error: token recognition error at: '{text[pos]}'")
        pos = m.end()
        if m.lastgroup != "ws":
            out.append((m.lastgroup, m.group()))
    out.append(("end", ""))
    return out


def _string_literal(tok):
    raw = tok[0] in "rR"
    body = tok[2:-1] if raw else tok[1:-1]
    if raw:
        return body
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), body)


def _number_literal(tok):
    if "." in tok:
        return float(tok)
    return int(tok.rstrip("u"), 0)


class _Parser:
    """Recursive descent over CEL's grammar; builds tuples (op, ...)."""

    def __init__(self, text):
        self.toks = _tokens(text)
        self.i = 0

    def peek(self):
        return self.toks[self.i][1] if self.toks[self.i][0] != "end" else None

    def take(self, want=None):
        kind, val = self.toks[self.i]
        if want is not None and val != want:
            raise CelError(f"Syntax error: expected '{want}', found '{val or '<EOF>'}'")
        if kind == "end":
            raise CelError("Syntax error: unexpected end of expression")
        self.i += 1
        return kind, val

    def parse(self):
        node = self.expr()
        if self.toks[self.i][0] != "end":
            raise CelError(f"Syntax error: unexpected '{self.peek()}'")
        return node

    def expr(self):
        cond = self.binary(0)
        if self.peek() == "?":
            self.take()
            yes = self.binary(0)
            self.take(":")
            return ("?:", cond, yes, self.expr())
        return cond

    _LEVELS = [("||",), ("&&",), ("==", "!=", "<", "<=", ">", ">=", "in"), ("+", "-"),
               ("*", "/", "%")]

    def binary(self, level):
        if level == len(self._LEVELS):
            return self.unary()
        node = self.binary(level + 1)
        while self.peek() in self._LEVELS[level]:
            op = self.take()[1]
            node = (op, node, self.binary(level + 1))
        return node

    def unary(self):
        if self.peek() in ("!", "-"):
            op = self.take()[1]
            return ("neg" if op == "-" else "!", self.unary())
        return self.member()

    def member(self):
        node = self.primary()
        while self.peek() in (".", "["):
            if self.take()[1] == ".":
                kind, name = self.take()
                if kind != "id":
                    raise CelError(f"Syntax error: field name expected, found '{name}'")
                if self.peek() == "(":
                    node = self.method(node, name)
                else:
                    node = ("select", node, name)
            else:
                index = self.expr()
                self.take("]")
                node = ("index", node, index)
        return node

    def method(self, target, name):
        args = self.arguments()
        if name in _MACROS:
            if len(args) != 2 or args[0][0] != "ident":
                raise CelError(f"{name}() needs a variable name and an expression")
            return ("macro", name, target, args[0][1], args[1])
        return ("call", name, target, args)

    def sequence(self, close, item):
        """Comma-separated items up to `close` (which is consumed): call arguments,
        list and map literals."""
        out = []
        while self.peek() != close:
            out.append(item())
            if self.peek() != close:
                self.take(",")
        self.take(close)
        return out

    def arguments(self):
        self.take("(")
        return self.sequence(")", self.expr)

    def map_entry(self):
        key = self.expr()
        self.take(":")
        return key, self.expr()

    def primary(self):
        kind, val = self.take()
        if kind == "num":
            return ("lit", _number_literal(val))
        if kind == "str":
            return ("lit", _string_literal(val))
        if kind == "id":
            if val in ("true", "false"):
                return ("lit", val == "true")
            if val == "null":
                return ("lit", None)
            if self.peek() == "(":
                args = self.arguments()
                if val == "has":
                    if len(args) != 1 or args[0][0] != "select":
                        raise CelError("invalid argument to has() macro")
                    return ("has", args[0][1], args[0][2])
                return ("call", val, None, args)
            return ("ident", val)
        if val == "(":
            node = self.expr()
            self.take(")")
            return node
        if val == "[":
            return ("list", self.sequence("]", self.expr))
        if val == "{":
            return ("map", self.sequence("}", self.map_entry))
        raise CelError(f"Syntax error: unexpected '{val}'")


_FUNCTIONS = {"size", "contains", "startsWith", "endsWith", "matches", "int", "double", "string"}


def _check_functions(node):
    if isinstance(node, tuple):
        if node[0] == "call" and node[1] not in _FUNCTIONS:
            raise CelError(f"undeclared reference to '{node[1]}' (in container '')")
        for x in node[1:]:
            _check_functions(x)
    elif isinstance(node, list):
        for x in node:
            _check_functions(x)


def compile_rule(text):
    """The parsed rule; raises CelError when it is not CEL this module evaluates."""
    node = _Parser(text).parse()
    _check_functions(node)
    return node


def _same_type(a, b):
    numeric = (int, float)
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool)
    if isinstance(a, numeric) and isinstance(b, numeric):
        return True
    return type(a) is type(b) or a is None or b is None


def _equal(a, b):
    if not _same_type(a, b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return a == b


def _type_name(v):
    if isinstance(v, bool):
        return "bool"
    return {int: "int", float: "double", str: "string", list: "list", dict: "map",
            type(None): "null_type"}.get(type(v), type(v).__name__)


def _no_overload(op, *vals):
    return CelError(f"no such overload: {op}({', '.join(_type_name(v) for v in vals)})")


def _arith(op, a, b):
    if op == "+" and (isinstance(a, str) and isinstance(b, str) or
                      isinstance(a, list) and isinstance(b, list)):
        return a + b
    if isinstance(a, bool) or isinstance(b, bool) or not (
            isinstance(a, (int, float)) and isinstance(b, (int, float))) or \
            type(a) is not type(b):
        raise _no_overload(f"_{op}_", a, b)
    if op in ("/", "%") and b == 0 and isinstance(a, int):
        raise CelError("division by zero" if op == "/" else "modulus by zero")
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        return a / b if isinstance(a, float) else int(a / b)
    return a - b * int(a / b)


def _compare(op, a, b):
    ok = (isinstance(a, str) and isinstance(b, str)) or (
        not isinstance(a, bool) and not isinstance(b, bool) and
        isinstance(a, (int, float)) and isinstance(b, (int, float))) or (
        isinstance(a, bool) and isinstance(b, bool))
    if not ok:
        raise _no_overload(f"_{op}_", a, b)
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def _size(v):
    if isinstance(v, (str, list, dict)) or isinstance(v, bytes):
        return len(v)
    raise _no_overload("size", v)


def _call(name, target, args):
    vals = ([target] if target is not _NONE else []) + args
    if name == "size" and len(vals) == 1:
        return _size(vals[0])
    if name in ("contains", "startsWith", "endsWith", "matches") and len(vals) == 2 and \
            all(isinstance(v, str) for v in vals):
        s, x = vals
        if name == "contains":
            return x in s
        if name == "startsWith":
            return s.startswith(x)
        if name == "endsWith":
            return s.endswith(x)
        return re.search(x, s) is not None
    if name == "int" and len(vals) == 1:
        try:
            return int(vals[0])
        except (TypeError, ValueError):
            raise CelError(f"cannot convert {vals[0]!r} to int") from None
    if name == "double" and len(vals) == 1:
        return float(vals[0])
    if name == "string" and len(vals) == 1:
        v = vals[0]
        return ("true" if v else "false") if isinstance(v, bool) else str(v)
    raise _no_overload(name, *vals)


_NONE = object()


class _Eval:
    def __init__(self, env):
        self.env = env

    def run(self, node):
        op = node[0]
        fn = getattr(self, "_" + {"?:": "cond", "!": "not", "||": "or", "&&": "and",
                                  "==": "eq", "!=": "ne", "in": "in"}.get(op, op), None)
        if fn is not None:
            return fn(*node[1:])
        if op in ("+", "-", "*", "/", "%"):
            return _arith(op, self.run(node[1]), self.run(node[2]))
        if op in ("<", "<=", ">", ">="):
            return _compare(op, self.run(node[1]), self.run(node[2]))
        raise CelError(f"unsupported expression {op}")

    def _lit(self, value):
        return value

    def _ident(self, name):
        if name not in self.env:
            raise CelError(f"undeclared reference to '{name}'")
        return self.env[name]

    def _list(self, items):
        return [self.run(x) for x in items]

    def _map(self, entries):
        return {self.run(k): self.run(v) for k, v in entries}

    def _select(self, target, name):
        obj = self.run(target)
        if not isinstance(obj, dict):
            raise _no_overload("_._", obj)
        if name not in obj:
            raise CelError(f"no such key: {name}")
        return obj[name]

    def _has(self, target, name):
        obj = self.run(target)
        if not isinstance(obj, dict):
            raise _no_overload("has", obj)
        return name in obj

    def _index(self, target, index):
        obj, key = self.run(target), self.run(index)
        if isinstance(obj, list) and isinstance(key, int) and not isinstance(key, bool):
            if not 0 <= key < len(obj):
                raise CelError(f"index out of bounds: {key}")
            return obj[key]
        if isinstance(obj, dict):
            if key not in obj:
                raise CelError(f"no such key: {key}")
            return obj[key]
        raise _no_overload("_[_]", obj, key)

    def _neg(self, x):
        v = self.run(x)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _no_overload("-_", v)
        return -v

    def _bool(self, x):
        v = self.run(x)
        if not isinstance(v, bool):
            raise _no_overload("_&&_", v)
        return v

    def _not(self, x):
        return not self._bool(x)

    def _cond(self, c, yes, no):
        return self.run(yes) if self._bool(c) else self.run(no)

    def _logic(self, a, b, short):
        """CEL's commutative && and ||: `short` on either side decides, even when the
        other side is an error."""
        err = None
        for side in (a, b):
            try:
                if self._bool(side) == short:
                    return short
            except CelError as e:
                err = err or e
        if err:
            raise err
        return not short

    def _or(self, a, b):
        return self._logic(a, b, True)

    def _and(self, a, b):
        return self._logic(a, b, False)

    def _eq(self, a, b):
        return _equal(self.run(a), self.run(b))

    def _ne(self, a, b):
        return not self._eq(a, b)

    def _in(self, a, b):
        x, coll = self.run(a), self.run(b)
        if isinstance(coll, list):
            return any(_equal(x, y) for y in coll)
        if isinstance(coll, dict):
            return x in coll
        raise _no_overload("@in", x, coll)

    def _call(self, name, target, args):
        t = _NONE if target is None else self.run(target)
        return _call(name, t, [self.run(a) for a in args])

    def _macro(self, name, target, var, body):
        coll = self.run(target)
        if not isinstance(coll, (list, dict)):
            raise _no_overload(name, coll)
        items = list(coll)      # a map's macros range over its keys
        saved = self.env.get(var, _NONE)
        try:
            results = []
            for item in items:
                self.env[var] = item
                results.append((item, self.run(body)))
        finally:
            if saved is _NONE:
                self.env.pop(var, None)
            else:
                self.env[var] = saved
        if name == "map":
            return [r for _, r in results]
        flags = []
        for _, r in results:
            if not isinstance(r, bool):
                raise _no_overload(name, r)
            flags.append(r)
        if name == "all":
            return all(flags)
        if name == "exists":
            return any(flags)
        if name == "exists_one":
            return sum(flags) == 1
        return [item for (item, _), keep in zip(results, flags) if keep]


def uses_old_self(node):
    """Whether a compiled rule is a transition rule (refers to oldSelf)."""
    if isinstance(node, tuple):
        if node == ("ident", "oldSelf"):
            return True
        return any(uses_old_self(x) for x in node)
    if isinstance(node, list):
        return any(uses_old_self(x) for x in node)
    return False


def evaluate(compiled, self_value):
    """The rule's value with `self` bound; raises CelError on an evaluation error."""
    return _Eval({"self": self_value}).run(compiled)
