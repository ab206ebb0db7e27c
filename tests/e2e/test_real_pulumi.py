"""Smoke tests of the REAL pulumi CLI (tests/e2e/real_fixtures.py): login to a
file:// backend, stack init, secret config from stdin, up with an event log,
masked and plain stack outputs, drift seen by refresh / preview --refresh, and a
lock conflict.  The program (tests/real/programs/files) runs on the Pulumi YAML
language host with the real standin provider, whose resources are files under
$PULUMI_STANDIN_CLOUD/files, as with the stand-in.

What these tests observe is recorded in docs/conformance.md ("Observed
behaviour of the real CLI") for the stand-in's author."""
import difflib
import json
import os
import pathlib
import re
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


# -- the human-readable output ---------------------------------------------------------

ROW = re.compile(r"^ (.{2}) (\S+:\S+) (\S+) ")
TICKER = re.compile(r"^@ [a-z ]+\.+$")


def normalize_display(text, p):
    """What legitimately varies between runs replaced by placeholders: durations,
    the provider's random id suffixes and the temporary directory.  Progress rows
    are grouped by resource (type, name), each resource's rows kept in their
    order, the root stack's sorted: the real engine runs independent steps in
    parallel, so rows of different resources interleave differently from run to
    run, and the stack's empty-status row lands anywhere among its own (seen
    between `deleting` and `deleted`)."""
    text = text.replace(str(p.workdir), "<TMP>")
    text = re.sub(r"\b(motd|note)-[0-9a-f]{8}\b", r"\1-<ID>", text)
    text = re.sub(r"\(\d+s\)", "(<T>s)", text)
    text = re.sub(r"\(\d+\.\d\ds\)", "(<T.TT>s)", text)
    text = re.sub(r"^Duration: \d+s$", "Duration: <T>s", text, flags=re.M)
    # The ticker would split a resource's rows into two groups (timing_free).
    lines = [line for line in text.split("\n") if not TICKER.match(line)]
    block, result = [], []

    def flush():
        def key(i):
            typ, name = ROW.match(block[i]).group(2, 3)
            return (typ, name, block[i] if typ == "pulumi:pulumi:Stack" else "", i)
        result.extend(block[i] for i in sorted(range(len(block)), key=key))
        block.clear()

    for line in lines:
        if ROW.match(line):
            block.append(line)
        else:
            flush()
            result.append(line)
    flush()
    # Rows end in a space (an empty column); "|" makes that visible in the expected text.
    return "\n".join(line + "|" if line.endswith(" ") else line for line in result)


def drift_note(p):
    note = next(f for f in (p.cloud_dir / "files").iterdir() if f.name.startswith("note-"))
    note.write_text("drifted")


def edit_program(old, new):
    def edit(p):
        path = p.work / "Pulumi.yaml"
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new))
    return edit


def settle_refresh(text):
    """The real v3.274.1's refresh display races with the root stack's events: one
    run in several repeats the root's empty-status row and ends before the
    `Outputs:` block (seen in CI).  Both are dropped, so the comparison holds the
    rest of a refresh to the same expected text on both CLIs."""
    out, skipping = [], False
    for line in text.split("\n"):
        if line == "Outputs:":
            skipping = True
        if skipping:
            skipping = line != ""
            continue
        if out and line == out[-1] and line.startswith("    pulumi:pulumi:Stack ") \
                and line.endswith(" |"):
            continue
        out.append(line)
    return "\n".join(out)


def run_display(p, steps):
    """Runs each step (argv, or a callable that changes the world) non-interactive
    as the driver does, colour off because stdout is a pipe (the driver passes no
    --color); returns the normalized stdout and stderr of each CLI step."""
    seen = []
    for step in steps:
        if callable(step):
            step(p)
            continue
        out = p.run("--non-interactive", *step, cwd=p.work)
        assert out.returncode == 0, (step, out.stdout, out.stderr)
        if step[0] == "config":
            continue
        stdout = normalize_display(out.stdout, p)
        if step[0] == "refresh":
            stdout = settle_refresh(stdout)
        seen.append(normalize_display(f"$ pulumi {' '.join(step)}\n", p)
                    + stdout + "--- stderr\n" + normalize_display(out.stderr, p))
    return "\n".join(seen) + "\n"


def display_scenario(p):
    """preview, up --yes (its preview first), an unchanged up, a config change,
    refresh --yes after drift, preview --save-plan, destroy --yes."""
    return run_display(p, [
        ("preview",), ("up", "--yes"), ("up", "--yes", "--skip-preview"),
        ("config", "set", "greeting", "hi"), ("up", "--yes", "--skip-preview"),
        drift_note, ("refresh", "--yes"), ("preview", f"--save-plan={p.workdir / 'plan.json'}"),
        ("destroy", "--yes")])


