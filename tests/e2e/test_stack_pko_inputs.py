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


def test_envs_as_a_list_of_config_maps(stack_world):
    """PKO's deprecated envs: [ConfigMap names] (its envFrom): every key of each ConfigMap
    is a variable of the CLI, a later ConfigMap's key wins, a variable the Stack names
    itself wins over both; the classic map form of envs keeps working next to it (another
    Stack).  Editing a listed ConfigMap runs one update, of that Stack only."""
    w = stack_world
    w.config_map("base", {"PCTEST_REGION": "eu-test-1", "PCTEST_ZONE": "zone-a"})
    w.config_map("override", {"PCTEST_ZONE": "zone-b", "PCTEST_EXPLICIT": "from-cm"})
    src = w.flux_source("GitRepository", "app", w.artifact(w.program_files("stack-basic")))
    w.apply_stack("listed", fluxSource={"sourceRef": GIT}, envs=["base", "override"],
                  envRefs={"PCTEST_EXPLICIT": {"type": "Literal", "literal": {"value": "spec"}}})
    w.apply_stack("classic", stack="classic", fluxSource={"sourceRef": GIT},
                  envs={"PCTEST_ZONE": {"valueFrom": {"configMapKeyRef": {
                      "name": "override", "key": "PCTEST_ZONE"}}}})
    w.controller()
    w.wait_ready("listed", revision=src["revision"])
    w.wait_ready("classic", revision=src["revision"])
    up, = w.updates("dev")
    env = {k: v for k, v in up["env_sha256"].items() if k.startswith("PCTEST_")}
    assert env == {"PCTEST_REGION": digest("eu-test-1"), "PCTEST_ZONE": digest("zone-b"),
                   "PCTEST_EXPLICIT": digest("spec")}
    up, = w.updates("classic")
    assert up["env_sha256"]["PCTEST_ZONE"] == digest("zone-b")

    mark = w.mark()
    w.config_map("base", {"PCTEST_REGION": "eu-test-2", "PCTEST_ZONE": "zone-a",
                          "PCTEST_NEW": "added"})
    w.wait_invocation("up", "dev", since=mark)
    w.settle("listed")
    w.settle("classic")
    up, = w.updates(since=mark)
    assert up["stack"] == "dev"
    assert up["env_sha256"]["PCTEST_REGION"] == digest("eu-test-2")
    assert up["env_sha256"]["PCTEST_NEW"] == digest("added")


INLINE_SECRET = "inline-Secret-Config-7373"
AWS_KEY = "aws-EnvSecrets-Key-8484"
AWS_KEY_2 = "aws-EnvSecrets-Rotated-9595"
ACCESS_TOKEN = "pul-AccessToken-Secret-0606"


def test_env_secrets_access_token_and_inline_secrets(stack_world):
    """PKO's envSecrets (every key of each Secret a variable), accessTokenSecret (its key
    accessToken as PULUMI_ACCESS_TOKEN) and secrets (inline secret config): they reach the
    CLI and the program, and no value appears in a log, event, status or argv.  Editing a
    Secret of envSecrets runs an update."""
    w = stack_world
    w.secret("aws", {"PCTEST_AWS_KEY": AWS_KEY, "PCTEST_AWS_REGION": "eu-test-3"})
    w.secret("pulumi-api", {"accessToken": ACCESS_TOKEN})
    src = w.flux_source("GitRepository", "app", w.artifact(w.program_files("stack-secrets")))
    w.apply_stack("pko", fluxSource={"sourceRef": GIT}, envSecrets=["aws"],
                  accessTokenSecret="pulumi-api", secrets={"dbPassword": INLINE_SECRET})
    w.controller()
    obj = w.wait_ready("pko", revision=src["revision"])

    sec = w.outputs_secret("pko")
    assert sec["decoded"]["secretOut"] == INLINE_SECRET
    assert obj["status"]["outputs"]["secretOut"] == "[secret]"
    assert list(w.cloud_files().values()) == [INLINE_SECRET]
    up, = w.updates("dev")
    assert up["env_sha256"]["PCTEST_AWS_KEY"] == digest(AWS_KEY)
    assert up["env_sha256"]["PCTEST_AWS_REGION"] == digest("eu-test-3")
    assert up["env_sha256"]["PULUMI_ACCESS_TOKEN"] == digest(ACCESS_TOKEN)

    mark = w.mark()
    w.secret("aws", {"PCTEST_AWS_KEY": AWS_KEY_2, "PCTEST_AWS_REGION": "eu-test-3"})
    w.wait_invocation("up", "dev", since=mark)
    w.settle("pko")
    up, = w.updates(since=mark)
    assert up["env_sha256"]["PCTEST_AWS_KEY"] == digest(AWS_KEY_2)
    w.assert_no_secret(INLINE_SECRET, AWS_KEY, AWS_KEY_2, ACCESS_TOKEN)


