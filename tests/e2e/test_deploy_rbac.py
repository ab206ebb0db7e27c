"""deploy/ against the real kube-apiserver (real tier only: the emulator has no
authorizer and no admission, which is what is under test here; FIDELITY.md).

- The rendered overlays apply server-side: deploy/default as it is, deploy/namespaced
  into a test namespace, deploy/flux and deploy/samples with a server dry run.
- The Deployment's pod is admitted by the server's PodSecurity admission in a namespace
  that enforces "restricted".
- The controller runs with exactly the rendered permissions -- a TokenRequest token of
  the rendered ServiceAccount, bound by nothing but the rendered (Cluster)RoleBindings --
  and the flags the Deployment passes, reconciles a Stack to Ready (outputs Secret,
  Events, the Lease, a programRef GitRepository) with no request refused, and is
  refused what the role does not grant.
- The default and namespaced installs grant nothing of the Job runner (`kubectl auth
  can-i --as` the controller's ServiceAccount, which the server's RBAC authorizer
  answers); deploy/job-runner adds it, running Jobs only in the namespaces bound with
  deploy/job-runner/namespace, and a job-mode Stack elsewhere says JobForbidden."""
import json
import pathlib
import secrets
import shutil
import subprocess

import pytest
import yaml

from kube_fixtures import KubeError
from stack_fixtures import SOURCE_API, STACK_API, wait_until

import test_deploy as td

ROOT = pathlib.Path(__file__).resolve().parents[2]
GIT = {"apiVersion": SOURCE_API, "kind": "GitRepository", "name": "app"}
# Flags of the Deployment that name places of the pod; the test gives its own.
POD_FLAGS = {"health-addr": "127.0.0.1:0", "metrics-addr": "0"}


def write_rendering(tmp_path, docs, name):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def apply(kube, path, *extra):
    return kube.kubectl("apply", "--server-side", "--force-conflicts",
                        "--field-manager=test-deploy", "-f", str(path), *extra)


def assert_references_exist_on_the_server(kube, docs):
    """What the applied Deployment and bindings name exists on the server itself."""
    c = kube.direct_client
    dep = td.one(docs, "Deployment")
    ns = dep["metadata"]["namespace"]
    served = c.get("apps/v1", "deployments", dep["metadata"]["name"], ns)
    c.get("v1", "serviceaccounts", served["spec"]["template"]["spec"]["serviceAccountName"], ns)
    for b in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        plural = "rolebindings" if b["kind"] == "RoleBinding" else "clusterrolebindings"
        on_server = c.get("rbac.authorization.k8s.io/v1", plural, b["metadata"]["name"],
                          b["metadata"].get("namespace"))
        ref = on_server["roleRef"]
        c.get("rbac.authorization.k8s.io/v1", "roles" if ref["kind"] == "Role" else "clusterroles",
              ref["name"], on_server["metadata"].get("namespace") if ref["kind"] == "Role" else None)
        for subject in on_server["subjects"]:
            c.get("v1", "serviceaccounts", subject["name"], subject["namespace"])


def sa_token(kube, namespace, sa):
    """A TokenRequest token of ServiceAccount namespace/sa, which the test binds to
    nothing: it has exactly what the applied manifests grant."""
    c = kube.direct_client
    token = c.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{sa}/token",
                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                       "spec": {"expirationSeconds": 3600}})["status"]["token"]
    from kubeapi.client import KubeClient
    client = KubeClient(kube.direct_url, token, kube.ca_file)
    # RBAC changes reach the authorizer's cache a moment after they are written.
    wait_until(lambda: client.raw("GET", f"/apis/{STACK_API}/namespaces/{namespace}/stacks")[0] == 200,
               timeout=30, what=f"the role of {namespace}/{sa} to be in force")
    return token, client


