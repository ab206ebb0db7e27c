"""Issue 14 scenario 4: spec.policyPacks.  A policy pack forbidding a resource property
blocks the update with Ready=False reason PolicyViolation, the policy's message in status
and a Warning event, and leaves the simulated cloud untouched.

Emulator tier only, with the stand-in's own policy-pack format (its README, "Policy
packs").  The real tier would need a policy runtime: @pulumi/policy from npm run by the
Node.js language host (or the `pulumi-analyzer-policy` plugin); tests/e2e/FIDELITY.md says
what was tried and why it does not run here."""
import pytest

GIT = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "name": "app"}

PACK = b"""runtime: standin-policy
name: demo-policies
version: 0.0.1
policies:
  - name: no-forbidden-content
    description: File content must not start with "forbidden".
    enforcementLevel: mandatory
    forbid:
      type: standin:index:File
      property: content
      pattern: "^forbidden"
"""


def test_a_violation_blocks_the_update_and_leaves_the_cloud_untouched(stack_world):
    w = stack_world
    if w.tier == "real":
        pytest.skip("no policy runtime on the real tier (tests/e2e/FIDELITY.md, policy packs)")
    art = w.artifact(w.revision_files("stack-plan", "hello"),
                     extra={"policies/PulumiPolicy.yaml": PACK})
    src = w.flux_source("GitRepository", "app", art)
    w.apply_stack("demo", fluxSource={"sourceRef": GIT}, policyPacks=["policies"])
    w.controller()
    w.wait_ready("demo", revision=src["revision"])        # the pack allows this one
    ups = w.updates("dev")
    pack_args = [a for a in ups[-1]["argv"] if a.startswith("--policy-pack")]
    assert len(pack_args) == 1 and pack_args[0].endswith("/tree/policies")
    assert list(w.cloud_files().values()) == ["hello"]

    bad = w.artifact(w.revision_files("stack-plan", "forbidden words"),
                     extra={"policies/PulumiPolicy.yaml": PACK})
    src2 = w.flux_source("GitRepository", "app", bad)
    obj = w.wait_condition("demo", "Stalled", reason="PolicyViolation")
    ready = w.cond(obj, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PolicyViolation")
    assert 'must not start with "forbidden"' in ready["message"]
    assert 'must not start with "forbidden"' in obj["status"]["policyViolation"]
    assert obj["status"]["lastAttemptedRevision"] == src2["revision"]
    assert obj["status"]["lastAppliedRevision"] == src["revision"]
    assert list(w.cloud_files().values()) == ["hello"]     # untouched
    ev = [e for e in w.events("demo") if e["reason"] == "PolicyViolation"]
    assert ev and ev[0]["type"] == "Warning"
    # Not retried: the same inputs violate again.
    mark = w.mark()
    w.settle("demo")
    assert w.updates("dev", mark) == []

    # A fixed revision clears it.
    src3 = w.flux_source("GitRepository", "app", w.artifact(
        w.revision_files("stack-plan", "fine"), extra={"policies/PulumiPolicy.yaml": PACK}))
    obj = w.wait_ready("demo", revision=src3["revision"])
    assert "policyViolation" not in obj["status"]
    assert list(w.cloud_files().values()) == ["fine"]


def test_a_policy_violation_in_the_preview_of_a_manual_stack(stack_world):
    """With approval: Manual the preview already runs the packs: no plan to approve."""
    w = stack_world
    if w.tier == "real":
        pytest.skip("no policy runtime on the real tier (tests/e2e/FIDELITY.md, policy packs)")
    w.flux_source("GitRepository", "app", w.artifact(
        w.revision_files("stack-plan", "forbidden"), extra={"policies/PulumiPolicy.yaml": PACK}))
    w.apply_stack("demo", fluxSource={"sourceRef": GIT}, policyPacks=["policies"],
                  approval="Manual")
    w.controller()
    obj = w.wait_condition("demo", "Stalled", reason="PolicyViolation")
    assert "preview" not in obj["status"]
    assert w.cloud_files() == {} and w.updates("dev") == []
