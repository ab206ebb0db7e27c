"""Self-test of stack_fixtures.py, the world of the Stack scenarios, on both tiers: a
Flux source served by nginx with the status source-controller writes, the --pulumi-bin
wrapper recording what it runs, the scenario programs on the CLI, a Stack applied, and
`run` started and stopped.  None of it needs the Stack reconciler."""
import gzip
import hashlib
import io
import json
import tarfile
import urllib.request

from stack_fixtures import PASSPHRASE, command_of, stack_of


def fetch(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read()


def test_flux_source_is_served_with_its_status(stack_world):
    w = stack_world
    art = w.artifact(under="app")
    got = w.flux_source("GitRepository", "prog", art)
    obj = w.client.get("source.toolkit.fluxcd.io/v1", "gitrepositories", "prog", w.namespace)
    assert obj["status"]["artifact"] == got
    assert got["digest"] == art.digest and got["size"] == art.size
    assert got["revision"].startswith("main@sha1:")
    assert w.cond(obj, "Ready")["status"] == "True"
    data = fetch(got["url"])
    assert "sha256:" + hashlib.sha256(data).hexdigest() == art.digest
    assert w.downloads(art) == 1
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as tar:
        names = tar.getnames()
    assert names[0] == "." and "app/Pulumi.yaml" in names

    w.corrupt(art)
    assert "sha256:" + hashlib.sha256(fetch(got["url"])).hexdigest() != art.digest

    assert w.flux_source("OCIRepository", "pending") is None
    pending = w.client.get("source.toolkit.fluxcd.io/v1", "ocirepositories", "pending",
                           w.namespace)
    assert "artifact" not in pending["status"]
    assert w.cond(pending, "Ready")["status"] == "Unknown"
    assert w.flux_source("Bucket", "bucket", w.artifact())["revision"].startswith("sha256:")


def test_wrapper_records_and_runs_the_cli(stack_world, tmp_path):
    w = stack_world
    work = tmp_path / "prog"
    work.mkdir()
    for rel, data in w.revision_files("stack-basic", "from-wrapper").items():
        (work / rel).write_bytes(data)
    env = dict(w.cli.env, PULUMI_BACKEND_URL=w.backend_url, PULUMI_CONFIG_PASSPHRASE=PASSPHRASE,
               PCTEST_TOKEN="tok-123")

    def run(*args):
        import subprocess
        p = subprocess.run([str(w.pulumi_bin), *args], cwd=work, env=env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, f"{args}: {p.stdout}\n{p.stderr}"
        return p
    assert run("version").stdout.startswith("v3.")
    run("stack", "init", "dev", "--secrets-provider", "passphrase", "--non-interactive")
    run("up", "--yes", "--skip-preview", "--stack", "dev", "--non-interactive")
    out = json.loads(run("stack", "output", "--json", "--stack", "dev").stdout)
    assert out["message"] == "from-wrapper"
    assert list(w.cloud_files().values()) == ["from-wrapper"]

    recs = w.cli_invocations()
    assert [r["command"] for r in recs] == ["version", "stack init", "up", "stack output"]
    assert recs[2]["stack"] == "dev"
    assert "PCTEST_TOKEN" in recs[2]["env"] and "PULUMI_CONFIG_PASSPHRASE" in recs[2]["env"]
    assert recs[2]["env_sha256"]["PCTEST_TOKEN"] == hashlib.sha256(b"tok-123").hexdigest()
    assert "tok-123" not in w.record.read_text() and PASSPHRASE not in w.record.read_text()
    assert len(w.updates(stack="dev")) == 1 and w.updates(since=w.mark()) == []
    assert [(h["kind"], h["result"]) for h in w.history("stackdemo", "dev")] == \
        [("update", "succeeded")]
    assert w.locks() == []
    assert w.hold_lock("stackdemo", "dev") in w.locks()


def cli_in(w, tmp_path, program, files=None):
    """run(*args) -> CompletedProcess of the wrapper CLI in a copy of `program`."""
    import subprocess
    work = tmp_path / program
    work.mkdir()
    for rel, data in (files or w.program_files(program)).items():
        (work / rel).write_bytes(data)
    env = dict(w.cli.env, PULUMI_BACKEND_URL=w.backend_url, PULUMI_CONFIG_PASSPHRASE=PASSPHRASE)

    def run(*args, extra=None):
        return subprocess.run([str(w.pulumi_bin), *args, "--non-interactive"], cwd=work,
                              env=dict(env, **(extra or {})), capture_output=True, text=True,
                              timeout=300)
    assert run("stack", "init", "dev", "--secrets-provider", "passphrase").returncode == 0
    return run


def test_scenario_programs_behave_as_the_scenarios_expect(stack_world, tmp_path):
    """What test_stack_failures, _inputs, _finalize and _classic rely on, on this CLI."""
    w = stack_world
    run = cli_in(w, tmp_path, "stack-broken")
    p = run("up", "--yes", "--skip-preview")
    assert p.returncode != 0 and "missing" in p.stdout + p.stderr
    assert w.cloud_files() == {}

    run = cli_in(w, tmp_path, "stack-fail")
    p = run("up", "--yes", "--skip-preview")
    assert p.returncode != 0 and "bad/name" in p.stdout + p.stderr
    assert run("config", "set", "fileName", "good").returncode == 0
    assert run("up", "--yes", "--skip-preview").returncode == 0
    assert [n.rsplit("-", 1)[0] for n in w.cloud_files()] == ["good"]   # + a random suffix
    # the destroy fault of test_stack_finalize: the CLI dies before deleting anything
    p = run("destroy", "--yes", "--skip-preview", extra={"PULUMI_STANDIN_CRASH": "destroy:0"})
    assert p.returncode != 0 and [n.rsplit("-", 1)[0] for n in w.cloud_files()] == ["good"]

    run = cli_in(w, tmp_path, "stack-secrets")
    p = run("config", "set", "--secret", "dbPassword", "pw-1")
    assert p.returncode == 0, p.stderr
    assert run("up", "--yes", "--skip-preview").returncode == 0
    out = json.loads(run("stack", "output", "--json", "--show-secrets").stdout)
    assert out == {"region": "nowhere", "secretOut": "pw-1"}

    run = cli_in(w, tmp_path, "stack-classic")
    assert run("config", "set", "region", "us-east-1").returncode == 0
    assert run("up", "--yes", "--skip-preview").returncode == 0
    assert "us-east-1" in w.cloud_files().values()


def test_fixture_helpers(stack_world):
    w = stack_world
    w.login()
    assert json.loads((w.cli.home / "credentials.json").read_text())["current"] == w.backend_url
    w.client.create({"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
                     "metadata": {"name": "made", "namespace": w.namespace},
                     "spec": {"url": "ssh://git@example.test/x.git", "interval": "60s"}},
                    "gitrepositories", w.namespace)
    got = w.flux_source("GitRepository", "made", w.artifact(), revision="v1@sha1:" + "0" * 40,
                        create=False)
    obj = w.client.get("source.toolkit.fluxcd.io/v1", "gitrepositories", "made", w.namespace)
    assert obj["spec"]["url"] == "ssh://git@example.test/x.git"      # left as it was
    assert obj["status"]["artifact"]["revision"] == got["revision"] == "v1@sha1:" + "0" * 40


def test_apply_stack_and_the_controller_process(stack_world):
    w = stack_world
    w.git_stack("demo", "prog", config={"greeting": "x"})
    obj = w.stack("demo")
    assert obj["spec"]["envRefs"]["PULUMI_CONFIG_PASSPHRASE"]["secret"]["name"] == "pulumi-passphrase"
    assert obj["spec"]["backend"] == w.backend_url
    w.git_stack("demo", "prog", config={"greeting": "y"})
    assert w.stack("demo")["metadata"]["generation"] == 2
    assert w.outputs_secret("demo") is None and w.events("demo") == []
    ctl = w.controller()
    ctl.wait_log("caches synced")
    assert ctl.health_port > 0
    assert "pulumi_controller_workqueue_depth" in ctl.metrics()
    ctl.wait_log("stack queued", key=f"{w.namespace}/demo")
    w.settle("demo")               # (its source does not exist: nothing runs)
    assert w.cli_invocations() == []
    assert ctl.stop() == 0
    assert ctl.sanitizer_report() is None
    w.assert_no_secret(PASSPHRASE)


def test_command_and_stack_of_argv():
    assert command_of(["--non-interactive", "stack", "select", "--stack", "dev"]) == "stack select"
    assert command_of(["up", "--yes", "--stack", "dev", "--event-log", "/x"]) == "up"
    assert command_of(["--cwd", "/w", "config", "set-all", "--plaintext", "a=b"]) == "config set-all"
    assert stack_of(["up", "--stack=s1"]) == "s1" and stack_of(["up", "-s", "s2"]) == "s2"
    assert stack_of(["version"]) is None


def test_nginx_log_counts_wait_for_a_request_still_answered(stack_world):
    """nginx writes a request's access-log line only once its response is sent: a count
    taken while the response is still going out (here /paced, 2 MiB/s, of 3 MiB) waits
    for the line instead of missing it."""
    import threading
    from stack_fixtures import wait_until
    nginx = stack_world.nginx
    name = f"paced-{stack_world.id}.bin"
    data = bytes(3 << 20)
    nginx.put(name, data)
    before = nginx.counted()
    got = []
    t = threading.Thread(target=lambda: got.append(fetch(nginx.url(f"/paced/{name}"))))
    t.start()
    try:
        wait_until(lambda: nginx.counted() > before, timeout=10, what="nginx to receive the request")
        assert nginx.requests(f"/paced/{name}") == [(200, f"/paced/{name}")]
    finally:
        t.join(20)
    assert got == [data]
