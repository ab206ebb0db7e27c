"""`make demo` (scripts/demo.py) end to end: the demo run as a subprocess on both tiers
([emulator]: --tier emulator, forced; [real]: --tier real, which needs `make deps-real`),
with a bounded timeout, against the binary under test (PC_BIN).

A whole run must end with both sample Stacks Ready, revision 2 landed on both, the rollback
done, and nothing left behind: no process naming the demo's temporary directory (every
sandbox process has it in its command line or environment) and an empty TMPDIR.  Ctrl-C
(SIGINT to the demo's whole process group, as a terminal sends it) and SIGTERM (to the demo
alone, as `kill` sends it) in the middle of a run must tear down just as cleanly.
"""
import os
import pathlib
import signal
import subprocess
import sys
import threading

import pytest

from kube_fixtures import wait_for

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEMO = ROOT / "scripts" / "demo.py"
sys.path.insert(0, str(ROOT / "scripts"))

from demo.sandbox import missing_real_parts, processes_naming, real_flux_built  # noqa: E402

RUN_TIMEOUT = 420        # an upper bound on one whole run under ASan, never an assertion


@pytest.fixture(params=["emulator", "real"])
def demo_tier(request):
    if request.param == "real" and missing_real_parts():
        pytest.fail(f"{missing_real_parts()[0]} is not built: run `make deps-real`")
    return request.param


class DemoRun:
    """One run of the demo with its own TMPDIR; its output is collected line by line."""

    def __init__(self, tier, pc_bin, tmp_path, *flags, **env):
        self.tmp = tmp_path / "tmp"
        self.tmp.mkdir()
        env = dict(os.environ, TMPDIR=str(self.tmp), **env)
        self.proc = subprocess.Popen(
            ["/usr/bin/python3", str(DEMO), "--tier", tier, "--bin", pc_bin, *flags],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
            start_new_session=True)         # its own group: Ctrl-C is sent to it alone
        self.lines = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def text(self):
        return "\n".join(self.lines)

    def wait_line(self, fragment, timeout=RUN_TIMEOUT):
        def seen():
            if self.proc.poll() is not None and not self.reader.is_alive():
                raise AssertionError(f"demo exited {self.proc.returncode} before printing "
                                     f"{fragment!r}:\n{self.text}")
            return any(fragment in line for line in self.lines)
        wait_for(seen, timeout, interval=0.1, what=f"demo line {fragment!r}")

    def finish(self, timeout=RUN_TIMEOUT):
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise AssertionError(f"demo still running after {timeout}s:\n{self.text}")
        self.reader.join(30)
        return rc

    def wait_update_started(self, timeout=RUN_TIMEOUT):
        """Waits until the controller has run `pulumi up` (the record the StackWorld's
        --pulumi-bin wrapper keeps in the sandbox: world/cli-record.jsonl)."""
        def started():
            if self.proc.poll() is not None:
                raise AssertionError(f"demo exited {self.proc.returncode}:\n{self.text}")
            return any('"up"' in p.read_text()
                       for p in self.tmp.glob("pc-demo-*/world/cli-record.jsonl"))
        wait_for(started, timeout, interval=0.05, what="the first pulumi up")

    def count(self, fragment):
        return sum(1 for line in self.lines if fragment in line)

    def assert_nothing_left(self):
        assert processes_naming(self.tmp) == [], f"processes left behind:\n{self.text}"
        assert list(self.tmp.iterdir()) == [], "files left in the demo's TMPDIR"
        assert "LEFTOVER" not in self.text, "teardown left processes to the final sweep"
        assert "could not stop" not in self.text, self.text


def test_demo_runs_to_the_end(demo_tier, pc_bin, tmp_path):
    run = DemoRun(demo_tier, pc_bin, tmp_path)
    rc = run.finish()
    assert rc == 0, run.text
    out = run.text
    # the tier is said at the start, never silently chosen
    assert run.lines[1].strip().startswith(f"tier: {demo_tier.upper()}"), out
    # the real tier drives the real source-controller when `make deps-real` built it
    if demo_tier == "real" and real_flux_built():
        assert "source-controller: REAL" in out, out
        assert "(source-controller fetched it: http://127.0.0.1:" in out, out
    else:
        assert "source-controller: PLAYED BY THE DEMO" in out
    # both Stacks Ready at revision 1, then at revision 2; hello-oci once more after the pin
    assert run.count("ok  hello-flux  Ready=True  main@sha1:") == 2, out
    assert run.count("ok  hello-oci   Ready=True  stable@sha256:") == 2, out
    assert run.count("ok  hello-oci   Ready=True  sha256:") == 1, out
    assert "the change landed: 2 pulumi up runs, one per Stack" in out
    assert "message: bonjour, world" not in out.split("[8]")[1], "rollback not shown"
    assert "rolled back: hello-oci runs revision 1 again" in out
    has_get = subprocess.run([pc_bin, "get", "--help"], capture_output=True).returncode == 0
    if has_get:
        assert "$ pulumi-controller get stacks -n demo" in out
    else:
        assert "this build has no `pulumi-controller get/outputs/history`" in out
        assert "$ kubectl get stacks -n demo" in out
    assert run.lines[-1].startswith("demo ok in "), out
    run.assert_nothing_left()


