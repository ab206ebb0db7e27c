"""Fixtures for the pulumi driver tests: a workspace with a Pulumi YAML
program, a file:// backend, a simulated cloud, and two ways to drive a
pulumi CLI: through the driver's test tool (build/asan/tools/pl_driver) or
directly (the stand-in only).

    pulumi_world      the stand-in CLI (tests/e2e/pulumi_standin/pulumi)
    any_pulumi_world  parametrized ["standin", "real"]: the same world around the
                      stand-in or the real pulumi CLI built by `make deps-real`
                      (real_fixtures.RealPulumi: its binary, a PULUMI_HOME holding
                      the test provider pulumi-resource-standin); .kind says which

Both CLIs keep the simulated cloud's files under $PULUMI_STANDIN_CLOUD/files and
honour the fault knobs PULUMI_STANDIN_SLOW_MS / HANG / HANG_STUBBORN / PIDFILE /
CRASH (the real CLI through its test provider, tests/real/pulumi/standin/main.go).
Only the stand-in records every invocation (argv and environment names) in a
file, which the tests read to check what the driver sent.
"""
import json
import os
import pathlib
import signal
import subprocess

import pytest

STANDIN = pathlib.Path(__file__).resolve().parent / "pulumi_standin" / "pulumi"

# Secret values used by the tests; none may ever show up in argv, logs or messages.
PASSPHRASE = "pp-Correct-Horse-41"
DB_PASSWORD = "s3cret-Db-Pw-93"
API_TOKEN = "tok-Env-Secret-77"

ONE_FILE_PROGRAM = """\
name: demo
runtime: yaml
config:
  greeting:
    type: string
    default: hello
resources:
  note:
    type: standin:index:File
    properties:
      content: ${greeting}
outputs:
  message: ${greeting}
  path: ${note.path}
  secretOut:
    fn::secret: ${password}
"""


