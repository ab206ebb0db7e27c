"""Stack scenario 6 (issue 11): failures, each with a clear status and event and nothing
left behind: a missing source; a source without an artifact yet; an artifact whose bytes
do not match its digest; a hostile archive; `dir` missing or without Pulumi.yaml; a
compile error; an update failure (backoff, failure count, Stalled, a spec change
un-stalls); a lock held by someone else; a source kind whose CRD is not installed.
Condition reasons and event reasons are CONTRACT.md's.  Both tiers."""
import gzip
import hashlib
import pathlib
import sys

from stack_fixtures import SOURCE_API

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import hostile_corpus  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent


def git(name):
    return {"sourceRef": {"apiVersion": SOURCE_API, "kind": "GitRepository", "name": name}}


def assert_waiting(w, name, reason):
    """Ready=False and Reconciling=True with `reason`, never Stalled."""
    obj = w.wait_condition(name, "Ready", "False", reason)
    rec = w.cond(obj, "Reconciling")
    assert rec and rec["status"] == "True" and rec["reason"] == reason, obj["status"]
    assert w.cond(obj, "Stalled") is None
    assert w.cond(obj, "Ready")["message"]
    return obj


def assert_stalled(w, name, reason):
    """Ready=False and Stalled=True with `reason`, no Reconciling, a Stalled event."""
    obj = w.wait_condition(name, "Stalled", "True", reason)
    ready = w.cond(obj, "Ready")
    assert ready["status"] == "False" and ready["reason"] == reason, obj["status"]
    assert w.cond(obj, "Reconciling") is None
    assert w.cond(obj, "Stalled")["message"]
    return obj


def ran_nothing(w, stack):
    return [r for r in w.cli_invocations() if r["stack"] == stack] == []


def test_source_missing_then_created(stack_world):
    w = stack_world
    w.apply_stack("demo", fluxSource=git("later"))
    w.controller()
    obj = assert_waiting(w, "demo", "SourceNotFound")
    assert "later" in w.cond(obj, "Ready")["message"]
    assert ran_nothing(w, "dev")
    src = w.flux_source("GitRepository", "later", w.artifact())
    w.wait_ready("demo", revision=src["revision"])


def test_source_without_artifact_then_ready(stack_world):
    w = stack_world
    assert w.flux_source("GitRepository", "pending") is None
    w.apply_stack("demo", fluxSource=git("pending"))
    w.controller()
    assert_waiting(w, "demo", "ArtifactNotReady")
    assert ran_nothing(w, "dev")
    src = w.flux_source("GitRepository", "pending", w.artifact())
    w.wait_ready("demo", revision=src["revision"])


def test_digest_mismatch_keeps_nothing(stack_world):
    w = stack_world
    art = w.artifact()
    w.flux_source("GitRepository", "app", art)
    w.corrupt(art)
    w.apply_stack("demo", fluxSource=git("app"))
    w.controller()
    obj = assert_waiting(w, "demo", "ArtifactFailed")
    assert "digest" in w.cond(obj, "Ready")["message"].lower()
    w.wait_event("demo", "ArtifactFailed")
    assert ran_nothing(w, "dev")
    bad = hashlib.sha256((w.nginx.root / art.key).read_bytes()).hexdigest()
    kept = [p for p in w.storage.rglob("*") if p.is_file() and
            hashlib.sha256(p.read_bytes()).hexdigest() == bad]
    assert kept == [], "the altered download was kept"
    # nginx serves the right bytes again: the retry (with backoff) succeeds
    w.nginx.put(art.key, art.data)
    w.wait_ready("demo", timeout=240)


def test_hostile_archive_is_refused(stack_world):
    w = stack_world
    data = gzip.compress(hostile_corpus.tar_bytes([
        hostile_corpus.F("Pulumi.yaml", b"name: x\nruntime: yaml\n"),
        hostile_corpus.L("up", "../outside")]), mtime=0)
    w.flux_source("GitRepository", "app", w.raw_artifact(data))
    w.apply_stack("demo", fluxSource=git("app"))
    w.controller()
    obj = assert_stalled(w, "demo", "ArtifactRefused")
    assert "outside the root" in w.cond(obj, "Ready")["message"]
    w.wait_event("demo", "ArtifactRefused")
    assert ran_nothing(w, "dev")
    assert not list(w.storage.rglob("outside"))
    # a new revision with a good archive un-stalls it
    src = w.flux_source("GitRepository", "app", w.artifact())
    w.wait_ready("demo", revision=src["revision"])


def test_dir_missing_or_without_pulumi_yaml(stack_world):
    w = stack_world
    art = w.artifact(under="programs/app", extra={"docs/README.md": b"no program here\n"})
    w.flux_source("GitRepository", "app", art)
    w.apply_stack("nodir", stack="nodir", fluxSource=dict(git("app"), dir="programs/missing"))
    w.apply_stack("noyaml", stack="noyaml", fluxSource=dict(git("app"), dir="docs"))
    w.apply_stack("good", stack="good", fluxSource=dict(git("app"), dir="programs/app"))
    w.controller()
    for name, path in (("nodir", "programs/missing"), ("noyaml", "docs")):
        obj = assert_stalled(w, name, "ProgramNotFound")
        assert path in w.cond(obj, "Ready")["message"]
    w.wait_ready("good")
    assert ran_nothing(w, "nodir") and ran_nothing(w, "noyaml")
    # fixing dir (a spec change) un-stalls
    w.apply_stack("nodir", stack="nodir", fluxSource=dict(git("app"), dir="programs/app"))
    w.wait_ready("nodir")


