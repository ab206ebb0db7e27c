"""The world of the Stack reconciler's end-to-end scenarios (tests/e2e/test_stack_*.py).

`stack_world` is parametrized over two tiers, and every scenario runs on both:

    [emulator]  the API-server emulator + the pulumi stand-in
    [real]      the real kube-apiserver (a fresh namespace) + the real pulumi CLI

`bare_stack_world` is the same with only the Stack CRD installed (no Flux kind served).

A StackWorld offers:

    .tier .api (any_kubeapi-like: .kubectl .client .namespace ...) .namespace .client
    .cli (real_fixtures.RealPulumi: .kind "standin"/"real", .backend_dir, .cloud_dir, .home)
    .backend_url (file://) .cloud_dir .nginx (session nginx; its access log counts downloads)
    program_files(name) / revision_files(name, greeting)  a program of tests/e2e/programs
    artifact(files, under=None)     a Flux tarball (as source-controller packs one) + digest
    publish(artifact, key) / corrupt(artifact)  nginx serves it / serves altered bytes
    flux_source(kind, name, artifact=None, revision=None)  the Flux source object with its
                    status.artifact and Ready condition: on the real tier made by the real
                    source-controller (flux_fixtures.py) from a Git repository, an OCI
                    artifact or bucket objects holding the artifact's files; on the
                    emulator tier (and for what Flux cannot produce: hostile archives, a
                    given revision, a failing or artifact-less source) written by hand as
                    source-controller would; returns status.artifact ({url, digest,
                    revision, ...}) and, when real, makes `artifact` the bytes Flux serves
    .flux (real tier) flux_fixtures.FluxControllers, .git_server, .s3_server
    downloads(artifact)             how many times nginx served it
    apply_stack(name, **spec)       server-side apply of a Stack (passphrase envRef, cloud
                                    Literal, file:// backend by default)
    stack(name) events(name) outputs_secret(name) condition(name, type)
    wait_ready(name, revision=None) wait_condition(name, type, status, reason)
    controller(host=None, **flags)  `pulumi-controller run` as a subprocess (Controller:
                                    .records() .find() .wait_log() .metrics() .stop() .kill());
                                    .ctl the latest; crash_controller() SIGKILLs it and its CLIs
    settle(name)                    a barrier: the controller has seen and reconciled
                                    everything about the Stack that happened before
    cli_invocations(since=0) / mark() / updates(stack=None, since=0)
                                    the record the --pulumi-bin wrapper keeps
    wait_invocation(command, stack, since)  waits until the CLI ran that command
    locks() hold_lock(project, stack) history(project, stack) cloud_files() login()
    secret(name, data) config_map(name, data)
    assert_no_secret(*values)       in no controller log line, event, Stack status, argv

--pulumi-bin is a wrapper script the fixture writes: it appends one JSON line per
invocation ({argv, env: [names], env_sha256: {name: digest} for DIGESTED_ENV and
PCTEST_* only, cwd, pid}) to the record file, then execs the stand-in or the real CLI.
No environment value is written, only digests of the ones a test proves arrived.
"""
import base64
import datetime
import hashlib
import json
import os
import pathlib
import secrets
import signal
import subprocess
import sys
import urllib.request
import uuid

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from artifacts import flux_tarball, sha256  # noqa: E402
from flux_fixtures import (SOURCE_API, SOURCE_FINALIZER, SOURCE_PLURALS,  # noqa: E402
                           RealFluxSources)
from kube_fixtures import KubeError, wait_for  # noqa: E402

STACK_API = "pulumi.com/v1"
PROGRAMS = HERE / "programs"
STACK_CRD = ROOT / "deploy" / "crds" / "pulumi.com_stacks.yaml"

# The test's secret values: none may appear in a log line, event, status or argv.
PASSPHRASE = "pp-Stack-Passphrase-5e1d"
PASSPHRASE_SECRET = "pulumi-passphrase"

# Environment variables whose value digests the wrapper records (besides PCTEST_*): the
# tests prove these values reached the CLI without any value being written down.
DIGESTED_ENV = ("PULUMI_CONFIG_PASSPHRASE", "PULUMI_ACCESS_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")

SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                   "SUMMARY: UndefinedBehaviorSanitizer")