def controller_flags(dep, kubeconfig, world):
    """The Deployment's args as StackWorld.controller() flags: the same flags and values,
    $(RUNTIME_NAMESPACE) expanded as the kubelet does, the pod's paths and ports replaced
    by the test's."""
    ns = dep["metadata"]["namespace"]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "run"
    flags = {"namespace": None, "log_level": "debug"}
    for a in args[1:]:
        name, _, value = a[2:].partition("=")
        flags[name.replace("-", "_")] = value.replace("$(RUNTIME_NAMESPACE)", ns) if value else True
    for name, value in POD_FLAGS.items():
        flags[name.replace("-", "_")] = value
    flags.update(kubeconfig=kubeconfig, storage_path=str(world.storage),
                 pulumi_home=str(world.cli.home), pulumi_bin=str(world.pulumi_bin))
    return flags


def can_i(kube, sa, verb, resource, namespace, subresource=None):
    """The server's answer for ServiceAccount sa ("ns/name"): True or False."""
    argv = ["auth", "can-i", verb, resource, f"--as=system:serviceaccount:{sa.replace('/', ':')}",
            "-n", namespace]
    if subresource:
        argv.append(f"--subresource={subresource}")
    out = kube.kubectl(*argv, check=False).stdout.strip()
    assert out in ("yes", "no"), (argv, out)
    return out == "yes"


# What only the Job runner needs (deploy/job-runner/rules/roles.yaml), as `can-i` asks it.
JOB_RUNNER_RIGHTS = [("create", "jobs.batch", None), ("delete", "jobs.batch", None),
                     ("patch", "jobs.batch", None), ("list", "pods", None), ("get", "pods", "log"),
                     ("create", "roles.rbac.authorization.k8s.io", None),
                     ("create", "rolebindings.rbac.authorization.k8s.io", None),
                     ("create", "serviceaccounts", None)]


def job_runner_rights(kube, sa, namespace):
    """Each of JOB_RUNNER_RIGHTS: whether sa holds it in namespace."""
    return {(verb, res, sub): can_i(kube, sa, verb, res, namespace, sub) for verb, res, sub in JOB_RUNNER_RIGHTS}


def cluster_scoped_job_runner(kube):
    """The cluster-scoped objects deploy/job-runner adds, removed so that later tests on
    the shared server see the default install alone."""
    kube.kubectl("delete", "clusterrolebinding", "pulumi-controller-jobs", "--ignore-not-found", check=False)
    kube.kubectl("delete", "clusterrole", "pulumi-controller-jobs", "pulumi-controller-job-runner",
                 "--ignore-not-found", check=False)


def labelled_stack(world, name, label, **spec):
    obj = world.stack_object(name, **spec)
    obj["metadata"]["labels"] = {"pc-deploy-test": label}
    return world._call(lambda c: c.apply(obj, "stacks", field_manager="stack-test"))


def refused(client, method, path, body=None, content_type=None):
    status, _, parsed = client.raw(method, path, body, content_type)
    assert status == 403, (method, path, status, parsed)
    return parsed


def no_forbidden_requests(ctl):
    bad = [r for r in ctl.records() if "forbidden" in json.dumps(r).lower()
           or '"status": 403' in json.dumps(r)]
    assert not bad, bad[:5]


def reconcile_one_stack(w, ctl, name, label=None):
    src = w.flux_source("GitRepository", "app", w.artifact())
    if label is None:
        w.apply_stack(name, fluxSource={"sourceRef": GIT})
    else:
        labelled_stack(w, name, label, fluxSource={"sourceRef": GIT})
    obj = w.wait_ready(name, revision=src["revision"])
    assert obj["status"]["outputs"]["message"] == "hello"
    assert w.outputs_secret(name)["decoded"]["message"] == "hello"
    assert "UpdateSucceeded" in w.event_reasons(name)
    return obj


def program_ref_source(w, name, label=None):
    """A programRef Stack: the controller server-side applies the GitRepository it owns."""
    spec = {"programRef": {"repo": "https://git.example.test/net.git", "ref": "refs/heads/main"}}
    if label is None:
        w.apply_stack(name, **spec)
    else:
        labelled_stack(w, name, label, **spec)
    path = f"/apis/{SOURCE_API}/namespaces/{w.namespace}/gitrepositories/{name}-program"
    repo = wait_until(lambda: w._call(lambda c: c.raw("GET", path))[0] == 200 and
                      w._call(lambda c: c.get(SOURCE_API, "gitrepositories", f"{name}-program",
                                              w.namespace)),
                      what="the programRef GitRepository")
    assert repo["metadata"]["ownerReferences"][0]["name"] == name
    return repo


