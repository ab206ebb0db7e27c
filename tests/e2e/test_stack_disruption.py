"""Stack scenario 9 (issue 11): watches dropped and the API server restarted while
updates run: no change is missed.  Changes are made with the test's own client (past the
real tier's fault proxy) while the controller's connections are cut.  Both tiers."""
from stack_fixtures import SOURCE_API

GIT = {"sourceRef": {"apiVersion": SOURCE_API, "kind": "GitRepository", "name": "app"}}
SLOW = {"PULUMI_STANDIN_SLOW_MS": {"type": "Literal", "literal": {"value": "500"}}}
NAMES = ("d0", "d1", "d2")


def test_no_change_missed_across_dropped_watches_and_a_restart(stack_world):
    w = stack_world
    src = w.flux_source("GitRepository", "app", w.artifact())
    for name in NAMES:
        w.apply_stack(name, stack=name, fluxSource=GIT, envRefs=SLOW)
    w.controller()
    for name in NAMES:
        w.wait_ready(name, revision=src["revision"])

    mark = w.mark()
    w.flux_source("GitRepository", "app", w.artifact(w.revision_files(greeting="two")))
    w.wait_invocation("up", since=mark)
    w.api.drop_watches()
    # while the watches are gone: a new revision and a spec change
    w.flux_source("GitRepository", "app", w.artifact(w.revision_files(greeting="three")))
    w.apply_stack("d1", stack="d1", fluxSource=GIT, envRefs=SLOW,
                  config={"greeting": "configured"})

    mark = w.mark()
    w.wait_invocation("up", since=mark)
    w.api.restart()
    last = w.flux_source("GitRepository", "app", w.artifact(w.revision_files(greeting="four")))
    w.apply_stack("d2", stack="d2", fluxSource=GIT, envRefs=SLOW,
                  config={"greeting": "after-restart"})

    for name in NAMES:
        w.wait_ready(name, revision=last["revision"], timeout=300)
    outputs = {n: w.stack(n)["status"]["outputs"]["message"] for n in NAMES}
    assert outputs == {"d0": "four", "d1": "configured", "d2": "after-restart"}
    assert sorted(w.cloud_files().values()) == sorted(outputs.values())
    assert w.locks() == []
