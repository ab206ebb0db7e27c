"""The pulumi driver (src/pulumi/) through the test tool build/asan/tools/pl_driver:
every operation, the failure classes, timeouts, cancellation and the
secret-handling rules.

Each test runs twice (fixture any_pulumi_world): against the stand-in CLI and
against the real pulumi CLI with the test provider pulumi-resource-standin.  The
stand-in alone records the argv and environment it was run with
(PULUMI_STANDIN_RECORD), so assertions on what the driver SENT are made on the
stand-in half only (`if w.kind == "standin"`); what came back is asserted on both.
Where the real CLI behaves differently the real one is right.  A few tests stay
stand-in only, each saying why."""
import json
import os
import pathlib
import pwd
import re
import signal
import socket
import stat
import subprocess
import time

from kube_fixtures import wait_for
from pulumi_fixtures import API_TOKEN, DB_PASSWORD, ONE_FILE_PROGRAM, PASSPHRASE, group_members

SECRETS = [PASSPHRASE, DB_PASSWORD, API_TOKEN]

TWO_FILES = """\
name: demo
runtime: yaml
resources:
  first:
    type: standin:index:File
    properties:
      content: one
  second:
    type: standin:index:File
    properties:
      content: two-${first.size}
outputs:
  first: ${first.path}
"""


def assert_no_secret(text, secrets=SECRETS):
    for s in secrets:
        assert s not in text, f"secret value leaked: ...{text[max(0, text.find(s) - 60):][:140]}"


def test_first_run_on_empty_backend(any_pulumi_world):
    w = any_pulumi_world
    res = w.ok("ensure")
    assert res["message"] == "stack init: succeeded"
    if w.kind == "standin":
        cmds = w.commands()
        assert cmds[0] == ["version"]
        assert cmds[1] == ["stack", "select", "--stack", "dev"]
        assert cmds[2] == ["stack", "init", "dev", "--secrets-provider", "passphrase"]
    assert (w.state / ".pulumi" / "stacks" / "demo" / "dev.json").exists()
    assert "encryptionsalt: v1:" in w.stack_config_text()

    w.ok("config")
    text = w.stack_config_text()
    assert "demo:greeting: hi" in text
    assert "secure: v1:" in text and DB_PASSWORD not in text

    w.ok("install", "--revision", "rev1")
    res = w.ok("preview")
    assert res["summary"]["present"] and res["summary"]["count"] == 1
    assert res["summary"]["is_preview"] is True
    assert res["summary"]["changes"] == {"create": 2}
    assert w.cloud_files() == []          # a preview changes nothing

    res = w.ok("up")
    assert res["summary"]["changes"] == {"create": 2}
    assert res["summary"]["result"] == "succeeded"
    assert res["steps"] == 3      # the root stack, the default provider, the file (as real v3.274.1)
    assert any(p.startswith("done create urn:pulumi:dev::demo::standin:index:File::note")
               for p in res["progress"])
    files = w.cloud_files()
    assert len(files) == 1 and (w.cloud / "files" / files[0]).read_text() == "hi"

    res = w.ok("outputs", "--show-secrets")
    assert res["outputs"]["message"] == "hi"
    assert res["outputs"]["secretOut"] == "[secret]"
    assert res["outputs_plain"]["secretOut"] == DB_PASSWORD
    assert res["outputs"]["path"].startswith(str(w.cloud))

    res = w.ok("history")
    h = res["history"]
    assert h["kind"] == "update" and h["result"] == "succeeded"
    assert h["resourceChanges"] == {"create": 2}
    assert "value" not in h["config"]["demo:password"]


