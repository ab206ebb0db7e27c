"""The kinds the emulator serves: built-ins, CRD-defined kinds, discovery and OpenAPI.

A ResourceType is one (group, version, plural) endpoint.  Every served
version of a kind shares one storage key (group, plural), as CRDs with the
"None" conversion strategy do: reading at another version only rewrites
apiVersion.  Applying a CustomResourceDefinition registers its served
versions; deleting it removes them (store.py drives both).
"""
import base64
import hashlib
import json
import re

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
META_FIELDS = {"metadata.name", "metadata.namespace"}


class ResourceType:
    def __init__(self, group, version, plural, kind, *, singular=None, namespaced=True,
                 short_names=None, categories=None, status=False, crd=False, schema=None,
                 printer_columns=None, field_labels=None, field_aliases=None,
                 generation=False, top_fields=None, storage_version=None,
                 deprecation=None, preserve_unknown=False, view=None):
        self.group = group
        self.version = version
        self.plural = plural
        self.kind = kind
        self.list_kind = kind + "List"
        self.singular = singular or kind.lower()
        self.namespaced = namespaced
        self.short_names = short_names or []
        self.categories = categories or []
        self.status = status
        self.crd = crd
        self.schema = schema
        self.printer_columns = printer_columns or []
        self.field_labels = set(field_labels or ()) | META_FIELDS
        if not namespaced:
            self.field_labels.discard("metadata.namespace")
        self.field_aliases = field_aliases or {}
        self.generation = generation
        self.top_fields = top_fields
        self.storage_version = storage_version or version
        self.deprecation = deprecation
        self.preserve_unknown = preserve_unknown
        self.view = view            # another kind's storage seen through a conversion
        self.verbs = None           # the discovery verbs, when not the usual eight
        # PUT without a resourceVersion: allowed by most built-in strategies, refused for
        # custom resources, CRDs and Leases (AllowUnconditionalUpdate)
        self.unconditional_update = not crd and kind not in ("Lease",
                                                             "CustomResourceDefinition")
        self.virtual = False        # answered, never stored (access reviews)

    @property
    def key(self):
        return self.view.key if self.view else (self.group, self.plural)

    @property
    def api_version(self):
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def storage_api_version(self):
        if self.view:
            return self.view.storage_api
        return f"{self.group}/{self.storage_version}" if self.group else self.storage_version


_EVENT_FIELDS = ["involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                 "involvedObject.uid", "involvedObject.apiVersion",
                 "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason",
                 "reportingComponent", "source", "type"]


_CORE_EVENT_FIELDS = {"involvedObject", "reason", "message", "source", "firstTimestamp",
                      "lastTimestamp", "count", "type", "eventTime", "series", "action",
                      "related", "reportingComponent", "reportingInstance"}

# events.k8s.io/v1 name -> core/v1 name (pkg/apis/events/v1/conversion.go)
_EVENT_RENAMES = {"regarding": "involvedObject", "note": "message",
                  "deprecatedSource": "source", "deprecatedFirstTimestamp": "firstTimestamp",
                  "deprecatedLastTimestamp": "lastTimestamp", "deprecatedCount": "count",
                  "reportingController": "reportingComponent"}


class EventsView:
    """events.k8s.io/v1 Events: the same storage as core/v1 Events, renamed fields."""

    key = ("", "events")
    storage_api = "v1"

    def to_storage(self, obj):
        out = {}
        for k, v in obj.items():
            out[_EVENT_RENAMES.get(k, k)] = v
        out["apiVersion"] = "v1"
        return out

    def from_storage(self, obj):
        back = {v: k for k, v in _EVENT_RENAMES.items()}
        out = {back.get(k, k): v for k, v in obj.items()}
        out["apiVersion"] = "events.k8s.io/v1"
        return out


