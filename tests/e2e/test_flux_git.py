"""Issue 12, scenarios 1 and 8: the real source-controller fetches a GitRepository from
the loopback Git server (flux_fixtures.git_server) and the Stack follows; a new commit
and the real `flux reconcile source git` run exactly one update at the new revision;
the classic manifest's programRef source the controller creates is fetched by
source-controller from the Git server.

Real tier only: the `flux` CLI and a Git fetch need the real source-controller (the
emulator tier's sources are hand-written: test_stack_git.py, test_stack_classic.py)."""
import pathlib
import re

import pytest
import yaml

from flux_fixtures import SHARD_LABEL
from stack_fixtures import SOURCE_API

pytestmark = pytest.mark.parametrize("stack_world", ["real"], indirect=True)

HERE = pathlib.Path(__file__).resolve().parent
GIT = {"apiVersion": SOURCE_API, "kind": "GitRepository", "name": "app"}


def test_new_commit_and_flux_reconcile_source_run_one_update(stack_world):
    w = stack_world
    src = w.flux_source("GitRepository", "app", w.artifact())
    assert re.fullmatch(r"main@sha1:[0-9a-f]{40}", src["revision"])
    w.apply_stack("demo", fluxSource={"sourceRef": GIT})
    w.controller()
    w.wait_ready("demo", revision=src["revision"])
    assert list(w.cloud_files().values()) == ["hello"]

    mark = w.mark()
    sha = w.git_server.commit(w.git_repo("app"), w.revision_files(greeting="pushed"))
    out = w.flux.cli("reconcile", "source", "git", "app", namespace=w.namespace)
    assert "fetched revision" in (out.stdout + out.stderr), out.stderr
    obj = w.wait_ready("demo", revision=f"main@sha1:{sha}")
    w.settle("demo")
    assert len(w.updates("dev", since=mark)) == 1
    assert obj["status"]["artifact"]["revision"] == f"main@sha1:{sha}"
    assert list(w.cloud_files().values()) == ["pushed"]


def test_classic_program_ref_is_fetched_by_source_controller(stack_world):
    """The classic manifest, its repo pointed at the local Git server and its ref at a tag
    pushed there: source-controller fetches the GitRepository the controller created."""
    w = stack_world
    repo = w.git_repo("pulumi-network")
    w.git_server.commit(repo, w.program_files("stack-classic"))
    sha = w.git_server.tag(repo, "v2.1.0")
    doc = yaml.safe_load((HERE / "programs" / "classic-stack.yaml").read_text())
    doc["metadata"]["namespace"] = w.namespace
    assert doc["spec"]["programRef"]["ref"] == "refs/tags/v2.1.0"
    doc["spec"]["programRef"]["repo"] = w.git_server.url(repo)
    doc["spec"]["envs"].update({
        "PULUMI_CONFIG_PASSPHRASE": {"valueFrom": {"secretKeyRef": {
            "name": "pulumi-passphrase", "key": "passphrase"}}},
        "PULUMI_STANDIN_CLOUD": {"value": str(w.cloud_dir)}})
    w.secret("aws-creds", {"access-key-id": "AKIA-x", "secret-access-key": "s-x"})
    w.login()
    w.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))
    w.controller()
    name = doc["metadata"]["name"]
    # the test's source-controller serves its shard only (flux_fixtures.SHARD_LABEL)
    w._wait(name, lambda: w.client.list(SOURCE_API, "gitrepositories", w.namespace)["items"],
            120, "the programRef GitRepository")
    w.kubectl("label", "gitrepository", f"{name}-program", f"{SHARD_LABEL[0]}={SHARD_LABEL[1]}")
    obj = w.wait_ready(name, revision=f"v2.1.0@sha1:{sha}", timeout=240)
    assert obj["status"]["outputs"]["region"] == "us-east-1"
    repo_obj = w.client.get(SOURCE_API, "gitrepositories", f"{name}-program", w.namespace)
    assert repo_obj["spec"]["url"] == w.git_server.url(repo)
    assert repo_obj["status"]["artifact"]["revision"] == f"v2.1.0@sha1:{sha}"