def test_unchanged_up_is_all_same_and_install_skipped(any_pulumi_world):
    w = any_pulumi_world
    w.ready()
    w.ok("install", "--revision", "r1")
    w.ok("up")
    before = len(w.records()) if w.kind == "standin" else 0
    res = w.ok("install", "--revision", "r1")
    assert "already installed" in res["message"]
    if w.kind == "standin":
        assert len(w.records()) == before + 1          # only the version probe ran
    res = w.ok("up")
    assert res["summary"]["changes"] == {"same": 2}
    res = w.ok("install", "--revision", "r2")
    assert "already installed" not in res["message"]
    if w.kind == "standin":
        assert w.commands()[-1] == ["install"]


def test_up_reports_its_outputs_and_whether_any_is_secret(any_pulumi_world):
    """The root stack's outputs come with the up's event log: the reconciler
    asks `stack output --show-secrets` only when one of them is secret."""
    w = any_pulumi_world
    w.ready()
    for _ in range(2):   # a first and an unchanged up
        res = w.ok("up")
        assert res["outputs"]["message"] == "hi"
        assert res["outputs"]["secretOut"] == "[secret]"
        assert res["has_secret_outputs"] is True
        assert res["outputs"] == w.ok("outputs")["outputs"]
        assert_no_secret(json.dumps(res))
    # The one call the secret values need, told by the up which are secret.
    def output_calls():
        return [c for c in w.commands() if c[0:2] == ["stack", "output"]] if w.kind == "standin" else []
    before = len(output_calls())
    up, shown = w.serve(["up", "outputs-shown"], "--show-secrets")
    assert up["status"] == "ok" and shown["status"] == "ok", (up, shown)
    assert shown["outputs"] == up["outputs"]
    assert shown["outputs_plain"]["secretOut"] == DB_PASSWORD
    assert shown["outputs_plain"]["message"] == "hi"
    if w.kind == "standin":
        assert output_calls()[before:] == [["stack", "output", "--json", "--show-secrets",
                                            "--stack", "dev"]]
    w.write_program(ONE_FILE_PROGRAM.split("  secretOut:")[0])
    res = w.ok("up")
    assert res["has_secret_outputs"] is False
    assert set(res["outputs"]) == {"message", "path"}
    assert res["outputs"] == w.ok("outputs")["outputs"]


def secret_sets(w):
    return [c for c in w.commands() if c[0:2] == ["config", "set"] and "--secret" in c]


def test_up_with_config_sets_plaintext_config_in_the_same_call(any_pulumi_world):
    """`up --config k=v` sets and saves plaintext config; secret config is set
    only when it changed, so an unchanged reconcile makes no config call."""
    w = any_pulumi_world
    w.ok("ensure")
    w.ok("config-secrets")
    res = w.ok("up", "--with-config")
    assert res["outputs"]["message"] == "hi"
    assert "demo:greeting: hi" in w.stack_config_text()
    if w.kind == "standin":
        assert not any(c[0:2] == ["config", "set-all"] for c in w.commands())
        up = [c for c in w.commands() if c[0] == "up"][-1]
        assert up[up.index("--config") + 1] == "greeting=hi"
        assert len(secret_sets(w)) == 1
        before = len(w.records())
        w.ok("config-secrets")
        assert len(w.records()) == before + 1          # only the version probe ran
    w.config[0]["value"] = "hey"
    w.ok("config-secrets")
    res = w.ok("up", "--with-config")
    assert res["outputs"]["message"] == "hey"
    assert "demo:greeting: hey" in w.stack_config_text()
    if w.kind == "standin":
        assert len(secret_sets(w)) == 1   # the up rewrote the file, the driver knows how
    res = w.ok("outputs", "--show-secrets")
    assert res["outputs_plain"]["secretOut"] == DB_PASSWORD
    # A changed secret is set again.
    w.config[1]["value"] = DB_PASSWORD + "-2"
    w.ok("config-secrets")
    w.ok("up", "--with-config")
    res = w.ok("outputs", "--show-secrets")
    assert res["outputs_plain"]["secretOut"] == DB_PASSWORD + "-2"
    if w.kind == "standin":
        assert len(secret_sets(w)) == 2


