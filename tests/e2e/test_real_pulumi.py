"""Smoke tests of the REAL pulumi CLI (tests/e2e/real_fixtures.py): login to a
file:// backend, stack init, secret config from stdin, up with an event log,
masked and plain stack outputs, drift seen by refresh / preview --refresh, and a
lock conflict.  The program (tests/real/programs/files) runs on the Pulumi YAML
language host with the real standin provider, whose resources are files under
$PULUMI_STANDIN_CLOUD/files, as with the stand-in.

What these tests observe is recorded in docs/conformance.md ("Observed
behaviour of the real CLI") for the stand-in's author."""
import json
import os
import pathlib
import socket
import uuid

import pytest

from real_fixtures import VERSIONS

PASSPHRASE = "real-Passphrase-17"
SECRET = "s3cr3t-Real-42"
PROJECT = "realfiles"


@pytest.fixture
def stack(pulumi_cli):
    """Backend chosen by PULUMI_BACKEND_URL (as the driver does), stack 'dev'
    created, config set; once with the stand-in, once with the real CLI."""
    p = pulumi_cli
    p.env["PULUMI_CONFIG_PASSPHRASE"] = PASSPHRASE
    p.env["PULUMI_BACKEND_URL"] = p.backend_url
    p.work = p.program("files")
    p.run("stack", "init", "dev", cwd=p.work, check=True)
    p.run("config", "set", "--secret", "password", cwd=p.work, input=SECRET, check=True)
    return p


def up(p, *extra, env=None):
    return p.run("up", "--yes", "--skip-preview", *extra, cwd=p.work, env=env)


def cloud_files(p):
    d = p.cloud_dir / "files"
    return sorted(x.name for x in d.iterdir()) if d.is_dir() else []


def test_version(pulumi_cli):
    out = pulumi_cli.run("version")
    assert out.returncode == 0, out.stderr
    assert out.stdout == VERSIONS["PULUMI_VERSION"] + "\n"


def test_login(real_pulumi):
    """`pulumi login` (the real CLI only: the driver and the stand-in use
    PULUMI_BACKEND_URL instead)."""
    p = real_pulumi
    work = p.program("files")
    out = p.run("login", p.backend_url)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"Logged in to {socket.gethostname()} as ")
    assert out.stdout.rstrip().endswith(f"({p.backend_url})")
    creds = json.loads((p.home / "credentials.json").read_text())
    assert creds["current"] == p.backend_url
    assert (p.backend_dir / ".pulumi" / "meta.yaml").read_text() == "version: 1\n"
    # The stored login is what later commands use.
    p.env["PULUMI_CONFIG_PASSPHRASE"] = PASSPHRASE
    p.run("stack", "init", "dev", cwd=work, check=True)
    assert (p.backend_dir / ".pulumi" / "stacks" / PROJECT / "dev.json").is_file()

    # A missing backend directory is refused.
    missing = "file://" + str(p.workdir / "absent")
    out = p.run("login", missing)
    assert out.returncode == 1
    assert out.stderr == (f'error: could not log in to the state backend "{missing}": '
                          "no such file or directory\n")


def test_init_select(pulumi_cli):
    p = pulumi_cli
    work = p.program("files")
    p.env["PULUMI_BACKEND_URL"] = p.backend_url
    p.env["PULUMI_CONFIG_PASSPHRASE"] = PASSPHRASE
    out = p.run("stack", "init", "dev", cwd=work)
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""
    assert out.stderr == "Created stack 'dev'\n"
    conf = (work / "Pulumi.dev.yaml").read_text()
    assert conf.startswith("encryptionsalt: v1:")

    out = p.run("stack", "init", "dev", cwd=work)
    assert out.returncode == 1
    assert out.stderr == f"error: stack 'organization/{PROJECT}/dev' already exists\n"

    out = p.run("stack", "select", "--stack", "nope", cwd=work)
    assert out.returncode == 6
    assert out.stderr == "error: no stack named 'nope' found\n"


def test_config_secret_from_stdin(stack):
    p = stack
    conf = (p.work / "Pulumi.dev.yaml").read_text()
    assert f"{PROJECT}:password:\n    secure: v1:" in conf
    assert SECRET not in conf
    out = p.run("config", "get", "password", cwd=p.work)
    assert out.returncode == 0, out.stderr
    assert out.stdout == SECRET + "\n"
    # A trailing newline on stdin is not part of the value.
    p.run("config", "set", "--secret", "nl", cwd=p.work, input="with-newline\n", check=True)
    out = p.run("config", "--json", cwd=p.work)
    cfg = json.loads(out.stdout)
    assert cfg[f"{PROJECT}:password"] == {"secret": True}
    shown = json.loads(p.run("config", "--json", "--show-secrets", cwd=p.work).stdout)
    assert shown[f"{PROJECT}:nl"]["value"] == "with-newline"
    assert shown[f"{PROJECT}:password"]["value"] == SECRET


