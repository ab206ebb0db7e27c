"""pytest fixtures of the test kubelet (tests/e2e/kubelet.py): a running TestKubelet on
the tier of the test, for the Job runner's scenarios (issue 16).

    kubelet_for(target, **options)   starts a TestKubelet against target -- a StackWorld
                        (stack_fixtures.py) or an any_kubeapi-like API (EmulatorView,
                        NamespacedKube) -- and stops it after the test.  On the real tier
                        it talks to the server directly (past the fault proxy, so a test
                        cutting the controller off does not cut the "cluster" off); pods
                        reach the API at the same address.  Options go to TestKubelet
                        (selector, commands, images, env, pod_api_url); by default it
                        watches Jobs of the target's namespace with the contract's label,
                        maps command[0] `pulumi-controller` to PC_BIN, and, for a
                        StackWorld, gives pods the world's pulumi on PATH (the recording
                        wrapper first, so world.updates() sees what pods ran).
    job_world           stack_world ([emulator] / [real]) with .kubelet started
    job_controller(w, request, **flags)
                        starts the world's controller with --runner job, the test image and,
                        on the real tier, --job-plugins-dir: the image's plugin cache (the
                        CLI's plugins, at a path outside /tmp and /work, which the test
                        kubelet rewrites to the pod's directories in every arg; the stand-in
                        needs none).  Returns the controller.
    any_kubelet         any_kubeapi ([emulator] / [real]) with .kubelet started: the
                        kubelet's own tests (test_kubelet.py)

A stopped kubelet has killed (and reaped) every process it started: teardown also
fails the test if any is left.
"""
import hashlib
import os
import pathlib
import shutil
import sys
import tempfile

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from kubelet import DEFAULT_SELECTOR, FAULT_LABEL, TestKubelet  # noqa: E402

REAL_PROVIDER = pathlib.Path(os.environ.get("REAL_DIR", str(HERE.parents[1] / ".real"))) / \
    "provider"


def _api_of(target):
    """(api, namespace, world or None) of a StackWorld or an any_kubeapi-like object."""
    if hasattr(target, "api") and hasattr(target, "cli"):
        return target.api, target.namespace, target
    return target, target.namespace, None


def _connection(api):
    """(url, token, ca_file): the real server directly, the emulator as it is."""
    url = getattr(api, "direct_url", None) or api.url
    return url, api.token, api.ca_file


def _world_env(world):
    """What the job image holds for a world's pods: its pulumi (the recording wrapper,
    then the CLI's directory, the test provider) on PATH, and the stand-in's cloud."""
    path = [str(pathlib.Path(world.pulumi_bin).parent), world.cli.bin_dir]
    if REAL_PROVIDER.is_dir():
        path.append(str(REAL_PROVIDER))
    path.append(os.environ.get("PATH", "/usr/bin:/bin"))
    env = {"PATH": os.pathsep.join(path), "PULUMI_SKIP_UPDATE_CHECK": "true",
           "PULUMI_STANDIN_CLOUD": str(world.cloud_dir)}
    if world.cli.kind == "standin":
        env["PULUMI_STANDIN_KDF_ITERATIONS"] = "1000"
    return env


@pytest.fixture
def kubelet_for(tmp_path, pc_bin):
    started = []

    def start(target, **options):
        api, namespace, world = _api_of(target)
        url, token, ca = _connection(api)
        env = dict(options.pop("env", None) or {})
        if world is not None:
            env = dict(_world_env(world), **env)
        options.setdefault("selector", DEFAULT_SELECTOR)
        k = TestKubelet(url, token, ca, tmp_path / f"kubelet-{len(started)}", pc_bin=pc_bin,
                        namespace=options.pop("namespace", namespace), env=env, **options)
        k.start()
        started.append(k)
        return k

    yield start
    leftovers = []
    for k in started:
        k.stop()
        leftovers += k.processes()
    assert not leftovers, f"pod processes left after the kubelet stopped: {leftovers}"


@pytest.fixture
def job_world(stack_world, kubelet_for):
    """stack_world with a test kubelet for its namespace (.kubelet)."""
    stack_world.kubelet = kubelet_for(stack_world)
    return stack_world


JOB_IMAGE = "registry.example.test/pulumi-controller:test"


def job_controller(w, request, **flags):
    if w.cli.kind == "real" and "job_plugins_dir" not in flags:
        image = pathlib.Path(tempfile.mkdtemp(dir="/var/tmp", prefix="pc-job-image-"))
        request.addfinalizer(lambda: shutil.rmtree(image))
        (image / "plugins").symlink_to(os.path.realpath(w.cli.home / "plugins"))
        flags["job_plugins_dir"] = str(image / "plugins")
    flags.setdefault("job_image", JOB_IMAGE)
    return w.controller(runner="job", **flags)


@pytest.fixture
def any_kubelet(any_kubeapi, kubelet_for):
    """any_kubeapi with a test kubelet watching its namespace (.kubelet)."""
    any_kubeapi.kubelet = kubelet_for(any_kubeapi, selector="kubelet-test=yes")
    return any_kubeapi


__all__ = ["FAULT_LABEL", "JOB_IMAGE", "TestKubelet", "job_controller"]


def job_name(obj, op, fingerprint):
    """The Job name the controller gives the Stack obj's op at fingerprint (short names):
    its 10 hex are sha256 of its uid and the fingerprint (docs/job-runner.md)."""
    uid, fp = obj["metadata"]["uid"], fingerprint
    h = hashlib.sha256(f"uid {len(uid)}:{uid}fingerprint {len(fp)}:{fp}".encode()).hexdigest()
    return f"{obj['metadata']['name']}-{op}-{h[:10]}"