WRAPPER = '''#!/usr/bin/python3 -S
# Written by tests/e2e/stack_fixtures.py: records this invocation, then runs the CLI.
import hashlib, json, os, sys
env = os.environ
record = {{"argv": sys.argv[1:], "env": sorted(env), "cwd": os.getcwd(), "pid": os.getpid(),
          "env_sha256": {{k: hashlib.sha256(v.encode()).hexdigest() for k, v in env.items()
                         if k in {digested!r} or k.startswith("PCTEST_")}}}}
fd = os.open({record!r}, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
os.write(fd, (json.dumps(record) + "\\n").encode())
os.close(fd)
# The driver puts this script's directory first on PATH; the CLI's own directory
# (language hosts, providers) must be found too, as in an installation.
env["PATH"] = {bin_dir!r} + os.pathsep + env.get("PATH", "/usr/bin:/bin")
for k, v in {extra_env!r}.items():
    env.setdefault(k, v)
if env.get("PCTEST_PLAN_TWIN"):      # a program that rewrites its saved plan
    os.execv(sys.executable, [sys.executable, {twin!r}, {binary!r}] + sys.argv[1:])
os.execv({binary!r}, [{binary!r}] + sys.argv[1:])
'''


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def command_of(argv):
    """The CLI command of a recorded argv: "up", "stack select", "config set-all", ..."""
    flags_with_values = {"--stack", "-s", "--cwd", "-C", "--config-file", "--event-log",
                         "--secrets-provider", "--exec-kind", "--color", "--parallel", "-p",
                         "--target", "--policy-pack", "--plan", "--save-plan", "--page-size",
                         "--page", "--message", "-m", "--client", "--exec-agent",
                         "--config", "-c"}
    words, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a.startswith("-"):
            skip = a in flags_with_values
            continue
        words.append(a)
    if not words:
        return ""
    if words[0] in ("stack", "config", "plugin", "state") and len(words) > 1:
        return f"{words[0]} {words[1]}"
    return words[0]


def stack_of(argv):
    """The --stack / -s value of a recorded argv, or None."""
    for i, a in enumerate(argv):
        if a in ("--stack", "-s") and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--stack="):
            return a.split("=", 1)[1]
    return None


class Artifact:
    """A Flux artifact: the tarball, its sha256 digest and the files it holds."""

    def __init__(self, files, data, raw=False):
        self.files = files
        self.raw = raw             # prepared bytes: no program Flux could package
        self.key = None            # its path under nginx's root once served
        self.uri = None            # the request path nginx's access log shows for it
        self.url = None
        self._set_data(data)

    def _set_data(self, data):
        self.data = data
        self.digest = sha256(data)
        self.hex = self.digest.split(":", 1)[1]
        self.size = len(data)

    def adopt(self, data, key, url):
        """The artifact is now the one the real source-controller stored (its own
        tarball of the files), served by nginx at `key` under its root."""
        self._set_data(data)
        self.key = key
        self.uri = "/" + key
        self.url = url


