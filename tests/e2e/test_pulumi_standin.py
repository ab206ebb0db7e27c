"""Fidelity of the stand-in `pulumi` (tests/e2e/pulumi_standin/pulumi) to the
real CLI as reference/pulumi-cli.md describes it.  Each test checks one or
more claims listed in tests/e2e/pulumi_standin/README.md."""
import base64
import hashlib
import json
import os
import re
import signal
import subprocess
import time

import pytest

from pulumi_fixtures import STANDIN

PW = "pw-for-tests"


@pytest.fixture
def si(pulumi_world):
    """The world with a stack `dev` created through the stand-in itself."""
    w = pulumi_world
    w.env_si = {"PULUMI_BACKEND_URL": f"file://{w.state}", "PULUMI_CONFIG_PASSPHRASE": PW}
    p = w.standin("--non-interactive", "stack", "init", "dev", "--secrets-provider",
                  "passphrase", env=w.env_si)
    assert p.returncode == 0, p.stderr
    p = w.standin("config", "set", "--secret", "--stack", "dev", "password", input="hunter2",
                  env=w.env_si)
    assert p.returncode == 0, p.stderr
    return w


def run(w, *args, env=None, **kw):
    e = dict(w.env_si)
    e.update(env or {})
    return w.standin(*args, env=e, **kw)


def events(path):
    return [json.loads(l) for l in path.read_text().splitlines()]


def test_version_output(pulumi_world):
    p = pulumi_world.standin("version")
    assert p.returncode == 0 and re.fullmatch(r"v3\.\d+\.\d+\n", p.stdout)


def test_flag_forms_and_positions(si):
    # --non-interactive anywhere, --flag=v and --flag v, -s shorthand, -- ends flags.
    assert run(si, "config", "set", "--stack=dev", "greeting", "hi", "--non-interactive").returncode == 0
    assert run(si, "--non-interactive", "config", "set", "-s", "dev", "--", "dash", "-v").returncode == 0
    p = run(si, "config", "--json", "--stack", "dev")
    cfg = json.loads(p.stdout)
    assert cfg["demo:greeting"] == {"value": "hi", "secret": False}
    assert cfg["demo:dash"]["value"] == "-v"
    p = run(si, "up", "--bogus", "--stack", "dev")
    assert p.returncode == 1 and p.stderr == "error: unknown flag: --bogus\n"   # observed: 1


def test_event_log_requires_debug_commands(si, tmp_path):
    log = tmp_path / "ev.jsonl"
    p = run(si, "preview", "--event-log", str(log), "--stack", "dev")
    assert p.returncode == 1 and p.stderr == "error: unknown flag: --event-log\n"
    p = run(si, "preview", "--event-log", str(log), "--stack", "dev",
            env={"PULUMI_DEBUG_COMMANDS": "1"})
    assert p.returncode == 0, p.stderr
    ev = events(log)
    assert [e["sequence"] for e in ev] == list(range(len(ev)))
    assert "preludeEvent" in ev[0] and "cancelEvent" in ev[-1]
    summaries = [e for e in ev if "summaryEvent" in e]
    assert len(summaries) == 1
    s = summaries[0]["summaryEvent"]
    assert set(s) == {"maybeCorrupt", "durationSeconds", "resourceChanges", "PolicyPacks",
                      "isPreview", "result"}
    # Truncated on open: a second run does not append.
    run(si, "preview", "--event-log", str(log), "--stack", "dev", env={"PULUMI_DEBUG_COMMANDS": "1"})
    assert len(events(log)) == len(ev)
    # An event log that cannot be opened is silently skipped.
    p = run(si, "preview", "--event-log", str(tmp_path / "no" / "dir" / "x"), "--stack", "dev",
            env={"PULUMI_DEBUG_COMMANDS": "true"})
    assert p.returncode == 0


def test_secret_config_is_masked_in_the_prelude(si, tmp_path):
    run(si, "config", "set", "--secret", "--stack", "dev", "password", input="hunter2\n")
    log = tmp_path / "ev.jsonl"
    run(si, "preview", "--event-log", str(log), "--stack", "dev", env={"PULUMI_DEBUG_COMMANDS": "1"})
    text = log.read_text()
    assert '"demo:password":"[secret]"' in text and "hunter2" not in text


