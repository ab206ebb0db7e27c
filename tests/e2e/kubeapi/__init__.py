"""A Kubernetes API-server emulator for the end-to-end tests.

The package is a single-process HTTPS server (``python3 -m kubeapi``) that
behaves like kube-apiserver wherever a controller or kubectl can tell:
discovery, CRDs, resourceVersion and generation rules, the status
subresource, patches, finalizers, selectors, pagination and watches, plus
fault injection through ``/__admin/`` endpoints.  ``tests/e2e/kube_fixtures.py``
starts it for pytest; docs/testing.md describes how to run it by hand.

Modules: errors (metav1.Status), selectors, patches, schema (CRD pruning and
validation), apply (server-side apply field ownership), registry (kinds,
discovery, OpenAPI), store (objects, resourceVersions, history, watchers),
server (HTTP, auth, routing, watch streams, admin), tlsgen (test PKI),
client (a small Python client for the tests).
"""