class PulumiWorld:
    """One stack's world: directories, the driver spec, helpers."""

    def __init__(self, root, tools, kind="standin"):
        self.root = root
        self.kind = kind
        self.tool = os.path.join(tools, "pl_driver")
        self.work = root / "work"
        self.scratch = root / "scratch"
        self.work.mkdir()
        if kind == "standin":
            self.binary = str(STANDIN)
            self.state = root / "state"
            self.cloud = root / "cloud"
            self.home = root / "home"
            for d in (self.state, self.cloud, self.home):
                d.mkdir()
        else:
            # Imported here: conftest registers real_fixtures after this module,
            # and an early import would keep pytest from rewriting its asserts.
            from real_fixtures import RealPulumi
            cli = RealPulumi(root / "real", kind=kind)
            self.binary = cli.binary
            self.state, self.cloud, self.home = cli.backend_dir, cli.cloud_dir, cli.home
        self.record = self.home / "standin-record.jsonl"
        self.config = [
            {"key": "greeting", "value": "hi"},
            {"key": "password", "value": DB_PASSWORD, "secret": True},
        ]
        self.env = [{"name": "API_TOKEN", "value": API_TOKEN, "secret": True}]
        self.extra = {}
        self.write_program(ONE_FILE_PROGRAM)

    def write_program(self, text):
        (self.work / "Pulumi.yaml").write_text(text)

    def base_env(self):
        env = {"PULUMI_STANDIN_CLOUD": str(self.cloud)}
        if self.kind == "standin":
            # Fewer PBKDF2 rounds than the real 1,000,000 keeps the suite fast; one
            # stand-in test checks the real count against the reference vector.
            env["PULUMI_STANDIN_KDF_ITERATIONS"] = "1000"
        return env

    def spec(self, knobs=None, **over):
        env = [{"name": k, "value": v} for k, v in self.base_env().items()]
        env += [{"name": k, "value": v} for k, v in (knobs or {}).items()]
        s = {
            "pulumi_bin": self.binary,
            "pulumi_home": str(self.home),
            "workdir": str(self.work),
            "scratch_dir": str(self.scratch),
            "stack": "dev",
            "backend_url": f"file://{self.state}",
            "secrets_provider": "passphrase",
            "passphrase": PASSPHRASE,
            "env": self.env + env,
            "config": self.config,
            "timeout_ms": 60000,
            "grace_ms": 2000,
        }
        s.update(self.extra)
        s.update(over)
        return s

    def drive(self, op, *flags, knobs=None, spec=None, timeout=120, extra_env=None):
        """Runs the driver tool; returns (exit status, result dict, stderr log)."""
        spec = spec if spec is not None else self.spec(knobs)
        env = dict(os.environ)
        env.update(extra_env or {})
        p = subprocess.run([self.tool, "--spec", "-", "--log-level", "debug", op, *flags],
                           input=json.dumps(spec), capture_output=True, text=True,
                           timeout=timeout, env=env)
        assert p.returncode in (0, 1), f"pl_driver {op}: exit {p.returncode}\n{p.stderr}"
        return p.returncode, json.loads(p.stdout), p.stderr

    def serve(self, ops, *flags, timeout=300):
        """Runs several operations on one open stack (the tool's serve mode,
        as the controller keeps a driver handle); returns the result dicts."""
        spec = self.root / "spec.json"
        spec.write_text(json.dumps(self.spec()))
        p = subprocess.run([self.tool, "--spec", str(spec), *flags, "serve"],
                           input="".join(op + "\n" for op in ops), capture_output=True,
                           text=True, timeout=timeout)
        assert p.returncode == 0, f"pl_driver serve: exit {p.returncode}\n{p.stderr}"
        return [json.loads(l) for l in p.stdout.splitlines()]

    def ok(self, op, *flags, **kw):
        rc, res, log = self.drive(op, *flags, **kw)
        assert rc == 0 and res["status"] == "ok", (op, res, log)
        return res

    def ready(self):
        """Stack created and config applied."""
        self.ok("ensure")
        self.ok("config")

    def records(self):
        """The stand-in's record of its invocations (the real CLI keeps none)."""
        assert self.kind == "standin", "only the stand-in records its invocations"
        if not self.record.exists():
            return []
        return [json.loads(l) for l in self.record.read_text().splitlines() if l.strip()]

    def commands(self):
        """Recorded argv lists (after the program name) without --non-interactive."""
        return [[a for a in r["argv"] if a != "--non-interactive"] for r in self.records()]

    def standin(self, *args, env=None, input=None, cwd=None, timeout=60):
        """Runs the stand-in directly with a minimal environment."""
        e = {"PATH": "/usr/bin:/bin", "HOME": str(self.home), "PULUMI_HOME": str(self.home)}
        e.update(self.base_env())
        e.update(env or {})
        return subprocess.run([str(STANDIN), *args], capture_output=True, text=True,
                              env=e, input=input, cwd=str(cwd or self.work), timeout=timeout)

    def stack_config_text(self):
        return (self.work / "Pulumi.dev.yaml").read_text()

    def cloud_files(self):
        d = self.cloud / "files"
        return sorted(p.name for p in d.iterdir()) if d.exists() else []

    def survivors(self):
        """Live processes started for this world (see processes_of_cloud)."""
        return processes_of_cloud(self.cloud)

    def kill_survivors(self):
        for pid in self.survivors():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def locks(self):
        return sorted((self.state / ".pulumi" / "locks").rglob("*.json"))

    def checkpoint(self):
        path = self.state / ".pulumi" / "stacks" / "demo" / "dev.json"
        return json.loads(path.read_text())


@pytest.fixture
def pulumi_world(tmp_path, pc_tools):
    tool = os.path.join(pc_tools, "pl_driver")
    if not os.access(tool, os.X_OK):
        pytest.fail(f"{tool} is not built; run 'make sanitize' first")
    return PulumiWorld(tmp_path, pc_tools)


@pytest.fixture(params=["standin", "real"])
def any_pulumi_world(request, tmp_path, pc_tools):
    """One driver test against the stand-in and against the real pulumi CLI."""
    tool = os.path.join(pc_tools, "pl_driver")
    if not os.access(tool, os.X_OK):
        pytest.fail(f"{tool} is not built; run 'make sanitize' first")
    world = PulumiWorld(tmp_path, pc_tools, kind=request.param)
    yield world
    # The real CLI starts its plugins in process groups of their own: whatever a
    # test left running must not outlive it.
    world.kill_survivors()


def processes_of_cloud(cloud):
    """Live processes whose environment names this cloud directory: the CLI, its
    language host and providers, and what they started, whatever their process
    group or parent (the real CLI starts its plugins in groups of their own)."""
    mark = f"PULUMI_STANDIN_CLOUD={cloud}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        if mark in env and stat[stat.rfind(")") + 2] != "Z":
            found.append(int(entry))
    return found


def group_members(pgid):
    """PIDs of live processes whose process group is pgid (zombies excluded)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(entry))
    return found
