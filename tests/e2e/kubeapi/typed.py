"""Go-typed decoding checks for the parts of objects the apiserver decodes into structs.

A JSON value of the wrong type in a typed field (ObjectMeta, the built-in kinds,
CustomResourceDefinition, DeleteOptions) makes kube-apiserver's decoder fail,
which it reports as 400 BadRequest before any validation runs, naming the Go
struct field ("Go struct field ObjectMeta.labels of type string").  Custom
resource bodies are unstructured, so only their metadata is typed.
"""
from .errors import bad_request

STR, BOOL, INT = "string", "bool", "int64"
STR_MAP = ("map", STR)


class Struct:
    def __init__(self, go_name, fields):
        self.go_name = go_name
        self.short = go_name.split(".")[-1]
        self.fields = fields


OWNER_REF = Struct("v1.OwnerReference", {
    "apiVersion": STR, "kind": STR, "name": STR, "uid": STR, "controller": BOOL,
    "blockOwnerDeletion": BOOL})
OBJECT_META = Struct("v1.ObjectMeta", {
    "name": STR, "generateName": STR, "namespace": STR, "uid": STR, "resourceVersion": STR,
    "generation": INT, "creationTimestamp": STR, "deletionTimestamp": STR,
    "deletionGracePeriodSeconds": INT, "labels": STR_MAP, "annotations": STR_MAP,
    "finalizers": ("list", STR), "ownerReferences": ("list", OWNER_REF),
    "managedFields": ("list", "object")})

_CRD_VERSION = Struct("v1.CustomResourceDefinitionVersion", {
    "name": STR, "served": BOOL, "storage": BOOL, "deprecated": BOOL,
    "deprecationWarning": STR,
    "schema": Struct("v1.CustomResourceValidation", {"openAPIV3Schema": "object"}),
    "subresources": "object", "additionalPrinterColumns": ("list", "object"),
    "selectableFields": ("list", "object")})

BUILTIN = {
    "ConfigMap": {"data": STR_MAP, "binaryData": STR_MAP, "immutable": BOOL},
    "Secret": {"data": STR_MAP, "stringData": STR_MAP, "type": STR, "immutable": BOOL},
    "Namespace": {"spec": Struct("v1.NamespaceSpec", {"finalizers": ("list", STR)}),
                  "status": Struct("v1.NamespaceStatus", {"phase": STR})},
    "ServiceAccount": {"secrets": ("list", "object"), "imagePullSecrets": ("list", "object"),
                       "automountServiceAccountToken": BOOL},
    "Lease": {"spec": Struct("v1.LeaseSpec", {
        "holderIdentity": STR, "leaseDurationSeconds": "int32", "acquireTime": STR,
        "renewTime": STR, "leaseTransitions": "int32", "strategy": STR,
        "preferredHolder": STR})},
    "Event": {"involvedObject": "object", "regarding": "object", "reason": STR,
              "message": STR, "note": STR, "type": STR, "count": "int32",
              "deprecatedCount": "int32", "source": "object", "series": "object",
              "action": STR, "reportingComponent": STR, "reportingController": STR,
              "reportingInstance": STR, "eventTime": STR, "firstTimestamp": STR,
              "lastTimestamp": STR},
    "CustomResourceDefinition": {"spec": Struct("v1.CustomResourceDefinitionSpec", {
        "group": STR, "scope": STR,
        "names": Struct("v1.CustomResourceDefinitionNames", {
            "plural": STR, "singular": STR, "kind": STR, "listKind": STR,
            "shortNames": ("list", STR), "categories": ("list", STR)}),
        "versions": ("list", _CRD_VERSION)})},
}

DELETE_OPTIONS = Struct("v1.DeleteOptions", {
    "gracePeriodSeconds": INT, "propagationPolicy": STR, "orphanDependents": BOOL,
    "dryRun": ("list", STR),
    "preconditions": Struct("v1.Preconditions", {"uid": STR, "resourceVersion": STR})})


def json_type(v):
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _go_type(spec):
    if isinstance(spec, Struct):
        return spec.go_name
    if isinstance(spec, tuple):
        return ("map[string]" if spec[0] == "map" else "[]") + _go_type(spec[1])
    return {"object": "map[string]interface {}"}.get(spec, spec)


def _fits(value, spec):
    if value is None:
        return True
    if spec == STR:
        return isinstance(value, str)
    if spec == BOOL:
        return isinstance(value, bool)
    if spec in (INT, "int32"):
        return isinstance(value, int) and not isinstance(value, bool)
    if spec == "object" or isinstance(spec, Struct) or (isinstance(spec, tuple) and
                                                        spec[0] == "map"):
        return isinstance(value, dict)
    return isinstance(value, list)


def _check(value, spec, field, prefix):
    """field: "Struct.jsonName" of the Go struct field being decoded."""
    if not _fits(value, spec):
        raise bad_request(f"{prefix}json: cannot unmarshal {json_type(value)} into Go "
                          f"struct field {field} of type {_go_type(spec)}")
    if value is None:
        return
    if isinstance(spec, Struct):
        check_struct(value, spec, prefix)
    elif isinstance(spec, tuple):
        for v in (value.values() if spec[0] == "map" else value):
            _check(v, spec[1], field, prefix)


def check_struct(value, struct, prefix):
    for k, sub in struct.fields.items():
        if k in value:
            _check(value[k], sub, f"{struct.short}.{k}", prefix)


def check_object(rtype, obj):
    prefix = f'{rtype.kind} in version "{rtype.version}" cannot be handled as a {rtype.kind}: '
    _check(obj.get("metadata"), OBJECT_META, f"{rtype.kind}.metadata", prefix)
    fields = BUILTIN.get(rtype.kind) if not rtype.crd else None
    if fields:
        check_struct(obj, Struct(f"v1.{rtype.kind}", fields), prefix)


def check_delete_options(opts):
    check_struct(opts, DELETE_OPTIONS, "")
