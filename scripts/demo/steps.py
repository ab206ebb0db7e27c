"""The demo's steps, in the order run() takes them; each prints what it does and checks it
(a Stack that is not Ready with the expected output within the timeout fails the demo)."""
import hashlib
import secrets
import subprocess

from demo import samples, show
from demo.samples import FLUX_STACK, NAMESPACE, OCI_REPO, OCI_STACK, OCI_TAG, SOURCE
from demo.sandbox import ROOT
from flux_fixtures import SHARD_LABEL, SOURCE_API  # noqa: E402  (sandbox put tests/e2e on the path)
from kube_fixtures import wait_for  # noqa: E402

GIT_REPO = "platform/hello"     # the Git server's repository of the GitRepository sample
from demo.show import say, step


class DemoFailed(Exception):
    pass


def run(sb, timeout):
    start_sandbox(sb)
    apply_crds(sb)
    apply_samples(sb)
    step("publishing revision 1 (greeting 'hello') as a Flux artifact and with "
         "pulumi-controller push")
    rev1 = publish(sb, "hello")
    run_controller(sb, rev1, timeout)
    cli = show.Cli(sb)
    show_stacks(cli)
    rev2 = change(sb, cli, timeout)
    rollback(sb, cli, rev2, timeout)


def start_sandbox(sb):
    step("starting the sandbox on loopback")
    sb.start_servers()
    real = sb.tier == "real"
    say(f"API server      {sb.kube.direct_url if real else sb.kube.url}  "
        f"({'kube-apiserver + etcd' if real else 'emulator'})")
    say(f"artifact server {sb.nginx.url('artifacts/')}  (nginx)")
    say(f"OCI registry    {sb.registry.url}  (docker-registry)")


def apply_crds(sb):
    step("applying the CRDs with kubectl, creating the namespace")
    if sb.real_flux:
        kubectl(sb, "apply", "--server-side", "-f", "deploy/crds/pulumi.com_stacks.yaml",
                "-f", ".real/flux-crds/", note="Flux's CRDs, from the controllers' own modules")
    else:
        kubectl(sb, "apply", "--server-side", "-f", "deploy/crds/pulumi.com_stacks.yaml",
                "-f", "tests/e2e/crds/", note="Flux's source CRDs, as Flux installs them")
    if sb.tier == "real":
        sb.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=120s")
        sb.kube.wait_custom_resources_served()
    kubectl(sb, "create", "namespace", NAMESPACE)
    if sb.real_flux:
        sb.start_flux()
        say(f"Git server      {sb.git.url(GIT_REPO)}  (git http-backend)")
        say("source-controller and kustomize-controller running (.real/bin, "
            f"label {SHARD_LABEL[0]}={SHARD_LABEL[1]})")
    sb.start_world()


def apply_samples(sb):
    step("applying the samples with kubectl: a Secret, a GitRepository and two Stacks")
    w = sb.world
    git = {"git_url": sb.git.url(GIT_REPO), "git_labels": dict([SHARD_LABEL])} if sb.real_flux else {}
    (sb.dir / "samples.yaml").write_text(
        samples.manifests(sb.registry.host, w.backend_url, w.cloud_dir, **git))
    kubectl(sb, "apply", "--server-side", "-f", str(sb.dir / "samples.yaml"), shown="samples.yaml")
    say(f"{FLUX_STACK}: spec.fluxSource -> GitRepository {SOURCE} (no artifact yet)")
    say(f"{OCI_STACK}:  spec.ociSource  -> {sb.registry.ref(OCI_REPO, OCI_TAG)} "
        "(looked at every 5s)")
    say(f"both: file:// backend in the sandbox, passphrase from Secret {samples.PASSPHRASE_SECRET}")


def run_controller(sb, rev1, timeout):
    step("running pulumi-controller until both Stacks are Ready")
    w = sb.world
    ctl = w.controller(namespace=NAMESPACE, log_level="info", shutdown_grace="10s")
    say(f"$ pulumi-controller run --namespace {NAMESPACE} --kubeconfig ... --pulumi-bin ... "
        f"(pid {ctl.proc.pid}, log {ctl.log_path.name})")
    wait_ready(sb, FLUX_STACK, rev1[0], timeout, "hello, world")
    wait_ready(sb, OCI_STACK, rev1[1], timeout, "hello, world")
    say(f"pulumi up runs so far: {len(w.updates())}; the cloud holds:")
    show_cloud(w)


def show_stacks(cli):
    step("the Stacks and their outputs")
    cli.fallback_note()
    cli.get_stacks()
    cli.outputs(FLUX_STACK)
    cli.outputs(OCI_STACK)


def change(sb, cli, timeout):
    step("a change: revision 2 (greeting 'bonjour'), published both ways")
    mark = sb.world.mark()
    rev2 = publish(sb, "bonjour")
    say("the tag stable moved to the new content; the GitRepository has a new revision:")
    wait_ready(sb, FLUX_STACK, rev2[0], timeout, "bonjour, world")
    wait_ready(sb, OCI_STACK, rev2[1], timeout, "bonjour, world")
    say(f"the change landed: {len(sb.world.updates(since=mark))} pulumi up runs, one per Stack")
    cli.get_stacks()
    return rev2


