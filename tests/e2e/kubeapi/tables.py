"""meta.k8s.io/v1 Table rendering, for clients that ask for it (kubectl get).

kubectl get sends Accept: application/json;as=Table;g=meta.k8s.io;v=v1 first.
Custom resources get Name plus their CRD's additionalPrinterColumns (or Age
when there are none); built-in kinds get the columns kubectl users know.
Each row carries the object's metadata as PartialObjectMetadata, as the
apiserver does by default (includeObject=Metadata).
"""
import calendar
import json
import re
import time


def age(stamp):
    try:
        t = calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))
    except (TypeError, ValueError):
        return "<unknown>"
    s = max(0, int(time.time() - t))
    if s < 120:
        return f"{s}s"
    if s < 600:
        return f"{s // 60}m{s % 60}s" if s % 60 else f"{s // 60}m"
    if s < 3 * 3600:
        return f"{s // 60}m"
    if s < 48 * 3600:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


_SEG = re.compile(r"\.([A-Za-z0-9_-]+)|\[(\d+|\*)\]|\[\?\(@\.([A-Za-z0-9_.-]+)\s*==\s*"
                  r"[\"']([^\"']*)[\"']\)\]")


def jsonpath(obj, path):
    """The values a simple JSONPath (.a.b, [0], [*], [?(@.k=="v")]) selects."""
    cur = [obj]
    pos = 0
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    while pos < len(path):
        m = _SEG.match(path, pos)
        if not m:
            return []
        pos = m.end()
        nxt = []
        for c in cur:
            if m.group(1) is not None:
                if isinstance(c, dict) and m.group(1) in c:
                    nxt.append(c[m.group(1)])
            elif m.group(2) is not None:
                if isinstance(c, list):
                    nxt.extend(c if m.group(2) == "*" else c[int(m.group(2)):int(m.group(2)) + 1])
            else:
                if isinstance(c, list):
                    for item in c:
                        vals = jsonpath(item, "." + m.group(3))
                        if vals and str(vals[0]) == m.group(4):
                            nxt.append(item)
        cur = nxt
    return cur


def _col(name, typ="string", fmt="", desc="", priority=0):
    return {"name": name, "type": typ, "format": fmt, "description": desc,
            "priority": priority}


def _builtin_columns(rtype):
    k = rtype.kind
    if k == "ConfigMap":
        return [(_col("Data", "string"), lambda o: str(len(o.get("data") or {}) +
                                                       len(o.get("binaryData") or {})))]
    if k == "Secret":
        return [(_col("Type"), lambda o: o.get("type", "")),
                (_col("Data"), lambda o: str(len(o.get("data") or {})))]
    if k == "Namespace":
        return [(_col("Status"), lambda o: (o.get("status") or {}).get("phase", ""))]
    if k == "Lease":
        return [(_col("Holder"), lambda o: (o.get("spec") or {}).get("holderIdentity", ""))]
    if k == "Event":
        def involved(o):
            ref = o.get("involvedObject") or o.get("regarding") or {}
            return f"{(ref.get('kind') or '').lower()}/{ref.get('name', '')}"
        def source(o):
            src = o.get("source") or o.get("deprecatedSource") or {}
            return ", ".join(x for x in (src.get("component"), src.get("host")) if x) or \
                o.get("reportingComponent") or o.get("reportingController") or ""
        return [(_col("Last Seen"),
                 lambda o: age(o.get("lastTimestamp") or o.get("deprecatedLastTimestamp")
                               or (o.get("eventTime") or "")[:19] + "Z")),
                (_col("Type"), lambda o: o.get("type", "")),
                (_col("Reason"), lambda o: o.get("reason", "")),
                (_col("Object"), involved),
                (_col("Subobject", priority=1),
                 lambda o: (o.get("involvedObject") or o.get("regarding") or {}).get(
                     "fieldPath", "")),
                (_col("Source", priority=1), source),
                (_col("Message"), lambda o: o.get("message", o.get("note", ""))),
                (_col("First Seen", priority=1),
                 lambda o: age(o.get("firstTimestamp") or o.get("deprecatedFirstTimestamp")
                               or (o.get("eventTime") or "")[:19] + "Z")),
                (_col("Count", "integer", priority=1),
                 lambda o: o.get("count") or o.get("deprecatedCount") or 1)]
    if k == "CustomResourceDefinition":
        return [(_col("Created At", "date"), lambda o: o["metadata"].get("creationTimestamp"))]
    return []


def _cell(value, typ):
    if value is None:
        return None
    if typ == "date":
        return age(value)
    if typ == "integer" and isinstance(value, int):
        return value
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return value if isinstance(value, (int, float, bool)) else str(value)


def table(rtype, doc, listing):
    items = doc["items"] if listing else [doc]
    cols = [(_col("Name", "string", "name", "Name must be unique within a namespace."),
             lambda o: o["metadata"].get("name"))]
    if rtype.crd and rtype.printer_columns:
        for pc in rtype.printer_columns:
            cols.append((_col(pc["name"], pc.get("type", "string"), pc.get("format", ""),
                              pc.get("description", ""), pc.get("priority", 0)),
                         lambda o, p=pc: _cell((jsonpath(o, p["jsonPath"]) or [None])[0],
                                               p.get("type", "string"))))
    else:
        cols += _builtin_columns(rtype)
        if rtype.kind not in ("CustomResourceDefinition", "Event"):
            cols.append((_col("Age", "string", "", "CreationTimestamp"),
                         lambda o: age(o["metadata"].get("creationTimestamp"))))
    if rtype.kind == "Event":          # events list the name only in wide output
        name = cols.pop(0)
        name[0]["priority"] = 1
        cols.append(name)
    rows = []
    for o in items:
        rows.append({"cells": [f(o) for _, f in cols],
                     "object": {"kind": "PartialObjectMetadata",
                                "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]}})
    out = {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
           "metadata": {"resourceVersion": (doc.get("metadata") or {}).get("resourceVersion",
                                                                            "")},
           "columnDefinitions": [c for c, _ in cols], "rows": rows}
    if listing and doc["metadata"].get("continue"):
        out["metadata"]["continue"] = doc["metadata"]["continue"]
    if listing and "remainingItemCount" in doc["metadata"]:
        out["metadata"]["remainingItemCount"] = doc["metadata"]["remainingItemCount"]
    return out


__all__ = ["table", "jsonpath", "age"]