# Observed on pulumi v3.274.1 (pulumi-language-yaml v1.25.0, the real standin
# provider), normalized by normalize_display.
EXPECTED_DISPLAY = """\
$ pulumi preview
Previewing update (dev):

 +  pulumi:pulumi:Stack realfiles-dev create |
 +  pulumi:pulumi:Stack realfiles-dev create |
 +  standin:index:File motd create |
 +  standin:index:File note create |
Outputs:
    message    : "hello"
    noteContent: "fixed note"
    secretOut  : [secret]

Resources:
    + 3 to create

--- stderr

$ pulumi up --yes
Previewing update (dev):

 +  pulumi:pulumi:Stack realfiles-dev create |
 +  pulumi:pulumi:Stack realfiles-dev create |
 +  standin:index:File motd create |
 +  standin:index:File note create |
Outputs:
    message    : "hello"
    noteContent: "fixed note"
    secretOut  : [secret]

Resources:
    + 3 to create

Updating (dev):

 +  pulumi:pulumi:Stack realfiles-dev created (<T.TT>s) |
 +  pulumi:pulumi:Stack realfiles-dev creating (<T>s) |
 +  standin:index:File motd creating (<T>s) |
 +  standin:index:File motd created (<T.TT>s) |
 +  standin:index:File note creating (<T>s) |
 +  standin:index:File note created (<T.TT>s) |
Outputs:
    message    : "hello"
    motdPath   : "<TMP>/cloud/files/motd-<ID>"
    noteContent: "fixed note"
    secretOut  : [secret]

Resources:
    + 3 created

Duration: <T>s

--- stderr

$ pulumi up --yes --skip-preview
Updating (dev):

    pulumi:pulumi:Stack realfiles-dev  |
Outputs:
    message    : "hello"
    motdPath   : "<TMP>/cloud/files/motd-<ID>"
    noteContent: "fixed note"
    secretOut  : [secret]

Resources:
    3 unchanged

Duration: <T>s

--- stderr

$ pulumi up --yes --skip-preview
Updating (dev):

    pulumi:pulumi:Stack realfiles-dev  |
 ~  standin:index:File motd updating (<T>s) [diff: ~content]
 ~  standin:index:File motd updated (<T.TT>s) [diff: ~content]
Outputs:
  ~ message    : "hello" => "hi"
    motdPath   : "<TMP>/cloud/files/motd-<ID>"
    noteContent: "fixed note"
    secretOut  : [secret]

Resources:
    ~ 1 updated
    2 unchanged

Duration: <T>s

--- stderr

$ pulumi refresh --yes
Previewing refresh (dev):

    pulumi:pulumi:Stack realfiles-dev  |
    pulumi:pulumi:Stack realfiles-dev running |
 ~  pulumi:pulumi:Stack realfiles-dev refreshing |
 ~  standin:index:File motd refreshing |
    standin:index:File motd  |
 ~  standin:index:File note refreshing |
 ~  standin:index:File note update [diff: ~content]
Resources:
    ~ 1 to update
    2 unchanged

Refreshing (dev):

    pulumi:pulumi:Stack realfiles-dev  |
    pulumi:pulumi:Stack realfiles-dev running |
 ~  pulumi:pulumi:Stack realfiles-dev refreshing (<T>s) |
 ~  standin:index:File motd refreshing (<T>s) |
    standin:index:File motd  |
 ~  standin:index:File note refreshing (<T>s) |
 ~  standin:index:File note updated (<T.TT>s) [diff: ~content]
Resources:
    ~ 1 updated
    2 unchanged

Duration: <T>s

--- stderr

$ pulumi preview --save-plan=<TMP>/plan.json
Previewing update (dev):

    pulumi:pulumi:Stack realfiles-dev  |
 ~  standin:index:File note update [diff: ~content]
Resources:
    ~ 1 to update
    2 unchanged

--- stderr
Update plan written to '<TMP>/plan.json'
Run `pulumi up --plan='<TMP>/plan.json'` to constrain the update to the operations planned by this preview

$ pulumi destroy --yes
Previewing destroy (dev):

    pulumi:pulumi:Stack realfiles-dev  |
 -  pulumi:pulumi:Stack realfiles-dev delete |
 -  pulumi:pulumi:Stack realfiles-dev delete |
 -  standin:index:File motd delete |
 -  standin:index:File note delete |
Resources:
    - 3 to delete

Destroying (dev):

    pulumi:pulumi:Stack realfiles-dev  |
 -  pulumi:pulumi:Stack realfiles-dev deleted (<T.TT>s) |
 -  pulumi:pulumi:Stack realfiles-dev deleting (<T>s) |
 -  standin:index:File motd deleting (<T>s) |
 -  standin:index:File motd deleted (<T.TT>s) |
 -  standin:index:File note deleting (<T>s) |
 -  standin:index:File note deleted (<T.TT>s) |
Resources:
    - 3 deleted

Duration: <T>s

The resources in the stack have been deleted, but the history and configuration associated with the stack are still maintained. |
If you want to remove the stack completely, run `pulumi stack rm dev`.
--- stderr

"""


