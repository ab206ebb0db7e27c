"""The pulumi driver against both CLIs: the same scenario, the same assertions,
once with the stand-in and once with the real pulumi built by `make deps-real`
(fixture `pulumi_cli` from real_fixtures.py).  Where the two disagree the
real CLI is right, and the stand-in (tests/e2e/pulumi_standin/) must follow."""
import json
import os
import subprocess

import pytest

from pulumi_fixtures import ONE_FILE_PROGRAM

PASSPHRASE = "pp-Conformance-3"
PASSWORD = "pw-Conformance-5"

# The driver tests' one-file program with `password` declared in the project.
PROGRAM = ONE_FILE_PROGRAM.replace("resources:", "  password:\n    type: string\nresources:", 1)


class Driver:
    def __init__(self, cli, tool):
        self.cli = cli
        self.tool = tool
        self.work = cli.workdir / "prog"
        self.work.mkdir()
        (self.work / "Pulumi.yaml").write_text(PROGRAM)
        self.config = [{"key": "greeting", "value": "hi"},
                       {"key": "password", "value": PASSWORD, "secret": True},
                       {"key": "old", "value": "soon-gone"}]

    def spec(self):
        env = [{"name": "PULUMI_STANDIN_CLOUD", "value": str(self.cli.cloud_dir)}]
        if self.cli.kind == "standin":
            env.append({"name": "PULUMI_STANDIN_KDF_ITERATIONS", "value": "1000"})
        return {"pulumi_bin": self.cli.binary, "pulumi_home": str(self.cli.home),
                "workdir": str(self.work), "scratch_dir": str(self.cli.workdir / "scratch"),
                "stack": "dev", "backend_url": self.cli.backend_url,
                "secrets_provider": "passphrase", "passphrase": PASSPHRASE, "env": env,
                "config": self.config, "timeout_ms": 120000}

    def drive(self, op, *flags):
        p = subprocess.run([self.tool, "--spec", "-", op, *flags], input=json.dumps(self.spec()),
                           capture_output=True, text=True, timeout=300)
        assert p.returncode in (0, 1), p.stderr
        return json.loads(p.stdout)

    def ok(self, op, *flags):
        res = self.drive(op, *flags)
        assert res["status"] == "ok", (self.cli.kind, op, res, res.get("stdout_tail"),
                                   res.get("stderr_tail"))
        return res

    def files(self):
        d = self.cli.cloud_dir / "files"
        return sorted(p for p in d.iterdir() if not p.name.endswith(".attrs")) if d.exists() else []


@pytest.fixture
def driver(pulumi_cli, pc_tools):
    tool = os.path.join(pc_tools, "pl_driver")
    if not os.access(tool, os.X_OK):
        pytest.fail(f"{tool} is not built; run 'make sanitize' first")
    return Driver(pulumi_cli, tool)


def test_driver_lifecycle_on_both_clis(driver):
    d = driver
    assert d.ok("ensure")["message"] == "stack init: succeeded"
    assert d.ok("ensure")["message"] == "stack select: succeeded"
    d.ok("config")
    d.config = d.config[:2]
    d.ok("config")
    settings = (d.work / "Pulumi.dev.yaml").read_text()
    assert "demo:old" not in settings and "demo:greeting: hi" in settings
    assert PASSWORD not in settings

    res = d.ok("up")
    assert res["summary"]["changes"] == {"create": 2}
    assert res["summary"]["result"] == "succeeded" and res["summary"]["count"] == 1
    assert res["steps"] == 3                       # root stack, default provider, file
    assert len(d.files()) == 1 and d.files()[0].read_text() == "hi"

    res = d.ok("outputs", "--show-secrets")
    assert res["outputs"]["secretOut"] == "[secret]" and res["outputs"]["message"] == "hi"
    assert res["outputs_plain"]["secretOut"] == PASSWORD
    h = d.ok("history")["history"]
    assert (h["kind"], h["result"], h["resourceChanges"]) == ("update", "succeeded", {"create": 2})
    assert h["config"]["demo:password"] == {"secret": True}

    d.files()[0].write_text("drifted")
    res = d.drive("refresh", "--preview-only", "--expect-no-changes")
    assert res["status"] == "changes-not-expected" and res["exit_code"] == 7
    assert res["summary"]["changes"] == {"same": 1, "update": 1}
    res = d.ok("up", "--refresh")
    assert res["summary"]["changes"] == {"same": 1, "update": 1}
    assert d.files()[0].read_text() == "hi"

    res = d.ok("destroy")
    assert res["summary"]["changes"] == {"delete": 2}
    assert d.files() == []


