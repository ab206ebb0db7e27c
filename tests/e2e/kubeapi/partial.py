"""Metadata-only responses: what kube-apiserver answers when the Accept header asks
for `application/json;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1` (client-go's
metadata client and controller-runtime's metadata informers).  Objects keep apiVersion
meta.k8s.io/v1, kind PartialObjectMetadata and their metadata, nothing else, so a
Secret's data never leaves the server.
"""
from . import errors as E

GROUP_VERSION = "meta.k8s.io/v1"


def requested(accept):
    """'PartialObjectMetadata', 'PartialObjectMetadataList' or None, from the first
    media type of the Accept header that is JSON (as kube-apiserver negotiates)."""
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        if fields[0] not in ("application/json", "*/*"):
            continue
        params = dict(f.split("=", 1) for f in fields[1:] if "=" in f)
        if params.get("as") in ("PartialObjectMetadata", "PartialObjectMetadataList") and \
                params.get("g") == "meta.k8s.io" and params.get("v") == "v1":
            return params["as"]
        if "as" not in params:
            return None
    return None


def not_acceptable(message):
    return E.ApiError(406, "NotAcceptable", message)


def go_type(rtype, listing):
    """The Go type kube-apiserver names in its message: the internal type of a
    built-in kind (*core.SecretList), unstructured for a custom resource."""
    if rtype.crd:
        return "*unstructured.UnstructuredList" if listing else "*unstructured.Unstructured"
    group = rtype.group.split(".")[0] if rtype.group else "core"
    return f"*{group}.{rtype.kind}{'List' if listing else ''}"


def check(want, rtype, listing):
    """Refuses a kind that does not fit the response, as the server does."""
    if want == "PartialObjectMetadata" and listing:
        raise not_acceptable("you requested PartialObjectMetadata, but the requested "
                             f"object is a list ({go_type(rtype, True)})")
    if want == "PartialObjectMetadataList" and not listing:
        raise not_acceptable("you requested PartialObjectMetadataList, but the requested "
                             f"object is not a list ({go_type(rtype, False)})")


def partial(obj):
    return {"kind": "PartialObjectMetadata", "apiVersion": GROUP_VERSION,
            "metadata": obj.get("metadata", {})}


def partial_list(doc):
    return {"kind": "PartialObjectMetadataList", "apiVersion": GROUP_VERSION,
            "metadata": doc.get("metadata", {}),
            "items": [partial(o) for o in doc.get("items", [])]}


__all__ = ["requested", "check", "partial", "partial_list"]
