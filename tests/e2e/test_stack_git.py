"""Stack scenario 1 (issue 11): a GitRepository artifact makes a Stack Ready with its
outputs Secret; a new revision runs exactly one update; the same revision again, a
restart of the controller and a resync without continueResyncOnCommitMatch run no CLI
at all (counted by the --pulumi-bin wrapper).  Both tiers (stack_fixtures.stack_world)."""
import json

from stack_fixtures import STACK_API

GIT = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "name": "app"}


def test_git_artifact_to_ready_then_one_update_per_revision(stack_world):
    w = stack_world
    src = w.flux_source("GitRepository", "app", w.artifact())
    w.apply_stack("demo", fluxSource={"sourceRef": GIT})
    ctl = w.controller()

    obj = w.wait_ready("demo", revision=src["revision"])
    st = obj["status"]
    assert w.cond(obj, "Ready")["reason"] == "Succeeded"
    assert w.cond(obj, "Reconciling") is None and w.cond(obj, "Stalled") is None
    assert st["artifact"] == {"revision": src["revision"], "digest": src["digest"]}
    assert st["lastAttemptedRevision"] == src["revision"]
    assert st["lastUpdate"]["type"] == "up" and st["lastUpdate"]["state"] == "succeeded"
    assert st["fingerprint"] and st["fingerprint"] == st["lastAttemptedFingerprint"]
    assert "currentUpdate" not in st
    assert st["outputs"]["message"] == "hello"
    assert st["outputsSecretName"] == "demo-outputs"
    assert [(h["revision"], h["result"]) for h in st["history"]] == [(src["revision"], "succeeded")]

    sec = w.outputs_secret("demo")
    assert sec["type"] == "Opaque"
    assert sec["decoded"]["message"] == "hello"
    assert sec["decoded"]["path"] == st["outputs"]["path"]
    assert sec["metadata"]["labels"]["reconcile.fluxcd.io/watch"] == "Enabled"
    assert sec["metadata"]["labels"]["pulumi.com/stack-name"] == "demo"
    assert json.loads(sec["metadata"]["annotations"]["pulumi.com/secrets"]) == []
    owner, = sec["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("Stack", "demo", True)
    assert owner["uid"] == obj["metadata"]["uid"]
    assert list(w.cloud_files().values()) == ["hello"]
    reasons = w.event_reasons("demo")
    assert "UpdateStarted" in reasons and "UpdateSucceeded" in reasons
    assert len(w.updates("dev")) == 1
    # no secret outputs: the event log's outputs suffice, no `stack output --show-secrets`
    assert not [r for r in w.cli_invocations() if "--show-secrets" in r["argv"]]

    # A new revision: exactly one update, at that revision.
    mark = w.mark()
    second = w.artifact(w.revision_files(greeting="second"))
    src2 = w.flux_source("GitRepository", "app", second)
    obj = w.wait_ready("demo", revision=src2["revision"])
    w.settle("demo")
    assert len(w.updates("dev", since=mark)) == 1
    assert list(w.cloud_files().values()) == ["second"]
    assert w.outputs_secret("demo")["decoded"]["message"] == "second"
    assert [h["revision"] for h in obj["status"]["history"]] == [src2["revision"], src["revision"]]

    # The same revision again (source-controller rewrote its status): nothing runs.
    mark = w.mark()
    w.flux_source("GitRepository", "app", second)
    w.settle("demo")
    assert w.cli_invocations(since=mark) == []

    # A restart: the fingerprint in status says it is all applied; not even `pulumi version`.
    assert ctl.stop() == 0
    mark = w.mark()
    w.controller().wait_log("caches synced")
    w.settle("demo")
    assert w.cli_invocations(since=mark) == []
    assert w.stack("demo")["status"]["lastAppliedRevision"] == src2["revision"]


def test_resync_runs_only_with_continue_resync_on_commit_match(stack_world):
    """Both Stacks' last resync is backdated an hour (as if the period had passed):
    only the one with continueResyncOnCommitMatch updates again."""
    w = stack_world
    src = w.flux_source("GitRepository", "app", w.artifact())
    w.apply_stack("plain", stack="plain", fluxSource={"sourceRef": GIT}, resyncFrequencySeconds=60)
    w.apply_stack("resync", stack="resync", fluxSource={"sourceRef": GIT},
                  resyncFrequencySeconds=60, continueResyncOnCommitMatch=True)
    w.controller()
    for name in ("plain", "resync"):
        w.wait_ready(name, revision=src["revision"])

    mark = w.mark()
    for name in ("plain", "resync"):
        w._call(lambda c, n=name: c.patch(
            STACK_API, "stacks", n, {"status": {"lastUpdate": {
                "lastResyncTime": "2020-01-01T00:00:00Z"}}}, w.namespace, "merge", "status"))
        w.settle(name)
    w.wait_invocation("up", "resync", since=mark)
    w.wait_ready("resync")
    w.settle("resync")
    assert len(w.updates("resync", since=mark)) == 1
    assert w.updates("plain", since=mark) == []
    assert [r for r in w.cli_invocations(since=mark) if r["stack"] == "plain"] == []