class Controller:
    """One `pulumi-controller run` with its log (JSON lines) in a file."""

    def __init__(self, argv, log_path, env):
        self.argv = argv
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=self._log, env=env,
                                     start_new_session=True)
        self._port = None

    def text(self):
        return self.log_path.read_text(errors="replace")

    def records(self):
        out = []
        for line in self.text().splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out

    def find(self, msg=None, **fields):
        return [r for r in self.records() if (msg is None or r.get("msg") == msg) and
                all(r.get(k) == v for k, v in fields.items())]

    def alive(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"controller exited {self.proc.returncode}:\n{self.text()[-4000:]}")
        return True

    def wait_log(self, msg=None, timeout=60, **fields):
        def found():
            self.alive()
            return self.find(msg, **fields)
        return wait_for(found, timeout, interval=0.05, what=f"log line {msg!r} {fields}")

    @property
    def health_port(self):
        if self._port is None:
            self._port = int(self.wait_log("serving health probes")[0]["port"])
        return self._port

    def metrics(self):
        """{metric line name: value} from /metrics (the health server answers it too)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/metrics",
                                    timeout=10) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def sanitizer_report(self):
        text = self.text()
        for mark in SANITIZER_MARKS:
            i = text.find(mark)
            if i >= 0:
                return text[max(0, i - 200):i + 4000]
        return None

    def stop(self, timeout=60):
        """SIGTERM and wait; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"controller did not stop on SIGTERM within {timeout}s")
        self._log.close()
        return self.proc.returncode

    def kill(self):
        """SIGKILL, as an OOM kill or a node loss would: the pulumi children it started
        are left running, as they would be in a killed container's process tree only
        until the kernel reaps the pod -- here the test kills them (kill_children)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._log.close()


class StackWorld(RealFluxSources):
    def __init__(self, tier, api, cli, nginx, pc_bin, workdir, request=None):
        self.tier = tier
        self._request = request    # for the real tier's session Flux fixtures, lazily
        self.api = api
        self.cli = cli
        self.nginx = nginx
        self.pc_bin = pc_bin
        self.workdir = pathlib.Path(workdir)
        self.namespace = api.namespace
        self.id = secrets.token_hex(4)
        self.backend_dir = cli.backend_dir
        self.backend_url = cli.backend_url
        self.cloud_dir = cli.cloud_dir
        self.storage = self.workdir / "storage"
        self.record = self.workdir / "cli-record.jsonl"
        self.controllers = []
        self._client = None
        self.pulumi_bin = self._write_wrapper()
        self.secret("pulumi-passphrase", {"passphrase": PASSPHRASE})

    # -- the API ----------------------------------------------------------------------

    @property
    def client(self):
        """The test's own client: on the real tier past the fault proxy, so the test's
        writes go through while the proxy cuts the controller off."""
        if self._client is None:
            self._client = self.api.direct_client
        return self._client

    def _call(self, fn):
        """fn(client), once more on a new connection if the kept-alive one died (an API
        server restart)."""
        try:
            return fn(self.client)
        except (OSError, ConnectionError):
            self._client = None
            return fn(self.client)

    def kubectl(self, *args, **kw):
        return self.api.kubectl(*args, **kw)

    def secret(self, name, data, labels=None):
        """Creates or replaces a Secret (string values); returns it."""
        obj = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
               "metadata": {"name": name, "namespace": self.namespace, "labels": labels or {}},
               "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}
        return self._call(lambda c: c.apply(obj, "secrets", field_manager="stack-test"))

    def config_map(self, name, data, labels=None):
        obj = {"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": self.namespace, "labels": labels or {}},
               "data": data}
        return self._call(lambda c: c.apply(obj, "configmaps", field_manager="stack-test"))

    # -- programs and artifacts -------------------------------------------------------

    @staticmethod
    def program_files(name):
        """{relative path: bytes} of tests/e2e/programs/<name>."""
        root = PROGRAMS / name
        return {str(p.relative_to(root)): p.read_bytes()
                for p in sorted(root.rglob("*")) if p.is_file()}

    def revision_files(self, name="stack-basic", greeting="hello"):
        """The program with another `greeting` default: a new revision whose update
        writes `greeting` into its file in the cloud."""
        files = self.program_files(name)
        text = files["Pulumi.yaml"].decode()
        assert "default: hello" in text, f"{name} has no greeting default"
        files["Pulumi.yaml"] = text.replace("default: hello", f"default: {greeting}", 1).encode()
        return files

    def artifact(self, files=None, under=None, extra=None):
        """A Flux artifact of files (default: stack-basic), optionally all under the
        directory `under`, plus extra {path: bytes} at the root."""
        files = dict(files if files is not None else self.program_files("stack-basic"))
        if under:
            files = {f"{under}/{k}": v for k, v in files.items()}
        files.update(extra or {})
        return Artifact(files, flux_tarball({k: (v, 0o644) for k, v in files.items()}))

    @staticmethod
    def raw_artifact(data):
        """An artifact of prepared bytes (a hostile archive from artifacts.py builders)."""
        return Artifact({}, data, raw=True)

    def publish(self, artifact, key=None):
        """Puts the artifact where nginx serves it; returns its URL."""
        key = key or f"stack-{self.id}/{artifact.hex}.tar.gz"
        path = self.nginx.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(path.parent, 0o755)
        self.nginx.put(key, artifact.data)
        artifact.key = key
        artifact.uri = "/artifacts/" + key
        artifact.url = self.nginx.url("artifacts/" + key)
        return artifact.url

    def corrupt(self, artifact):
        """nginx now serves other bytes under the artifact's URL (the digest no longer
        matches); same size, one byte flipped in the middle."""
        data = bytearray(artifact.data)
        data[len(data) // 2] ^= 0xFF
        self.nginx.put(artifact.key, bytes(data))

    def downloads(self, artifact):
        """How many successful GETs nginx served of the artifact."""
        return sum(1 for status, _ in self.nginx.requests(artifact.uri) if status == 200)

    # -- Flux sources -----------------------------------------------------------------

    def flux_source(self, kind, name, artifact=None, revision=None, ready=True, create=True):
        """Creates (or updates) the Flux source `kind`/`name` with an artifact of
        `artifact`'s files; returns its status.artifact {url, digest, revision, path,
        lastUpdateTime, size}, or None when it has none.

        On the real tier the real source-controller makes it (real_source): the files
        are committed to the Git server, pushed to the registry or put in a bucket, the
        source reconciled and its status waited for.  Otherwise the status is written
        by hand (hand_written_source), as source-controller writes it; the real tier
        does that too for what no Flux source can produce: prepared bytes (a hostile
        archive), a given revision, a failing source (ready=False), a source without an
        artifact (artifact=None), or the status of an object the controller made
        (create=False).  A world made outside pytest (no `request`: scripts/demo) writes
        them by hand too.  Tests use what it returns, never revisions of their own making.
        """
        if (self.tier == "real" and self._request is not None and artifact is not None and
                not artifact.raw and revision is None and ready and create):
            return self.real_source(kind, name, artifact)
        return self.hand_written_source(kind, name, artifact, revision, ready, create)

    def hand_written_source(self, kind, name, artifact=None, revision=None, ready=True,
                            create=True):
        """What source-controller writes, written through the status subresource: a
        Ready condition True/Succeeded, ArtifactInStorage, observedGeneration and the
        artifact nginx serves; without an artifact Ready=Unknown/Progressing ("no
        artifact yet").  The object lacks flux_fixtures.SHARD_LABEL, so the real
        source-controller leaves it alone."""
        plural = SOURCE_PLURALS[kind]
        if create:
            obj = {"apiVersion": SOURCE_API, "kind": kind,
                   "metadata": {"name": name, "namespace": self.namespace},
                   "spec": self._source_spec(kind, name)}
            cur = self._call(lambda c: c.apply(obj, plural, field_manager="stack-test"))
        else:
            cur = self._call(lambda c: c.get(SOURCE_API, plural, name, self.namespace))
        if self.tier == "real":
            self._drop_flux_finalizer(plural, cur)
        gen = cur["metadata"].get("generation", 1)
        ts = now_rfc3339()
        if artifact is None:
            status = {"observedGeneration": gen, "conditions": [
                {"type": "Reconciling", "status": "True", "reason": "Progressing",
                 "message": "building artifact", "lastTransitionTime": ts,
                 "observedGeneration": gen},
                {"type": "Ready", "status": "Unknown", "reason": "Progressing",
                 "message": "building artifact", "lastTransitionTime": ts,
                 "observedGeneration": gen}]}
            self._patch_source_status(plural, name, status)
            return None
        if artifact.url is None:
            self.publish(artifact)
        if revision is None:
            revision = {"GitRepository": "main@sha1:" + hashlib.sha1(artifact.data).hexdigest(),
                        "OCIRepository": "latest@" + artifact.digest,
                        "Bucket": artifact.digest}[kind]
        written = {"url": artifact.url, "digest": artifact.digest, "revision": revision,
                   "path": f"{kind.lower()}/{self.namespace}/{name}/{artifact.hex}.tar.gz",
                   "lastUpdateTime": ts, "size": artifact.size}
        cond = "True" if ready else "False"
        reason = "Succeeded" if ready else "GitOperationFailed"
        msg = f"stored artifact for revision '{revision}'" if ready else "fetch failed"
        status = {"observedGeneration": gen, "artifact": written, "conditions": [
            {"type": "Ready", "status": cond, "reason": reason, "message": msg,
             "lastTransitionTime": ts, "observedGeneration": gen},
            {"type": "ArtifactInStorage", "status": "True", "reason": "Succeeded",
             "message": msg, "lastTransitionTime": ts, "observedGeneration": gen}]}
        self._patch_source_status(plural, name, status)
        return written

    def _drop_flux_finalizer(self, plural, obj):
        """A source real until now (its shard label dropped by this apply) keeps
        source-controller's finalizer, which nothing would remove any more: the object
        could not be deleted."""
        fins = obj["metadata"].get("finalizers") or []
        if SOURCE_FINALIZER in fins:
            keep = [f for f in fins if f != SOURCE_FINALIZER]
            self._call(lambda c: c.patch(SOURCE_API, plural, obj["metadata"]["name"],
                                         {"metadata": {"finalizers": keep or None}},
                                         self.namespace, "merge"))

    def _source_spec(self, kind, name):
        if kind == "GitRepository":
            return {"url": f"https://git.example.test/{name}.git", "interval": "1m",
                    "ref": {"branch": "main"}}
        if kind == "OCIRepository":
            return {"url": f"oci://registry.example.test/{name}", "interval": "1m",
                    "ref": {"tag": "latest"}}
        return {"bucketName": name, "endpoint": "s3.example.test", "interval": "1m"}

    def _patch_source_status(self, plural, name, status):
        def patch(c):
            # status.conditions are replaced whole (a merge patch replaces lists)
            return c.patch(SOURCE_API, plural, name, {"status": status}, self.namespace,
                           "merge", "status")
        return self._call(patch)

    def delete_source(self, kind, name):
        self._call(lambda c: c.delete(SOURCE_API, SOURCE_PLURALS[kind], name, self.namespace))

    # -- Stacks -----------------------------------------------------------------------

    def stack_spec(self, **spec):
        """The spec every scenario starts from: the file:// backend, the passphrase from
        a Secret and the cloud directory as Literal envRefs; `spec` adds or overrides
        (envRefs are merged)."""
        env_refs = {
            "PULUMI_CONFIG_PASSPHRASE": {"type": "Secret", "secret": {
                "name": PASSPHRASE_SECRET, "key": "passphrase"}},
            "PULUMI_STANDIN_CLOUD": {"type": "Literal", "literal": {"value": str(self.cloud_dir)}},
        }
        env_refs.update(spec.pop("envRefs", {}))
        out = {"stack": "dev", "backend": self.backend_url, "secretsProvider": "passphrase",
               "envRefs": env_refs}
        out.update(spec)
        return out

    def stack_object(self, name, api_version=STACK_API, **spec):
        return {"apiVersion": api_version, "kind": "Stack",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": self.stack_spec(**spec)}

    def apply_stack(self, name, **spec):
        """Server-side applies the Stack `name` (field manager stack-test, so applying
        again with another spec changes exactly that); returns it."""
        obj = self.stack_object(name, **spec)
        return self._call(lambda c: c.apply(obj, "stacks", field_manager="stack-test"))

    def git_stack(self, name, source, **spec):
        """apply_stack with a fluxSource naming the GitRepository `source`."""
        spec.setdefault("fluxSource", {"sourceRef": {"apiVersion": SOURCE_API,
                                                     "kind": "GitRepository", "name": source}})
        return self.apply_stack(name, **spec)

    def patch_stack(self, name, patch):
        return self._call(lambda c: c.patch(STACK_API, "stacks", name, patch, self.namespace))

    def delete_stack(self, name):
        return self._call(lambda c: c.delete(STACK_API, "stacks", name, self.namespace))

    def stack(self, name):
        return self._call(lambda c: c.get(STACK_API, "stacks", name, self.namespace))

    def stack_or_none(self, name):
        try:
            return self.stack(name)
        except KubeError as e:
            if e.code == 404:
                return None
            raise

    @staticmethod
    def cond(obj, type_):
        for c in (obj.get("status") or {}).get("conditions") or []:
            if c.get("type") == type_:
                return c
        return None

    def condition(self, name, type_):
        return self.cond(self.stack(name), type_)

    def _explain(self, name):
        obj = self.stack_or_none(name)
        status = json.dumps(obj.get("status"), indent=1)[:3000] if obj else "(gone)"
        log = self.controllers[-1].text()[-3000:] if self.controllers else "(no controller)"
        return f"\nstatus of {name}: {status}\ncontroller log tail:\n{log}"

    def _wait(self, name, pred, timeout, what):
        def check():
            if self.controllers:
                self.controllers[-1].alive()
            return pred()
        try:
            return wait_for(check, timeout, interval=0.1, what=what)
        except AssertionError as e:
            raise AssertionError(f"{e}{self._explain(name)}") from None

    def wait_ready(self, name, revision=None, timeout=180):
        """Waits until Ready=True at the Stack's current generation (and, when given,
        lastAppliedRevision == revision); returns the Stack."""
        def ready():
            obj = self.stack(name)
            c = self.cond(obj, "Ready")
            st = obj.get("status") or {}
            if (c and c["status"] == "True" and
                    st.get("observedGeneration") == obj["metadata"]["generation"] and
                    (revision is None or st.get("lastAppliedRevision") == revision)):
                return obj
            return None
        return self._wait(name, ready, timeout, f"Stack {name} Ready at {revision or 'its generation'}")

    def wait_condition(self, name, type_, status="True", reason=None, timeout=180):
        """Waits until condition type_ has status (and reason) at the current generation."""
        def match():
            obj = self.stack(name)
            c = self.cond(obj, type_)
            gen_ok = (obj.get("status") or {}).get("observedGeneration") == \
                obj["metadata"]["generation"]
            if c and c["status"] == status and (reason is None or c.get("reason") == reason) \
                    and gen_ok:
                return obj
            return None
        return self._wait(name, match, timeout, f"Stack {name} {type_}={status} {reason or ''}")

    def wait_gone(self, name, timeout=180):
        return self._wait(name, lambda: self.stack_or_none(name) is None, timeout,
                          f"Stack {name} to be deleted")

    def events(self, name):
        """core/v1 Events whose involvedObject is the Stack `name`."""
        items = self._call(lambda c: c.list("v1", "events", self.namespace))["items"]
        return [e for e in items if e.get("involvedObject", {}).get("kind") == "Stack" and
                e["involvedObject"].get("name") == name]

    def event_reasons(self, name):
        return [e.get("reason") for e in self.events(name)]

    def wait_event(self, name, reason, timeout=120):
        return self._wait(name, lambda: [e for e in self.events(name) if e.get("reason") == reason],
                          timeout, f"a {reason} event on Stack {name}")

    def outputs_secret(self, name):
        """The Secret <name>-outputs with its data decoded (.["decoded"]), or None."""
        try:
            obj = self._call(lambda c: c.get("v1", "secrets", f"{name}-outputs", self.namespace))
        except KubeError as e:
            if e.code == 404:
                return None
            raise
        obj["decoded"] = {k: base64.b64decode(v).decode()
                          for k, v in (obj.get("data") or {}).items()}
        return obj

    # -- the controller ---------------------------------------------------------------

    def controller(self, host=None, **flags):
        """Starts `pulumi-controller run` against this world; flags are `--name value`
        (underscores become dashes, True is a bare flag, None drops a default).  host:
        run it under that host name, in a UTS namespace of its own (as a pod is; needs
        root), which the pulumi processes it starts share."""
        args = {
            "kubeconfig": self.api.kubeconfig,
            "storage_path": str(self.storage),
            "pulumi_bin": str(self.pulumi_bin),
            "pulumi_home": str(self.cli.home),
            "health_addr": "127.0.0.1:0",
            "metrics_addr": "0",
            "log_format": "json",
            "concurrency": "4",
            "requeue_dependency": "2s",
            "log_level": "debug",       # settle() reads the queue's and the passes' lines
        }
        if self.tier == "real":
            args["namespace"] = self.namespace     # the session's server is shared
        args.update(flags)
        argv = [self.pc_bin, "run"]
        if host is not None:
            argv = ["unshare", "--uts", "/bin/sh", "-c", 'hostname "$0" && exec "$@"', host] + argv
        for k, v in args.items():
            if v is None or v is False:
                continue
            argv.append("--" + k.replace("_", "-"))
            if v is not True:
                argv.append(str(v))
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PULUMI_", "KUBECONFIG"))}
        ctl = Controller(argv, self.workdir / f"controller-{len(self.controllers)}.log", env)
        self.controllers.append(ctl)
        return ctl

    @property
    def ctl(self):
        return self.controllers[-1]

    def crash_controller(self):
        """SIGKILL of the controller and of every pulumi process it started, as when its
        container is killed (the pod's processes die with it): locks and pending
        operations the CLI held stay in the backend."""
        self.ctl.kill()
        self.kill_children()

    def kill_children(self):
        """Ends every pulumi process (CLI, language host, providers) of this world's
        cloud, whatever its process group (see pulumi_fixtures.processes_of_cloud)."""
        from pulumi_fixtures import processes_of_cloud
        for pid in processes_of_cloud(self.cloud_dir):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    BARRIER_FINALIZER = "stack-test.pulumi.com/barrier"

    def settle(self, name, timeout=120):
        """A barrier for "nothing ran" checks.  A finalizer change queues a Stack without
        giving it anything to update (the reconciler's change filter), so the fixture adds
        a finalizer of its own and removes it again, and after each waits until the
        controller has queued the Stack (debug line `stack queued`), ended a reconcile
        pass of it after that (`reconcile pass ended`), finished every update it started
        (`update started` / `update succeeded|failed`, by reconcileID) and emptied its
        queue.  Whatever the controller was going to do about earlier changes of the
        Stack is done then."""
        for add in (True, False):
            mark = len(self.ctl.records())
            self._toggle_barrier(name, add)
            self._wait_pass_after(name, mark, timeout)

    def _toggle_barrier(self, name, add):
        def patch(c):
            obj = c.get(STACK_API, "stacks", name, self.namespace)
            fins = obj["metadata"].get("finalizers") or []
            if add:
                ops = [{"op": "add", "path": "/metadata/finalizers/-",
                        "value": self.BARRIER_FINALIZER}] if fins else \
                    [{"op": "add", "path": "/metadata/finalizers",
                      "value": [self.BARRIER_FINALIZER]}]
            else:
                i = fins.index(self.BARRIER_FINALIZER)
                ops = [{"op": "test", "path": f"/metadata/finalizers/{i}",
                        "value": self.BARRIER_FINALIZER},
                       {"op": "remove", "path": f"/metadata/finalizers/{i}"}]
            return c.patch(STACK_API, "stacks", name, ops, self.namespace, "json")
        for _ in range(20):            # the controller may write finalizers meanwhile
            try:
                return self._call(patch)
            except KubeError as e:
                if e.code not in (409, 422):
                    raise
        raise AssertionError(f"could not change the barrier finalizer of {name}")

    def _wait_pass_after(self, name, mark, timeout):
        ctl = self.ctl
        key = f"{self.namespace}/{name}"

        def done():
            ctl.alive()
            recs = ctl.records()[mark:]
            queued = [i for i, r in enumerate(recs)
                      if r.get("msg") == "stack queued" and r.get("key") == key]
            if not queued:
                return False
            ended = [r for r in recs[queued[0]:]
                     if r.get("msg") == "reconcile pass ended" and r.get("name") == name]
            if not ended:
                return False
            mine = [r for r in ctl.records() if r.get("name") == name and
                    r.get("namespace") == self.namespace]
            started = {r.get("reconcileID") for r in mine if r.get("msg") == "update started"}
            finished = {r.get("reconcileID") for r in mine
                        if r.get("msg") in ("update succeeded", "update failed")}
            if started - finished:
                return False
            return ctl.metrics().get("pulumi_controller_workqueue_depth", 1) == 0
        self._wait(name, done, timeout, f"the controller to reconcile {name} after a barrier")

    # -- what the CLI was asked to do -------------------------------------------------

    def _write_wrapper(self):
        d = self.workdir / "wrapper-bin"
        d.mkdir()
        extra = {}
        if self.cli.kind == "standin":
            # fewer PBKDF2 rounds than the real 1,000,000 keep the stand-in fast
            # (pulumi_fixtures.PulumiWorld.base_env does the same)
            extra["PULUMI_STANDIN_KDF_ITERATIONS"] = "1000"
        path = d / "pulumi"
        path.write_text(WRAPPER.format(record=str(self.record), bin_dir=self.cli.bin_dir,
                                       twin=str(pathlib.Path(__file__).with_name("plan_twin.py")),
                                       digested=DIGESTED_ENV,
                                       binary=self.cli.binary, extra_env=extra))
        path.chmod(0o755)
        return path

    def cli_invocations(self, since=0):
        """Recorded invocations (dicts with argv, env names, command, stack), from the
        `since`-th on (see mark())."""
        if not self.record.exists():
            return []
        out = []
        for line in self.record.read_text().splitlines()[since:]:
            r = json.loads(line)
            r["command"] = command_of(r["argv"])
            r["stack"] = stack_of(r["argv"])
            out.append(r)
        return out

    def mark(self):
        """The number of invocations so far: cli_invocations(since=mark) is what follows."""
        return len(self.record.read_text().splitlines()) if self.record.exists() else 0

    def wait_invocation(self, command="up", stack=None, since=0, timeout=120):
        """Waits until the CLI was run with `command` (for Pulumi stack `stack`)."""
        def seen():
            if self.controllers:
                self.ctl.alive()
            return self.updates(stack, since, (command,))
        return wait_for(seen, timeout, interval=0.05, what=f"pulumi {command} for {stack}")

    def updates(self, stack=None, since=0, commands=("up",)):
        """Recorded invocations of `commands` (default up), for Pulumi stack `stack`."""
        return [r for r in self.cli_invocations(since) if r["command"] in commands and
                (stack is None or r["stack"] == stack)]

    # -- the backend and the cloud ----------------------------------------------------

    def login(self):
        """What `pulumi login <backend>` leaves in PULUMI_HOME: a Stack that names no
        backend then uses this one, as the CLI resolves it."""
        (self.cli.home / "credentials.json").write_text(json.dumps(
            {"current": self.backend_url, "accessTokens": {self.backend_url: ""},
             "accounts": {}}, indent=4) + "\n")

    def locks(self):
        d = self.backend_dir / ".pulumi" / "locks"
        return sorted(d.rglob("*.json")) if d.exists() else []

    def hold_lock(self, project, stack, owner="ops", host="another-controller", pid=4242):
        """A lock file as another holder's CLI leaves it in the file:// backend while it
        updates (layout of reference pulumi-cli §4.2; test_pulumi_driver_conformance
        makes the same); returns its path."""
        d = self.backend_dir / ".pulumi" / "locks" / "organization" / project / stack
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"{uuid.uuid4()}.json"
        path.write_text(json.dumps({"pid": pid, "username": owner, "hostname": host,
                                    "timestamp": now_rfc3339().replace("Z", ".123456789Z")}))
        return path

    def history(self, project, stack):
        """The backend's update history of project/stack: [{kind, result, ...}]."""
        d = self.backend_dir / ".pulumi" / "history" / project / stack
        out = []
        for p in sorted(d.glob("*.history.json")) if d.exists() else []:
            out.append(json.loads(p.read_text()))
        return out

    def cloud_files(self):
        d = self.cloud_dir / "files"
        return {p.name: p.read_text() for p in sorted(d.iterdir())} if d.exists() else {}

    # -- secrets ----------------------------------------------------------------------

    def assert_no_secret(self, *values):
        """No value appears in any controller log, any Event of the namespace, any
        Stack's status, or any recorded CLI argv."""
        values = [v for v in values if v]
        places = {}
        for i, ctl in enumerate(self.controllers):
            places[f"controller log {i}"] = ctl.text()
        events = self._call(lambda c: c.list("v1", "events", self.namespace))["items"]
        places["events"] = json.dumps(events)
        stacks = self._call(lambda c: c.list(STACK_API, "stacks", self.namespace))["items"]
        places["stack status"] = json.dumps([s.get("status") for s in stacks])
        places["argv"] = json.dumps([r["argv"] for r in self.cli_invocations()])
        for where, text in places.items():
            for v in values:
                assert v not in text, f"a secret value appears in the {where}"

    # -- teardown ---------------------------------------------------------------------

    def close(self):
        reports = []
        for ctl in self.controllers:
            if ctl.proc.poll() is None:
                try:
                    ctl.stop(timeout=30)
                except AssertionError:
                    pass
            report = ctl.sanitizer_report()
            if report:
                reports.append(f"{ctl.log_path}:\n{report}")
        self.kill_children()
        if reports:
            pytest.fail("sanitizer report in the controller log:\n" + "\n".join(reports))


def _world(request, tmp_path, bare=False):
    tier = request.param
    from real_fixtures import EmulatorView, RealPulumi
    if tier == "emulator":
        factory = request.getfixturevalue("kubeapi_factory")
        api = EmulatorView(factory(crds=not bare))
        cli = RealPulumi(tmp_path / "pulumi", kind="standin")
    else:
        if not bare:
            # The real Flux controllers, and the CRDs of their modules, before the
            # world's first source: every real-tier source is a real Flux object.
            request.getfixturevalue("flux")
        api = request.getfixturevalue("bare_real_kubeapi" if bare else "real_kubeapi")
        cli = RealPulumi(tmp_path / "pulumi", kind="real")
    if bare:
        api.apply_file(STACK_CRD)
        if tier == "real":
            api.kubectl("wait", "--for=condition=Established", "crd/stacks.pulumi.com",
                        "--timeout=120s")
            api.wait_custom_resources_served()
    world = StackWorld(tier, api, cli, request.getfixturevalue("nginx"),
                       request.getfixturevalue("pc_bin"), tmp_path / "world", request=request)
    return world


@pytest.fixture(params=["emulator", "real"])
def stack_world(request, tmp_path):
    """A Stack scenario's world on one tier (see the module docstring)."""
    (tmp_path / "world").mkdir()
    world = _world(request, tmp_path)
    yield world
    world.close()


@pytest.fixture(params=["emulator", "real"])
def bare_stack_world(request, tmp_path):
    """stack_world whose API server serves the Stack CRD and no Flux kind."""
    (tmp_path / "world").mkdir()
    world = _world(request, tmp_path, bare=True)
    yield world
    world.close()


def wait_until(predicate, timeout=120, what="condition"):
    """kube_fixtures.wait_for with the upper bound the scenarios use."""
    return wait_for(predicate, timeout, interval=0.1, what=what)


__all__ = ["StackWorld", "Artifact", "Controller", "PASSPHRASE", "STACK_API", "SOURCE_API",
           "command_of", "stack_of", "wait_until"]