def lease_holder(w, namespace):
    lease = w._call(lambda c: c.get("coordination.k8s.io/v1", "leases",
                                    "pulumi-controller-leader-election", namespace))
    return lease["spec"].get("holderIdentity")


@pytest.mark.parametrize("stack_world", ["real"], indirect=True)
def test_cluster_wide_install_reconciles_with_only_its_cluster_role(stack_world, tmp_path):
    """deploy/default as it is: pulumi-system, the ClusterRole, the leader-election Role."""
    w = stack_world
    kube = w.api
    docs = td.render("default")
    apply(kube, write_rendering(tmp_path, docs, "default"))
    assert_references_exist_on_the_server(kube, docs)
    dep = td.one(docs, "Deployment")
    ns = dep["metadata"]["namespace"]
    sa = dep["spec"]["template"]["spec"]["serviceAccountName"]
    token, client = sa_token(kube, ns, sa)
    # In a pod the Lease's namespace is the service account's: here the kubeconfig's.
    kubeconfig = kube.write_kubeconfig(tmp_path / "sa.kubeconfig", token=token, namespace=ns)
    label = secrets.token_hex(4)
    # All namespaces, as deployed, but only this test's Stacks: the server is shared.
    ctl = w.controller(**controller_flags(dep, kubeconfig, w),
                       watch_label_selector=f"pc-deploy-test={label}")
    reconcile_one_stack(w, ctl, "wide", label)
    wait_until(lambda: lease_holder(w, ns), what="the Lease in " + ns)
    owned = program_ref_source(w, "classic", label)
    no_forbidden_requests(ctl)

    # RBAC grants create/patch on every GitRepository; deploy/policy admits only the
    # <stack>-program ones a Stack controls.  "app" is the test's own (no owner).
    repos = f"/apis/{SOURCE_API}/namespaces/{w.namespace}/gitrepositories"
    merge = "application/merge-patch+json"
    body = refused(client, "PATCH", f"{repos}/app", {"spec": {"url": "https://evil.example.test/x.git"}},
                   merge)
    assert "pulumi-controller" in body["message"], body
    refused(client, "PATCH", f"{repos}/app", {"metadata": {
        "labels": {"pulumi.com/stack-name": "app"},
        "ownerReferences": [{"apiVersion": STACK_API, "kind": "Stack", "name": "app",
                             "uid": owned["metadata"]["ownerReferences"][0]["uid"],
                             "controller": True}]}}, merge)
    refused(client, "POST", repos, {"apiVersion": SOURCE_API, "kind": "GitRepository",
                                    "metadata": {"name": "mine"},
                                    "spec": {"url": "https://evil.example.test/x.git", "interval": "1m"}})
    status, _, _ = client.raw("PATCH", f"{repos}/classic-program", {"spec": {"interval": "2m"}}, merge)
    assert status == 200      # its own: RBAC and the policy both admit it

    # What the ClusterRole does not grant.
    stack = f"/apis/{STACK_API}/namespaces/{w.namespace}/stacks/wide"
    refused(client, "DELETE", stack)
    refused(client, "PUT", stack, w.stack("wide"))
    refused(client, "DELETE", f"/api/v1/namespaces/{w.namespace}/secrets/wide-outputs")
    refused(client, "POST", f"/api/v1/namespaces/{w.namespace}/configmaps",
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})
    # Pods are listed (a Job's termination message), never made, changed or removed.
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
           "spec": {"containers": [{"name": "c", "image": "x"}]}}
    refused(client, "POST", f"/api/v1/namespaces/{w.namespace}/pods", pod)
    refused(client, "DELETE", f"/api/v1/namespaces/{w.namespace}/pods/x")
    refused(client, "GET", f"/api/v1/namespaces/{w.namespace}/pods/x/exec")
    refused(client, "DELETE", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{w.namespace}/roles/x")
    refused(client, "PATCH", f"/apis/{SOURCE_API}/namespaces/{w.namespace}/ocirepositories/x",
            {"metadata": {"labels": {"a": "b"}}}, "application/merge-patch+json")
    refused(client, "POST", f"/apis/coordination.k8s.io/v1/namespaces/{w.namespace}/leases",
            {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "x"}})
    refused(client, "DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/"
            "pulumi-controller-leader-election")
    # Nothing of the Job runner (deploy/job-runner): a program that reads this token
    # cannot start a Job, read a pod's log or grant a Role.
    rights = job_runner_rights(kube, f"{ns}/{sa}", w.namespace)
    assert not any(rights.values()), rights
    assert not can_i(kube, f"{ns}/{sa}", "list", "jobs.batch", w.namespace)
    refused(client, "GET", f"/apis/batch/v1/namespaces/{w.namespace}/jobs")
    refused(client, "GET", f"/api/v1/namespaces/{w.namespace}/pods")