def test_config_json_lists_project_config_too(si):
    si.write_program(si.work.joinpath("Pulumi.yaml").read_text().replace(
        "config:\n", "config:\n  fixed:\n    value: from-project\n", 1))
    assert run(si, "config", "set", "--path", "--stack", "dev", "db.port", "5432").returncode == 0
    assert run(si, "config", "set", "--path", "--stack", "dev", "db.on", "true").returncode == 0
    cfg = json.loads(run(si, "config", "--json", "--stack", "dev").stdout)
    assert cfg["demo:greeting"] == {"value": "hello", "secret": False}      # a default
    assert cfg["demo:fixed"] == {"value": "from-project", "secret": False}
    assert cfg["demo:password"] == {"secret": True}
    assert cfg["demo:db"] == {"value": '{"on":true,"port":5432}', "objectValue": {"on": True, "port": 5432},
                              "secret": False}
    assert "demo:greeting" not in si.stack_config_text()


def test_stack_select_and_init_texts(si):
    p = run(si, "--non-interactive", "stack", "select", "--stack", "nope")
    assert p.returncode == 6 and p.stderr == "error: no stack named 'nope' found\n"
    p = run(si, "stack", "init", "dev")
    assert p.returncode == 1
    assert p.stderr == "error: stack 'organization/demo/dev' already exists\n"
    assert re.search(r"^encryptionsalt: v1:[A-Za-z0-9+/=]+:v1:", si.stack_config_text(), re.M)
    st = json.loads((si.state / ".pulumi" / "stacks" / "demo" / "dev.json").read_text())
    assert st["checkpoint"]["stack"] == "organization/demo/dev"
    assert st["checkpoint"]["latest"]["secrets_providers"]["type"] == "passphrase"
    bak = json.loads((si.state / ".pulumi" / "stacks" / "demo" / "dev.json.bak").read_text())
    assert bak == {"version": 0, "checkpoint": {"stack": "organization/demo/dev"}}   # observed
    assert (si.state / ".pulumi" / "meta.yaml").read_text() == "version: 1\n"
    for blob in ("meta.yaml", "stacks/demo/dev.json", "stacks/demo/dev.json.bak"):
        attrs = json.loads((si.state / ".pulumi" / (blob + ".attrs")).read_text())
        data = (si.state / ".pulumi" / blob).read_bytes()
        assert attrs["md5"] == base64.b64encode(hashlib.md5(data).digest()).decode()
        assert attrs["user.content_type"] == "text/plain; charset=utf-8"
    ws = list((si.home / "workspaces").iterdir())
    assert len(ws) == 1 and ws[0].name == (
        "demo-" + hashlib.sha1(str(si.work / "Pulumi.yaml").encode()).hexdigest() + "-workspace.json")
    assert json.loads(ws[0].read_text()) == {"stacks": {f"file://{si.state}": "organization/demo/dev"}}


def test_backend_resolution_order(pulumi_world, tmp_path):
    w = pulumi_world
    other = tmp_path / "other"
    other.mkdir()
    w.write_program(f"name: demo\nruntime: yaml\nbackend:\n  url: file://{other}\n")
    env = {"PULUMI_CONFIG_PASSPHRASE": PW}
    assert w.standin("stack", "init", "a", env=env).returncode == 0
    assert (other / ".pulumi" / "stacks" / "demo" / "a.json").exists()
    env["PULUMI_BACKEND_URL"] = f"file://{w.state}"
    assert w.standin("stack", "init", "b", env=env).returncode == 0
    assert (w.state / ".pulumi" / "stacks" / "demo" / "b.json").exists()
    w.write_program("name: demo\nruntime: yaml\n")
    third = tmp_path / "third"
    third.mkdir()
    (w.home / "credentials.json").write_text(json.dumps({"current": f"file://{third}"}))
    env.pop("PULUMI_BACKEND_URL")
    assert w.standin("stack", "init", "c", env=env).returncode == 0
    assert (third / ".pulumi" / "stacks" / "demo" / "c.json").exists()
    env["PULUMI_BACKEND_URL"] = f"file://{tmp_path}/missing"
    p = w.standin("stack", "init", "d", env=env)
    assert p.stderr == (f'error: unable to open state directory "file://{tmp_path}/missing": '
                        f"stat {tmp_path}/missing: no such file or directory\n")