def test_ctrl_c_mid_run_tears_down(demo_tier, pc_bin, tmp_path):
    """SIGINT to the whole group once the controller has started its first `pulumi up`:
    the servers in the group get it too, as from a terminal."""
    run = DemoRun(demo_tier, pc_bin, tmp_path)
    run.wait_update_started()
    os.killpg(run.proc.pid, signal.SIGINT)
    rc = run.finish()
    assert rc == 130, run.text
    assert "interrupted: tearing down" in run.text
    assert "stopped every process, removed" in run.text
    run.assert_nothing_left()


def test_sigterm_mid_run_tears_down(pc_bin, tmp_path):
    """SIGTERM to the demo alone (its servers get nothing): the demo's handler is the same
    on both tiers, so one tier shows it; the Ctrl-C test covers each tier's teardown."""
    run = DemoRun("emulator", pc_bin, tmp_path)
    run.wait_line("[4] publishing revision 1")
    run.proc.send_signal(signal.SIGTERM)
    rc = run.finish()
    assert rc == 130, run.text
    assert "interrupted: tearing down" in run.text
    run.assert_nothing_left()


def test_tier_is_never_chosen_silently(pc_bin, tmp_path):
    """Without .real (REAL_DIR names an empty directory) the default tier is the emulator,
    and the demo says why; --tier real then refuses to start, naming what to build."""
    empty = tmp_path / "no-real"
    empty.mkdir()
    run = DemoRun("auto", pc_bin, tmp_path, REAL_DIR=str(empty))
    run.wait_line("[1] starting the sandbox")
    run.proc.send_signal(signal.SIGTERM)
    assert run.finish() == 130, run.text
    assert run.lines[1].strip().startswith("tier: EMULATOR"), run.text
    assert f"{empty}/bin/etcd is not built; `make deps-real` builds the real ones" in run.text
    run.assert_nothing_left()

    r = subprocess.run(["/usr/bin/python3", str(DEMO), "--tier", "real", "--bin", pc_bin],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, REAL_DIR=str(empty)))
    assert r.returncode != 0
    assert f"--tier real: {empty}/bin/etcd is not built; run `make deps-real`" in r.stderr


def test_a_failed_step_says_so_and_tears_down(pc_bin, tmp_path):
    """--timeout 0: the first wait for a Stack gives up at once (the controller has only
    just been started), so the demo fails there: exit 1, the controller log's tail shown,
    nothing left.  The failure path is the demo's own, the same on both tiers."""
    run = DemoRun("emulator", pc_bin, tmp_path, "--timeout", "0")
    assert run.finish() == 1, run.text
    assert "demo FAILED: timed out after 0" in run.text
    assert "controller log (last lines):" in run.text
    assert "demo ok" not in run.text
    run.assert_nothing_left()


INTERRUPTED_SPAWN = r'''
import os, signal, subprocess, sys
sys.path.insert(0, sys.argv[1])
from demo import sandbox
sandbox.handle_interrupts()
try:
    # the child signals its parent between fork and exec: the parent is inside Popen then
    proc = subprocess.Popen(["sleep", "60"], preexec_fn=lambda: os.kill(os.getppid(), signal.SIGTERM))
    print("no interrupt")
except KeyboardInterrupt:
    print("interrupted; recorded:", [p.args for p in sandbox._children])
    print("stopped:", sandbox.stop_orphans())
'''


def test_an_interrupt_while_a_child_starts_loses_no_child():
    """SIGTERM that arrives while subprocess.Popen is starting a child (sent by the child
    itself before its exec) is raised once Popen has returned and the child is recorded;
    stop_orphans() then ends it.  Without this a fixture's `self.proc = Popen(...)` could
    be cut off with the child running and nobody holding it."""
    r = subprocess.run(["/usr/bin/python3", "-c", INTERRUPTED_SPAWN, str(ROOT / "scripts")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["interrupted; recorded: [['sleep', '60']]", "stopped: 1"], \
        r.stdout + r.stderr