@pytest.mark.parametrize("stack_world", ["real"], indirect=True)
def test_namespaced_install_reconciles_with_only_its_role(stack_world, tmp_path):
    """deploy/namespaced overlaid into the test's namespace: Role, RoleBindings, and the
    controller watching that namespace (--namespace=$(RUNTIME_NAMESPACE))."""
    w = stack_world
    kube = w.api
    docs = td.overlay(tmp_path / "k", "namespaced", namespace=w.namespace)
    assert not [d for d in docs if d["kind"].startswith("Cluster")]
    apply(kube, write_rendering(tmp_path, docs, "namespaced"))
    assert_references_exist_on_the_server(kube, docs)
    dep = td.one(docs, "Deployment")
    token, client = sa_token(kube, w.namespace, dep["spec"]["template"]["spec"]["serviceAccountName"])
    kubeconfig = kube.write_kubeconfig(tmp_path / "sa.kubeconfig", token=token, namespace=w.namespace)
    flags = controller_flags(dep, kubeconfig, w)
    assert flags["namespace"] == w.namespace
    ctl = w.controller(**flags)
    reconcile_one_stack(w, ctl, "narrow")
    wait_until(lambda: lease_holder(w, w.namespace), what="the Lease")

    program_ref_source(w, "classic")
    no_forbidden_requests(ctl)

    # Nothing outside the namespace: another namespace's Secret, Stacks cluster-wide.
    other = "t-other-" + secrets.token_hex(3)
    kube.kubectl("create", "namespace", other)
    try:
        kube.direct_client.create({"apiVersion": "v1", "kind": "Secret", "metadata": {
            "name": "elsewhere", "namespace": other}, "stringData": {"k": "v"}}, "secrets")
        refused(client, "GET", f"/api/v1/namespaces/{other}/secrets/elsewhere")
        refused(client, "GET", f"/apis/{STACK_API}/namespaces/{other}/stacks")
        refused(client, "GET", f"/apis/{STACK_API}/stacks")
        refused(client, "GET", "/api/v1/secrets")
    finally:
        kube.kubectl("delete", "namespace", other, "--wait=false", check=False)
    refused(client, "DELETE", f"/apis/{STACK_API}/namespaces/{w.namespace}/stacks/narrow")
    refused(client, "DELETE", f"/api/v1/namespaces/{w.namespace}/secrets/narrow-outputs")
    sa = f"{w.namespace}/{dep['spec']['template']['spec']['serviceAccountName']}"
    rights = job_runner_rights(kube, sa, w.namespace)
    assert not any(rights.values()), rights


