"""The operator's (PKO v2's) input fields acted on, both tiers (issue 23): references that
name the Stack's own namespace, the deprecated list form of envs, envSecrets,
accessTokenSecret and inline secrets, and the operation flags (targetDependents,
runProgram, useLocalStackOnly, environment).

As in test_stack_inputs.py, the --pulumi-bin wrapper records digests (never values) of
PCTEST_* variables, which is how a test sees an environment value arrive."""
import hashlib

GIT = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "name": "app"}
DB_PASSWORD = "db-Pw-Own-Namespace-5151"
TOKEN = "tok-Own-Namespace-6262"


def digest(value):
    return hashlib.sha256(value.encode()).hexdigest()


def test_references_in_the_stacks_own_namespace_are_accepted(stack_world):
    """secret.namespace equal to the Stack's namespace is what PKO's manifests write: it
    works; any other namespace is refused by name and nothing runs for that Stack."""
    w = stack_world
    ns = w.namespace
    w.secret("db", {"password": DB_PASSWORD})
    w.secret("tok", {"token": TOKEN})
    src = w.flux_source("GitRepository", "app", w.artifact(w.program_files("stack-secrets")))
    w.apply_stack(
        "own", fluxSource={"sourceRef": GIT},
        secretsRef={"dbPassword": {"type": "Secret", "secret": {
            "name": "db", "key": "password", "namespace": ns}}},
        envRefs={"PCTEST_TOKEN": {"type": "Secret", "secret": {
            "name": "tok", "key": "token", "namespace": ns}}})
    w.apply_stack(
        "other", stack="other", fluxSource={"sourceRef": GIT},
        secretsRef={"dbPassword": {"type": "Secret", "secret": {
            "name": "db", "key": "password", "namespace": "kube-system"}}})
    w.controller()
    w.wait_ready("own", revision=src["revision"])
    assert w.outputs_secret("own")["decoded"]["secretOut"] == DB_PASSWORD
    up, = w.updates("dev")
    assert up["env_sha256"]["PCTEST_TOKEN"] == digest(TOKEN)

    obj = w.wait_condition("other", "Stalled", "True", "SpecInvalid")
    msg = w.cond(obj, "Stalled")["message"]
    assert "spec.secretsRef.dbPassword.secret.namespace" in msg and "cross-namespace" in msg
    assert w.updates("other") == []
    w.assert_no_secret(DB_PASSWORD, TOKEN)
