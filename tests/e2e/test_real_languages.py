"""Programs as their users write them, through the controller (local runner) on the real
tier: the real kube-apiserver, the real Flux source-controller serving the program from Git,
the real pulumi CLI with the language hosts deps-real builds (issue 24).

- Python (tests/real/programs/pyfiles: __main__.py, requirements.txt, Pulumi.yaml runtime
  python) on pulumi-language-python, importing `pulumi` from .real/python/venv;
- Go (tests/real/programs/gofiles: main.go, go.mod, go.sum against sdk/v3 at the CLI's
  version) on pulumi-language-go, built by the `go` found on the controller's PATH.

Each Stack gets Ready with its outputs in the outputs Secret, the config value and the
secret config value read by the program, and a File of the test provider in the cloud.
The controller's PATH (the pulumi child's, after the CLI's directory: docs/run.md,
Toolchains) is where the toolchain is found: the venv's bin/ first for Python, Go's own
directory for Go; without `go` on it the Go Stack is Stalled `PulumiUnavailable`, the
message naming `go`.  Real tier only: the stand-in runs Pulumi YAML programs only
(FIDELITY.md)."""
import os
import pathlib
import shutil
import subprocess

import pytest

from real_fixtures import REAL, real_binary
from stack_fixtures import PASSPHRASE

HERE = pathlib.Path(__file__).resolve().parent
PROGRAMS = HERE.parents[1] / "tests" / "real" / "programs"
GIT = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "name": "app"}
PASSWORD = "lang-Secret-Config-7c1e"

# A Go program's first build compiles the SDK and its dependencies (about 80 s on two
# busy cores, more on a cold build cache); the Python install runs pip.
GO_READY_TIMEOUT = 900
PY_READY_TIMEOUT = 300


def program_files(name):
    root = PROGRAMS / name
    return {str(p.relative_to(root)): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def python_venv():
    """.real/python/venv (deps-real: pulumi from PyPI), after the Python host."""
    real_binary("pulumi-language-python")
    real_binary("pulumi-language-python-exec", component="pulumi-language-python")
    venv = REAL / "python" / "venv"
    if not os.access(venv / "bin" / "python3", os.X_OK):
        pytest.fail(f"{venv} has no python3: run `make deps-real`")
    return venv


def go_toolchain():
    """The Go host and the `go` that deps-real itself builds with."""
    real_binary("pulumi-language-go")
    go = shutil.which("go")
    if go is None:
        pytest.fail("no `go` on PATH: the real tier builds with it (make deps-real)")
    return pathlib.Path(go).resolve()


def go_env(go):
    """The Stack's Go settings, as a user gives them in `envs`: nothing of the
    controller's environment but PATH reaches the CLI (docs/run.md, Toolchains), so
    the module and build caches are named here (the machine's own, warm: a fresh
    HOME would download every module again), and no toolchain is fetched."""
    out = subprocess.run([str(go), "env", "GOMODCACHE", "GOCACHE"], capture_output=True,
                         text=True, check=True).stdout.split("\n")
    return {"GOMODCACHE": {"value": out[0]}, "GOCACHE": {"value": out[1]},
            "GOTOOLCHAIN": {"value": "local"}}


def check_outputs(w, name, language, greeting):
    sec = w.outputs_secret(name)
    assert sec is not None, f"no outputs Secret for {name}"
    out = sec["decoded"]
    assert out["language"] == language
    assert out["message"] == greeting
    assert out["secretOut"] == PASSWORD
    assert pathlib.Path(out["path"]).parent == w.cloud_dir / "files"
    assert pathlib.Path(out["path"]).read_text() == greeting
    obj = w.stack(name)
    assert obj["status"]["outputs"]["secretOut"] == "[secret]"
    assert obj["status"]["outputs"]["message"] == greeting
    w.assert_no_secret(PASSWORD, PASSPHRASE)


def lang_stack(w, name, program, **spec):
    w.secret("db", {"password": PASSWORD})
    src = w.flux_source("GitRepository", "app", w.artifact(program_files(program)))
    w.apply_stack(name, fluxSource={"sourceRef": GIT}, config={"greeting": f"hi from {name}"},
                  secretsRef={"password": {"type": "Secret",
                                           "secret": {"name": "db", "key": "password"}}},
                  **spec)
    return src


@pytest.mark.parametrize("stack_world", ["real"], indirect=True)
def test_python_program_gets_ready(stack_world, monkeypatch):
    w = stack_world
    venv = python_venv()
    src = lang_stack(w, "py", "pyfiles", envs={"VIRTUAL_ENV": {"value": str(venv)}})
    # The venv's python3 first on the controller's PATH, hence on the CLI's: the
    # Python host of the real tier ignores the program's `virtualenv` option.
    monkeypatch.setenv("PATH", f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
    w.controller()
    w.wait_ready("py", revision=src["revision"], timeout=PY_READY_TIMEOUT)
    check_outputs(w, "py", "python", "hi from py")


@pytest.mark.parametrize("stack_world", ["real"], indirect=True)
def test_go_program_gets_ready(stack_world, monkeypatch):
    w = stack_world
    go = go_toolchain()
    src = lang_stack(w, "gopher", "gofiles", envs=go_env(go))
    # Go's own directory on the controller's PATH (here /usr/local/go/bin, as in
    # Go's and Pulumi's images), which the CLI's fixed PATH of old lacked.
    monkeypatch.setenv("PATH", f"{go.parent}{os.pathsep}{os.environ['PATH']}")
    w.controller()
    w.wait_ready("gopher", revision=src["revision"], timeout=GO_READY_TIMEOUT)
    check_outputs(w, "gopher", "go", "hi from gopher")


@pytest.mark.parametrize("stack_world", ["real"], indirect=True)
def test_go_program_without_go_is_stalled_naming_it(stack_world, monkeypatch):
    w = stack_world
    go = go_toolchain()
    lang_stack(w, "nogo", "gofiles", envs=go_env(go))
    path = [d for d in os.environ["PATH"].split(os.pathsep)
            if d and not os.access(os.path.join(d, "go"), os.X_OK)]
    monkeypatch.setenv("PATH", os.pathsep.join(path))
    w.controller()
    obj = w.wait_condition("nogo", "Stalled", "True", "PulumiUnavailable")
    msg = w.cond(obj, "Stalled")["message"]
    assert "the program's toolchain `go` is not on the controller's PATH" in msg, msg
    assert w.cond(obj, "Ready")["status"] == "False"
