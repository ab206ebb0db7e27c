"""The demo's sandbox: servers on loopback made of the test harness's fixture classes, all
under one temporary directory.  Tier "real": etcd + kube-apiserver (real_fixtures.RealKube)
and the real pulumi CLI with the real test provider from .real/; tier "emulator": the
API-server emulator (kube_fixtures.KubeAPI) and the pulumi stand-in.  Both: nginx serving
Flux artifacts, Debian's docker-registry (plain HTTP), and a stack_fixtures.StackWorld whose
controller() runs `pulumi-controller run` and whose flux_source() writes a GitRepository's
status as source-controller would.

close() stops everything newest first, whatever state a start was interrupted in, then kills
and reports any process still naming the directory (the demo's test checks there is none).
"""
import os
import pathlib
import shutil
import signal
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

import real_fixtures  # noqa: E402
from kube_fixtures import KUBECTL, KubeAPI  # noqa: E402
from nginx_fixtures import Nginx  # noqa: E402
from real_fixtures import REAL, REAL_BIN, EmulatorView, NamespacedKube, RealKube, RealPulumi  # noqa: E402
from registry_fixtures import Registry  # noqa: E402
from stack_fixtures import StackWorld  # noqa: E402

from demo.samples import NAMESPACE  # noqa: E402

# What the real tier needs from `make deps-real`.
REAL_PARTS = [REAL_BIN / n for n in ("etcd", "kube-apiserver", "kubectl", "pulumi",
                                     "pulumi-language-yaml")] + \
    [REAL / "provider" / "pulumi-resource-standin", REAL / "pulumi-home" / "plugins"]
SOURCE_CONTROLLER = REAL_BIN / "source-controller"
# What driving the real Flux controllers needs besides the real tier.
FLUX_PARTS = [SOURCE_CONTROLLER, REAL_BIN / "kustomize-controller", REAL / "flux-crds"]


def real_flux_built():
    return all(p.exists() for p in FLUX_PARTS) and any((REAL / "flux-crds").glob("*.yaml"))


def missing_real_parts():
    """The paths of the real tier that `make deps-real` has not built."""
    return [str(p) for p in REAL_PARTS
            if not (p.is_dir() if p.name == "plugins" else os.access(p, os.X_OK))]


def real_versions():
    """'kube-apiserver v1.37.2 + etcd, pulumi v3.274.1' from .real/manifest.env."""
    m = real_fixtures.read_env_file(REAL / "manifest.env")
    return (f"kube-apiserver {m.get('KUBERNETES_VERSION', '?')} + etcd, "
            f"pulumi {m.get('PULUMI_VERSION', '?')} with pulumi-language-yaml "
            f"{m.get('PULUMI_YAML_VERSION', '?')}")


# -- interrupts: never between the start of a child and its handle -------------------------
#
# Ctrl-C or SIGTERM raises KeyboardInterrupt wherever the demo is, also inside the fixture
# classes.  Raised in the middle of subprocess.Popen (forked, not yet returned), it would
# leave a child nobody holds.  So every Popen of this process is recorded once started, and
# an interrupt that comes while one starts is raised only then; Sandbox.close() stops any
# recorded child still running after the orderly teardown.

_children = []
_spawning = [False]
_pending = []
_popen_init = subprocess.Popen.__init__


def on_interrupt(signum, frame):
    """The SIGINT and SIGTERM handler (see above)."""
    if _spawning[0]:
        _pending.append(signum)
        return
    raise KeyboardInterrupt


def _recorded_popen_init(self, *args, **kwargs):
    _spawning[0] = True
    try:
        _popen_init(self, *args, **kwargs)
        _children.append(self)
    finally:
        _spawning[0] = False
    if _pending:
        _pending.clear()
        raise KeyboardInterrupt


def handle_interrupts():
    subprocess.Popen.__init__ = _recorded_popen_init
    signal.signal(signal.SIGINT, on_interrupt)
    signal.signal(signal.SIGTERM, on_interrupt)


def stop_orphans():
    """Kills the recorded children still running (those whose start was interrupted
    before a fixture kept them); returns how many."""
    alive = [p for p in _children if p.poll() is None]
    for p in alive:
        p.kill()
        p.wait()
    return len(alive)


def processes_naming(path):
    """PIDs of live processes (not this one) whose command line or environment contains
    `path`: every process of the sandbox has its directory in one or the other."""
    mark = str(path).encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
            if stat[stat.rfind(")") + 2] == "Z":
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                text = fh.read()
            with open(f"/proc/{entry}/environ", "rb") as fh:
                text += fh.read()
        except OSError:
            continue
        if mark in text:
            found.append(int(entry))
    return found