# Stand-in only, as the next test: both read the stand-in's record of what it was run with.
def test_argv_and_environment_follow_the_automation_api(pulumi_world):
    w = pulumi_world
    w.ready()
    w.ok("up", "--refresh", "--target", "urn:pulumi:dev::demo::standin:index:File::note")
    rec = w.records()
    up = [r for r in rec if "up" in r["argv"]][-1]
    argv = up["argv"]
    assert argv[0] == "--non-interactive" and argv[1] == "up"
    assert argv[2:4] == ["--yes", "--skip-preview"]
    assert "--target=urn:pulumi:dev::demo::standin:index:File::note" in argv
    assert "--refresh" in argv and "--exec-kind=auto.local" in argv
    i = argv.index("--event-log")
    assert argv[i + 1].startswith(str(w.scratch))
    assert argv[-2:] == ["--stack", "dev"]
    expected_stack = {"PATH", "HOME", "PULUMI_HOME", "PULUMI_SKIP_UPDATE_CHECK",
                      "PULUMI_AUTOMATION_API", "PULUMI_DEBUG_COMMANDS", "PULUMI_BACKEND_URL",
                      "PULUMI_CONFIG_PASSPHRASE", "API_TOKEN", "PULUMI_STANDIN_CLOUD",
                      "PULUMI_STANDIN_KDF_ITERATIONS"}
    # proc_run adds PULUMI_CONTROLLER_RUN_ID to every child: it finds the plugins a
    # killed CLI left in process groups of their own (src/base/proc.h)
    expected_stack.add("PULUMI_CONTROLLER_RUN_ID")
    assert set(up["env"]) == expected_stack
    sel = [r for r in rec if r["argv"][1:3] == ["stack", "select"]][0]
    assert set(sel["env"]) == expected_stack - {"PULUMI_DEBUG_COMMANDS"}
    ver = [r for r in rec if r["argv"] == ["version"]][0]
    assert set(ver["env"]) == {"PATH", "HOME", "PULUMI_HOME", "PULUMI_SKIP_UPDATE_CHECK",
                               "PULUMI_CONTROLLER_RUN_ID"}


def test_nothing_leaks_from_the_callers_environment(pulumi_world):
    w = pulumi_world
    w.drive("ensure", extra_env={"AWS_SECRET_ACCESS_KEY": "leaky", "PULUMI_ACCESS_TOKEN": "x"})
    for r in w.records():
        assert "AWS_SECRET_ACCESS_KEY" not in r["env"]
        assert "PULUMI_ACCESS_TOKEN" not in r["env"]
        assert "ASAN_OPTIONS" not in r["env"]


def test_config_key_removed_structured_and_secret(any_pulumi_world):
    w = any_pulumi_world
    w.config = w.config + [
        {"key": "old", "value": "gone-soon"},
        {"key": "db", "value": json.dumps({"hosts": ["a", "b"], "port": 5432}),
         "structured": True},
        {"key": "creds", "value": json.dumps({"user": "u1", "token": DB_PASSWORD + "-x"}),
         "structured": True, "secret": True},
    ]
    w.ready()
    text = w.stack_config_text()
    assert "demo:old: gone-soon" in text
    assert "- a" in text and "port: 5432" in text
    assert DB_PASSWORD not in text
    if w.kind == "standin":
        secret_sets = [c for c in w.commands() if c[0:2] == ["config", "set"]]
        assert any("creds.token" in c for c in secret_sets)
        assert all("--secret" in c for c in secret_sets)
    w.config = [c for c in w.config if c["key"] != "old"]
    w.ok("config")
    assert "demo:old" not in w.stack_config_text()
    if w.kind == "standin":
        assert ["config", "rm", "--stack", "dev", "--", "demo:old"] in w.commands()
    assert "demo:greeting" in w.stack_config_text()