@pytest.mark.parametrize("stack_world", ["real"], indirect=True)
def test_the_pod_is_admitted_under_restricted_pod_security(stack_world, tmp_path):
    """The server's PodSecurity admission, in a namespace that enforces "restricted",
    admits the Deployment's pod template as a Pod (dry run) -- and refuses it once one
    of the restricted fields is taken away, so the check is live."""
    w = stack_world
    kube = w.api
    kube.kubectl("label", "namespace", w.namespace, "pod-security.kubernetes.io/enforce=restricted",
                 "pod-security.kubernetes.io/enforce-version=latest", "--overwrite")
    dep = td.one(td.render("default"), "Deployment")
    tmpl = dep["spec"]["template"]
    sa = tmpl["spec"]["serviceAccountName"]    # ServiceAccount admission wants it to exist
    kube.direct_client.create({"apiVersion": "v1", "kind": "ServiceAccount",
                               "metadata": {"name": sa, "namespace": w.namespace}}, "serviceaccounts")
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "pc-pod", "namespace": w.namespace, "labels": tmpl["metadata"]["labels"]},
           "spec": tmpl["spec"]}
    good = write_rendering(tmp_path, [pod], "pod")
    out = kube.kubectl("apply", "--dry-run=server", "-f", str(good))
    assert "would violate" not in out.stderr
    bad_pod = json.loads(json.dumps(pod))
    bad_pod["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    bad = kube.kubectl("apply", "--dry-run=server", "-f", str(write_rendering(tmp_path, [bad_pod], "bad")),
                       check=False)
    assert bad.returncode != 0 and "PodSecurity" in bad.stderr + bad.stdout


@pytest.mark.parametrize("stack_world", ["real"], indirect=True)
def test_flux_and_samples_are_accepted_by_the_server(stack_world, tmp_path):
    """Server-side dry run of deploy/flux and deploy/samples: the Flux source kinds are
    served (tests/e2e/crds); the Kustomization kind is only where kustomize-controller's
    CRD is installed, so its documents are dry-run only when the server serves them."""
    w = stack_world
    kube = w.api
    served = kube.direct_client.raw("GET", "/apis/kustomize.toolkit.fluxcd.io/v1")[0] == 200
    flux = [d for d in td.render("flux") if served or d["kind"] != "Kustomization"]
    for d in flux:
        if d["metadata"].get("namespace") == "flux-system":
            d["metadata"]["namespace"] = w.namespace
    apply(kube, write_rendering(tmp_path, flux, "flux"), "--dry-run=server")
    samples = td.render("samples")
    for d in samples:
        d["metadata"]["namespace"] = w.namespace
    apply(kube, write_rendering(tmp_path, samples, "samples"), "--dry-run=server")


@pytest.mark.parametrize("stack_world", ["real"], indirect=True)
def test_the_job_runner_works_with_only_the_namespaced_role(stack_world, tmp_path, kubelet_for):
    """deploy/namespaced + deploy/job-runner/namespaced, the controller in job mode
    (--runner job): the Job, its pod's
    termination message, the outputs Secret's Role and RoleBinding and a failed update's
    pods/log, all with no request refused (the test kubelet runs the fake run-update of
    test_stack_jobs.py)."""
    from test_stack_jobs import FAKE, IMAGE
    w = stack_world
    kube = w.api
    script = tmp_path / "fake-run-update"
    script.write_text(FAKE)
    script.chmod(0o755)
    w.kubelet = kubelet_for(w, commands={"pulumi-controller": str(script)})
    docs = td.job_runner_overlay(tmp_path / "k", "namespaced", "job-runner/namespaced", namespace=w.namespace)
    apply(kube, write_rendering(tmp_path, docs, "namespaced"))
    dep = td.one(docs, "Deployment")
    sa = dep["spec"]["template"]["spec"]["serviceAccountName"]
    wait_until(lambda: all(job_runner_rights(kube, f"{w.namespace}/{sa}", w.namespace).values()),
               timeout=30, what="the Job runner's Roles to be in force")
    token, _ = sa_token(kube, w.namespace, sa)
    kubeconfig = kube.write_kubeconfig(tmp_path / "sa.kubeconfig", token=token, namespace=w.namespace)
    assert controller_flags(dep, kubeconfig, w)["job_image"] == td.container(docs)["image"]
    ctl = w.controller(**dict(controller_flags(dep, kubeconfig, w), runner="job", job_image=IMAGE))
    src = w.flux_source("GitRepository", "app", w.artifact())
    for name, mode in (("ok", "ok"), ("bad", "fail")):
        w.apply_stack(name, fluxSource={"sourceRef": GIT}, runner={"type": "Job", "podTemplate": {
            "spec": {"env": [{"name": "FAKE_MODE", "value": mode}]}}})
    w.wait_ready("ok", revision=src["revision"])
    obj = w.wait_condition("bad", "Reconciling", reason="RetryingAfterFailure")
    assert "log tail:" in w.cond(obj, "Ready")["message"]
    w.client.get("rbac.authorization.k8s.io/v1", "roles", "ok-outputs-writer", w.namespace)
    no_forbidden_requests(ctl)