def test_yaml_unknown_reference_is_reported_and_the_rest_runs(si, tmp_path):
    """Observed on v3.274.1 with pulumi-yaml 1.25 (through the driver)."""
    si.write_program(si.work.joinpath("Pulumi.yaml").read_text() + "  broken: ${nope.id}\n")
    log = tmp_path / "ev"
    p = run(si, "up", "--yes", "--skip-preview", "--event-log", str(log), "--stack", "dev",
            env={"PULUMI_DEBUG_COMMANDS": "1"})
    assert p.returncode == 1 and p.stderr == ""
    n = si.work.joinpath("Pulumi.yaml").read_text().splitlines().index("  broken: ${nope.id}") + 1
    errs = [e["diagnosticEvent"] for e in events(log)
            if e.get("diagnosticEvent", {}).get("severity") == "error"]
    assert errs[0] == {"prefix": "error: ", "color": "never", "severity": "error",
                       "message": 'resource or variable named "nope" could not be found\n\n'
                                  f"  on Pulumi.yaml line {n}:\n  {n}:   broken: ${{nope.id}}\n\n\n"}
    assert errs[1]["message"] == "Error registering output [broken]: no diagnostics\n"
    assert len(si.cloud_files()) == 1                      # the file was still created
    summary = [e["summaryEvent"] for e in events(log) if "summaryEvent" in e][0]
    assert summary["result"] == "failed" and summary["resourceChanges"] == {"create": 2}
    out = json.loads(run(si, "stack", "output", "--json", "--stack", "dev").stdout)
    assert "broken" not in out and out["message"] == "hello"


def test_missing_language_host(si, tmp_path):
    """Observed on v3.274.1 without pulumi-language-yaml."""
    si.write_program("name: demo\nruntime: nodejs\n")
    log = tmp_path / "ev"
    p = run(si, "preview", "--event-log", str(log), "--stack", "dev",
            env={"PULUMI_DEBUG_COMMANDS": "1"})
    assert p.returncode == 1
    assert p.stdout == "Previewing update (dev):\n"
    assert p.stderr == ("error: failed to load language plugin nodejs: no language plugin "
                        "'pulumi-language-nodejs' found in the workspace or on your $PATH\n")
    assert events(log) == [{"sequence": 0, "timestamp": events(log)[0]["timestamp"],
                            "cancelEvent": {}}]
    p = run(si, "up", "--yes", "--skip-preview", "--stack", "dev")
    assert p.returncode == 1 and p.stdout == "Updating (dev):\n"
    h = json.loads(run(si, "stack", "history", "--json", "--stack", "dev").stdout)
    assert len(h) == 1 and h[0]["result"] == "failed" and h[0]["resourceChanges"] == {}
    p = run(si, "install")
    assert p.returncode == 1 and p.stderr.startswith("error: load language plugin nodejs: ")


def test_mutations_need_yes_in_non_interactive_mode(si):
    p = run(si, "up", "--stack", "dev")
    assert p.returncode == 2
    assert p.stderr == ("error: --yes or --skip-preview or --preview-only must be passed in to "
                        "proceed when running in non-interactive mode\n")


