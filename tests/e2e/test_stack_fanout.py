"""Stack scenario 3 (issue 11): 50 Stacks on one artifact download it exactly once
(counted in nginx's access log), and all of them become Ready.  Both tiers."""

GIT = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "name": "shared"}
STACKS = 50


def test_fifty_stacks_one_download(stack_world):
    w = stack_world
    art = w.artifact()
    src = w.flux_source("GitRepository", "shared", art)
    names = [f"fan-{i:02d}" for i in range(STACKS)]
    for name in names:
        w.apply_stack(name, stack=name, fluxSource={"sourceRef": GIT})
    w.controller()
    for name in names:
        w.wait_ready(name, revision=src["revision"], timeout=600)
    assert w.downloads(art) == 1
    ups = w.updates()
    assert sorted(r["stack"] for r in ups) == names        # one update each, no more
    assert len(w.cloud_files()) == STACKS
