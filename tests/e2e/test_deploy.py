"""The kustomize manifests in deploy/ (docs/install.md), rendered with the kustomize built
into kubectl -- in a network namespace of their own where the machine allows one, to
prove no overlay fetches anything -- and checked for what they promise: every
reference inside a rendering resolves (ServiceAccount, Roles, volumes, named ports),
the flags are flags of `run`, the pod meets the restricted Pod Security Standard, the
termination grace outlasts an update, the namespaced overlay has a Role and no
ClusterRole, and the Flux overlay installs the controller from an OCIRepository and
health-checks a Stack.  test_deploy_rbac.py applies them to the real kube-apiserver."""
import functools
import os
import pathlib
import re
import shutil
import subprocess

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
OVERLAYS = ["default", "namespaced", "crds", "rbac", "policy", "manager", "flux", "samples",
            "job-runner/rules", "job-runner/namespace"]
REAL_KUBECTL = pathlib.Path(os.environ.get("REAL_DIR", str(ROOT / ".real"))) / "bin" / "kubectl"
# How long the controller may still take after --shutdown-grace: cancelling running
# updates the way the CLI expects (src/cli/cmd_run.c STOP_CANCEL_MS).
CANCEL_S = int(re.search(r"#define STOP_CANCEL_MS (\d+)L",
                         (ROOT / "src" / "cli" / "cmd_run.c").read_text()).group(1)) // 1000


def kubectl():
    if REAL_KUBECTL.exists():
        return str(REAL_KUBECTL)
    found = shutil.which("kubectl")
    if found is None:
        pytest.fail("no kubectl: run `make deps-real`")
    return found


@functools.lru_cache(maxsize=None)
def isolated():
    """`unshare --net` works here (root or user namespaces): renderings run offline."""
    return subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode == 0


def render_dir(path):
    argv = [kubectl(), "kustomize", str(path)]
    if isolated():
        argv = ["unshare", "--net"] + argv
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def render(d):
    return render_dir(DEPLOY / d)


def overlay(tmp_path, base, **fields):
    """A copy of deploy/ with an overlay of `base` that sets `fields` (namespace,
    nameSuffix ...), as a user's own overlay would; returns its rendering."""
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    (tmp_path / "mine").mkdir()
    doc = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
           "resources": [f"../deploy/{base}"], **fields}
    (tmp_path / "mine" / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    return render_dir(tmp_path / "mine")


def one(docs, kind, name=None):
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, [d["metadata"]["name"] for d in found])
    return found[0]


def container(docs):
    return one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def duration_s(text):
    total, units = 0, {"h": 3600, "m": 60, "s": 1}
    for n, u in re.findall(r"(\d+)([hms])", text):
        total += int(n) * units[u]
    return total


def flag(args, name):
    """The value of --name=V in args, or None."""
    for a in args:
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
    return None


@pytest.mark.parametrize("d", OVERLAYS)
def test_renders_offline(d):
    assert render(d)


def test_every_kustomization_is_local():
    """No remote base, no URL anywhere a kustomization loads from."""
    for path in DEPLOY.rglob("kustomization.yaml"):
        doc = yaml.safe_load(path.read_text())
        for key in ("resources", "components", "bases", "crds"):
            for ref in doc.get(key) or []:
                assert "://" not in ref and not ref.startswith(("github.com", "git@")), (path, ref)
                assert (path.parent / ref).exists(), (path, ref)