def test_lock_layout_conflict_text_and_cancel(si, tmp_path):
    pidfile = tmp_path / "pids"
    proc = subprocess.Popen(
        [str(STANDIN), "up", "--yes", "--skip-preview", "--stack", "dev"], cwd=str(si.work),
        env={"PATH": "/usr/bin:/bin", "PULUMI_HOME": str(si.home), "HOME": str(si.home),
             "PULUMI_STANDIN_CLOUD": str(si.cloud), "PULUMI_STANDIN_HANG": "up",
             "PULUMI_STANDIN_PIDFILE": str(pidfile), "PULUMI_STANDIN_KDF_ITERATIONS": "1000",
             **si.env_si}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        locks = [p for p in (si.state / ".pulumi" / "locks" / "organization" / "demo" /
                             "dev").iterdir() if not p.name.endswith(".attrs")]
        assert len(locks) == 1
        assert re.fullmatch(r"[0-9a-f-]{36}\.json", locks[0].name)
        info = json.loads(locks[0].read_text())
        assert set(info) == {"pid", "username", "hostname", "timestamp"}
        p = run(si, "refresh", "--yes", "--stack", "dev")
        assert p.returncode == 1
        first, second = p.stderr.splitlines()
        assert first == ("error: the stack is currently locked by 1 lock(s). Either wait for the "
                         "other process(es) to end or delete the lock file with `pulumi cancel`.")
        assert re.fullmatch(
            rf"  file://{si.state}/\.pulumi/locks/organization/demo/dev/"
            rf"{locks[0].name}\?no_tmp_dir=true: created by \S+@\S+ \(pid {info['pid']}\) at "
            r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", second)
        # preview takes no lock
        assert run(si, "preview", "--stack", "dev").returncode == 0
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=20)
        # A graceful cancel fails the update on the real CLI (test_pulumi_driver).
        assert proc.returncode == 1
        assert "^C received; cancelling." in out
        assert list(locks[0].parent.iterdir()) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    locks[0].parent.mkdir(parents=True, exist_ok=True)
    locks[0].write_text(json.dumps(info))
    p = run(si, "cancel", "--yes", "--stack", "dev")
    assert p.returncode == 0
    assert p.stdout == "The currently running update for 'dev' has been canceled!\n"
    assert list(locks[0].parent.iterdir()) == []
    # Non-interactive, --yes is not insisted on (observed on v3.274.1).
    locks[0].write_text(json.dumps(info))
    p = run(si, "--non-interactive", "cancel", "--stack", "dev")
    assert p.returncode == 0 and list(locks[0].parent.iterdir()) == []


def test_update_writes_checkpoint_backup_history(si):
    p = run(si, "up", "--yes", "--stack", "dev")
    assert p.returncode == 0, p.stderr
    root = si.state / ".pulumi"
    raw = (root / "stacks" / "demo" / "dev.json").read_text()
    assert raw.startswith('{"version":3,"checkpoint":{') and "\n" not in raw   # compact (>= v3.238)
    hist = list((root / "history" / "demo" / "dev").iterdir())
    assert sorted(re.sub(r"\d+", "N", h.name) for h in hist) == [
        "dev-N.checkpoint.json", "dev-N.checkpoint.json.attrs", "dev-N.history.json",
        "dev-N.history.json.attrs"]
    h = json.loads([x for x in hist if x.name.endswith(".history.json")][0].read_text())
    assert h["kind"] == "update" and h["version"] == 0 and isinstance(h["startTime"], int)
    assert h["environment"]["pulumi.env.PULUMI_CONFIG_PASSPHRASE"] == "set"
    assert PW not in json.dumps(h)
    backups = sorted(p.name for p in (root / "backups" / "demo" / "dev").iterdir())
    assert len(backups) == 2 and backups[1] == backups[0] + ".attrs"
    # As the real CLI with a file:// backend: a duration, and no Permalink line.
    assert re.search(r"^Duration: \d+s$", p.stdout, re.M) and "Permalink:" not in p.stdout


def test_stack_output_masked_and_shown(si):
    run(si, "config", "set", "--secret", "--stack", "dev", "password", input="hunter2")
    assert run(si, "up", "--yes", "--stack", "dev").returncode == 0
    masked = run(si, "stack", "output", "--json", "--stack", "dev",
                 env={"PULUMI_CONFIG_PASSPHRASE": "wrong"})     # no decryption needed
    assert masked.returncode == 0
    assert json.loads(masked.stdout)["secretOut"] == "[secret]"
    assert masked.stdout.startswith('{\n  "message"')              # 2-space, sorted
    shown = run(si, "stack", "output", "--json", "--show-secrets", "--stack", "dev")
    assert json.loads(shown.stdout)["secretOut"] == "hunter2"
    bad = run(si, "stack", "output", "--json", "--show-secrets", "--stack", "dev",
              env={"PULUMI_CONFIG_PASSPHRASE": "wrong"})
    assert bad.returncode == 1 and bad.stderr == "error: incorrect passphrase\n"   # observed
    p = run(si, "stack", "output", "nope", "--stack", "dev")
    assert p.stderr == "error: current stack does not have output property 'nope'\n"


def test_stack_history_shape_and_paging(si):
    run(si, "config", "set", "--secret", "--stack", "dev", "password", input="hunter2")
    for _ in range(3):
        assert run(si, "up", "--yes", "--stack", "dev").returncode == 0
    full = json.loads(run(si, "stack", "history", "--json", "--stack", "dev").stdout)
    assert len(full) == 3
    e = full[0]
    assert list(e) == ["version", "kind", "startTime", "message", "environment", "config",
                       "result", "endTime", "resourceChanges"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", e["startTime"])
    assert e["config"]["demo:password"] == {"secret": True}
    assert list(e["environment"]) == sorted(e["environment"])          # Go map order (observed)
    assert e["environment"]["stack.environments"] == "[]"
    page = json.loads(run(si, "stack", "history", "--json", "--page-size", "1", "--page", "2",
                          "--stack", "dev").stdout)
    assert len(page) == 1 and page[0]["startTime"] == full[1]["startTime"]
    shown = json.loads(run(si, "stack", "history", "--json", "--show-secrets", "--stack",
                           "dev").stdout)
    assert shown[0]["config"]["demo:password"]["value"] == "hunter2"


def test_preview_json_digest(si):
    p = run(si, "preview", "--json", "--stack", "dev")
    d = json.loads(p.stdout)
    assert list(d) == ["config", "steps", "duration", "changeSummary"]
    assert isinstance(d["duration"], int) and d["changeSummary"] == {"create": 2}
    assert p.stdout.startswith('{\n    "')                       # 4-space indent
    assert d["config"]["demo:password"] == "[secret]"
    ops = [(s["op"], s["urn"].rsplit("::", 1)[1]) for s in d["steps"]]
    assert sorted(ops) == [("create", "demo-dev"), ("create", "note")]
    root = [s for s in d["steps"] if s["newState"]["type"] == "pulumi:pulumi:Stack"][0]
    assert root["detailedDiff"] is None and root["newState"]["custom"] is False
    assert root["newState"]["outputs"]["secretOut"] == "[secret]"
    assert "hunter2" not in p.stdout


def test_expect_no_changes_exit_code(si):
    p = run(si, "preview", "--expect-no-changes", "--stack", "dev")
    assert p.returncode == 7
    assert p.stderr == "error: no changes were expected for preview but changes were proposed\n"


def test_passphrase_crypto_matches_the_reference_vector(pulumi_world):
    """Real PBKDF2 count (1,000,000), reference §6 computed example."""
    w = pulumi_world
    (w.work / "Pulumi.dev.yaml").write_text(
        "encryptionsalt: v1:AQIDBAUGBwg=:v1:AAECAwQFBgcICQoL:yX1+BiKJUW+guDZbiQRMUnobuD6cFg==\n"
        "config:\n  demo:password:\n    secure: v1:AQIDBAUGBwgJCgsM:IwVgbMOqTBUsDtDU+dZ6OCuyyKAw6lA=\n")
    env = {"PULUMI_BACKEND_URL": f"file://{w.state}", "PULUMI_CONFIG_PASSPHRASE": "password",
           "PULUMI_STANDIN_KDF_ITERATIONS": "1000000"}
    os.makedirs(w.state / ".pulumi" / "stacks" / "demo")
    (w.state / ".pulumi" / "stacks" / "demo" / "dev.json").write_text(
        '{"version": 3, "checkpoint": {"stack": "organization/demo/dev"}}')
    p = w.standin("config", "--json", "--show-secrets", "--stack", "dev", env=env)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["demo:password"] == {"value": "hunter2", "secret": True}
    env.pop("PULUMI_CONFIG_PASSPHRASE")
    p = w.standin("config", "--json", "--show-secrets", "--stack", "dev", env=env)
    assert p.stderr == ("error: passphrase must be set with PULUMI_CONFIG_PASSPHRASE or "
                        "PULUMI_CONFIG_PASSPHRASE_FILE environment variables\n")


def test_plan_divergence_fails_the_update(si, tmp_path):
    plan = tmp_path / "plan.json"
    assert run(si, "preview", "--save-plan", str(plan), "--stack", "dev").returncode == 0
    assert run(si, "config", "set", "greeting", "changed", "--stack", "dev").returncode == 0
    p = run(si, "up", "--yes", "--skip-preview", "--plan", str(plan), "--stack", "dev")
    assert p.returncode == 1 and p.stderr == ""
    # The wording observed on v3.274.1 for one changed property.
    assert ("error: resource urn:pulumi:dev::demo::standin:index:File::note violates plan: "
            "properties changed: =~content[{changed}]") in p.stdout
    assert si.cloud_files() == []


def test_policy_pack_format(si, tmp_path):
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "PulumiPolicy.yaml").write_text(
        "runtime: standin-policy\nname: p\nversion: 1.0.0\npolicies:\n"
        "  - name: hello-only\n    enforcementLevel: advisory\n"
        "    forbid: {type: standin:index:File, property: content, pattern: '^hel'}\n")
    log = tmp_path / "ev"
    p = run(si, "up", "--yes", "--policy-pack", str(pack), "--event-log", str(log), "--stack",
            "dev", env={"PULUMI_DEBUG_COMMANDS": "1"})
    assert p.returncode == 0     # advisory only warns
    pol = [e["policyEvent"] for e in events(log) if "policyEvent" in e]
    assert pol and pol[0]["enforcementLevel"] == "advisory" and pol[0]["policyName"] == "hello-only"
    summary = [e["summaryEvent"] for e in events(log) if "summaryEvent" in e][0]
    assert summary["PolicyPacks"] == {"p": "1.0.0"}