# A resource whose name is the password: the provider refuses it and echoes it.
FILE_NAMED_BY_PASSWORD = """\
name: demo
runtime: yaml
resources:
  bad:
    type: standin:index:File
    properties:
      name: ${{password}}{suffix}
      content: x
"""


def test_no_secret_in_argv_log_or_message(any_pulumi_world):
    w = any_pulumi_world
    # A resource whose failure message echoes a secret value.
    w.write_program(FILE_NAMED_BY_PASSWORD.format(suffix="/x"))
    logs = []
    w.ok("ensure")
    rc, res, log = w.drive("config")
    logs.append(log)
    rc, res, log = w.drive("up")
    logs.append(log)
    assert res["status"] == "failed" and res["failed_steps"] == 1
    assert "[secret]" in res["message"] and "invalid file name" in res["message"]
    assert_no_secret(res["message"])
    assert_no_secret(res["stdout_tail"] + res["stderr_tail"])
    for l in logs:
        assert_no_secret(l)
    assert '"msg":"pulumi command failed"' in logs[-1]
    if w.kind != "standin":
        return
    for r in w.records():
        assert_no_secret(" ".join(r["argv"]))
        for name in r["env"]:
            assert_no_secret(name)
    assert any(r["stdin_piped"] for r in w.records() if "--secret" in r["argv"])


PEM_SECRET = ("-----BEGIN PRIVATE KEY-----\n"
              "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n"
              "BKcwggSjAgEAAoIBAQC7pemQ2x9vK3Lz\n"
              "-----END PRIVATE KEY-----")


def assert_no_line_of(text, secret):
    for line in secret.splitlines():
        line = line.strip()
        assert len(line) < 8 or line not in text, f"a line of a secret leaked: {line!r} in {text!r}"


def test_multiline_secret_in_an_error_is_masked_line_by_line(any_pulumi_world):
    """The provider's error echoes a PEM-like secret: the message (cut to one
    line), the tails and the log hold no line of it."""
    w = any_pulumi_world
    w.config = [{"key": "password", "value": PEM_SECRET, "secret": True}]
    w.write_program(FILE_NAMED_BY_PASSWORD.format(suffix=""))
    w.ok("ensure")
    w.ok("config")
    rc, res, log = w.drive("up")
    assert res["status"] == "failed" and res["failed_steps"] == 1, res
    assert "invalid file name" in res["message"] and "[secret]" in res["message"], res
    for text in (res["message"], res["stdout_tail"], res["stderr_tail"], log):
        assert_no_line_of(text, PEM_SECRET)
    # Nor the driver's files (the stand-in's event log has the error in clear;
    # the real v3.274.1 masks known secrets in diagnostics itself).
    for f in w.scratch.iterdir():
        assert_no_line_of(f.read_text(), PEM_SECRET)


def test_compile_failure_is_a_program_error(any_pulumi_world):
    w = any_pulumi_world
    w.ready()
    w.write_program("""\
name: demo
runtime: yaml
outputs:
  x: ${nope.id}
""")
    rc, res, _ = w.drive("up")
    assert rc == 1 and res["status"] == "program-error"
    # Pulumi YAML 1.25's text, as the real CLI printed it.
    assert res["message"] == 'up: resource or variable named "nope" could not be found'
    assert res["summary"]["result"] == "failed"


# Stand-in only: no policy runtime is built for the real CLI (the stand-in's packs
# are its own "standin-policy" format).
def test_policy_violation(pulumi_world, tmp_path):
    w = pulumi_world
    pack = tmp_path / "policies"
    pack.mkdir()
    (pack / "PulumiPolicy.yaml").write_text("""\
runtime: standin-policy
name: demo-policies
version: 0.0.1
policies:
  - name: no-files
    description: File resources are not allowed here.
    enforcementLevel: mandatory
    forbid:
      type: standin:index:File
""")
    w.ready()
    rc, res, _ = w.drive("up", "--policy-pack", str(pack))
    assert res["status"] == "policy-violation"
    assert "no-files" in res["message"] and res["policy_violations"] == 1
    assert w.cloud_files() == []
    assert f"--policy-pack={pack}" in w.records()[-1]["argv"]