def test_driver_failures_on_both_clis(driver):
    d = driver
    d.ok("ensure")
    d.ok("config")
    (d.work / "Pulumi.yaml").write_text(PROGRAM + "  broken: ${nope.id}\n")
    res = d.drive("up")
    assert res["status"] == "program-error"
    assert res["message"] == 'up: resource or variable named "nope" could not be found'
    assert len(d.files()) == 1                     # the rest of the program ran

    # A lock left by a CLI that died: classified, holder parsed, cancelled on request.
    lock_dir = d.cli.backend_dir / ".pulumi" / "locks" / "organization" / "demo" / "dev"
    lock_dir.mkdir(parents=True, exist_ok=True)
    (lock_dir / "bf4d21ea-53b0-42c4-b03d-a6c88daad481.json").write_text(json.dumps(
        {"pid": 4242, "username": "ops", "hostname": "gone-pod",
         "timestamp": "2024-05-01T12:00:00.123456789Z"}))
    res = d.drive("up")
    assert res["status"] == "conflict"
    assert res["lock"] == {"owner": "ops@gone-pod", "pid": 4242, "created": "2024-05-01T12:00:00Z"}
    d.ok("cancel")
    assert [p for p in lock_dir.iterdir()] == []

    (d.work / "Pulumi.yaml").write_text(PROGRAM.replace("runtime: yaml", "runtime: dotnet"))
    res = d.drive("preview")
    assert res["status"] == "cli-missing"
    assert "no language plugin 'pulumi-language-dotnet'" in res["message"]


def test_driver_plans_reruns_and_failed_resources_on_both_clis(driver, tmp_path):
    """Scenarios of test_pulumi_driver.py that need no stand-in knob: a missing stack,
    saved plans (one the real CLI cannot apply), an unchanged second up, a plan
    diverged from, a preview-only destroy, and a resource the provider fails with a
    secret in its message."""
    d = driver
    res = d.drive("preview")
    assert res["status"] == "not-found"
    assert "no stack named 'dev' found" in res["message"]

    d.ok("ensure")
    d.ok("config")
    # A stack output unknown at preview time (${note.path}, on a create): the real v3.274.1
    # applies the resources, then fails registering the stack's outputs against the
    # plan, with no diagnostic at all (exit 1, result "failed").
    plan2 = tmp_path / "plan2.json"
    d.ok("preview", "--plan", str(plan2))
    res = d.drive("up", "--plan", str(plan2))
    assert (res["status"], res["exit_code"]) == ("failed", 1), res
    assert res["summary"]["result"] == "failed" and res["summary"]["changes"] == {
        "create": 2}, res["summary"]
    assert d.files()[0].read_text() == "hi"          # the resources were applied
    assert d.ok("outputs")["outputs"] == {}          # the stack kept no outputs

    # With every stack output known at preview time, a plan applies, then binds.
    (d.work / "Pulumi.yaml").write_text(PROGRAM.replace("  path: ${note.path}\n", ""))
    plan = tmp_path / "plan.json"
    d.ok("preview", "--plan", str(plan))
    assert "resourcePlans" in json.loads(plan.read_text())
    d.ok("up", "--plan", str(plan))
    assert len(d.files()) == 1 and d.files()[0].read_text() == "hi"
    res = d.ok("up")
    assert res["summary"]["changes"] == {"same": 2}
    d.config = [{"key": "greeting", "value": "changed"}] + d.config[1:]
    d.ok("config")
    res = d.drive("up", "--plan", str(plan))
    assert res["status"] == "plan-violation", res
    assert d.files()[0].read_text() == "hi"          # stopped before the diverging resource

    res = d.ok("destroy", "--preview-only")
    assert res["summary"]["is_preview"] and len(d.files()) == 1

    # A resource whose failure message echoes a secret config value.
    (d.work / "Pulumi.yaml").write_text(PROGRAM.replace("outputs:\n", """\
  bad:
    type: standin:index:File
    properties:
      name: ${password}/x
      content: x
outputs:
"""))
    res = d.drive("up")
    assert res["status"] == "failed" and res["failed_steps"] == 1, res
    assert "[secret]" in res["message"] and "invalid file name" in res["message"]
    for text in (res["message"], res["stdout_tail"], res["stderr_tail"]):
        assert PASSWORD not in text and PASSPHRASE not in text
