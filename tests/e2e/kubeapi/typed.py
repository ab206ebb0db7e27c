"""Go-typed decoding checks for the parts of objects the apiserver decodes into structs.

A JSON value of the wrong type in a typed field (ObjectMeta, the built-in kinds,
CustomResourceDefinition, DeleteOptions) makes kube-apiserver's decoder fail,
which it reports as 400 BadRequest before any validation runs.  Custom
resource bodies are unstructured, so only their metadata is typed.
"""
from .errors import bad_request

STR, BOOL, INT = "string", "bool", "int64"
STR_MAP = ("map", STR)

OWNER_REF = {"apiVersion": STR, "kind": STR, "name": STR, "uid": STR, "controller": BOOL,
             "blockOwnerDeletion": BOOL}
OBJECT_META = {"name": STR, "generateName": STR, "namespace": STR, "uid": STR,
               "resourceVersion": STR, "generation": INT, "creationTimestamp": STR,
               "deletionTimestamp": STR, "deletionGracePeriodSeconds": INT,
               "labels": STR_MAP, "annotations": STR_MAP, "finalizers": ("list", STR),
               "ownerReferences": ("list", OWNER_REF), "managedFields": ("list", "object")}

BUILTIN = {
    "ConfigMap": {"data": STR_MAP, "binaryData": STR_MAP, "immutable": BOOL},
    "Secret": {"data": STR_MAP, "stringData": STR_MAP, "type": STR, "immutable": BOOL},
    "Namespace": {"spec": {"finalizers": ("list", STR)}, "status": {"phase": STR}},
    "ServiceAccount": {"secrets": ("list", "object"), "imagePullSecrets": ("list", "object"),
                       "automountServiceAccountToken": BOOL},
    "Lease": {"spec": {"holderIdentity": STR, "leaseDurationSeconds": INT,
                       "acquireTime": STR, "renewTime": STR, "leaseTransitions": INT,
                       "strategy": STR, "preferredHolder": STR}},
    "Event": {"involvedObject": "object", "regarding": "object", "reason": STR,
              "message": STR, "note": STR, "type": STR, "count": INT, "deprecatedCount": INT,
              "source": "object", "series": "object", "action": STR,
              "reportingComponent": STR, "reportingController": STR,
              "reportingInstance": STR, "eventTime": STR, "firstTimestamp": STR,
              "lastTimestamp": STR},
    "CustomResourceDefinition": {"spec": {
        "group": STR, "scope": STR,
        "names": {"plural": STR, "singular": STR, "kind": STR, "listKind": STR,
                  "shortNames": ("list", STR), "categories": ("list", STR)},
        "versions": ("list", {"name": STR, "served": BOOL, "storage": BOOL,
                              "deprecated": BOOL, "deprecationWarning": STR,
                              "schema": {"openAPIV3Schema": "object"},
                              "subresources": "object",
                              "additionalPrinterColumns": ("list", "object"),
                              "selectableFields": ("list", "object")})}},
}

DELETE_OPTIONS = {"gracePeriodSeconds": INT, "propagationPolicy": STR,
                  "orphanDependents": BOOL, "dryRun": ("list", STR),
                  "preconditions": {"uid": STR, "resourceVersion": STR}}


def _json_type(v):
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
    if isinstance(spec, dict):
        return "struct"
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
    if spec == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if spec == "object" or isinstance(spec, dict) or (isinstance(spec, tuple) and
                                                       spec[0] == "map"):
        return isinstance(value, dict)
    return isinstance(value, list)


def check(value, spec, path, where):
    """Raises 400 when value does not decode into spec."""
    if not _fits(value, spec):
        raise bad_request(f"{where}: json: cannot unmarshal {_json_type(value)} into Go "
                          f"struct field {path} of type {_go_type(spec)}")
    if value is None:
        return
    if isinstance(spec, dict):
        for k, sub in spec.items():
            if k in value:
                check(value[k], sub, f"{path}.{k}", where)
    elif isinstance(spec, tuple) and spec[0] == "map":
        for k, v in value.items():
            check(v, spec[1], path, where)
    elif isinstance(spec, tuple):
        for v in value:
            check(v, spec[1], path, where)


def check_object(rtype, obj):
    where = f'{rtype.kind} in version "{rtype.version}" cannot be handled as a {rtype.kind}'
    check(obj.get("metadata"), OBJECT_META, f"{rtype.kind}.metadata", where)
    spec = BUILTIN.get(rtype.kind) if not rtype.crd else None
    if spec:
        for k, sub in spec.items():
            if k in obj:
                check(obj[k], sub, f"{rtype.kind}.{k}", where)


def check_delete_options(opts):
    check(opts, DELETE_OPTIONS, "DeleteOptions",
          'DeleteOptions in version "v1" cannot be handled as a DeleteOptions')
