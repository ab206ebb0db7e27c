"""Fidelity of the stand-in `pulumi` (tests/e2e/pulumi_standin/pulumi): the claims of
tests/e2e/pulumi_standin/README.md.  Every test that needs no stand-in knob runs twice
through `pulumi_cli` (real_fixtures.py): against the stand-in and against the real
pulumi CLI built by `make deps-real`, with the same assertions; where the two
disagree the real CLI is right.  The few stand-in-only tests say why at the top."""
import base64
import hashlib
import json
import os
import re
import signal
import subprocess

import pytest

from pulumi_fixtures import ONE_FILE_PROGRAM, processes_of_cloud
from real_fixtures import VERSIONS, wait_for
from test_pulumi_driver_conformance import Driver

PW = "pw-for-tests"

PROGRAM = ONE_FILE_PROGRAM
leftovers = processes_of_cloud


@pytest.fixture
def si(pulumi_cli):
    """Stack `dev` of project `demo` created by the CLI under test, with a secret
    `password`; the backend chosen by PULUMI_BACKEND_URL as the driver does."""
    p = pulumi_cli
    p.env.update(PULUMI_BACKEND_URL=p.backend_url, PULUMI_CONFIG_PASSPHRASE=PW)
    if p.kind == "standin":
        # Speed only: test_passphrase_crypto_matches_the_reference_vector checks the
        # real count, 1,000,000, on both.
        p.env["PULUMI_STANDIN_KDF_ITERATIONS"] = "1000"
    p.work = p.workdir / "work"
    p.work.mkdir()
    write_program(p, PROGRAM)
    r = run(p, "--non-interactive", "stack", "init", "dev", "--secrets-provider", "passphrase")
    assert r.returncode == 0, r.stderr
    r = run(p, "config", "set", "--secret", "--stack", "dev", "password", input="hunter2")
    assert r.returncode == 0, r.stderr
    yield p
    for pid in leftovers(p.cloud_dir):
        os.kill(pid, signal.SIGKILL)


def run(p, *args, env=None, input=None):
    return p.run(*args, cwd=p.work, env=env, input=input, timeout=120)


def write_program(p, text):
    (p.work / "Pulumi.yaml").write_text(text)


def program_text(p):
    return (p.work / "Pulumi.yaml").read_text()


def stack_config_text(p):
    return (p.work / "Pulumi.dev.yaml").read_text()


def cloud_files(p):
    d = p.cloud_dir / "files"
    return sorted(x.name for x in d.iterdir()) if d.exists() else []


