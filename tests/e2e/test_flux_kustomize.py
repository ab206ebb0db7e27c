"""Issue 12, scenarios 4, 5 and 6: Stacks applied by the real kustomize-controller from a
directory of manifests on the loopback Git server.

  4. `wait: true`: the Kustomization turns Ready only once its Stacks are Ready (Flux's
     own kstatus health checks), a failing Stack makes it report that Stack, and a
     Stack removed from Git with `prune: true` is deleted, its finalizer destroying it;
  5. `flux reconcile kustomization --with-source` after a commit: one update;
  6. a second Kustomization depends on the first and renders the Stack's outputs Secret
     through postBuild.substituteFrom; a changed output re-renders it.

Real tier only: there is no kustomize-controller on the emulator tier."""
import pytest
import yaml

from stack_fixtures import SOURCE_API

pytestmark = pytest.mark.parametrize("stack_world", ["real"], indirect=True)

KUSTOMIZE_API = "kustomize.toolkit.fluxcd.io/v1"


def program(name):
    return {"sourceRef": {"apiVersion": SOURCE_API, "kind": "GitRepository", "name": name}}


def stack_yaml(w, name, **spec):
    return yaml.safe_dump(w.stack_object(name, stack=name, **spec)).encode()


def kustomization(w, name, path, **spec):
    obj = {"apiVersion": KUSTOMIZE_API, "kind": "Kustomization",
           "metadata": {"name": name, "namespace": w.namespace},
           "spec": {"interval": "10m", "path": path, "prune": True, "timeout": "90s",
                    "sourceRef": {"kind": "GitRepository", "name": "manifests"}, **spec}}
    w.client.apply(obj, "kustomizations", field_manager="stack-test")


def ks(w, name):
    return w.client.get(KUSTOMIZE_API, "kustomizations", name, w.namespace)


