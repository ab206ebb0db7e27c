"""Shared pytest configuration for the end-to-end tests.

Each area keeps its fixtures in its own module (``<area>_fixtures.py``) and
registers it in ``pytest_plugins`` below, so areas do not edit one file.
The binary under test is the sanitized build: ``make e2e`` exports PC_BIN.
"""
import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

pytest_plugins = ["nginx_fixtures", "registry_fixtures", "kube_fixtures", "pulumi_fixtures", "real_fixtures",
                  "flux_fixtures",
                  "stack_fixtures", "job_fixtures"]


def _binary():
    env = os.environ.get("PC_BIN")
    if env:
        return env
    return str(ROOT / "build" / "asan" / "pulumi-controller")


@pytest.fixture(scope="session")
def pc_bin():
    """Path to the pulumi-controller binary under test."""
    path = _binary()
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is not built; run 'make sanitize' first")
    return path


@pytest.fixture(scope="session")
def pc_tools():
    """Directory of the test-only C programs built from tests/tools/."""
    return os.environ.get("PC_TOOLS", str(ROOT / "build" / "asan" / "tools"))


@pytest.fixture
def run_pc(pc_bin):
    """Runs the binary with arguments; returns CompletedProcess (text)."""
    def run(*args, timeout=120, env=None, input=None):
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        return subprocess.run([pc_bin, *map(str, args)], capture_output=True, text=True,
                              timeout=timeout, env=full_env, input=input)
    return run


def which_or_skip(name):
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed; run 'make deps'")
    return path
