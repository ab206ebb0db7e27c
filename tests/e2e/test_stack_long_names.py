"""Stack names longer than a label value (both tiers).

A Stack's name may have 253 characters; a label value at most 63.  Every object the
controller makes for a Stack carries the label pulumi.com/stack-name, cut to 63 characters
(ending in a letter or digit), and its ownerReference, which carries the whole name.  Issue
21's review found the ServiceAccount, Roles, RoleBindings and Secrets of job mode, the
local outputs Secret and the programRef GitRepository labelled with the whole name: the
API server refused them (422), and such a Stack never ran.
"""
from job_fixtures import job_controller
from stack_fixtures import wait_until

GIT = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "name": "app"}
NAME = "team-" + "x" * 59 + "-a"          # 66 characters; its first 63 end in "x"


def labels_of(w, kind, name, api="v1"):
    return w.client.get(api, kind, name, w.namespace)["metadata"].get("labels") or {}


def test_a_long_named_local_stack_gets_its_outputs_secret(stack_world):
    w = stack_world
    src = w.flux_source("GitRepository", "app", w.artifact())
    w.apply_stack(NAME, fluxSource={"sourceRef": GIT})
    w.controller()
    obj = w.wait_ready(NAME, revision=src["revision"])
    assert w.outputs_secret(NAME)["decoded"]["message"] == "hello"
    assert labels_of(w, "secrets", f"{NAME}-outputs")["pulumi.com/stack-name"] == NAME[:63]
    assert obj["status"]["lastUpdate"]["state"] == "succeeded"


def test_a_long_named_job_stack_gets_its_job(job_world, request):
    w = job_world
    src = w.flux_source("GitRepository", "app", w.artifact())
    stack = w.apply_stack(NAME, fluxSource={"sourceRef": GIT}, runner={"type": "Job"})
    job_controller(w, request)
    obj = w.wait_ready(NAME, revision=src["revision"])
    assert obj["status"]["lastUpdate"]["state"] == "succeeded"
    assert w.outputs_secret(NAME)["decoded"]["message"] == "hello"
    for kind, name, api in (("serviceaccounts", f"{NAME}-runner", "v1"),
                            ("secrets", f"{NAME}-outputs", "v1"),
                            ("roles", f"{NAME}-outputs-writer", "rbac.authorization.k8s.io/v1"),
                            ("rolebindings", f"{NAME}-outputs-writer", "rbac.authorization.k8s.io/v1")):
        assert labels_of(w, kind, name, api)["pulumi.com/stack-name"] == NAME[:63], (kind, name)
        owner, = w.client.get(api, kind, name, w.namespace)["metadata"]["ownerReferences"]
        assert (owner["name"], owner["uid"]) == (NAME, stack["metadata"]["uid"]), (kind, name)
    jobs = wait_until(lambda: w.client.list("batch/v1", "jobs", w.namespace)["items"],
                      what="the Stack's Job")
    assert all(j["metadata"]["labels"]["pulumi.com/stack-name"] == NAME[:63] for j in jobs)