def rollback(sb, cli, rev2, timeout):
    """Pins the ociSource Stack to the manifest digest of the revision before rev2, as
    docs/stack-api.md says to roll back: found in the Stack's own status.history."""
    step(f"a rollback: pin {OCI_STACK} to revision 1's digest from its status.history")
    history = sb.world.stack(OCI_STACK)["status"].get("history") or []
    cli.history(OCI_STACK)
    previous = next((h["revision"] for h in history if h.get("revision") != rev2[1]), "")
    if "@" not in previous:
        raise DemoFailed(f"no earlier revision in {OCI_STACK}'s status.history: {history}")
    patch = samples.pin_digest_patch(previous.rsplit("@", 1)[1])
    kubectl(sb, "patch", "stack", OCI_STACK, "-n", NAMESPACE, "--type", "merge", "-p", patch)
    wait_ready(sb, OCI_STACK, None, timeout, "hello, world")
    cli.outputs(OCI_STACK)
    say(f"rolled back: {OCI_STACK} runs revision 1 again, {FLUX_STACK} stays on revision 2")
    show_cloud(sb.world)


# -- helpers ---------------------------------------------------------------------------

def kubectl(sb, *args, shown=None, note=None):
    """kubectl from the repository's root, shown as typed (`shown` replaces the last
    argument, a long path; `note` becomes a comment)."""
    words = [*args[:-1], shown] if shown else list(args)
    words = [f"'{a}'" if a.startswith("{") else a for a in words]
    out = sb.kubectl(*[str(ROOT / a) if a.startswith(("deploy/", "tests/", ".real/")) else a
                       for a in args]).stdout
    show.command(["kubectl", *words] + ([f" # {note}"] if note else []), out)
    return out


def commit_of(greeting):
    """The revision both publications carry, as if the program were a Git commit."""
    return "main@sha1:" + hashlib.sha1(samples.program_files(greeting)["Pulumi.yaml"]).hexdigest()


def push(sb, greeting):
    """`pulumi-controller push` of the program with `greeting`; returns the manifest digest."""
    d = sb.dir / f"program-{greeting}"
    d.mkdir()
    for rel, data in samples.program_files(greeting).items():
        (d / rel).write_bytes(data)
    argv = [sb.pc_bin, "push", sb.registry.ref(OCI_REPO, OCI_TAG), "--path", str(d),
            "--plain-http", "--source", samples.GIT_URL, "--revision", commit_of(greeting)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    show.command(argv[:3] + ["--path", d.name, *argv[5:]], r.stdout)
    if r.returncode != 0 or not r.stdout.startswith("sha256:"):
        raise DemoFailed(f"pulumi-controller push failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout.strip()


def publish(sb, greeting):
    """Revision `greeting` as a Flux artifact (GitRepository status written) and in the
    registry; returns (the GitRepository's revision, the OCI Stack's revision)."""
    if sb.real_flux:
        return fetched_by_source_controller(sb, greeting), f"{OCI_TAG}@{push(sb, greeting)}"
    w = sb.world
    art = w.artifact(samples.program_files(greeting))
    w.publish(art, key=f"gitrepository/{NAMESPACE}/{SOURCE}/{art.hex}.tar.gz")
    say(f"Flux artifact: {art.url}")
    say(f"               {art.size} bytes, {art.digest}")
    src = w.flux_source("GitRepository", SOURCE, art, revision=commit_of(greeting), create=False)
    say(f"GitRepository {NAMESPACE}/{SOURCE} status.artifact.revision = {src['revision']}")
    say("               (written by the demo, playing source-controller)")
    return src["revision"], f"{OCI_TAG}@{push(sb, greeting)}"


def fetched_by_source_controller(sb, greeting):
    """Commits the program to the Git server, asks source-controller for a reconcile (as
    `flux reconcile source git` does) and waits for its artifact; returns the revision."""
    sha = sb.git.commit(GIT_REPO, samples.program_files(greeting), message=f"greeting {greeting}")
    say(f"git push        {sb.git.url(GIT_REPO)} main -> commit {sha[:12]}")
    token = secrets.token_hex(6)
    w = sb.world
    w.client.patch(SOURCE_API, "gitrepositories", SOURCE,
                   {"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": token}}},
                   NAMESPACE, "merge")

    def handled():
        st = w.client.get(SOURCE_API, "gitrepositories", SOURCE, NAMESPACE).get("status") or {}
        art = st.get("artifact") or {}
        return art if st.get("lastHandledReconcileAt") == token and \
            art.get("revision") == f"main@sha1:{sha}" else None
    try:
        art = wait_for(handled, 120, interval=0.2, what="source-controller's artifact")
    except AssertionError as e:
        raise DemoFailed(f"{e}{sb.flux.explain()}") from None
    say(f"GitRepository {NAMESPACE}/{SOURCE} status.artifact.revision = {art['revision']}")
    say(f"               (source-controller fetched it: {art['url']})")
    return art["revision"]


def wait_ready(sb, name, revision, timeout, expect):
    """Waits until Stack `name` is Ready (at `revision`) with output message `expect`."""
    try:
        obj = sb.world.wait_ready(name, revision=revision, timeout=timeout)
    except AssertionError as e:      # the timeout and the Stack's status (teardown shows the log)
        raise DemoFailed(str(e).split("\ncontroller log tail:")[0]) from None
    got = (obj["status"].get("outputs") or {}).get("message")
    if got != expect:
        raise DemoFailed(f"Stack {name} is Ready but its output message is {got!r}, "
                         f"not {expect!r}")
    say("ok  " + show.stack_line(obj))


def show_cloud(world):
    for name, content in world.cloud_files().items():
        say(f"  {name}: {content!r}")