def test_human_output(stack):
    """The text a person (or a log) sees for each operation: the same rows,
    blocks and order on both CLIs, up to normalize_display's placeholders."""
    assert_display(display_scenario(stack), EXPECTED_DISPLAY, stack.kind)


def replace_scenario(p):
    """A replacement (the note's `name` changes), a resource dropped from the
    program with its output, --suppress-outputs, destroy --preview-only."""
    drop_motd = edit_program("  motd:\n    type: standin:index:File\n    properties:\n"
                             "      content: ${greeting}\n", "")
    return run_display(p, [
        ("up", "--yes", "--skip-preview", "--suppress-outputs"),
        edit_program("name: note", "name: note2"), ("preview",),
        ("up", "--yes", "--skip-preview"),
        drop_motd, edit_program("  motdPath: ${motd.path}\n", ""), ("preview",),
        ("up", "--yes", "--skip-preview"), ("destroy", "--preview-only")])


EXPECTED_REPLACE_DISPLAY = """\
$ pulumi up --yes --skip-preview --suppress-outputs
Updating (dev):

 +  pulumi:pulumi:Stack realfiles-dev created (<T.TT>s) |
 +  pulumi:pulumi:Stack realfiles-dev creating (<T>s) |
 +  standin:index:File motd creating (<T>s) |
 +  standin:index:File motd created (<T.TT>s) |
 +  standin:index:File note creating (<T>s) |
 +  standin:index:File note created (<T.TT>s) |
Resources:
    + 3 created

Duration: <T>s

--- stderr

$ pulumi preview
Previewing update (dev):

    pulumi:pulumi:Stack realfiles-dev  |
 ++ standin:index:File note create replacement [diff: ~name]
 +- standin:index:File note replace [diff: ~name]
 -- standin:index:File note delete original [diff: ~name]
Resources:
    +-1 to replace
    2 unchanged

--- stderr

$ pulumi up --yes --skip-preview
Updating (dev):

    pulumi:pulumi:Stack realfiles-dev  |
 ++ standin:index:File note creating replacement (<T>s) [diff: ~name]
 ++ standin:index:File note created replacement (<T.TT>s) [diff: ~name]
 +- standin:index:File note replacing (<T>s) [diff: ~name]
 +- standin:index:File note replaced (<T.TT>s) [diff: ~name]
 -- standin:index:File note deleting original (<T>s) [diff: ~name]
 -- standin:index:File note deleted original (<T.TT>s) [diff: ~name]
Outputs:
    message    : "hello"
    motdPath   : "<TMP>/cloud/files/motd-<ID>"
    noteContent: "fixed note"
    secretOut  : [secret]

Resources:
    +-1 replaced
    2 unchanged

Duration: <T>s

--- stderr

$ pulumi preview
Previewing update (dev):

    pulumi:pulumi:Stack realfiles-dev  |
 -  standin:index:File motd delete |
Outputs:
  - motdPath   : "<TMP>/cloud/files/motd-<ID>"

Resources:
    - 1 to delete
    2 unchanged

--- stderr

$ pulumi up --yes --skip-preview
Updating (dev):

    pulumi:pulumi:Stack realfiles-dev  |
 -  standin:index:File motd deleting (<T>s) |
 -  standin:index:File motd deleted (<T.TT>s) |
Outputs:
    message    : "hello"
  - motdPath   : "<TMP>/cloud/files/motd-<ID>"
    noteContent: "fixed note"
    secretOut  : [secret]

Resources:
    - 1 deleted
    2 unchanged

Duration: <T>s

--- stderr

$ pulumi destroy --preview-only
Previewing destroy (dev):

    pulumi:pulumi:Stack realfiles-dev  |
 -  pulumi:pulumi:Stack realfiles-dev delete |
 -  pulumi:pulumi:Stack realfiles-dev delete |
 -  standin:index:File note delete |
Resources:
    - 2 to delete

--- stderr

"""


STACK_IDLE_ROW = re.compile(r"^    pulumi:pulumi:Stack \S+  \|$")


def timing_free(text):
    """What depends on how fast the machine runs, removed from both sides: the real
    CLI's ticker (`@ updating....`, printed while an operation takes longer than a
    refresh tick), the root stack's empty-status rows (printed on a tick), and the
    duration's form (`(0.52s)` below a second, `(1s)` above, seen on a loaded CI
    machine).  Every step, resource row and summary line is still compared."""
    out = []
    for line in text.split("\n"):
        if TICKER.match(line) or STACK_IDLE_ROW.match(line):
            continue
        out.append(line.replace("(<T.TT>s)", "(<T>)").replace("(<T>s)", "(<T>)"))
    return "\n".join(out)


def assert_display(seen, expected, kind):
    seen, expected = timing_free(seen), timing_free(expected)
    diff = "".join(difflib.unified_diff(expected.splitlines(True), seen.splitlines(True),
                                        "expected", kind))
    assert seen == expected, diff


def test_human_output_of_replace_and_delete(stack):
    assert_display(replace_scenario(stack), EXPECTED_REPLACE_DISPLAY, stack.kind)
