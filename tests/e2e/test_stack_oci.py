"""Stack scenario 2 (issue 11): an OCIRepository source; an ociSource whose semver range
picks up a newly pushed higher tag within its interval; a tag moved to new content is
picked up by digest.  The registry is docker-registry (registry_fixtures.registry_plain),
programs are pushed with `pulumi-controller push`.  Both tiers."""
import pytest

from stack_fixtures import SOURCE_API

pytestmark = pytest.mark.usefixtures("isolated_docker_config")


def push(run_pc, registry, w, tmp_path, repo, tag, greeting):
    """Pushes stack-basic with `greeting` as repo:tag; returns the manifest digest."""
    d = tmp_path / f"push-{tag}-{greeting}"
    d.mkdir()
    for rel, data in w.revision_files(greeting=greeting).items():
        (d / rel).write_bytes(data)
    r = run_pc("push", registry.ref(repo, tag), "--path", d, "--plain-http",
               "--source", "https://git.example.test/app", "--revision", f"main@sha1:{greeting}")
    assert r.returncode == 0, r.stderr
    digest = r.stdout.strip()
    assert digest.startswith("sha256:")
    return digest


def oci_source(registry, repo, ref):
    return {"url": f"oci://{registry.host}/{repo}", "ref": ref, "insecure": True,
            "interval": "2s"}


def test_oci_repository_source(stack_world):
    w = stack_world
    src = w.flux_source("OCIRepository", "app", w.artifact())
    w.apply_stack("demo", fluxSource={"sourceRef": {"apiVersion": SOURCE_API,
                                                    "kind": "OCIRepository", "name": "app"}})
    w.controller()
    obj = w.wait_ready("demo", revision=src["revision"])
    assert obj["status"]["artifact"]["digest"] == src["digest"]
    assert list(w.cloud_files().values()) == ["hello"]


def test_oci_source_semver_picks_up_a_higher_tag(stack_world, run_pc, registry_plain, tmp_path):
    w = stack_world
    repo = f"stacks-{w.id}/semver"
    push(run_pc, registry_plain, w, tmp_path, repo, "0.9.0", "old")
    d1 = push(run_pc, registry_plain, w, tmp_path, repo, "1.0.0", "one")
    w.apply_stack("demo", ociSource=oci_source(registry_plain, repo, {"semver": ">=1.0.0"}))
    w.controller()
    w.wait_ready("demo", revision=f"1.0.0@{d1}")
    assert list(w.cloud_files().values()) == ["one"]

    mark = w.mark()
    push(run_pc, registry_plain, w, tmp_path, repo, "2.0.0-rc.1", "pre")   # not in range
    d2 = push(run_pc, registry_plain, w, tmp_path, repo, "1.1.0", "newer")
    obj = w.wait_ready("demo", revision=f"1.1.0@{d2}", timeout=120)
    assert obj["status"]["artifact"]["revision"] == f"1.1.0@{d2}"
    w.settle("demo")
    assert len(w.updates("dev", since=mark)) == 1
    assert list(w.cloud_files().values()) == ["newer"]


def test_oci_source_moved_tag_is_picked_up_by_digest(stack_world, run_pc, registry_plain,
                                                     tmp_path):
    w = stack_world
    repo = f"stacks-{w.id}/moved"
    d1 = push(run_pc, registry_plain, w, tmp_path, repo, "stable", "first")
    w.apply_stack("demo", ociSource=oci_source(registry_plain, repo, {"tag": "stable"}))
    w.controller()
    w.wait_ready("demo", revision=f"stable@{d1}")

    mark = w.mark()
    d2 = push(run_pc, registry_plain, w, tmp_path, repo, "stable", "moved")
    assert d2 != d1
    w.wait_ready("demo", revision=f"stable@{d2}", timeout=120)
    w.settle("demo")
    assert len(w.updates("dev", since=mark)) == 1
    assert list(w.cloud_files().values()) == ["moved"]


def test_reconcile_request_looks_up_a_moved_tag_at_once(stack_world, run_pc, registry_plain,
                                                        tmp_path):
    """A tag moved while its interval is long: a reconcile request (what
    `pulumi-controller reconcile` and `flux reconcile` set) looks it up now."""
    w = stack_world
    repo = f"stacks-{w.id}/requested"
    d1 = push(run_pc, registry_plain, w, tmp_path, repo, "stable", "first")
    src = dict(oci_source(registry_plain, repo, {"tag": "stable"}), interval="1h")
    w.apply_stack("demo", ociSource=src)
    w.controller()
    w.wait_ready("demo", revision=f"stable@{d1}")
    d2 = push(run_pc, registry_plain, w, tmp_path, repo, "stable", "moved")
    w.settle("demo")
    assert w.stack("demo")["status"]["artifact"]["revision"] == f"stable@{d1}"   # not looked up yet

    mark = w.mark()
    token = "manual-1"
    w.patch_stack("demo", {"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": token}}})
    obj = w.wait_ready("demo", revision=f"stable@{d2}", timeout=120)
    assert obj["status"]["lastHandledReconcileAt"] == token
    assert len(w.updates("dev", since=mark)) == 1
    assert list(w.cloud_files().values()) == ["moved"]


def test_credentials_over_plain_http_are_warned_about(stack_world, run_pc, registry_plain, tmp_path):
    """insecure: true with a secretRef: the registry credentials would cross the network
    in cleartext.  The Ready message says so (on every pass, not only when a lookup ran)
    and the controller logs a warning; without the secretRef neither appears."""
    import base64
    import json
    w = stack_world
    repo = f"stacks-{w.id}/cleartext"
    d1 = push(run_pc, registry_plain, w, tmp_path, repo, "stable", "first")
    auth = base64.b64encode(b"robot:Plain-Http-Pass-5").decode()
    w.secret("regcred", {".dockerconfigjson": json.dumps({"auths": {registry_plain.host: {"auth": auth}}})})
    ctl = w.controller()
    w.apply_stack("creds", ociSource=dict(oci_source(registry_plain, repo, {"tag": "stable"}),
                                          secretRef={"name": "regcred"}))
    w.apply_stack("anon", ociSource=oci_source(registry_plain, repo, {"tag": "stable"}))
    obj = w.wait_ready("creds", revision=f"stable@{d1}")
    msg = w.cond(obj, "Ready")["message"]
    assert "spec.ociSource.insecure: the registry credentials of Secret regcred are sent over plain HTTP" in msg
    assert "Plain-Http-Pass-5" not in msg
    ctl.wait_log("registry credentials sent over plain HTTP (spec.ociSource.insecure)", name="creds")
    obj = w.wait_ready("anon", revision=f"stable@{d1}")
    assert "plain HTTP" not in w.cond(obj, "Ready")["message"]
    assert not ctl.find("registry credentials sent over plain HTTP (spec.ociSource.insecure)", name="anon")
