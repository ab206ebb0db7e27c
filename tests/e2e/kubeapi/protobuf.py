"""Decoding of the protobuf bodies kubectl's typed generators send.

`kubectl create configmap|secret|namespace|serviceaccount` and `kubectl auth
can-i` POST application/vnd.kubernetes.protobuf and do not fall back to JSON
on a 415.
The body is the magic "k8s\\0" followed by a runtime.Unknown message
(1: typeMeta {1: apiVersion, 2: kind}, 2: raw) whose raw bytes are the
object's message (k8s.io/api generated.proto field numbers).  Only those
kinds are decoded, into the same JSON the server stores; responses stay
JSON, which kubectl accepts.
"""
import base64

MAGIC = b"k8s\x00"


class ProtobufError(Exception):
    pass


def _varint(buf, i):
    value = shift = 0
    while True:
        if i >= len(buf):
            raise ProtobufError("truncated varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise ProtobufError("varint too long")


def fields(buf):
    """[(field number, value)]: ints for varints, bytes for length-delimited fields."""
    out, i = [], 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            n, i = _varint(buf, i)
            if i + n > len(buf):
                raise ProtobufError("truncated field")
            value, i = buf[i:i + n], i + n
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
        out.append((num, value))
    return out


def _text(b):
    try:
        return b.decode()
    except (UnicodeDecodeError, AttributeError):
        raise ProtobufError("invalid string") from None


def _map(entries, binary=False):
    out = {}
    for entry in entries:
        f = dict(fields(entry))
        value = f.get(2, b"")
        out[_text(f.get(1, b""))] = base64.b64encode(value).decode() if binary \
            else _text(value)
    return out


def _object_meta(buf):
    meta, labels, annotations, finalizers = {}, [], [], []
    names = {1: "name", 2: "generateName", 3: "namespace", 6: "resourceVersion"}
    for num, value in fields(buf):
        if num in names and value:
            meta[names[num]] = _text(value)
        elif num == 11:
            labels.append(value)
        elif num == 12:
            annotations.append(value)
        elif num == 14:
            finalizers.append(_text(value))
    if labels:
        meta["labels"] = _map(labels)
    if annotations:
        meta["annotations"] = _map(annotations)
    if finalizers:
        meta["finalizers"] = finalizers
    return meta


def _decode_object(kind, raw):
    obj = {}
    maps = {}
    for num, value in fields(raw):
        if num == 1:
            obj["metadata"] = _object_meta(value)
        else:
            maps.setdefault(num, []).append(value)
    if kind == "ConfigMap":
        if 2 in maps:
            obj["data"] = _map(maps[2])
        if 3 in maps:
            obj["binaryData"] = _map(maps[3], binary=True)
        if 4 in maps:
            obj["immutable"] = bool(maps[4][-1])
    elif kind == "Secret":
        if 2 in maps:
            obj["data"] = _map(maps[2], binary=True)
        if 3 in maps and maps[3][-1]:
            obj["type"] = _text(maps[3][-1])
        if 4 in maps:
            obj["stringData"] = _map(maps[4])
        if 5 in maps:
            obj["immutable"] = bool(maps[5][-1])
    elif kind == "Namespace":
        fins = [_text(v) for spec in maps.get(2, []) for n, v in fields(spec) if n == 1]
        if fins:
            obj["spec"] = {"finalizers": fins}
    elif kind == "ServiceAccount":
        pulls = [{"name": _text(dict(fields(ref)).get(1, b""))} for ref in maps.get(3, [])]
        if pulls:
            obj["imagePullSecrets"] = pulls
        if 4 in maps:
            obj["automountServiceAccountToken"] = bool(maps[4][-1])
    elif kind == "SelfSubjectAccessReview":       # kubectl auth can-i
        names = {1: "namespace", 2: "verb", 3: "group", 4: "version", 5: "resource",
                 6: "subresource", 7: "name"}
        attrs = {}
        for spec in maps.get(2, []):
            for n, v in fields(spec):
                if n == 1:
                    attrs = {names[k]: _text(x) for k, x in fields(v) if k in names and x}
        obj["spec"] = {"resourceAttributes": attrs} if attrs else {}
    else:
        raise ProtobufError(f"protobuf decoding of {kind} is not supported")
    return obj


def decode(body):
    """The JSON form of a protobuf-encoded object; raises ProtobufError."""
    if not body.startswith(MAGIC):
        raise ProtobufError("missing protobuf magic")
    env = dict(fields(body[len(MAGIC):]))
    tm = dict(fields(env.get(1, b"")))
    kind = _text(tm.get(2, b""))
    obj = {"apiVersion": _text(tm.get(1, b"")), "kind": kind}
    obj.update(_decode_object(kind, env.get(2, b"")))
    return obj