def builtin_types():
    return [
        ResourceType("", "v1", "namespaces", "Namespace", namespaced=False, short_names=["ns"],
                     status=True, field_labels=["status.phase"], top_fields={"spec", "status"}),
        ResourceType("", "v1", "configmaps", "ConfigMap", short_names=["cm"],
                     top_fields={"data", "binaryData", "immutable"}),
        ResourceType("", "v1", "secrets", "Secret", field_labels=["type"],
                     top_fields={"data", "stringData", "type", "immutable"}),
        ResourceType("", "v1", "serviceaccounts", "ServiceAccount", short_names=["sa"],
                     top_fields={"secrets", "imagePullSecrets", "automountServiceAccountToken"}),
        ResourceType("", "v1", "events", "Event", short_names=["ev"],
                     field_labels=_EVENT_FIELDS, field_aliases={"source": "source.component"},
                     top_fields={"involvedObject", "reason", "message", "source",
                                 "firstTimestamp", "lastTimestamp", "count", "type",
                                 "eventTime", "series", "action", "related",
                                 "reportingComponent", "reportingInstance"}),
        ResourceType("events.k8s.io", "v1", "events", "Event", short_names=["ev"],
                     top_fields=_CORE_EVENT_FIELDS, view=EventsView()),
        ResourceType("coordination.k8s.io", "v1", "leases", "Lease", top_fields={"spec"}),
        ResourceType("apiextensions.k8s.io", "v1", "customresourcedefinitions",
                     "CustomResourceDefinition", namespaced=False, short_names=["crd", "crds"],
                     categories=["api-extensions"], status=True, generation=True,
                     top_fields={"spec", "status"}, preserve_unknown=True),
    ]


# the order kube-apiserver lists a custom resource's verbs in
CRD_VERBS = ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]


def _verbs(rtype):
    if rtype.verbs is not None:
        return rtype.verbs
    if rtype.crd:
        return CRD_VERBS
    if rtype.key == ("", "namespaces"):
        return [v for v in VERBS if v != "deletecollection"]
    return VERBS


# Kinds stored as they come, without the controllers or validation behind them: enough
# for kubectl's prune allow-list, `get all`, and a controller that creates Jobs or
# Deployments and reads them back.  (group, version, plural, kind, short names,
# namespaced, status subresource, generation, categories)
_GENERIC = [
    ("", "v1", "pods", "Pod", ["po"], True, True, True, ["all"]),
    ("", "v1", "nodes", "Node", ["no"], False, True, False, []),
    ("", "v1", "services", "Service", ["svc"], True, True, False, ["all"]),
    ("", "v1", "endpoints", "Endpoints", ["ep"], True, False, False, []),
    ("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", ["pvc"], True, True,
     False, []),
    ("", "v1", "persistentvolumes", "PersistentVolume", ["pv"], False, True, False, []),
    ("", "v1", "replicationcontrollers", "ReplicationController", ["rc"], True, True, True,
     ["all"]),
    ("apps", "v1", "deployments", "Deployment", ["deploy"], True, True, True, ["all"]),
    ("apps", "v1", "statefulsets", "StatefulSet", ["sts"], True, True, True, ["all"]),
    ("apps", "v1", "daemonsets", "DaemonSet", ["ds"], True, True, True, ["all"]),
    ("apps", "v1", "replicasets", "ReplicaSet", ["rs"], True, True, True, ["all"]),
    ("batch", "v1", "jobs", "Job", [], True, True, True, ["all"]),
    ("batch", "v1", "cronjobs", "CronJob", ["cj"], True, True, True, ["all"]),
    ("networking.k8s.io", "v1", "ingresses", "Ingress", ["ing"], True, True, True, []),
    ("rbac.authorization.k8s.io", "v1", "roles", "Role", [], True, False, False, []),
    ("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", [], True, False,
     False, []),
    ("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", [], False, False,
     False, []),
    ("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", [],
     False, False, False, []),
]

# field selectors the real server accepts on them (a kubelet watches its node's pods)
_GENERIC_FIELDS = {"pods": ["spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
                            "spec.serviceAccountName", "status.phase", "status.podIP",
                            "status.nominatedNodeName"],
                   "nodes": ["spec.unschedulable"]}

# Subresources served beyond status (kubeapi/pods.py): listed by discovery as the real
# server lists them.
EXTRA_SUBRESOURCES = {("", "pods"): [("log", "Pod", ["get"])],
                      ("", "serviceaccounts"): [("token", "TokenRequest", ["create"])]}


def generic_types():
    out = [ResourceType(g, v, plural, kind, short_names=short, namespaced=ns, status=status,
                        generation=gen, categories=cats,
                        field_labels=_GENERIC_FIELDS.get(plural))
           for g, v, plural, kind, short, ns, status, gen, cats in _GENERIC]
    # `kubectl auth can-i`: a create-only review the emulator always allows (no RBAC)
    review = ResourceType("authorization.k8s.io", "v1", "selfsubjectaccessreviews",
                          "SelfSubjectAccessReview", namespaced=False)
    review.verbs = ["create"]
    review.virtual = True
    return out + [review]