def test_up_event_log_and_outputs(stack):
    p = stack
    log = p.workdir / "events.jsonl"
    out = up(p, "--event-log", str(log), env={"PULUMI_DEBUG_COMMANDS": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert SECRET not in out.stdout + out.stderr
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["sequence"] for e in events] == list(range(len(events)))
    kinds = [next(k for k in e if k not in ("sequence", "timestamp")) for e in events]
    assert kinds[0] == "preludeEvent"
    assert kinds.count("summaryEvent") == 1
    assert kinds[-1] == "cancelEvent"
    summary = next(e["summaryEvent"] for e in events if "summaryEvent" in e)
    assert summary["resourceChanges"] == {"create": 3}
    assert SECRET not in log.read_text()

    files = cloud_files(p)
    assert len(files) == 2 and any(f.startswith("note-") for f in files) \
        and any(f.startswith("motd-") for f in files)

    masked = json.loads(p.run("stack", "output", "--json", cwd=p.work, check=True).stdout)
    assert masked["secretOut"] == "[secret]"
    assert masked["message"] == "hello"
    assert masked["noteContent"] == "fixed note"
    plain = json.loads(p.run("stack", "output", "--json", "--show-secrets", cwd=p.work,
                             check=True).stdout)
    assert plain["secretOut"] == SECRET

    # No changes the second time.
    out = p.run("preview", "--expect-no-changes", cwd=p.work)
    assert out.returncode == 0, out.stdout + out.stderr


def test_event_log_needs_debug_commands(stack):
    p = stack
    out = up(p, "--event-log", str(p.workdir / "e.jsonl"))
    assert out.returncode == 1
    assert out.stderr == "error: unknown flag: --event-log\n"
    assert not (p.workdir / "e.jsonl").exists()


def test_drift_seen_by_refresh(stack):
    p = stack
    assert up(p).returncode == 0
    note = next(f for f in (p.cloud_dir / "files").iterdir() if f.name.startswith("note-"))
    note.write_text("drifted")

    # A preview without refresh trusts the state: no changes.
    out = p.run("preview", "--expect-no-changes", cwd=p.work)
    assert out.returncode == 0, out.stdout + out.stderr
    # With --refresh it reads the file and proposes to put the content back.
    out = p.run("preview", "--refresh", "--expect-no-changes", cwd=p.work)
    assert out.returncode == 7, out.stdout + out.stderr
    assert "no changes were expected" in out.stderr

    out = p.run("refresh", "--yes", cwd=p.work)
    assert out.returncode == 0, out.stdout + out.stderr
    state = json.loads((p.backend_dir / ".pulumi" / "stacks" / PROJECT / "dev.json").read_text())
    res = next(r for r in state["checkpoint"]["latest"]["resources"]
               if r.get("id", "").startswith("note-"))
    assert res["outputs"]["content"] == "drifted"

    assert up(p).returncode == 0
    assert note.read_text() == "fixed note"

    # A deleted file is a deleted resource for refresh; up creates it again.
    note.unlink()
    out = p.run("refresh", "--yes", cwd=p.work)
    assert out.returncode == 0, out.stdout + out.stderr
    assert up(p).returncode == 0
    assert sum(f.startswith("note-") for f in cloud_files(p)) == 1


def test_lock_conflict(stack):
    p = stack
    lock_dir = p.backend_dir / ".pulumi" / "locks" / "organization" / PROJECT / "dev"
    lock_dir.mkdir(parents=True, exist_ok=True)
    lock = lock_dir / f"{uuid.uuid4()}.json"
    lock.write_text(json.dumps({"pid": 4242, "username": "someone", "hostname": "elsewhere",
                                "timestamp": "2026-01-02T03:04:05.123456789Z"}))
    out = up(p)
    assert out.returncode == 1, out.stdout + out.stderr
    # The lock's URL carries the backend's internal "?no_tmp_dir=true" after the file
    # name, and the time is RFC 3339 in seconds.
    assert out.stderr == (
        "error: the stack is currently locked by 1 lock(s). Either wait for the other "
        "process(es) to end or delete the lock file with `pulumi cancel`.\n"
        f"  {p.backend_url}/.pulumi/locks/organization/{PROJECT}/dev/{lock.name}"
        "?no_tmp_dir=true: created by someone@elsewhere (pid 4242) at 2026-01-02T03:04:05Z\n")
    out = p.run("cancel", "--yes", cwd=p.work)
    assert out.returncode == 0, out.stdout + out.stderr
    assert not lock.exists()
    assert up(p).returncode == 0
    assert not any(lock_dir.iterdir())