def test_compile_error_fails_the_update_and_leaves_no_lock(stack_world):
    w = stack_world
    w.flux_source("GitRepository", "app", w.artifact(w.program_files("stack-broken")))
    w.apply_stack("demo", fluxSource=git("app"), maxUpdateFailures=5)
    w.controller()
    obj = w.wait_condition("demo", "Ready", "False", "UpdateFailed")
    assert "missing" in w.cond(obj, "Ready")["message"]
    ev = w.wait_event("demo", "UpdateFailed")
    assert ev[0]["type"] == "Warning" and "missing" in ev[0]["message"]
    assert obj["status"]["lastUpdate"]["state"] == "failed"
    assert w.locks() == [] and w.cloud_files() == {}


def test_update_failure_backs_off_stalls_and_a_spec_change_unstalls(stack_world):
    w = stack_world
    w.flux_source("GitRepository", "app", w.artifact(w.program_files("stack-fail")))
    w.apply_stack("demo", fluxSource=git("app"), maxUpdateFailures=3,
                  retryMaxBackoffDurationSeconds=1)
    w.controller()
    obj = w.wait_condition("demo", "Ready", "False", "UpdateFailed")
    assert "bad/name" in w.cond(obj, "Ready")["message"]
    w.wait_event("demo", "UpdateFailed")

    obj = assert_stalled(w, "demo", "UpdateFailed")
    assert obj["status"]["lastUpdate"]["failures"] == 3
    assert obj["status"]["lastUpdate"]["state"] == "failed"
    w.wait_event("demo", "Stalled")
    w.settle("demo")
    assert len(w.updates("dev")) == 3                     # then no more tries
    assert w.locks() == []

    mark = w.mark()
    w.apply_stack("demo", fluxSource=git("app"), maxUpdateFailures=3,
                  retryMaxBackoffDurationSeconds=1, config={"fileName": f"good-{w.id}"})
    obj = w.wait_ready("demo")
    assert w.cond(obj, "Stalled") is None
    assert obj["status"]["lastUpdate"]["state"] == "succeeded"
    assert not obj["status"]["lastUpdate"].get("failures")
    assert len(w.updates("dev", since=mark)) == 1
    # the provider adds a random suffix to a file's name
    assert [n.rsplit("-", 1)[0] for n in w.cloud_files()] == [f"good-{w.id}"]


def test_lock_held_by_someone_else_is_reported_never_broken(stack_world):
    w = stack_world
    src = w.flux_source("GitRepository", "app", w.artifact())
    w.apply_stack("demo", fluxSource=git("app"))
    lock = w.hold_lock("stackdemo", "dev", owner="ops", host="another-controller")
    w.controller()
    obj = assert_waiting(w, "demo", "UpdateConflict")
    msg = w.cond(obj, "Reconciling")["message"]
    assert "ops@another-controller" in msg, msg
    w.wait_event("demo", "UpdateConflict")
    assert lock.exists()                                   # never broken
    assert "LockCancelled" not in w.event_reasons("demo")
    lock.unlink()                                          # the other holder finishes
    w.wait_ready("demo", revision=src["revision"], timeout=240)
    assert w.locks() == []


def test_source_kind_not_served(bare_stack_world):
    w = bare_stack_world
    w.apply_stack("demo", fluxSource=git("app"))
    w.controller()
    obj = assert_stalled(w, "demo", "SourceKindNotServed")
    assert "GitRepository" in w.cond(obj, "Ready")["message"]
    assert ran_nothing(w, "dev")


def test_flux_installed_after_the_controller(bare_stack_world):
    """Flux's CRDs applied while the controller runs: the kind is discovered and
    watched, and the Stack Stalled on SourceKindNotServed reconciles."""
    w = bare_stack_world
    w.apply_stack("demo", fluxSource=git("app"))
    w.controller(discovery_interval="1s")
    assert_stalled(w, "demo", "SourceKindNotServed")
    w.api.apply_file(HERE / "crds" / "source.toolkit.fluxcd.io_gitrepositories.yaml")
    if w.tier == "real":
        w.api.kubectl("wait", "--for=condition=Established",
                      "crd/gitrepositories.source.toolkit.fluxcd.io", "--timeout=120s")
        w.api.wait_custom_resources_served()
    w.ctl.wait_log("kind now served by the API server; watching it", kind="GitRepository")
    # hand-written on both tiers: no source-controller serves the bare server
    src = w.hand_written_source("GitRepository", "app", w.artifact())
    w.wait_ready("demo", revision=src["revision"])
