"""A Kubernetes API-server emulator for the end-to-end tests.

The package is a single-process HTTPS server (``python3 -m kubeapi``) that
behaves like kube-apiserver wherever a controller or kubectl can tell:
discovery, CRDs, resourceVersion and generation rules, the status
subresource, patches, finalizers, selectors, pagination and watches, plus
fault injection through ``/__admin/`` endpoints.  ``tests/e2e/kube_fixtures.py``
starts it for pytest; docs/testing.md describes how to run it by hand.

Modules: errors (metav1.Status), selectors, patches, protobuf (the bodies of
kubectl's typed create commands), typed (Go-typed decoding checks), schema
(CRD pruning and validation), apply (server-side apply field ownership),
registry (kinds, discovery, OpenAPI), store (objects, resourceVersions,
history, watchers), tables (meta.k8s.io Table output), server (HTTP, auth,
routing, watch streams, admin), app (the process, state directory, stop and
restart), tlsgen (test PKI), client (a small Python client for the tests).
"""