class Sandbox:
    """The servers, the StackWorld and the directory of one demo run; close() undoes it."""

    def __init__(self, tier, workdir, pc_bin):
        self.tier = tier
        self.dir = pathlib.Path(workdir)
        self.pc_bin = pc_bin
        self.parts = []          # (what, close function), in start order
        self.kube = self.view = self.api = self.nginx = self.registry = self.world = None
        self.kubectl_bin = None
        # The real source-controller (and kustomize-controller) with a Git server, on the
        # real tier when `make deps-real` built them; else the demo plays source-controller.
        self.real_flux = tier == "real" and real_flux_built()
        self.git = self.flux = None

    def _started(self, what, obj, close):
        """Keeps obj for close() before it starts, so an interrupted start is undone too."""
        self.parts.append((what, close))
        return obj

    def _mkdir(self, name):
        d = self.dir / name
        d.mkdir(mode=0o755)
        return d

    # -- start ------------------------------------------------------------------------

    def start_servers(self):
        """The API server (without CRDs: the demo applies them), nginx and the registry."""
        kdir = self._mkdir("kube")
        if self.tier == "real":
            # __new__ then __init__: etcd starts inside the constructor, and a Ctrl-C
            # during the apiserver's start must still find it to stop it.
            kube = self._started("kube-apiserver + etcd", RealKube.__new__(RealKube),
                                 lambda: kube.close() if hasattr(kube, "proc") else None)
            kube.__init__(kdir, crds=False)
            self.kubectl_bin = kube.kubectl_bin
        else:
            kube = self._started("API-server emulator", KubeAPI.__new__(KubeAPI),
                                 lambda: kube.stop() if getattr(kube, "proc", None) else None)
            kube.__init__(kdir, crds=False)     # it kills its own process if this fails
            self.kubectl_bin = KUBECTL if os.access(KUBECTL, os.X_OK) else \
                str(REAL_BIN / "kubectl")
        self.kube = kube
        self.view = kube if self.tier == "real" else EmulatorView(kube)
        self.nginx = self._started("nginx", Nginx(self._mkdir("nginx")), lambda: self.nginx.stop())
        self.nginx.start()
        self.registry = self._started("docker-registry", Registry(self._mkdir("registry"), "plain"),
                                      lambda: self.registry.stop())
        self.registry.start()

    def start_flux(self):
        """A Git server and the real Flux controllers (flux_fixtures), once the API server
        serves Flux's CRDs."""
        from flux_fixtures import FluxControllers, GitServer
        self.git = self._started("Git server", GitServer(self._mkdir("git")),
                                 lambda: self.git.close())
        flux = self._started("source-controller + kustomize-controller",
                             FluxControllers.__new__(FluxControllers),
                             lambda: flux.close() if hasattr(flux, "processes") else None)
        flux.__init__(self.kube, self.nginx, self._mkdir("flux"))
        self.flux = flux

    def start_world(self):
        """Once the namespace exists: the StackWorld (its pulumi CLI, backend and cloud)."""
        if self.tier == "real":
            self.api = NamespacedKube(self.kube, NAMESPACE, self._mkdir("kube-ns"))
            cli = RealPulumi(self.dir / "pulumi", kind="real")
        else:
            self.api = self.view
            self.api.namespace = NAMESPACE
            cli = RealPulumi(self.dir / "pulumi", kind="standin")
        self.world = StackWorld(self.tier, self.api, cli, self.nginx, self.pc_bin,
                                self._mkdir("world"))
        self._started("pulumi-controller and its pulumi processes", self.world,
                      self._close_world)
        return self.world

    def _close_world(self):
        try:
            self.world.close()           # SIGTERM to each controller, then the CLI's children
        except BaseException as e:       # pytest.fail() on a sanitizer report
            raise RuntimeError(str(e)) from None

    @property
    def kubeconfig(self):
        return self.kube.kubeconfig

    def kubectl(self, *args, check=True, timeout=120):
        """kubectl against the sandbox (the real tier's own build, else the machine's)."""
        return self.view.kubectl(*args, check=check, timeout=timeout, kubectl=self.kubectl_bin)

    # -- stop -------------------------------------------------------------------------

    def close(self):
        """Stops what was started, newest first; returns [(what, error)], how many children
        whose start was interrupted it killed, and the processes ("PID command line") the
        final sweep had to kill."""
        errors = []
        for what, close in reversed(self.parts):
            try:
                close()
            except Exception as e:       # keep going: the rest must stop too
                errors.append((what, f"{type(e).__name__}: {e}"))
        self.parts = []
        orphans = stop_orphans()
        swept = []
        for pid in processes_naming(self.dir):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    argv = fh.read().replace(b"\0", b" ").decode(errors="replace")
                swept.append(f"{pid} {argv[:120]}")
                os.kill(pid, signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass
        return errors, orphans, swept

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)
        return not self.dir.exists()