NOTE_URN = "urn:pulumi:dev::stackdemo::standin:index:File::note"


def test_target_dependents_run_program_and_local_stack_only(stack_world):
    """targetDependents rides with the targets on the up, runProgram on the destroy of a
    deleted Stack; useLocalStackOnly: a missing stack is not created, the update fails
    saying why, and once the stack exists it runs."""
    w = stack_world
    src = w.flux_source("GitRepository", "app", w.artifact(w.program_files("stack-basic")))
    w.apply_stack("flags", fluxSource={"sourceRef": GIT}, targets=[NOTE_URN],
                  targetDependents=True, runProgram=True, destroyOnFinalize=True)
    w.apply_stack("local", stack="local", fluxSource={"sourceRef": GIT}, useLocalStackOnly=True)
    w.controller()
    w.wait_ready("flags", revision=src["revision"])
    up, = w.updates("dev")
    assert f"--target={NOTE_URN}" in up["argv"] and "--target-dependents" in up["argv"]

    obj = w.wait_condition("local", "Ready", "False")
    w._wait("local", lambda: "useLocalStackOnly" in (w.condition("local", "Ready") or {}).get(
        "message", ""), 120, "the Ready message to name useLocalStackOnly")
    assert [r for r in w.cli_invocations() if r["stack"] == "local" and
            r["command"] in ("stack init", "up")] == []
    del obj

    mark = w.mark()
    w.delete_stack("flags")
    w.wait_gone("flags")
    destroy, = w.updates("dev", since=mark, commands=("destroy",))
    assert "--run-program=true" in destroy["argv"]


def test_environment_needs_pulumi_cloud(stack_world):
    """environment (Pulumi ESC): with a DIY spec.backend it is refused by name before
    anything runs; with a backend only the CLI knows (the login), the CLI's own refusal
    of `config env add` is the update's failure.  (No Pulumi Cloud is reachable here, so
    the accepted path is the driver's argv only.)"""
    w = stack_world
    src = w.flux_source("GitRepository", "app", w.artifact(w.program_files("stack-basic")))
    w.apply_stack("diy", stack="diy", fluxSource={"sourceRef": GIT}, environment=["proj/base"])
    w.login()
    obj = w.stack_object("login", stack="login", fluxSource={"sourceRef": GIT},
                         environment=["proj/base"])
    del obj["spec"]["backend"]           # the CLI finds it: the login
    w._call(lambda c: c.apply(obj, "stacks", field_manager="stack-test"))
    w.controller()
    obj = w.wait_condition("diy", "Stalled", "True", "SpecInvalid")
    assert "spec.environment" in w.cond(obj, "Stalled")["message"]
    assert "file://" in w.cond(obj, "Stalled")["message"]
    assert all(r["stack"] != "diy" for r in w.cli_invocations())

    add = w.wait_invocation("config env", "login")    # the record names two words
    assert add[0]["argv"][-6:] == ["env", "add", "proj/base", "--yes", "--stack", "login"]
    w._wait("login", lambda: "does not support environments" in (
        w.condition("login", "Ready") or {}).get("message", ""), 120,
        "the CLI's refusal in the Ready message")
    assert w.updates("login") == []
    assert w.stack("login")["status"].get("lastAppliedRevision") != src["revision"]
