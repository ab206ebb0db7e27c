"""What the demo prints: numbered step lines, the commands it runs (`$ ...`) with their
output indented, and the Stacks as the operator's command line shows them.

`pulumi-controller get stacks` and `pulumi-controller outputs NS/NAME` are used when the
binary has them (`get --help` succeeds); otherwise the demo says so once and shows the same
with kubectl (`kubectl get stacks`, the outputs Secret decoded).
"""
import base64
import json
import os
import subprocess
import time

from demo.samples import NAMESPACE

T0 = time.monotonic()
_step = 0


def elapsed():
    return time.monotonic() - T0


def step(title):
    global _step
    _step += 1
    print(f"\n[{_step}] {title}   ({elapsed():.0f}s)", flush=True)


def say(text=""):
    for line in str(text).splitlines() or [""]:
        print(f"    {line}", flush=True)


def command(argv, output):
    """Shows one command as typed (paths shortened) and its output, indented."""
    words = [os.path.basename(a) if i == 0 else a for i, a in enumerate(argv)]
    say("$ " + " ".join(words))
    for line in output.rstrip("\n").splitlines():
        say("  " + line)


class Cli:
    """The operator's commands, through pulumi-controller when it has them."""

    def __init__(self, sb):
        self.sb = sb
        self.env = dict(os.environ, KUBECONFIG=sb.kubeconfig)
        self.has = {c: self._run(c, "--help").returncode == 0 for c in ("get", "outputs", "history")}

    def _run(self, *args):
        return subprocess.run([self.sb.pc_bin, *args], capture_output=True, text=True,
                              env=self.env, timeout=60)

    def fallback_note(self):
        lacking = [c for c, ok in self.has.items() if not ok]
        if lacking:
            say(f"(this build has no `pulumi-controller {'/'.join(lacking)}` yet: "
                "showing the same with kubectl)")

    def _show(self, args, fallback):
        """`pulumi-controller ARGS` when the binary has the command and it succeeds, else
        fallback() (saying why when the command failed)."""
        if self.has[args[0]]:
            r = self._run(*args)
            if r.returncode == 0:
                return command(["pulumi-controller", *args], r.stdout)
            say(f"pulumi-controller {args[0]} failed ({r.stderr.strip()}); kubectl instead:")
        fallback()

    def get_stacks(self):
        args = ("get", "stacks", "-n", NAMESPACE)
        self._show(args, lambda: command(["kubectl", *args], self.sb.kubectl(*args).stdout))

    def outputs(self, name):
        def from_secret():
            args = ("get", "secret", f"{name}-outputs", "-n", NAMESPACE, "-o", "jsonpath={.data}")
            data = json.loads(self.sb.kubectl(*args).stdout or "{}")
            command(["kubectl", *args, "| base64 -d"], "\n".join(
                f"{k}: {base64.b64decode(v).decode()}" for k, v in sorted(data.items())))
        self._show(("outputs", f"{NAMESPACE}/{name}"), from_secret)

    def history(self, name):
        def from_status():
            args = ("get", "stack", name, "-n", NAMESPACE, "-o", "jsonpath={.status.history}")
            entries = json.loads(self.sb.kubectl(*args).stdout or "[]")
            command(["kubectl", *args], "\n".join(
                f"{short(h.get('revision', '?'))}  {h.get('type')} {h.get('result')}"
                for h in entries))
        self._show(("history", f"{NAMESPACE}/{name}"), from_status)


def stack_line(obj):
    """'hello-oci   Ready=True  stable@sha256:3a33bdc8b667' of a Stack object."""
    st = obj.get("status") or {}
    ready = next((c for c in st.get("conditions") or [] if c.get("type") == "Ready"), {})
    rev = st.get("lastAppliedRevision") or "-"
    return f"{obj['metadata']['name']:<11} Ready={ready.get('status', '?'):<5} {short(rev)}"


def short(revision):
    """A revision with its digest cut to 12 hex digits, for reading."""
    head, sep, digest = revision.rpartition(":")
    return f"{head}{sep}{digest[:12]}" if sep and len(digest) > 12 else revision