def fake_kubelet(w, tmp_path, kubelet_for):
    from test_stack_jobs import FAKE
    script = tmp_path / "fake-run-update"
    script.write_text(FAKE)
    script.chmod(0o755)
    w.kubelet = kubelet_for(w, commands={"pulumi-controller": str(script)})


def request_reconcile(w, name):
    w.patch_stack(name, {"metadata": {"annotations": {
        "reconcile.fluxcd.io/requestedAt": secrets.token_hex(4)}}})


@pytest.mark.parametrize("stack_world", ["real"], indirect=True)
def test_cluster_wide_job_runner_runs_jobs_only_where_bound(stack_world, tmp_path, kubelet_for):
    """deploy/default + deploy/job-runner: the controller reads Jobs everywhere but may
    run them only in a namespace bound with deploy/job-runner/namespace.  Before the
    binding a job-mode Stack says JobForbidden, naming the refused right and the
    ClusterRole to bind; once bound (and asked again) it runs its Job to Ready."""
    from test_stack_jobs import IMAGE
    w = stack_world
    kube = w.api
    fake_kubelet(w, tmp_path, kubelet_for)
    docs = td.job_runner_overlay(tmp_path / "k", "default", "job-runner")
    dep = td.one(docs, "Deployment")
    ns = dep["metadata"]["namespace"]
    sa = dep["spec"]["template"]["spec"]["serviceAccountName"]
    binding = td.overlay(tmp_path / "b", "job-runner/namespace", namespace=w.namespace)
    try:
        apply(kube, write_rendering(tmp_path, docs, "job-runner"))
        assert_references_exist_on_the_server(kube, docs)
        wait_until(lambda: can_i(kube, f"{ns}/{sa}", "list", "jobs.batch", w.namespace),
                   timeout=30, what="reading Jobs to be in force")
        assert not any(job_runner_rights(kube, f"{ns}/{sa}", w.namespace).values())
        token, client = sa_token(kube, ns, sa)
        kubeconfig = kube.write_kubeconfig(tmp_path / "sa.kubeconfig", token=token, namespace=ns)
        label = secrets.token_hex(4)
        ctl = w.controller(**dict(controller_flags(dep, kubeconfig, w), job_image=IMAGE),
                           watch_label_selector=f"pc-deploy-test={label}")
        src = w.flux_source("GitRepository", "app", w.artifact())
        labelled_stack(w, "jobs", label, fluxSource={"sourceRef": GIT}, runner={"type": "Job"})
        obj = w.wait_condition("jobs", "Reconciling", reason="JobForbidden")
        msg = w.cond(obj, "Ready")["message"]
        assert f"namespace {w.namespace}" in msg and "pulumi-controller-job-runner" in msg, msg
        assert "forbidden" in msg and f"system:serviceaccount:{ns}:{sa}" in msg, msg
        assert "JobForbidden" in w.event_reasons("jobs")
        assert not w.client.list("batch/v1", "jobs", w.namespace)["items"]

        apply(kube, write_rendering(tmp_path, binding, "binding"))
        wait_until(lambda: can_i(kube, f"{ns}/{sa}", "create", "jobs.batch", w.namespace),
                   timeout=30, what="the namespace's binding to be in force")
        assert all(job_runner_rights(kube, f"{ns}/{sa}", w.namespace).values())
        assert not can_i(kube, f"{ns}/{sa}", "create", "jobs.batch", "default")
        request_reconcile(w, "jobs")
        w.wait_ready("jobs", revision=src["revision"])
        assert w.client.list("batch/v1", "jobs", w.namespace)["items"]
        ctl.stop()
    finally:
        kube.kubectl("delete", "-f", str(tmp_path / "binding.yaml"), "--ignore-not-found", check=False)
        cluster_scoped_job_runner(kube)
