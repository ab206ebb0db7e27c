"""Stack scenario 5 (issue 11): secrets from envRefs, envs and secretsRef reach the
program, and no secret value appears in any controller log line, event, status field or
recorded CLI argv.  Editing a referenced Secret or ConfigMap runs exactly one update of
exactly the Stacks that refer to it.  Both tiers.

The wrapper records digests (never values) of PCTEST_* variables: that is how a test sees
an environment value arrive.  Secret config is seen in the outputs Secret and the cloud."""
import hashlib
import json

from stack_fixtures import PASSPHRASE

GIT = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "name": "app"}
DB_PASSWORD = "db-Pw-Stack-Secret-4411"
DB_PASSWORD_2 = "db-Pw-Rotated-Secret-8822"
TOKEN = "tok-EnvRef-Secret-3f3f"
CLASSIC = "classic-Envs-Secret-9a9a"


def digest(value):
    return hashlib.sha256(value.encode()).hexdigest()


def secret_ref(name, key):
    return {"type": "Secret", "secret": {"name": name, "key": key}}


def test_secrets_reach_the_program_and_appear_nowhere(stack_world):
    w = stack_world
    w.secret("db", {"password": DB_PASSWORD})
    w.secret("tok", {"token": TOKEN, "classic": CLASSIC})
    w.config_map("env", {"region": "eu-test-1", "zone": "zone-b"})
    src = w.flux_source("GitRepository", "app", w.artifact(w.program_files("stack-secrets")))
    w.apply_stack(
        "demo", fluxSource={"sourceRef": GIT},
        secretsRef={"dbPassword": secret_ref("db", "password")},
        configRef={"region": {"name": "env", "key": "region"}},
        envRefs={"PCTEST_TOKEN": secret_ref("tok", "token"),
                 "PCTEST_LITERAL": {"type": "Literal", "literal": {"value": "lit"}}},
        envs={"PCTEST_CLASSIC": {"valueFrom": {"secretKeyRef": {"name": "tok", "key": "classic"}}},
              "PCTEST_ZONE": {"valueFrom": {"configMapKeyRef": {"name": "env", "key": "zone"}}},
              "PCTEST_PLAIN": {"value": "plain"}})
    w.controller(log_level="debug")
    obj = w.wait_ready("demo", revision=src["revision"])

    # secretsRef and configRef: in the program's outputs and its file in the cloud
    sec = w.outputs_secret("demo")
    assert sec["decoded"]["secretOut"] == DB_PASSWORD
    assert sec["decoded"]["region"] == "eu-test-1"
    assert json.loads(sec["metadata"]["annotations"]["pulumi.com/secrets"]) == ["secretOut"]
    assert obj["status"]["outputs"] == {"region": "eu-test-1", "secretOut": "[secret]"}
    assert list(w.cloud_files().values()) == [DB_PASSWORD]

    # envRefs and envs: in the environment of every stack command
    up, = w.updates("dev")
    assert up["env_sha256"] == {
        "PULUMI_CONFIG_PASSPHRASE": digest(PASSPHRASE), "PCTEST_TOKEN": digest(TOKEN),
        "PCTEST_LITERAL": digest("lit"), "PCTEST_CLASSIC": digest(CLASSIC),
        "PCTEST_ZONE": digest("zone-b"), "PCTEST_PLAIN": digest("plain")}
    assert "PULUMI_STANDIN_CLOUD" in up["env"]

    w.assert_no_secret(DB_PASSWORD, TOKEN, CLASSIC, PASSPHRASE)


def test_edited_secret_or_config_map_updates_exactly_its_stacks(stack_world):
    """a: Secret db + ConfigMap env; b: ConfigMap env only; c: Secret db only."""
    w = stack_world
    w.secret("db", {"password": DB_PASSWORD})
    w.secret("other", {"password": "other-Pw-Secret-1717"})
    w.config_map("env", {"region": "eu-test-1"})
    src = w.flux_source("GitRepository", "app", w.artifact(w.program_files("stack-secrets")))
    db = {"dbPassword": secret_ref("db", "password")}
    env = {"region": {"name": "env", "key": "region"}}
    w.apply_stack("a", stack="a", fluxSource={"sourceRef": GIT}, secretsRef=db, configRef=env)
    w.apply_stack("b", stack="b", fluxSource={"sourceRef": GIT},
                  secretsRef={"dbPassword": secret_ref("other", "password")}, configRef=env)
    w.apply_stack("c", stack="c", fluxSource={"sourceRef": GIT}, secretsRef=db,
                  config={"region": "fixed"})
    w.controller()
    for name in "abc":
        w.wait_ready(name, revision=src["revision"])

    def outputs_become(name, key, value):
        w._wait(name, lambda: (w.outputs_secret(name) or {}).get("decoded", {}).get(key) == value,
                180, f"{name}-outputs {key} to be updated")
        w.wait_ready(name)

    mark = w.mark()
    w.secret("db", {"password": DB_PASSWORD_2})
    outputs_become("a", "secretOut", DB_PASSWORD_2)
    outputs_become("c", "secretOut", DB_PASSWORD_2)
    for name in "abc":
        w.settle(name)
    assert sorted(r["stack"] for r in w.updates(since=mark)) == ["a", "c"]

    mark = w.mark()
    w.config_map("env", {"region": "eu-test-2"})
    outputs_become("a", "region", "eu-test-2")
    outputs_become("b", "region", "eu-test-2")
    for name in "abc":
        w.settle(name)
    assert sorted(r["stack"] for r in w.updates(since=mark)) == ["a", "b"]
    assert w.outputs_secret("c")["decoded"]["region"] == "fixed"

    # an unreferenced Secret changes nothing
    mark = w.mark()
    w.secret("unrelated", {"x": "y"})
    w.secret("pulumi-passphrase-copy", {"passphrase": "z"})
    for name in "abc":
        w.settle(name)
    assert w.updates(since=mark) == []
    w.assert_no_secret(DB_PASSWORD, DB_PASSWORD_2, PASSPHRASE, "other-Pw-Secret-1717")