def events(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


DEBUG = {"PULUMI_DEBUG_COMMANDS": "1"}


def test_version_output(pulumi_cli):
    p = pulumi_cli.run("version")
    assert p.returncode == 0 and p.stdout == VERSIONS["PULUMI_VERSION"] + "\n"
    assert re.fullmatch(r"v3\.\d+\.\d+\n", p.stdout)


def test_flag_forms_and_positions(si):
    # --non-interactive anywhere, --flag=v and --flag v, -s shorthand, -- ends flags.
    assert run(si, "config", "set", "--stack=dev", "greeting", "hi", "--non-interactive").returncode == 0
    assert run(si, "--non-interactive", "config", "set", "-s", "dev", "--", "dash", "-v").returncode == 0
    cfg = json.loads(run(si, "config", "--json", "--stack", "dev").stdout)
    assert cfg["demo:greeting"] == {"value": "hi", "secret": False}
    assert cfg["demo:dash"]["value"] == "-v"
    p = run(si, "up", "--bogus", "--stack", "dev")
    assert p.returncode == 1 and p.stderr == "error: unknown flag: --bogus\n"


def test_event_log_requires_debug_commands(si, tmp_path):
    log = tmp_path / "ev.jsonl"
    p = run(si, "preview", "--event-log", str(log), "--stack", "dev")
    assert p.returncode == 1 and p.stderr == "error: unknown flag: --event-log\n"
    p = run(si, "preview", "--event-log", str(log), "--stack", "dev", env=DEBUG)
    assert p.returncode == 0, p.stderr
    ev = events(log)
    assert [e["sequence"] for e in ev] == list(range(len(ev)))
    assert "preludeEvent" in ev[0] and "cancelEvent" in ev[-1]
    summaries = [e for e in ev if "summaryEvent" in e]
    assert len(summaries) == 1
    assert set(summaries[0]["summaryEvent"]) == {
        "maybeCorrupt", "durationSeconds", "resourceChanges", "PolicyPacks", "isPreview", "result"}
    # Truncated on open: a second run does not append.
    run(si, "preview", "--event-log", str(log), "--stack", "dev", env=DEBUG)
    assert len(events(log)) == len(ev)
    # An event log that cannot be opened is silently skipped.
    p = run(si, "preview", "--event-log", str(tmp_path / "no" / "dir" / "x"), "--stack", "dev",
            env={"PULUMI_DEBUG_COMMANDS": "true"})
    assert p.returncode == 0


def test_secret_config_is_masked_in_the_prelude(si, tmp_path):
    log = tmp_path / "ev.jsonl"
    run(si, "preview", "--event-log", str(log), "--stack", "dev", env=DEBUG)
    text = log.read_text()
    assert '"demo:password":"[secret]"' in text and "hunter2" not in text
    assert events(log)[0]["preludeEvent"]["config"]["demo:password"] == "[secret]"


def test_config_json_lists_project_config_too(si):
    write_program(si, program_text(si).replace(
        "config:\n", "config:\n  fixed:\n    value: from-project\n", 1))
    assert run(si, "config", "set", "--path", "--stack", "dev", "db.port", "5432").returncode == 0
    assert run(si, "config", "set", "--path", "--stack", "dev", "db.on", "true").returncode == 0
    cfg = json.loads(run(si, "config", "--json", "--stack", "dev").stdout)
    assert cfg["demo:greeting"] == {"value": "hello", "secret": False}      # a default
    assert cfg["demo:fixed"] == {"value": "from-project", "secret": False}
    assert cfg["demo:password"] == {"secret": True}
    assert cfg["demo:db"] == {"value": '{"on":true,"port":5432}', "objectValue": {"on": True, "port": 5432},
                              "secret": False}
    assert "demo:greeting" not in stack_config_text(si)


def test_stack_select_and_init_texts(si):
    p = run(si, "--non-interactive", "stack", "select", "--stack", "nope")
    assert p.returncode == 6 and p.stderr == "error: no stack named 'nope' found\n"
    p = run(si, "stack", "init", "dev")
    assert p.returncode == 1
    assert p.stderr == "error: stack 'organization/demo/dev' already exists\n"
    assert re.search(r"^encryptionsalt: v1:[A-Za-z0-9+/=]+:v1:", stack_config_text(si), re.M)
    root = si.backend_dir / ".pulumi"
    st = json.loads((root / "stacks" / "demo" / "dev.json").read_text())
    assert st["checkpoint"]["stack"] == "organization/demo/dev"
    assert st["checkpoint"]["latest"]["secrets_providers"]["type"] == "passphrase"
    bak = json.loads((root / "stacks" / "demo" / "dev.json.bak").read_text())
    assert bak == {"version": 0, "checkpoint": {"stack": "organization/demo/dev"}}
    assert (root / "meta.yaml").read_text() == "version: 1\n"
    for blob in ("meta.yaml", "stacks/demo/dev.json", "stacks/demo/dev.json.bak"):
        attrs = json.loads((root / (blob + ".attrs")).read_text())
        data = (root / blob).read_bytes()
        assert attrs["md5"] == base64.b64encode(hashlib.md5(data).digest()).decode()
        assert attrs["user.content_type"] == "text/plain; charset=utf-8"
    ws = list((si.home / "workspaces").iterdir())
    assert len(ws) == 1 and ws[0].name == (
        "demo-" + hashlib.sha1(str(si.work / "Pulumi.yaml").encode()).hexdigest() + "-workspace.json")
    assert json.loads(ws[0].read_text()) == {"stacks": {si.backend_url: "organization/demo/dev"}}


def test_backend_resolution_order(pulumi_cli, tmp_path):
    """PULUMI_BACKEND_URL, then Pulumi.yaml's backend.url, then credentials.json
    (written here by hand, as `pulumi login` writes it: RP test_login)."""
    p = pulumi_cli
    p.work = p.workdir / "work"
    p.work.mkdir()
    p.env["PULUMI_CONFIG_PASSPHRASE"] = PW
    if p.kind == "standin":
        p.env["PULUMI_STANDIN_KDF_ITERATIONS"] = "1000"     # speed only
    other = tmp_path / "other"
    other.mkdir()
    write_program(p, f"name: demo\nruntime: yaml\nbackend:\n  url: file://{other}\n")
    third = tmp_path / "third"
    third.mkdir()
    (p.home / "credentials.json").write_text(json.dumps({"current": f"file://{third}"}))
    assert run(p, "stack", "init", "a").returncode == 0
    assert (other / ".pulumi" / "stacks" / "demo" / "a.json").exists()
    p.env["PULUMI_BACKEND_URL"] = p.backend_url
    assert run(p, "stack", "init", "b").returncode == 0
    assert (p.backend_dir / ".pulumi" / "stacks" / "demo" / "b.json").exists()
    write_program(p, "name: demo\nruntime: yaml\n")
    del p.env["PULUMI_BACKEND_URL"]
    assert run(p, "stack", "init", "c").returncode == 0
    assert (third / ".pulumi" / "stacks" / "demo" / "c.json").exists()
    missing = tmp_path / "missing"
    r = run(p, "stack", "init", "d", env={"PULUMI_BACKEND_URL": f"file://{missing}"})
    assert r.returncode == 1
    assert r.stderr == (f'error: unable to open state directory "file://{missing}": '
                        f"stat {missing}: no such file or directory\n")


def test_yaml_unknown_reference_in_an_output(si, tmp_path):
    """An unknown reference in an output: reported without a urn, the resources
    still run.  The driver calls it a program error (DC test_driver_failures_on_both_clis)."""
    write_program(si, program_text(si) + "  broken: ${nope.id}\n")
    log = tmp_path / "ev"
    p = run(si, "up", "--yes", "--skip-preview", "--event-log", str(log), "--stack", "dev",
            env=DEBUG)
    assert p.returncode == 1 and p.stderr == ""
    n = program_text(si).splitlines().index("  broken: ${nope.id}") + 1
    errs = [e["diagnosticEvent"] for e in events(log)
            if e.get("diagnosticEvent", {}).get("severity") == "error"]
    assert {"urn", "prefix", "color"} & set(errs[0]) == {"prefix", "color"}
    assert (errs[0]["prefix"], errs[0]["color"]) == ("error: ", "never")
    assert errs[0]["message"] == ('resource or variable named "nope" could not be found\n\n'
                                  f"  on Pulumi.yaml line {n}:\n  {n}:   broken: ${{nope.id}}\n\n\n")
    assert errs[1]["message"] == "Error registering output [broken]: no diagnostics\n"
    assert len(cloud_files(si)) == 1                      # the file was still created
    summary = [e["summaryEvent"] for e in events(log) if "summaryEvent" in e][0]
    assert summary["result"] == "failed" and summary["resourceChanges"] == {"create": 2}
    out = json.loads(run(si, "stack", "output", "--json", "--stack", "dev").stdout)
    assert "broken" not in out and out["message"] == "hello"


UNKNOWN_IN_A_PROPERTY = PROGRAM.replace("outputs:\n", """\
  other:
    type: standin:index:File
    properties:
      content: ${nope.id}
outputs:
""")


def test_yaml_unknown_reference_in_a_property_stops_the_program(si, tmp_path, pc_tools):
    """An unknown reference in a resource's property is found before anything
    runs (pulumi-yaml 1.25): no resource is created, three `info#err` lines
    without urn and no `error` diagnostic, the stack keeps its outputs.  The
    driver sees a failure without an error diagnostic."""
    write_program(si, UNKNOWN_IN_A_PROPERTY)
    log = tmp_path / "ev"
    p = run(si, "up", "--yes", "--skip-preview", "--event-log", str(log), "--stack", "dev",
            env=DEBUG)
    assert p.returncode == 1 and p.stderr == ""
    n = UNKNOWN_IN_A_PROPERTY.splitlines().index("      content: ${nope.id}") + 1
    ev = events(log)
    assert ev[0]["preludeEvent"]["config"] == {"demo:greeting": "hello", "demo:password": "[secret]"}
    diags = [e["diagnosticEvent"] for e in ev if "diagnosticEvent" in e
             and e["diagnosticEvent"]["severity"] != "debug"]
    assert diags == [
        {"message": 'Error: resource, variable, or config value "nope" not found\n\n',
         "color": "never", "severity": "info#err"},
        {"message": f"  on Pulumi.yaml line {n}:\n\n", "color": "never", "severity": "info#err"},
        {"message": f"  {n}:       content: ${{nope.id}}\n\n", "color": "never",
         "severity": "info#err"}]
    assert cloud_files(si) == []                          # not even `note` ran
    summary = [e["summaryEvent"] for e in ev if "summaryEvent" in e][0]
    assert summary["result"] == "failed" and summary["resourceChanges"] == {"create": 1}
    # What a person sees: the language host colours its own text, even on a pipe.
    assert ("Diagnostics:\n  pulumi:pulumi:Stack (demo-dev):\n"
            '    \x1b[31mError\x1b[0m: resource, variable, or config value "nope" not found\n'
            f"      on Pulumi.yaml line {n}:\n"
            f"      {n}:       content: \x1b[1;4m${{nope.id}}\x1b[0m\n\n") in p.stdout
    assert re.search(r"^ \+  pulumi:pulumi:Stack demo-dev created \(\d\.\d\ds\) 3 messages$",
                     p.stdout, re.M)

    # After a good update the stack keeps its resources and outputs.
    write_program(si, PROGRAM)
    assert run(si, "up", "--yes", "--skip-preview", "--stack", "dev").returncode == 0
    write_program(si, UNKNOWN_IN_A_PROPERTY.replace("content: ${nope.id}", "content: ${v}")
                  .replace("outputs:\n", "variables:\n  v: ${nope.id}\noutputs:\n"))
    p = run(si, "up", "--yes", "--skip-preview", "--event-log", str(log), "--stack", "dev",
            env=DEBUG)
    assert p.returncode == 1
    summary = [e["summaryEvent"] for e in events(log) if "summaryEvent" in e][0]
    assert summary["resourceChanges"] == {"same": 1}      # the stack only; `note` untouched
    assert len(cloud_files(si)) == 1
    out = json.loads(run(si, "stack", "output", "--json", "--stack", "dev").stdout)
    assert out["message"] == "hello" and out["secretOut"] == "[secret]"

    # The driver: a failed update with no error diagnostic; its reason is the
    # language host's (coloured) Error line on stdout.
    d = Driver(si, os.path.join(pc_tools, "pl_driver"))
    d.work, spec = si.work, d.spec
    d.spec = lambda: dict(spec(), passphrase=PW)
    res = d.drive("up")
    assert (res["status"], res["exit_code"]) == ("failed", 1), res
    assert res["message"] == 'up: resource, variable, or config value "nope" not found', res


def test_missing_language_host(si, tmp_path):
    """A runtime without a language host (dotnet: one the CLI counts as bundled, so it
    never downloads it, and built on neither side)."""
    write_program(si, "name: demo\nruntime: dotnet\n")
    log = tmp_path / "ev"
    p = run(si, "preview", "--event-log", str(log), "--stack", "dev", env=DEBUG)
    assert p.returncode == 1
    assert p.stdout == "Previewing update (dev):\n"
    assert p.stderr == ("error: failed to load language plugin dotnet: no language plugin "
                        "'pulumi-language-dotnet' found in the workspace or on your $PATH\n")
    assert events(log) == [{"sequence": 0, "timestamp": events(log)[0]["timestamp"],
                            "cancelEvent": {}}]
    p = run(si, "up", "--yes", "--skip-preview", "--stack", "dev")
    assert p.returncode == 1 and p.stdout == "Updating (dev):\n"
    h = json.loads(run(si, "stack", "history", "--json", "--stack", "dev").stdout)
    assert len(h) == 1 and h[0]["result"] == "failed" and h[0]["resourceChanges"] == {}
    p = run(si, "install")
    assert p.returncode == 1 and p.stderr.startswith("error: load language plugin dotnet: ")


def test_mutations_need_yes_in_non_interactive_mode(si):
    # The same text; refresh exits 1, up and destroy 2.
    for cmd, code in (("up", 2), ("refresh", 1), ("destroy", 2)):
        p = run(si, "--non-interactive", cmd, "--stack", "dev")
        assert p.returncode == code, cmd
        assert p.stderr == ("error: --yes or --skip-preview or --preview-only must be passed in to "
                            "proceed when running in non-interactive mode\n"), cmd


def test_lock_layout_conflict_text_and_cancel(si, tmp_path):
    """A live holder: `up` hanging in its first resource step (the stand-in's knob,
    the real test provider's on the real CLI)."""
    pidfile = tmp_path / "pids"
    env = dict(si.env, PULUMI_STANDIN_HANG="up", PULUMI_STANDIN_PIDFILE=str(pidfile))
    proc = subprocess.Popen([si.binary, "up", "--yes", "--skip-preview", "--stack", "dev"],
                            cwd=str(si.work), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lock_dir = si.backend_dir / ".pulumi" / "locks" / "organization" / "demo" / "dev"
    try:
        wait_for(pidfile.exists, timeout=60, what="the hanging up")
        locks = [p for p in lock_dir.iterdir() if not p.name.endswith(".attrs")]
        assert len(locks) == 1
        assert re.fullmatch(r"[0-9a-f-]{36}\.json", locks[0].name)
        info = json.loads(locks[0].read_text())
        assert set(info) == {"pid", "username", "hostname", "timestamp"}
        assert info["pid"] == proc.pid
        p = run(si, "refresh", "--yes", "--stack", "dev")
        assert p.returncode == 1
        first, second = p.stderr.splitlines()
        assert first == ("error: the stack is currently locked by 1 lock(s). Either wait for the "
                         "other process(es) to end or delete the lock file with `pulumi cancel`.")
        assert re.fullmatch(
            rf"  {si.backend_url}/\.pulumi/locks/organization/demo/dev/"
            rf"{locks[0].name}\?no_tmp_dir=true: created by \S+@\S+ \(pid {info['pid']}\) at "
            r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", second)
        assert run(si, "preview", "--stack", "dev").returncode == 0     # preview takes no lock
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 1                     # a graceful cancel fails the update
        assert "^C received; cancelling." in out
        assert [p for p in lock_dir.iterdir() if not p.name.endswith(".attrs")] == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # A lock of a process that is gone: `cancel` removes it, non-interactive without --yes.
    for extra in (("--yes",), ("--non-interactive",)):
        locks[0].write_text(json.dumps(info))
        p = run(si, "cancel", *extra, "--stack", "dev")
        assert p.returncode == 0, p.stderr
        assert p.stdout == "The currently running update for 'dev' has been canceled!\n"
        assert [p for p in lock_dir.iterdir() if not p.name.endswith(".attrs")] == []


def test_update_writes_checkpoint_backup_history(si):
    p = run(si, "up", "--yes", "--stack", "dev")
    assert p.returncode == 0, p.stderr
    root = si.backend_dir / ".pulumi"
    raw = (root / "stacks" / "demo" / "dev.json").read_text()
    assert raw.startswith('{"version":3,"checkpoint":{') and "\n" not in raw   # compact
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
    assert re.fullmatch(r"dev\.\d+\.json", backups[0])
    assert re.search(r"^Duration: \d+s$", p.stdout, re.M) and "Permalink:" not in p.stdout


def test_stack_output_masked_and_shown(si):
    assert run(si, "stack", "output", "--json", "--stack", "dev").stdout == "{}\n"
    assert run(si, "up", "--yes", "--stack", "dev").returncode == 0
    masked = run(si, "stack", "output", "--json", "--stack", "dev",
                 env={"PULUMI_CONFIG_PASSPHRASE": "wrong"})     # no decryption needed
    assert masked.returncode == 0, masked.stderr
    assert json.loads(masked.stdout)["secretOut"] == "[secret]"
    assert masked.stdout.startswith('{\n  "message"')              # 2-space, sorted
    shown = run(si, "stack", "output", "--json", "--show-secrets", "--stack", "dev")
    assert json.loads(shown.stdout)["secretOut"] == "hunter2"
    bad = run(si, "stack", "output", "--json", "--show-secrets", "--stack", "dev",
              env={"PULUMI_CONFIG_PASSPHRASE": "wrong"})
    assert bad.returncode == 1 and bad.stderr == (
        "error: failed to decrypt: incorrect passphrase, please set PULUMI_CONFIG_PASSPHRASE to "
        "the correct passphrase or set PULUMI_CONFIG_PASSPHRASE_FILE to a file containing the "
        "passphrase\n")
    p = run(si, "stack", "output", "nope", "--stack", "dev")
    assert p.returncode == 1
    assert p.stderr == "error: current stack does not have output property 'nope'\n"


def log_files(p):
    """{name: (inode, size, mtime)} of $PULUMI_HOME/logs."""
    d = p.home / "logs"
    return {x.name: (x.stat().st_ino, x.stat().st_size, x.stat().st_mtime_ns)
            for x in d.iterdir()} if d.exists() else {}


def test_every_command_leaves_a_log_in_pulumi_home(si):
    """The CLI never removes them; PULUMI_HOME is shared by every stack, which is
    why the driver prunes the directory (test_pulumi_driver.py).  The number in the
    generic name is the CLI's pid."""
    stamp = r"\d{8}T\d{6}"
    steps = [(("config", "set", "--stack", "dev", "greeting", "yo"),
              rf"pulumi-{stamp}-\d+-config_set\.log"),
             (("up", "--yes", "--skip-preview", "--stack", "dev"),
              rf"organization\+demo\+dev-{stamp}\.log"),
             (("stack", "output", "--json", "--stack", "dev"),
              rf"pulumi-{stamp}-\d+-stack_output\.log"),
             (("version",), rf"pulumi-{stamp}-\d+-version\.log")]
    for args, pattern in steps:
        before = log_files(si)
        assert run(si, *args).returncode == 0
        # new, or appended to (a command in the same second as an earlier one of
        # the same name shares its file)
        written = sorted(n for n, st in log_files(si).items() if before.get(n) != st)
        assert len(written) == 1 and re.fullmatch(pattern, written[0]), (args, written)


def test_stack_history_shape_and_paging(si):
    assert run(si, "stack", "history", "--json", "--stack", "dev").stdout == "[]\n"
    for _ in range(3):
        assert run(si, "up", "--yes", "--skip-preview", "--stack", "dev").returncode == 0
    full = json.loads(run(si, "stack", "history", "--json", "--stack", "dev").stdout)
    assert len(full) == 3
    e = full[0]
    assert list(e) == ["version", "kind", "startTime", "message", "environment", "config",
                       "result", "endTime", "resourceChanges"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", e["startTime"])
    assert e["version"] == 0 and e["config"]["demo:password"] == {"secret": True}
    assert list(e["environment"]) == sorted(e["environment"])          # Go map order
    assert e["environment"]["stack.environments"] == "[]"
    assert [x["resourceChanges"] for x in full] == [{"same": 2}, {"same": 2}, {"create": 2}]
    page = json.loads(run(si, "stack", "history", "--json", "--page-size", "1", "--page", "2",
                          "--stack", "dev").stdout)
    assert len(page) == 1 and page[0]["startTime"] == full[1]["startTime"]
    shown = json.loads(run(si, "stack", "history", "--json", "--show-secrets", "--stack",
                           "dev").stdout)
    assert shown[0]["config"]["demo:password"]["value"] == "hunter2"
    bad = run(si, "stack", "history", "--json", "--show-secrets", "--stack", "dev",
              env={"PULUMI_CONFIG_PASSPHRASE": "wrong"})
    assert bad.returncode == 1 and bad.stderr == "error: decrypting secrets: incorrect passphrase\n"


def test_preview_json_digest(si):
    p = run(si, "preview", "--json", "--stack", "dev")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    # The real digest also carries the steps' sourcePosition/stackTrace, left out
    # by the stand-in on purpose (README): only the fields compared here.
    assert list(d) == ["config", "steps", "duration", "changeSummary"]
    assert isinstance(d["duration"], int) and d["changeSummary"] == {"create": 2}
    assert p.stdout.startswith('{\n    "')                       # 4-space indent
    assert d["config"]["demo:password"] == "[secret]"
    assert d["config"]["demo:greeting"] == "hello"               # a default
    # Each step as registered, the root stack first, before any outputs.
    ops = [(s["op"], s["urn"].rsplit("::", 1)[1]) for s in d["steps"]]
    assert ops == [("create", "demo-dev"), ("create", "note")]
    root, note = d["steps"]
    assert root["detailedDiff"] is None and root["newState"]["custom"] is False
    assert "outputs" not in root["newState"] and "provider" not in root
    assert note["newState"]["inputs"] == {"content": "hello"} and "outputs" not in note["newState"]
    assert note["provider"].startswith("urn:pulumi:dev::demo::pulumi:providers:standin::default::")
    assert note["newState"]["parent"] == root["urn"]
    assert "hunter2" not in p.stdout


def test_expect_no_changes_exit_code(si):
    p = run(si, "preview", "--expect-no-changes", "--stack", "dev")
    assert p.returncode == 7
    assert p.stderr == "error: no changes were expected for preview but changes were proposed\n"


def test_passphrase_crypto_matches_the_reference_vector(pulumi_cli):
    """The reference's computed example (PBKDF2-HMAC-SHA256, 1,000,000 rounds,
    AES-256-GCM): the stand-in with its real round count decrypts what the real
    CLI decrypts."""
    p = pulumi_cli
    p.work = p.workdir / "work"
    p.work.mkdir()
    write_program(p, "name: demo\nruntime: yaml\n")
    (p.work / "Pulumi.dev.yaml").write_text(
        "encryptionsalt: v1:AQIDBAUGBwg=:v1:AAECAwQFBgcICQoL:yX1+BiKJUW+guDZbiQRMUnobuD6cFg==\n"
        "config:\n  demo:password:\n    secure: v1:AQIDBAUGBwgJCgsM:IwVgbMOqTBUsDtDU+dZ6OCuyyKAw6lA=\n")
    p.env.update(PULUMI_BACKEND_URL=p.backend_url, PULUMI_CONFIG_PASSPHRASE="password")
    stacks = p.backend_dir / ".pulumi" / "stacks" / "demo"
    stacks.mkdir(parents=True)
    (stacks / "dev.json").write_text('{"version": 3, "checkpoint": {"stack": "organization/demo/dev"}}')
    r = run(p, "config", "--json", "--show-secrets", "--stack", "dev")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["demo:password"] == {"value": "hunter2", "secret": True}
    r = run(p, "config", "--json", "--show-secrets", "--stack", "dev",
            env={"PULUMI_CONFIG_PASSPHRASE": "wrong"})
    assert r.returncode == 1 and r.stderr == "error: incorrect passphrase\n"
    del p.env["PULUMI_CONFIG_PASSPHRASE"]
    r = run(p, "config", "--json", "--show-secrets", "--stack", "dev")
    assert r.returncode == 1
    assert r.stderr == ("error: passphrase must be set with PULUMI_CONFIG_PASSPHRASE or "
                        "PULUMI_CONFIG_PASSPHRASE_FILE environment variables\n")


def test_plan_divergence_fails_the_update(si, tmp_path):
    plan = tmp_path / "plan.json"
    assert run(si, "preview", "--save-plan", str(plan), "--stack", "dev").returncode == 0
    assert set(json.loads(plan.read_text())) >= {"manifest", "resourcePlans"}
    assert run(si, "config", "set", "greeting", "changed", "--stack", "dev").returncode == 0
    p = run(si, "up", "--yes", "--skip-preview", "--plan", str(plan), "--stack", "dev")
    assert p.returncode == 1 and p.stderr == ""
    # Planned as a create: the planned value and the new one.
    assert ("error: resource urn:pulumi:dev::demo::standin:index:File::note violates plan: "
            "properties changed: ++content[{hello}!={changed}]") in p.stdout
    assert cloud_files(si) == []
    # Planned as an update: both values too.
    write_program(si, PROGRAM.replace("  path: ${note.path}\n", ""))   # known at preview
    assert run(si, "up", "--yes", "--skip-preview", "--stack", "dev").returncode == 0
    assert run(si, "config", "set", "greeting", "second", "--stack", "dev").returncode == 0
    assert run(si, "preview", "--save-plan", str(plan), "--stack", "dev").returncode == 0
    assert run(si, "config", "set", "greeting", "third", "--stack", "dev").returncode == 0
    p = run(si, "up", "--yes", "--skip-preview", "--plan", str(plan), "--stack", "dev")
    assert p.returncode == 1 and p.stderr == ""
    assert ("error: resource urn:pulumi:dev::demo::standin:index:File::note violates plan: "
            "properties changed: ~~content[{second}!={third}]") in p.stdout
    assert [(si.cloud_dir / "files" / f).read_text() for f in cloud_files(si)] == ["changed"]


NON_STRING_OUTPUTS = PROGRAM.replace("outputs:\n", """\
outputs:
  num: 42
  flt: 1.5
  yes: true
  list: [a, 1, false]
  map:
    k: v
    n: 2
    nested:
      x: [1, 2]
  size: ${note.size}
  secretList:
    fn::secret: [1, 2]
  empty: []
  nul: null
""")

NON_STRING_DISPLAY = """\
Outputs:
    flt       : 1.5
    list      : [
        [0]: "a"
        [1]: 1
        [2]: false
    ]
    map       : {
        k     : "v"
        n     : 2
        nested: {
            x: [
                [0]: 1
                [1]: 2
            ]
        }
    }
    message   : "hello"
    num       : 42
    path      : "<PATH>"
    secretList: [secret]
    secretOut : [secret]
    size      : 5
    yes       : true

Resources:
"""


def test_non_string_outputs_and_the_preview_of_up(si, tmp_path):
    """Numbers, booleans, lists and maps in `Outputs:`, `stack output` and its
    --json; a null output is not kept, an empty list not shown; `yes` is a string
    key (YAML 1.2).  The preview `up --yes` prints first is not in --event-log."""
    write_program(si, NON_STRING_OUTPUTS)
    log = tmp_path / "ev"
    p = run(si, "up", "--yes", "--event-log", str(log), "--stack", "dev", env=DEBUG)
    assert p.returncode == 0, p.stdout + p.stderr
    preview, update = p.stdout.split("Updating (dev):")
    assert NON_STRING_DISPLAY.replace("    path      : \"<PATH>\"\n", "") in preview
    path = str(si.cloud_dir / "files" / cloud_files(si)[0])
    assert NON_STRING_DISPLAY.replace("<PATH>", path) in update
    ev = events(log)
    assert sum("preludeEvent" in e for e in ev) == 1
    assert [e["summaryEvent"]["isPreview"] for e in ev if "summaryEvent" in e] == [False]

    out = run(si, "stack", "output", "--json", "--stack", "dev").stdout
    assert json.loads(out) == {
        "empty": [], "flt": 1.5, "list": ["a", 1, False], "map": {"k": "v", "n": 2, "nested": {
            "x": [1, 2]}}, "message": "hello", "num": 42, "path": path,
        "secretList": "[secret]", "secretOut": "[secret]", "size": 5, "yes": True}
    assert '  "list": [\n    "a",\n    1,\n    false\n  ],\n' in out
    table = run(si, "stack", "output", "--stack", "dev").stdout
    assert table.startswith("Current stack outputs (11):\n    OUTPUT      VALUE\n    empty       []\n")
    assert '    map         {"k":"v","n":2,"nested":{"x":[1,2]}}\n' in table
    assert "    yes         true\n" in table
    assert run(si, "stack", "output", "list", "--stack", "dev").stdout == '["a",1,false]\n'
    assert run(si, "stack", "output", "num", "--stack", "dev").stdout == "42\n"
    assert run(si, "stack", "output", "--show-secrets", "secretList", "--stack",
               "dev").stdout == "[1,2]\n"


# -- stand-in only --------------------------------------------------------------------


def test_policy_pack_format(pulumi_world, tmp_path):
    """Stand-in only: its own policy-pack format; no policy runtime is built for
    the real CLI."""
    w = pulumi_world
    env = {"PULUMI_BACKEND_URL": f"file://{w.state}", "PULUMI_CONFIG_PASSPHRASE": PW}
    assert w.standin("stack", "init", "dev", env=env).returncode == 0
    assert w.standin("config", "set", "--secret", "password", input="x", env=env).returncode == 0
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "PulumiPolicy.yaml").write_text(
        "runtime: standin-policy\nname: p\nversion: 1.0.0\npolicies:\n"
        "  - name: hello-only\n    enforcementLevel: advisory\n"
        "    forbid: {type: standin:index:File, property: content, pattern: '^hel'}\n")
    log = tmp_path / "ev"
    p = w.standin("up", "--yes", "--policy-pack", str(pack), "--event-log", str(log), "--stack",
                  "dev", env=dict(env, **DEBUG))
    assert p.returncode == 0     # advisory only warns
    pol = [e["policyEvent"] for e in events(log) if "policyEvent" in e]
    assert pol and pol[0]["enforcementLevel"] == "advisory" and pol[0]["policyName"] == "hello-only"
    summary = [e["summaryEvent"] for e in events(log) if "summaryEvent" in e][0]
    assert summary["PolicyPacks"] == {"p": "1.0.0"}


def test_kdf_iterations_knob(pulumi_world):
    """Stand-in only: PULUMI_STANDIN_KDF_ITERATIONS, the speed knob the fast tests
    use, changes the key, so a value set with it needs it to be read back."""
    w = pulumi_world
    env = {"PULUMI_BACKEND_URL": f"file://{w.state}", "PULUMI_CONFIG_PASSPHRASE": PW,
           "PULUMI_STANDIN_KDF_ITERATIONS": "1000"}
    assert w.standin("stack", "init", "dev", env=env).returncode == 0
    assert w.standin("config", "set", "--secret", "password", input="x", env=env).returncode == 0
    p = w.standin("config", "get", "password", env=env)
    assert p.returncode == 0 and p.stdout == "x\n"
    p = w.standin("config", "get", "password", env=dict(env, PULUMI_STANDIN_KDF_ITERATIONS="2000"))
    assert p.returncode == 1 and p.stderr == "error: incorrect passphrase\n"
