"""Issue 12, scenarios 2, 3 and 7, with the real source-controller:

  2. an OCIRepository with a semver range over programs pushed both with
     `pulumi-controller push` and with the real `flux push artifact`: the higher tag
     wins whoever pushed it, and the two pushers' artifacts have the same media types;
  3. a Bucket on the S3 server (flux_fixtures.s3_server) makes a Stack Ready;
  7. source-controller garbage-collects the artifact a Stack's status points at (and,
     as when the collection races a download, an artifact vanishes under the controller):
     the Stack re-reads the source and moves on, never stuck.

Real tier only: the emulator tier has no source-controller to select tags, list a
bucket or collect artifacts (its semver selection is test_stack_oci.py's ociSource)."""
import json

import pytest

from stack_fixtures import SOURCE_API, wait_until

pytestmark = [pytest.mark.parametrize("stack_world", ["real"], indirect=True),
              pytest.mark.usefixtures("isolated_docker_config")]

MANIFEST_TYPES = "application/vnd.oci.image.manifest.v1+json"


def source_ref(kind, name="app"):
    return {"sourceRef": {"apiVersion": SOURCE_API, "kind": kind, "name": name}}


def manifest(w, repo, tag):
    status, _, body = w.registry.raw("GET", f"/v2/{repo}/manifests/{tag}",
                                     headers={"Accept": MANIFEST_TYPES})
    assert status == 200, body
    return json.loads(body)


def test_oci_semver_follows_the_higher_tag_of_either_pusher(stack_world):
    w = stack_world
    repo = w.oci_repo("semver")
    d1 = w.push_program(f"{repo}:1.0.0", w.revision_files(greeting="by-pc"))
    d2 = w.push_program(f"{repo}:1.1.0", w.revision_files(greeting="by-flux"), tool="flux")
    spec = {"url": f"oci://{w.registry.host}/{repo}", "interval": "10m", "insecure": True,
            "ref": {"semver": ">=1.0.0"}}
    src = w.reconcile_source("OCIRepository", "app", spec)["status"]["artifact"]
    assert src["revision"] == f"1.1.0@{d2}"
    w.apply_stack("demo", fluxSource=source_ref("OCIRepository"))
    w.controller()
    w.wait_ready("demo", revision=src["revision"])
    assert list(w.cloud_files().values()) == ["by-flux"]

    # the other pusher's higher tag wins in turn: one update
    mark = w.mark()
    d3 = w.push_program(f"{repo}:1.2.0", w.revision_files(greeting="by-pc-again"))
    src = w.reconcile_source("OCIRepository", "app")["status"]["artifact"]
    assert src["revision"] == f"1.2.0@{d3}"
    w.wait_ready("demo", revision=src["revision"])
    w.settle("demo")
    assert len(w.updates("dev", since=mark)) == 1
    assert list(w.cloud_files().values()) == ["by-pc-again"]

    # interchangeable: the same artifact and layer media types from both pushers
    by_pc, by_flux = manifest(w, repo, "1.0.0"), manifest(w, repo, "1.1.0")
    assert by_pc["config"]["mediaType"] == by_flux["config"]["mediaType"]
    assert [la["mediaType"] for la in by_pc["layers"]] == \
        [la["mediaType"] for la in by_flux["layers"]]
    assert by_pc.get("artifactType") == by_flux.get("artifactType")
    assert d1 != d2


def test_bucket_source_makes_a_stack_ready(stack_world):
    w = stack_world
    src = w.flux_source("Bucket", "app", w.artifact())
    assert src["revision"].startswith("sha256:")
    w.apply_stack("demo", fluxSource=source_ref("Bucket"))
    w.controller()
    obj = w.wait_ready("demo", revision=src["revision"])
    assert obj["status"]["artifact"]["digest"] == src["digest"]
    assert list(w.cloud_files().values()) == ["hello"]


def test_collected_artifacts_never_leave_a_stack_stuck(stack_world):
    w = stack_world
    src = w.flux_source("GitRepository", "app", w.artifact())
    w.apply_stack("demo", fluxSource=source_ref("GitRepository"))
    ctl = w.controller()
    w.wait_ready("demo", revision=src["revision"])
    assert ctl.stop() == 0

    # Three more revisions while the controller is down: source-controller keeps two
    # (--artifact-retention-records), so the one the Stack's status names is collected.
    for greeting in ("two", "three", "four"):
        last = w.flux_source("GitRepository", "app",
                             w.artifact(w.revision_files(greeting=greeting)))
    first_file = w.flux.storage / src["path"]
    wait_until(lambda: not first_file.exists(), 120, f"{src['path']} collected")
    mark = w.mark()
    w.controller()
    w.wait_ready("demo", revision=last["revision"])
    w.settle("demo")
    assert len(w.updates("dev", since=mark)) == 1
    assert list(w.cloud_files().values()) == ["four"]

    # The artifact vanishes before the controller downloads it (a collection racing
    # the download): a clear status, then source-controller rebuilds it on its next
    # reconcile and the Stack moves on.
    assert w.ctl.stop() == 0
    art = w.artifact(w.revision_files(greeting="five"))
    five = w.flux_source("GitRepository", "app", art)
    (w.flux.storage / five["path"]).unlink()
    w.controller()
    obj = w.wait_condition("demo", "Ready", "False", "ArtifactFailed")
    assert five["url"] in w.cond(obj, "Ready")["message"] or \
        "404" in w.cond(obj, "Ready")["message"], w.cond(obj, "Ready")
    again = w.reconcile_source("GitRepository", "app")["status"]["artifact"]
    assert again["revision"] == five["revision"]
    w.wait_ready("demo", revision=five["revision"], timeout=240)
    assert list(w.cloud_files().values()) == ["five"]