def start_driver(w, op, spec):
    """pl_driver OP running in the background; finish() collects its result."""
    p = subprocess.Popen([w.tool, "--spec", "-", op], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdin.write(json.dumps(spec))
    p.stdin.close()
    p.stdin = None          # communicate() must not flush the closed pipe
    return p


def finish(p):
    out, err = p.communicate(timeout=120)
    assert p.returncode in (0, 1), err
    return json.loads(out)


def hanging_up(w, pidfile, **knobs):
    """Knobs making the next up hang in its first resource step (the stand-in: in
    the CLI itself; the real CLI: in the test provider's Create) and write the
    process ids to pidfile once it hangs."""
    return {"PULUMI_STANDIN_HANG": "up", "PULUMI_STANDIN_PIDFILE": str(pidfile), **knobs}


def test_held_lock_is_classified_then_cancelled_only_when_told(any_pulumi_world, tmp_path):
    """The lock is held by a live update (a second CLI hanging in its first step)."""
    w = any_pulumi_world
    w.ready()
    w.ok("up")
    w.config = [{"key": "greeting", "value": "changed"}] + w.config[1:]
    w.ok("config")
    pidfile = tmp_path / "pids.json"
    holder = start_driver(w, "up", w.spec(hanging_up(w, pidfile), grace_ms=5000))
    try:
        wait_for(pidfile.exists, 60, what="the holder to hang")
        holder_pid = json.loads(pidfile.read_text())["pid"]
        assert len(w.locks()) == 1
        rc, res, _ = w.drive("up")
        assert res["status"] == "conflict"
        assert "currently locked by 1 lock(s)" in res["message"]
        assert res["lock"]["pid"] == holder_pid
        assert res["lock"]["owner"] == f"{pwd.getpwuid(os.getuid()).pw_name}@{socket.gethostname()}"
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", res["lock"]["created"])
        assert len(w.locks()) == 1                                   # never on its own
        if w.kind == "standin":
            assert not any(c[0:1] == ["cancel"] for c in w.commands())
        w.ok("cancel")
        if w.kind == "standin":
            assert ["cancel", "--yes", "--stack", "dev"] in w.commands()
        assert w.locks() == []
    finally:
        holder.send_signal(signal.SIGTERM)       # the holder's driver cancels its CLI
        held = finish(holder)
    assert held["status"] == "canceled"
    # No change count here: the stand-in hangs before its first step, the real
    # provider finishes its update once the engine cancels, so the halves differ in
    # what is left to do, not in where they end.
    w.ok("up")
    assert (w.cloud / "files" / w.cloud_files()[0]).read_text() == "changed"
    w.ok("preview", "--expect-no-changes")


def wait_gone(pids, deadline=10.0):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if not any(os.path.exists(f"/proc/{p}") and not _zombie(p) for p in pids):
            return True
        time.sleep(0.02)
    return False


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            s = fh.read()
        return s[s.rfind(")") + 2] == "Z"
    except OSError:
        return True


def assert_cli_tree_gone(w, pids):
    """Nothing the CLI started is left: not in its process group, and not outside
    it either (the real CLI starts its language host and providers in process
    groups of their own)."""
    assert pids["pgid"] == pids["pid"]                # the CLI leads its own group
    assert group_members(pids["pgid"]) == []
    started = dict.fromkeys([pids["child"], *pids.get("plugins", [])])   # the real CLI's
    left = [p for p in started if not wait_gone([p], 2.0)]
    left += [p for p in w.survivors() if p not in left]
    assert left == [], "outlived the CLI: " + ", ".join(f"{p} {_command(p)}" for p in left)


def _command(pid):
    try:
        return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return "(gone)"


def test_hanging_cli_is_killed_with_its_whole_group(any_pulumi_world, tmp_path):
    w = any_pulumi_world
    w.ready()
    pidfile = tmp_path / "pids.json"
    # Stubborn: the stand-in ignores SIGINT and SIGTERM; the real CLI, whose provider
    # ignores them and the engine's cancel, waits for it even after SIGTERM.
    knobs = hanging_up(w, pidfile, PULUMI_STANDIN_HANG_STUBBORN="1")
    # Long enough for a loaded machine to reach the hang before the timeout.
    spec = w.spec(knobs, timeout_ms=10000, grace_ms=300)
    rc, res, _ = w.drive("up", spec=spec)
    assert res["status"] == "timeout"
    assert "SIGKILL" in res["message"]
    assert pidfile.exists(), "the CLI did not reach its hang before the timeout"
    assert_cli_tree_gone(w, json.loads(pidfile.read_text()))


def test_killed_cli_leaves_no_zombie_when_the_driver_is_a_subreaper(any_pulumi_world, tmp_path):
    """As PID 1 of its container (or a subreaper), the controller inherits what a
    killed CLI leaves: the real CLI's plugins, the stand-in's child. The sweep
    kills them; they must also be reaped."""
    w = any_pulumi_world
    w.ready()
    pidfile = tmp_path / "pids.json"
    knobs = hanging_up(w, pidfile, PULUMI_STANDIN_HANG_STUBBORN="1")
    rc, res, log = w.drive("up", "--subreaper", spec=w.spec(knobs, timeout_ms=10000, grace_ms=300))
    assert res["status"] == "timeout", res
    assert pidfile.exists(), "the CLI did not reach its hang before the timeout"
    assert res["zombie_child"] is False, log[-3000:]
    assert_cli_tree_gone(w, json.loads(pidfile.read_text()))


# After a graceful cancel (SIGINT) the real v3.274.1 reports the update "failed"
# (exit 1), not "canceled": its YAML program's next registration fails with
# "update canceled", and a step or program error outranks the cancel in the engine.
# The summary says "canceled" only when the CLI is terminated (a second signal).
CANCELED_UPDATE_RESULT = "failed"
CANCELED_UPDATE_EXIT = 1


def test_hanging_cli_cancels_gracefully_on_sigint(any_pulumi_world, tmp_path):
    w = any_pulumi_world
    w.ready()
    pidfile = tmp_path / "pids.json"
    rc, res, _ = w.drive("up", spec=w.spec(hanging_up(w, pidfile), timeout_ms=10000,
                                           grace_ms=20000))
    assert res["status"] == "timeout" and "SIGINT" in res["message"]
    assert pidfile.exists(), "the CLI did not reach its hang before the timeout"
    assert "^C received; cancelling." in res["stdout_tail"]
    assert (res["summary"]["result"], res["exit_code"]) == (CANCELED_UPDATE_RESULT,
                                                            CANCELED_UPDATE_EXIT)
    assert_cli_tree_gone(w, json.loads(pidfile.read_text()))
    assert w.locks() == []                            # released on cancel


def test_interrupt_cancels_the_running_update(any_pulumi_world, tmp_path):
    """SIGTERM to the tool = the controller shutting down: pl_interrupt."""
    w = any_pulumi_world
    w.ready()
    pidfile = tmp_path / "pids.json"
    p = start_driver(w, "up", w.spec(hanging_up(w, pidfile), timeout_ms=120000, grace_ms=20000))
    try:
        wait_for(pidfile.exists, 60, what="the CLI to hang")
    finally:
        p.send_signal(signal.SIGTERM)
        res = finish(p)
    assert p.returncode == 1 and res["status"] == "canceled"
    assert "interrupted on request" in res["message"] and "SIGINT" in res["message"]
    assert (res["summary"]["result"], res["exit_code"]) == (CANCELED_UPDATE_RESULT,
                                                            CANCELED_UPDATE_EXIT)
    assert_cli_tree_gone(w, json.loads(pidfile.read_text()))
    assert w.locks() == []


def test_crash_mid_update_then_recovery(any_pulumi_world):
    """The CLI SIGKILLed in its second resource step (the stand-in kills itself; the
    real CLI is killed by its provider), as by the OOM killer."""
    w = any_pulumi_world
    w.write_program(TWO_FILES)
    w.ready()
    rc, res, _ = w.drive("up", knobs={"PULUMI_STANDIN_CRASH": "up:1"})
    assert res["status"] == "failed" and "signal 9" in res["message"]
    assert len(w.cloud_files()) == 1
    pending = w.checkpoint()["checkpoint"]["latest"]["pending_operations"]
    assert [op["type"] for op in pending] == ["creating"]
    assert pending[0]["resource"]["urn"].endswith("::second")
    assert len(w.locks()) == 1
    rc, res, _ = w.drive("up")
    assert res["status"] == "conflict"
    w.ok("cancel")
    res = w.ok("up")
    # The stack root and the first file were saved before the crash (as the real
    # v3.274.1 does); the pending create is dropped and the second file made anew.
    assert res["summary"]["changes"] == {"create": 1, "same": 2}
    assert len(w.cloud_files()) == 2


def test_drift_is_seen_by_refresh(any_pulumi_world):
    w = any_pulumi_world
    w.ready()
    w.ok("up")
    f = w.cloud / "files" / w.cloud_files()[0]
    f.write_text("edited by hand")
    rc, res, _ = w.drive("refresh", "--preview-only", "--expect-no-changes")
    assert res["status"] == "changes-not-expected"
    assert res["summary"]["changes"] == {"same": 1, "update": 1}     # as real v3.274.1
    assert "no changes were expected for refresh" in res["message"]
    rc, res, _ = w.drive("preview", "--refresh", "--expect-no-changes")
    assert res["status"] == "changes-not-expected"
    assert res["summary"]["changes"] == {"same": 1, "update": 1}
    assert res["steps"] == 6        # refresh steps, then update steps (as real v3.274.1)
    res = w.ok("up", "--refresh")
    assert res["summary"]["changes"].get("update") == 1
    assert f.read_text() == "hi"
    w.ok("preview", "--expect-no-changes")


def test_plan_saved_then_applied_and_diverging_plan_fails(any_pulumi_world, tmp_path):
    w = any_pulumi_world
    w.ready()
    # No stack output that is unknown at preview time (${note.path} on a create): with
    # one, the real v3.274.1 cannot apply its own plan (test_pulumi_driver_conformance.py).
    w.write_program(ONE_FILE_PROGRAM.replace("  path: ${note.path}\n", ""))
    plan = tmp_path / "plan.json"
    w.ok("preview", "--plan", str(plan))
    assert "resourcePlans" in json.loads(plan.read_text())
    if w.kind == "standin":
        up = w.records()[-1]
        assert f"--save-plan={plan}" in up["argv"] and "PULUMI_EXPERIMENTAL" in up["env"]
    w.ok("up", "--plan", str(plan))
    if w.kind == "standin":
        assert f"--plan={plan}" in w.records()[-1]["argv"]
    w.ok("preview", "--plan", str(plan))
    w.config = [{"key": "greeting", "value": "changed"}] + w.config[1:]
    w.ok("config")
    rc, res, _ = w.drive("up", "--plan", str(plan))
    assert res["status"] == "plan-violation"
    assert w.cloud / "files" and (w.cloud / "files" / w.cloud_files()[0]).read_text() == "hi"


def test_destroy(any_pulumi_world):
    w = any_pulumi_world
    w.ready()
    w.ok("up")
    res = w.ok("destroy", "--preview-only")
    assert len(w.cloud_files()) == 1 and res["summary"]["is_preview"]
    res = w.ok("destroy")
    # The root stack counts as a step (reference §2.5 resourceChanges).
    assert res["summary"]["changes"] == {"delete": 2}
    assert w.cloud_files() == []
    assert w.ok("history")["history"]["kind"] == "destroy"


def test_stack_not_found(any_pulumi_world):
    rc, res, _ = any_pulumi_world.drive("preview")
    assert res["status"] == "not-found"
    assert "no stack named 'dev' found" in res["message"]
    # A caller that skips pl_ensure_stack for a stack it knows learns it is gone.
    rc, res, _ = any_pulumi_world.drive("up", "--with-config")
    assert res["status"] == "not-found", res


def test_cli_missing_and_too_old(any_pulumi_world, tmp_path):
    w = any_pulumi_world
    rc, res, _ = w.drive("up", spec=w.spec(pulumi_bin=str(tmp_path / "nope" / "pulumi")))
    assert res["status"] == "cli-missing"
    old = tmp_path / "old" / "pulumi"
    old.parent.mkdir()
    old.write_text("#!/bin/sh\necho v3.100.0\n")
    old.chmod(old.stat().st_mode | stat.S_IEXEC)
    rc, res, _ = w.drive("up", spec=w.spec(pulumi_bin=str(old)))
    assert res["status"] == "cli-too-old"
    assert "v3.100.0" in res["message"] and "3.135.0" in res["message"]


def test_missing_language_host_is_classified(any_pulumi_world):
    w = any_pulumi_world
    w.ready()
    # dotnet: a host the CLI counts as bundled (never downloaded, unlike java) and deps-real
    # does not build (it builds the Node.js, Python and Go hosts next to the real CLI).
    w.write_program("name: demo\nruntime: dotnet\n")
    rc, res, _ = w.drive("up")
    assert res["status"] == "cli-missing"
    assert "no language plugin 'pulumi-language-dotnet'" in res["message"]
    assert res["summary"]["present"] is False


def test_output_tails_are_bounded(any_pulumi_world):
    w = any_pulumi_world
    w.ready()
    rc, res, _ = w.drive("up", spec=w.spec(tail_max=64))
    assert res["status"] == "ok"
    assert 0 < len(res["stdout_tail"].encode()) <= 64
    assert re.search(r"Duration: \d+s\n+$", res["stdout_tail"])


def test_cli_logs_in_pulumi_home_are_pruned(any_pulumi_world):
    """The CLI leaves a log file in $PULUMI_HOME/logs for every command and never
    removes one (S test_every_command_leaves_a_log_in_pulumi_home); PULUMI_HOME is
    shared by every stack, so after each call the driver keeps the 64 newest."""
    w = any_pulumi_world
    logs = w.home / "logs"
    logs.mkdir(exist_ok=True)
    hours_ago = time.time() - 7200
    for i in range(100):
        f = logs / f"pulumi-old-{i:03d}.log"
        f.write_text("x")
        os.utime(f, (hours_ago + i, hours_ago + i))
    (logs / "notes.txt").write_text("not a CLI log")
    w.ready()
    w.ok("up")
    names = {p.name for p in logs.iterdir()}
    cli_logs = {n for n in names if n.endswith(".log")}
    assert len(cli_logs) == 64
    fresh = {n for n in cli_logs if not n.startswith("pulumi-old-")}
    assert any(n.startswith("organization+demo+dev-") for n in fresh)   # the update's own
    assert "pulumi-old-000.log" not in names and "pulumi-old-099.log" in names
    assert "notes.txt" in names


def test_reserved_environment_names_are_refused(any_pulumi_world):
    w = any_pulumi_world
    for name in ("PULUMI_HOME", "PULUMI_CONTROLLER_RUN_ID"):
        spec = w.spec()
        spec["env"].append({"name": name, "value": "/elsewhere"})
        p = subprocess.run([w.tool, "--spec", "-", "version"], input=json.dumps(spec),
                           capture_output=True, text=True)
        assert p.returncode == 1 and f"{name} is set by the driver" in p.stderr