def version_priority(v):
    """Kubernetes version ordering: GA > beta > alpha, higher numbers first."""
    m = re.match(r"^v(\d+)(?:(alpha|beta)(\d+))?$", v)
    if not m:
        return (0, 0, 0, v)
    stage = {"": 3, "beta": 2, "alpha": 1}[m.group(2) or ""]
    return (1, stage, int(m.group(1)), int(m.group(3) or 0))


def types_from_crd(crd):
    """The ResourceTypes a CRD object defines (one per served version)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = spec.get("group", "")
    versions = spec.get("versions") or []
    storage = next((v["name"] for v in versions if v.get("storage")), None)
    out = []
    for v in versions:
        if not v.get("served"):
            continue
        list_kind = names.get("listKind") or f"{names.get('kind')}List"
        schema = ((v.get("schema") or {}).get("openAPIV3Schema"))
        deprecation = None
        if v.get("deprecated"):
            deprecation = v.get("deprecationWarning") or (
                f"{group}/{v['name']} {names.get('kind')} is deprecated")
        out.append(ResourceType(
            group, v["name"], names.get("plural"), names.get("kind"),
            singular=names.get("singular") or names.get("kind", "").lower(),
            namespaced=spec.get("scope") == "Namespaced",
            short_names=names.get("shortNames"), categories=names.get("categories"),
            status="status" in ((v.get("subresources") or {})),
            crd=True, schema=schema, printer_columns=v.get("additionalPrinterColumns"),
            generation=True, storage_version=storage, deprecation=deprecation,
            field_labels=[f["jsonPath"].lstrip(".") for f in v.get("selectableFields") or []]))
        out[-1].list_kind = list_kind
    return out


class Registry:
    def __init__(self):
        self.builtins = builtin_types() + generic_types()
        self.crd_types = {}     # crd name -> [ResourceType]
        self._rebuild()

    def _rebuild(self):
        self.by_gv = {}
        for t in self.builtins + [t for ts in self.crd_types.values() for t in ts]:
            self.by_gv.setdefault((t.group, t.version), {})[t.plural] = t

    def set_crd(self, name, crd):
        if crd is None:
            self.crd_types.pop(name, None)
        else:
            self.crd_types[name] = types_from_crd(crd)
        self._rebuild()

    def lookup(self, group, version, plural):
        return self.by_gv.get((group, version), {}).get(plural)

    def has_gv(self, group, version):
        return (group, version) in self.by_gv

    def is_builtin_gv(self, group, version):
        return any(not t.crd for t in self.by_gv.get((group, version), {}).values())

    def types_for_key(self, key):
        return [t for ts in self.by_gv.values() for t in ts.values() if t.key == key]

    def storage_type(self, key):
        for t in self.types_for_key(key):
            if t.view is None and t.version == t.storage_version:
                return t
        ts = self.types_for_key(key)
        return ts[0] if ts else None

    def groups(self):
        """{group: [versions sorted by priority]} for named groups."""
        out = {}
        for (g, v) in self.by_gv:
            if g:
                out.setdefault(g, []).append(v)
        return {g: sorted(vs, key=version_priority, reverse=True) for g, vs in sorted(out.items())}

    # -- discovery documents --------------------------------------------------------

    def api_versions(self, server_address):
        return {"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                "serverAddress": server_address}]}

    def _group_doc(self, g, versions):
        vs = [{"groupVersion": f"{g}/{v}", "version": v} for v in versions]
        return {"name": g, "versions": vs, "preferredVersion": vs[0]}

    def api_group_list(self):
        return {"kind": "APIGroupList", "apiVersion": "v1",
                "groups": [self._group_doc(g, vs) for g, vs in self.groups().items()]}

    def api_group(self, g):
        vs = self.groups().get(g)
        if not vs:
            return None
        doc = self._group_doc(g, vs)
        doc.update({"kind": "APIGroup", "apiVersion": "v1"})
        return doc

    def resource_list(self, group, version):
        types = self.by_gv.get((group, version))
        if types is None:
            return None
        resources = []
        for t in sorted(types.values(), key=lambda t: t.plural):
            r = {"name": t.plural, "singularName": t.singular, "namespaced": t.namespaced,
                 "kind": t.kind, "verbs": _verbs(t)}
            if t.short_names:
                r["shortNames"] = t.short_names
            if t.categories:
                r["categories"] = t.categories
            r["storageVersionHash"] = base64.b64encode(hashlib.sha256(
                f"{t.group}/{t.storage_version}/{t.kind}".encode()).digest()[:8]).decode()
            resources.append(r)
            if t.status:
                resources.append({"name": t.plural + "/status", "singularName": "",
                                  "namespaced": t.namespaced, "kind": t.kind,
                                  "verbs": ["get", "patch", "update"]})
            for sub, kind, verbs in EXTRA_SUBRESOURCES.get(t.key, []):
                resources.append({"name": f"{t.plural}/{sub}", "singularName": "",
                                  "namespaced": t.namespaced, "kind": kind, "verbs": verbs})
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version,
                "resources": resources}

    def aggregated(self, legacy, api_version):
        """apidiscovery.k8s.io APIGroupDiscoveryList for /api (legacy) or /apis."""
        groups = {"": ["v1"]} if legacy else self.groups()
        items = []
        for g, versions in groups.items():
            vs = []
            for v in versions:
                resources = []
                for t in sorted(self.by_gv.get((g, v), {}).values(), key=lambda t: t.plural):
                    kind = {"group": g, "version": v, "kind": t.kind}
                    r = {"resource": t.plural, "responseKind": kind,
                         "scope": "Namespaced" if t.namespaced else "Cluster",
                         "singularResource": t.singular,
                         "verbs": _verbs(t)}
                    if t.short_names:
                        r["shortNames"] = t.short_names
                    if t.categories:
                        r["categories"] = t.categories
                    subs = []
                    if t.status:
                        subs.append({"subresource": "status", "responseKind": kind,
                                     "verbs": ["get", "patch", "update"]})
                    for sub, sub_kind, verbs in EXTRA_SUBRESOURCES.get(t.key, []):
                        group = "authentication.k8s.io" if sub == "token" else g
                        subs.append({"subresource": sub, "verbs": verbs, "responseKind": {
                            "group": group, "version": v, "kind": sub_kind}})
                    if subs:
                        r["subresources"] = subs
                    resources.append(r)
                vs.append({"version": v, "resources": resources, "freshness": "Current"})
            items.append({"metadata": {"name": g, "creationTimestamp": None}, "versions": vs})
        return {"kind": "APIGroupDiscoveryList", "apiVersion": api_version,
                "metadata": {}, "items": items}

    # -- OpenAPI v3 -----------------------------------------------------------------
    # kubectl (1.29+) validates by looking for a PATCH operation carrying the kind's
    # x-kubernetes-group-version-kind and a fieldValidation query parameter; when it
    # finds one it leaves validation to the server (fieldValidation=Strict).

    def openapi_gv_doc(self, group, version, k8s_version):
        types = self.by_gv.get((group, version))
        if types is None:
            return None
        prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
        params = [{"name": n, "in": "query", "schema": {"type": "string"}, "uniqueItems": True}
                  for n in ("dryRun", "fieldManager", "fieldValidation", "force")]
        paths, schemas = {}, {}
        for t in types.values():
            gvk = {"group": group, "version": version, "kind": t.kind}
            ref = ".".join(reversed(group.split("."))) + f".{version}.{t.kind}" if group \
                else f"io.k8s.api.core.{version}.{t.kind}"
            item = f"{prefix}/namespaces/{{namespace}}/{t.plural}/{{name}}" if t.namespaced \
                else f"{prefix}/{t.plural}/{{name}}"
            op = {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": "patch",
                  "operationId": f"patch{t.kind}", "parameters": params,
                  "requestBody": {"content": {"application/apply-patch+yaml": {
                      "schema": {"$ref": f"#/components/schemas/{ref}"}}}},
                  "responses": {"200": {"description": "OK", "content": {
                      "application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}}}}}
            get = {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": "get",
                   "operationId": f"read{t.kind}",
                   "responses": {"200": {"description": "OK"}}}
            paths[item] = {"get": get, "patch": op}
            schema = dict(t.schema) if isinstance(t.schema, dict) else {"type": "object"}
            schema["x-kubernetes-group-version-kind"] = [gvk]
            schemas[ref] = schema
        return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": k8s_version},
                "paths": paths, "components": {"schemas": schemas}}

    def openapi_root(self, k8s_version):
        paths = {}
        for (g, v) in sorted(self.by_gv):
            rel = f"apis/{g}/{v}" if g else f"api/{v}"
            doc = self.openapi_gv_doc(g, v, k8s_version)
            digest = hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest().upper()
            paths[rel] = {"serverRelativeURL": f"/openapi/v3/{rel}?hash={digest[:128]}"}
        return {"paths": paths}