def wait_ks(w, name, status, timeout=180):
    def match():
        obj = ks(w, name)
        c = w.cond(obj, "Ready")
        if c and c["status"] == status and \
                (obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"]:
            return obj
        return None
    try:
        return w._wait(name, match, timeout, f"Kustomization {name} Ready={status}")
    except AssertionError as e:
        raise AssertionError(f"{e}\nKustomization: {ks(w, name).get('status')}"
                             f"{w.flux.explain()}") from None


def test_kustomization_waits_for_stacks_reconciles_with_source_and_prunes(stack_world):
    w = stack_world
    w.flux_source("GitRepository", "app", w.artifact())
    w.flux_source("GitRepository", "failing", w.artifact(w.program_files("stack-fail")))
    manifests = {"stacks/alpha.yaml": stack_yaml(w, "alpha", fluxSource=program("app"),
                                                 destroyOnFinalize=True)}
    w.flux_source("GitRepository", "manifests", w.artifact(manifests))
    w.controller()
    kustomization(w, "stacks", "./stacks", wait=True)
    obj = wait_ks(w, "stacks", "True")
    assert w.cond(obj, "Ready")["reason"] == "ReconciliationSucceeded"
    w.wait_ready("alpha")
    assert list(w.cloud_files().values()) == ["hello"]

    # 5: a commit, then `flux reconcile kustomization --with-source`: one update.
    mark = w.mark()
    manifests["stacks/alpha.yaml"] = stack_yaml(w, "alpha", fluxSource=program("app"),
                                                destroyOnFinalize=True,
                                                config={"greeting": "via-flux"})
    w.git_server.commit(w.git_repo("manifests"), manifests)
    w.flux.cli("reconcile", "kustomization", "stacks", "--with-source", namespace=w.namespace)
    w.wait_ready("alpha")
    w.settle("alpha")
    assert len(w.updates("alpha", since=mark)) == 1
    assert list(w.cloud_files().values()) == ["via-flux"]

    # A failing Stack: the Kustomization is not Ready and names it.
    manifests["stacks/broken.yaml"] = stack_yaml(w, "broken", fluxSource=program("failing"),
                                                 maxUpdateFailures=1)
    w.git_server.commit(w.git_repo("manifests"), manifests)
    # (the CLI would wait for Ready: it only asks here, the test waits for the failure)
    w.flux.cli("reconcile", "kustomization", "stacks", "--with-source", "--timeout=5s",
               namespace=w.namespace, check=False)
    obj = wait_ks(w, "stacks", "False")
    msg = w.cond(obj, "Ready")["message"]
    assert "broken" in msg, msg

    # Pruned: alpha and broken leave Git, beta arrives; alpha's finalizer destroys it.
    alpha_file = w.stack("alpha")["status"]["outputs"]["path"].rsplit("/", 1)[-1]
    manifests = {"stacks/beta.yaml": stack_yaml(w, "beta", fluxSource=program("app"))}
    w.git_server.commit(w.git_repo("manifests"), manifests)
    w.flux.cli("reconcile", "kustomization", "stacks", "--with-source", namespace=w.namespace)
    w.wait_gone("alpha")
    w.wait_gone("broken")
    assert w.cond(w.stack("beta"), "Ready")["status"] == "True"
    assert [r["stack"] for r in w.updates(commands=("destroy",))] == ["alpha"]
    assert alpha_file not in w.cloud_files()


def test_kustomization_chained_through_the_outputs_secret(stack_world):
    w = stack_world
    w.flux_source("GitRepository", "app", w.artifact())
    consumer = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "consumer", "namespace": w.namespace},
                "data": {"message": "${message}"}}
    manifests = {"stacks/alpha.yaml": stack_yaml(w, "alpha", fluxSource=program("app")),
                 "consumers/consumer.yaml": yaml.safe_dump(consumer).encode()}
    w.flux_source("GitRepository", "manifests", w.artifact(manifests))
    kustomization(w, "stacks", "./stacks", wait=True)
    kustomization(w, "consumers", "./consumers", dependsOn=[{"name": "stacks"}],
                  postBuild={"substituteFrom": [{"kind": "Secret", "name": "alpha-outputs"}]})
    w.controller()
    wait_ks(w, "consumers", "True")
    cm = w.client.get("v1", "configmaps", "consumer", w.namespace)
    assert cm["data"]["message"] == "hello"

    # A new program revision changes the output; the consumer is rendered again.
    src = w.flux_source("GitRepository", "app", w.artifact(w.revision_files(greeting="changed")))
    w.wait_ready("alpha", revision=src["revision"])
    w._wait("alpha", lambda: w.client.get("v1", "configmaps", "consumer", w.namespace)
            ["data"]["message"] == "changed", 120, "the consumer ConfigMap re-rendered")


def test_kustomization_is_not_ready_before_the_controller_saw_its_stack(stack_world):
    """The Stack CRD's status default (observedGeneration -1, as Flux's kinds) keeps an unseen
    Stack InProgress to kstatus, so wait: true cannot pass before the controller ran it."""
    w = stack_world
    w.flux_source("GitRepository", "app", w.artifact())
    manifests = {"stacks/alpha.yaml": stack_yaml(w, "alpha", fluxSource=program("app"))}
    w.flux_source("GitRepository", "manifests", w.artifact(manifests))
    kustomization(w, "stacks", "./stacks", wait=True, timeout="20s")
    # No pulumi-controller runs: the health check can only time out (Ready=False after 20 s);
    # Ready=True means Flux took the unseen Stack for Current.
    def settled():
        obj = ks(w, "stacks")
        c = w.cond(obj, "Ready")
        # Ready=True (the bug), or the health check's verdict (Flux then retries, keeping its
        # own observedGeneration at -1, so that is not waited for)
        done = c and (c["status"] == "True" or c.get("reason") == "HealthCheckFailed")
        return obj if done else None
    obj = w._wait("stacks", settled, 120, "Kustomization stacks done")
    assert w.cond(obj, "Ready")["status"] == "False", obj["status"]
    assert "alpha" in w.cond(obj, "Ready")["message"]
    assert "InProgress" in w.cond(obj, "Ready")["message"]