def check_references(docs):
    """Everything the Deployment and the bindings name exists in the same rendering."""
    dep = one(docs, "Deployment")
    ns = dep["metadata"]["namespace"]
    pod = dep["spec"]["template"]["spec"]
    sas = {(d["metadata"]["namespace"], d["metadata"]["name"])
           for d in docs if d["kind"] == "ServiceAccount"}
    assert (ns, pod["serviceAccountName"]) in sas
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])
             for d in docs if d["kind"] in ("Role", "ClusterRole")}
    bindings = [d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    assert bindings
    for b in bindings:
        ref = b["roleRef"]
        where = b["metadata"].get("namespace") if ref["kind"] == "Role" else None
        assert (ref["kind"], where, ref["name"]) in roles, b["metadata"]["name"]
        for s in b["subjects"]:
            assert s["kind"] == "ServiceAccount" and (s["namespace"], s["name"]) in sas, s
    ctr = pod["containers"][0]
    volumes = {v["name"] for v in pod["volumes"]}
    mounts = {m["name"] for m in ctr["volumeMounts"]}
    assert mounts == volumes, (mounts, volumes)
    ports = {p["name"]: p["containerPort"] for p in ctr["ports"]}
    for probe in ("livenessProbe", "readinessProbe"):
        assert ctr[probe]["httpGet"]["port"] in ports
    return dep


@pytest.mark.parametrize("d", ["default", "namespaced"])
def test_references_resolve(d):
    check_references(render(d))


def test_references_resolve_in_an_overlay_of_another_namespace(tmp_path):
    """An overlay that installs elsewhere binds the ServiceAccount it creates (the
    subject's namespace is not written down in deploy/rbac)."""
    docs = overlay(tmp_path, "default", namespace="platform-pulumi", nameSuffix="-b")
    dep = check_references(docs)
    assert dep["metadata"]["namespace"] == "platform-pulumi"
    crb = one(docs, "ClusterRoleBinding")
    assert crb["subjects"] == [{"kind": "ServiceAccount", "name": "pulumi-controller-b",
                                "namespace": "platform-pulumi"}]


@pytest.mark.parametrize("d", ["default", "namespaced"])
def test_flags_are_flags_of_run(d, run_pc):
    ctr = container(render(d))
    assert ctr["args"][0] == "run" and "command" not in ctr    # the image's ENTRYPOINT
    help_text = run_pc("run", "--help").stdout
    known = set(re.findall(r"^\s+(--[a-z-]+)", help_text, re.M))
    for a in ctr["args"][1:]:
        assert a.split("=")[0] in known, f"{a} is not a flag of 'run'"


def test_pod_meets_the_restricted_pod_security_standard():
    """The restricted profile's rules, field by field (the real API server's PodSecurity
    admission checks the same in test_deploy_rbac.py)."""
    pod = one(render("default"), "Deployment")["spec"]["template"]["spec"]
    psc = pod["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] > 0
    assert psc["seccompProfile"]["type"] == "RuntimeDefault"
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    for ctr in pod["containers"]:
        sc = ctr["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add")
        assert sc["readOnlyRootFilesystem"] is True
        assert not sc.get("privileged")
    for v in pod["volumes"]:
        assert set(v) <= {"name", "emptyDir", "persistentVolumeClaim", "configMap", "secret",
                          "projected", "ephemeral", "downwardAPI"}, v
    ns = one(render("default"), "Namespace")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_writable_paths_are_volumes():
    """Everything the process writes is on a volume: the store and workspaces
    (--storage-path), PULUMI_HOME (--pulumi-home), $HOME and /tmp of the CLI."""
    ctr = container(render("default"))
    mounts = {m["mountPath"] for m in ctr["volumeMounts"]}
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    for path in (flag(ctr["args"], "storage-path"), flag(ctr["args"], "pulumi-home"),
                 env["HOME"], env["TMPDIR"]):
        assert path in mounts, path
    assert not any(m.get("readOnly") for m in ctr["volumeMounts"])


def test_termination_grace_outlasts_an_update():
    """SIGKILL must never land in a running `pulumi up`: the grace period covers the
    update timeout and the shutdown grace plus the cancellation after it."""
    dep = one(render("default"), "Deployment")
    grace = dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    args = container([dep])["args"]
    update = duration_s(flag(args, "update-timeout"))
    shutdown = duration_s(flag(args, "shutdown-grace"))
    assert update > 0 and shutdown >= update
    assert grace > update and grace >= shutdown + CANCEL_S, (grace, update, shutdown, CANCEL_S)
    assert dep["spec"]["strategy"]["type"] == "Recreate"


def test_probes_are_on_the_health_port():
    ctr = container(render("default"))
    port = int(flag(ctr["args"], "health-addr").rsplit(":", 1)[1])
    ports = {p["name"]: p["containerPort"] for p in ctr["ports"]}
    assert ctr["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert ctr["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe"):
        assert ports[ctr[probe]["httpGet"]["port"]] == port
    metrics = int(flag(ctr["args"], "metrics-addr").rsplit(":", 1)[1])
    assert ports["http-prom"] == metrics


def test_resources_have_a_memory_limit_above_the_request():
    res = container(render("default"))["resources"]
    mib = {"Mi": 1, "Gi": 1024}
    req = int(res["requests"]["memory"][:-2]) * mib[res["requests"]["memory"][-2:]]
    lim = int(res["limits"]["memory"][:-2]) * mib[res["limits"]["memory"][-2:]]
    assert 0 < req <= lim and "cpu" in res["requests"]


# -- RBAC: least privilege ------------------------------------------------------------

def rules_of(docs, kind, name):
    return {(g, r): sorted(rule["verbs"]) for rule in one(docs, kind, name)["rules"]
            for g in rule["apiGroups"] for r in rule["resources"]}


# What the code calls (docs/security.md "RBAC"), and not a verb more.
EXPECTED_RULES = {
    ("pulumi.com", "stacks"): ["get", "list", "patch", "watch"],
    ("pulumi.com", "stacks/status"): ["update"],
    ("pulumi.com", "stacks/finalizers"): ["update"],
    ("pulumi.com", "programs"): ["get", "list", "watch"],
    ("source.toolkit.fluxcd.io", "gitrepositories"): ["create", "get", "list", "patch", "watch"],
    ("source.toolkit.fluxcd.io", "ocirepositories"): ["get", "list", "watch"],
    ("source.toolkit.fluxcd.io", "buckets"): ["get", "list", "watch"],
    ("", "configmaps"): ["get", "list", "watch"],
    ("", "secrets"): ["create", "get", "list", "update", "watch"],
    ("", "events"): ["create", "patch"],
}
# deploy/job-runner (docs/job-runner.md "RBAC"): reading Jobs, bound where the controller
# watches; running them, bound per namespace.  The only delete: a Job the controller
# replaces (its pod never started, or its result was recorded and the same inputs run again).
JOB_READ_RULES = {("batch", "jobs"): ["get", "list", "watch"]}
JOB_RUNNER_RULES = {
    ("batch", "jobs"): ["create", "delete", "patch"],
    ("", "pods"): ["list"],
    ("", "pods/log"): ["get"],
    ("rbac.authorization.k8s.io", "roles"): ["create", "get", "update"],
    ("rbac.authorization.k8s.io", "rolebindings"): ["create", "get", "update"],
    ("", "serviceaccounts"): ["create", "get", "update"],
}
DELETABLE = {("batch", "jobs")}
LEADER_RULES = {("coordination.k8s.io", "leases"): ["create", "get", "update"],
                ("", "events"): ["create", "patch"]}


def is_user_role(doc):
    """deploy/default/user_roles.yaml: ClusterRoles for people, aggregated into Kubernetes'
    edit, admin and view; never bound to the controller."""
    labels = doc.get("metadata", {}).get("labels") or {}
    return doc["kind"] == "ClusterRole" and any(
        k.startswith("rbac.authorization.k8s.io/aggregate-to-") for k in labels)


def check_least_privilege(docs, deletable):
    for d in docs:
        if is_user_role(d):
            continue
        for rule in d.get("rules", []):
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
            assert not {"deletecollection", "escalate", "bind", "impersonate"} & set(rule["verbs"])
            if "delete" in rule["verbs"]:
                assert {(g, r) for g in rule["apiGroups"] for r in rule["resources"]} <= deletable
            assert "resourceNames" not in rule


def test_cluster_role_is_exactly_what_the_code_calls():
    """The default install grants nothing of the Job runner: no Job, pod, pods/log,
    Role, RoleBinding or ServiceAccount right, and no delete at all."""
    docs = render("default")
    assert rules_of(docs, "ClusterRole", "pulumi-controller") == EXPECTED_RULES
    assert rules_of(docs, "Role", "pulumi-controller-leader-election") == LEADER_RULES
    assert [d["metadata"]["name"] for d in docs
            if d["kind"] in ("ClusterRole", "Role") and not is_user_role(d)] == \
        ["pulumi-controller-leader-election", "pulumi-controller"]
    assert not flag(container(docs)["args"], "job-image")
    check_least_privilege(docs, set())


def test_user_roles_aggregate_into_edit_and_view_and_are_bound_to_nobody():
    """Editing Stacks and Programs is added to edit and admin, reading them to view;
    status stays the controller's, and no binding in the install names these roles."""
    docs = render("default")
    users = {d["metadata"]["name"]: d for d in docs if is_user_role(d)}
    assert sorted(users) == ["pulumi-controller-stacks-edit", "pulumi-controller-stacks-view"]
    edit, view = users["pulumi-controller-stacks-edit"], users["pulumi-controller-stacks-view"]
    assert set(edit["metadata"]["labels"]) == {"rbac.authorization.k8s.io/aggregate-to-edit",
                                               "rbac.authorization.k8s.io/aggregate-to-admin"}
    assert set(view["metadata"]["labels"]) == {"rbac.authorization.k8s.io/aggregate-to-view"}
    for role in (edit, view):
        for rule in role["rules"]:
            assert rule["apiGroups"] == ["pulumi.com"]
            assert "*" not in rule["verbs"] + rule["resources"]
    edited = {r for rule in edit["rules"] for r in rule["resources"]}
    assert edited == {"stacks", "programs"}, "status is written by the controller only"
    assert {v for rule in view["rules"] for v in rule["verbs"]} == {"get", "list", "watch"}
    assert not [d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
                and d["roleRef"]["name"] in users]


def job_runner_overlay(tmp_path, base, component, **fields):
    """An overlay of deploy/<base> with the component deploy/<component>."""
    return overlay(tmp_path, base, components=[f"../deploy/{component}"], **fields)


def test_job_runner_component_adds_its_rules_and_the_job_image(tmp_path):
    """deploy/default + deploy/job-runner: --job-image, reading Jobs bound cluster-wide,
    running them bound nowhere (deploy/job-runner/namespace binds it per namespace)."""
    docs = job_runner_overlay(tmp_path, "default", "job-runner")
    check_references(docs)
    assert rules_of(docs, "ClusterRole", "pulumi-controller") == EXPECTED_RULES
    assert rules_of(docs, "ClusterRole", "pulumi-controller-jobs") == JOB_READ_RULES
    assert rules_of(docs, "ClusterRole", "pulumi-controller-job-runner") == JOB_RUNNER_RULES
    assert one(docs, "ClusterRoleBinding", "pulumi-controller-jobs")["roleRef"]["name"] == "pulumi-controller-jobs"
    assert not [d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
                and d["roleRef"]["name"] == "pulumi-controller-job-runner"]
    ctr = container(docs)
    assert flag(ctr["args"], "job-image") == ctr["image"]
    check_least_privilege(docs, DELETABLE)


def test_job_runner_namespace_binding_names_the_controller(tmp_path):
    """One deploy/job-runner/namespace overlay per namespace: a RoleBinding there of the
    ClusterRole pulumi-controller-job-runner to the controller's ServiceAccount in its
    own namespace (kustomize keeps the explicit subject namespace)."""
    docs = overlay(tmp_path, "job-runner/namespace", namespace="team-a")
    binding = one(docs, "RoleBinding", "pulumi-controller-job-runner")
    assert binding["metadata"]["namespace"] == "team-a"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "pulumi-controller-job-runner"}
    sa = one(render("default"), "ServiceAccount")["metadata"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["name"], "namespace": sa["namespace"]}]


def test_job_runner_namespaced_component_is_roles_of_the_namespace(tmp_path):
    docs = job_runner_overlay(tmp_path, "namespaced", "job-runner/namespaced", namespace="team-b")
    check_references(docs)
    assert not [d for d in docs if d["kind"].startswith("Cluster")]
    assert rules_of(docs, "Role", "pulumi-controller") == EXPECTED_RULES
    assert rules_of(docs, "Role", "pulumi-controller-jobs") == JOB_READ_RULES
    assert rules_of(docs, "Role", "pulumi-controller-job-runner") == JOB_RUNNER_RULES
    assert all(d["metadata"].get("namespace") == "team-b" for d in docs)
    ctr = container(docs)
    assert flag(ctr["args"], "job-image") == ctr["image"]


def test_namespaced_overlay_has_a_role_and_watches_its_namespace():
    docs = render("namespaced")
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding",
                                                 "CustomResourceDefinition", "Namespace")]
    ns = one(docs, "Deployment")["metadata"]["namespace"]
    assert rules_of(docs, "Role", "pulumi-controller") == EXPECTED_RULES
    binding = one(docs, "RoleBinding", "pulumi-controller")
    assert binding["metadata"]["namespace"] == ns
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": "pulumi-controller"}
    ctr = container(docs)
    assert flag(ctr["args"], "namespace") == "$(RUNTIME_NAMESPACE)"
    env = {e["name"]: e for e in ctr["env"]}
    assert env["RUNTIME_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert all(d["metadata"].get("namespace") == ns for d in docs)


def test_gitrepository_policy_names_what_the_code_writes():
    """deploy/policy checks the label, the name suffix and the ServiceAccount the code and
    the overlays really use (test_deploy_rbac.py shows the server enforcing it)."""
    docs = render("default")
    policy = one(docs, "ValidatingAdmissionPolicy")
    binding = one(docs, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    header = (ROOT / "src" / "stack" / "stack_model.h").read_text()
    label = re.search(r'#define STACK_LABEL_NAME "([^"]+)"', header).group(1)
    spec = (ROOT / "src" / "stack" / "stack_spec_git.c").read_text()   # the Git sources
    assert '"%s-program"' in spec
    text = yaml.safe_dump(policy)
    assert f"'{label}'" in text and "'-program'" in text
    cond, = policy["spec"]["matchConditions"]
    pattern = re.search(r"matches\('(.+?)'\)", cond["expression"]).group(1)
    for d in ("default", "namespaced"):
        dep = one(render(d), "Deployment")
        user = (f"system:serviceaccount:{dep['metadata']['namespace']}:"
                f"{dep['spec']['template']['spec']['serviceAccountName']}")
        assert re.fullmatch(pattern, user), (pattern, user)
    assert not re.fullmatch(pattern, "system:serviceaccount:flux-system:source-controller")


# -- Flux -----------------------------------------------------------------------------

def test_flux_installs_the_controller_from_an_oci_artifact_of_deploy():
    docs = render("flux")
    repo = one(docs, "OCIRepository", "pulumi-controller")
    assert repo["apiVersion"] == "source.toolkit.fluxcd.io/v1"
    assert repo["spec"]["url"].startswith("oci://") and repo["spec"]["ref"]["semver"]
    ks = one(docs, "Kustomization", "pulumi-controller")
    assert ks["apiVersion"] == "kustomize.toolkit.fluxcd.io/v1"
    assert ks["spec"]["sourceRef"] == {"kind": "OCIRepository", "name": "pulumi-controller"}
    assert ks["metadata"]["namespace"] == repo["metadata"]["namespace"]
    # The artifact is deploy/ (controller.yaml says how it is pushed): the path is an
    # overlay of this tree, and it renders.
    path = ks["spec"]["path"]
    assert render_dir(DEPLOY / path)
    assert ks["spec"]["prune"] is True and ks["spec"]["wait"] is True


def test_flux_health_checks_a_stack():
    docs = render("flux")
    stacks = [d for d in docs if d["kind"] == "Kustomization" and d["spec"].get("healthChecks")]
    assert len(stacks) == 1
    ks = stacks[0]["spec"]
    check, = ks["healthChecks"]
    crd = one(render("crds"), "CustomResourceDefinition", "stacks.pulumi.com")
    storage = next(v["name"] for v in crd["spec"]["versions"] if v["storage"])
    assert check["apiVersion"] == f"{crd['spec']['group']}/{storage}"
    assert check["kind"] == crd["spec"]["names"]["kind"] and check["name"] and check["namespace"]
    assert ks["dependsOn"] == [{"name": "pulumi-controller"}]
    src = one(docs, ks["sourceRef"]["kind"], ks["sourceRef"]["name"])
    assert src["metadata"]["namespace"] == stacks[0]["metadata"]["namespace"]
    # kustomize-controller gives up on a health check after spec.timeout: it must
    # cover one update, which the controller bounds with --update-timeout.
    update = duration_s(flag(container(render("default"))["args"], "update-timeout"))
    assert duration_s(ks["timeout"]) >= update


def test_flux_network_policy_admits_the_controller_pods():
    docs = render("flux")
    pol = one(docs, "NetworkPolicy")
    peer, = pol["spec"]["ingress"][0]["from"]
    dep = one(render("default"), "Deployment")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert peer["podSelector"]["matchLabels"].items() <= labels.items()
    assert peer["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": dep["metadata"]["namespace"]}


# -- samples and CRD ------------------------------------------------------------------

def test_samples_render_every_file_and_each_stack_has_one_source():
    """The kustomization lists every sample file; each Stack names exactly one source
    (the CRD refuses anything else; test_stack_crd.py applies them to a server)."""
    samples = DEPLOY / "samples"
    listed = yaml.safe_load((samples / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(f.name for f in samples.glob("*.yaml")
                                    if f.name != "kustomization.yaml")
    docs = render("samples")
    stacks = [d for d in docs if d["kind"] == "Stack"]
    sources = {"fluxSource", "ociSource", "programRef", "projectRepo"}
    assert len(stacks) == 4
    for s in stacks:
        assert len(sources & s["spec"].keys()) == 1, s["metadata"]["name"]
        assert "namespace" not in s["metadata"]
    kinds = {(d["kind"], d["spec"].get("ociSource") is not None) for d in docs}
    assert {("GitRepository", False), ("OCIRepository", False), ("Stack", True)} <= kinds


def test_classic_sample_is_the_tutorial_shape():
    """classic-stack.yaml stays the shape users copy (v1alpha1, programRef, envs,
    cloud, destroyOnDelete, no stack name): a tidy-up must not modernise it."""
    doc = yaml.safe_load((DEPLOY / "samples" / "classic-stack.yaml").read_text())
    assert doc["apiVersion"] == "pulumi.com/v1alpha1"
    spec = doc["spec"]
    assert sorted(spec) == ["cloud", "config", "destroyOnDelete", "envs", "programRef"]
    assert spec["programRef"] == {"repo": "git@github.com:acme/pulumi-network.git",
                                  "ref": "refs/tags/v2.1.0"}
    assert spec["envs"]["AWS_ACCESS_KEY_ID"] == {
        "valueFrom": {"secretKeyRef": {"name": "aws-creds", "key": "access-key-id"}}}


def test_crds_are_the_stack_and_the_program_kinds():
    """deploy/crds installs both kinds the controller serves: Stack, and the operator's
    Program that spec.programRef.name reads (one pulumi.com group)."""
    crds = {d["metadata"]["name"]: d for d in render("crds")
            if d["kind"] == "CustomResourceDefinition"}
    assert sorted(crds) == ["programs.pulumi.com", "stacks.pulumi.com"]
    prog = crds["programs.pulumi.com"]["spec"]
    assert (prog["group"], prog["scope"], prog["names"]["kind"]) == ("pulumi.com", "Namespaced", "Program")
    assert [v["name"] for v in prog["versions"] if v["served"] and v["storage"]] == ["v1"]


def test_crd_versions_share_one_schema():
    """v1 is stored, v1alpha1 is served with the very same schema, columns and status
    subresource, without a conversion webhook."""
    crd = one(render("crds"), "CustomResourceDefinition", "stacks.pulumi.com")
    v1, alpha = crd["spec"]["versions"]
    assert (v1["name"], v1["served"], v1["storage"]) == ("v1", True, True)
    assert (alpha["name"], alpha["served"], alpha["storage"]) == ("v1alpha1", True, False)
    assert alpha["deprecated"] is False
    assert crd["spec"]["conversion"] == {"strategy": "None"}
    for key in ("schema", "additionalPrinterColumns", "subresources"):
        assert v1[key] == alpha[key], key
