#!/usr/bin/python3
"""`make demo`: pulumi-controller doing its main job in a local sandbox on loopback.

It starts an API server, nginx (as source-controller's artifact server) and an OCI registry,
publishes an embedded Pulumi YAML program as a Flux artifact and with `pulumi-controller push`,
applies the CRDs and two sample Stacks with kubectl, runs the controller until both are Ready,
shows them and their outputs, publishes a new revision and shows the update land, rolls one
Stack back by pinning the previous digest, and tears everything down -- also on Ctrl-C or
SIGTERM.  The real kube-apiserver, etcd and pulumi CLI are used when `make deps-real` has
built them (.real/bin), the emulator and the pulumi stand-in otherwise; the first lines say
which.  See docs/demo.md.
"""
import argparse
import hashlib
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import traceback

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import pytest  # noqa: E402  (the fixture classes report a missing binary with pytest.fail)

from demo import samples, show  # noqa: E402
from demo.samples import FLUX_STACK, NAMESPACE, OCI_REPO, OCI_STACK, OCI_TAG, SOURCE  # noqa: E402
from demo.sandbox import SOURCE_CONTROLLER, Sandbox, missing_real_parts, real_versions  # noqa: E402
from demo.show import say, step  # noqa: E402


class DemoFailed(Exception):
    pass


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tier", choices=("auto", "real", "emulator"), default="auto",
                    help="real: .real/bin's kube-apiserver, etcd and pulumi (fails when not "
                         "built); emulator: the emulator and the stand-in; auto (default): "
                         "real when built, else emulator")
    ap.add_argument("--bin", default=str(ROOT / "bin" / "pulumi-controller"),
                    help="the pulumi-controller binary (default: bin/pulumi-controller)")
    ap.add_argument("--timeout", type=float, default=180,
                    help="seconds each wait for a Stack may take (default 180)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the sandbox directory (logs, state) after the servers stop")
    return ap.parse_args()


def choose_tier(want):
    """(tier, why) or DemoFailed when the real tier is asked for and not built."""
    missing = missing_real_parts()
    if want == "real" and missing:
        raise DemoFailed(f"--tier real: {missing[0]} is not built; run `make deps-real`")
    if want == "emulator":
        return "emulator", "--tier emulator"
    if missing:
        return "emulator", f"{missing[0]} is not built; `make deps-real` builds the real ones"
    return "real", "built by `make deps-real`"


def banner(tier, why):
    print("pulumi-controller demo: Stacks from a Flux artifact and an OCI artifact, on loopback")
    if tier == "real":
        say(f"tier: REAL  {real_versions()} (.real/bin, {why})")
    else:
        say("tier: EMULATOR  the API-server emulator (tests/e2e/kubeapi) and the pulumi "
            "stand-in (tests/e2e/pulumi_standin)")
        say(f"      ({why})")
    why_not = "present, but the demo does not drive it yet" if SOURCE_CONTROLLER.exists() \
        else "not in .real/bin"
    say(f"source-controller: PLAYED BY THE DEMO ({why_not}): nginx serves the artifact and the")
    say("      demo writes the GitRepository's status.artifact as source-controller would")


def commit_of(greeting):
    """The revision both publications carry, as if the program were a Git commit."""
    files = samples.program_files(greeting)
    return "main@sha1:" + hashlib.sha1(files["Pulumi.yaml"]).hexdigest()


def push(sb, greeting):
    """`pulumi-controller push` of the program with `greeting`; returns the manifest digest."""
    d = sb.dir / f"program-{greeting}"
    d.mkdir()
    files = samples.program_files(greeting)
    for rel, data in files.items():
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
    w = sb.world
    art = w.artifact(samples.program_files(greeting))
    w.publish(art, key=f"gitrepository/{NAMESPACE}/{SOURCE}/{art.hex}.tar.gz")
    say(f"Flux artifact: {art.url}")
    say(f"               {art.size} bytes, {art.digest}")
    src = w.flux_source("GitRepository", SOURCE, art, revision=commit_of(greeting),
                        create=False)
    say(f"GitRepository {NAMESPACE}/{SOURCE} status.artifact.revision = {src['revision']}")
    say("               (written by the demo, playing source-controller)")
    digest = push(sb, greeting)
    return src["revision"], f"{OCI_TAG}@{digest}"


def wait_ready(sb, name, revision, timeout, expect):
    """Waits until Stack `name` is Ready at `revision` with output message `expect`."""
    try:
        obj = sb.world.wait_ready(name, revision=revision, timeout=timeout)
    except AssertionError as e:
        raise DemoFailed(str(e)) from None
    got = (obj["status"].get("outputs") or {}).get("message")
    if got != expect:
        raise DemoFailed(f"Stack {name} is Ready but its output message is {got!r}, "
                         f"not {expect!r}")
    say("ok  " + show.stack_line(obj))
    return obj


def run(sb, args):
    step("starting the sandbox on loopback")
    sb.start_servers()
    api_url = sb.kube.direct_url if sb.tier == "real" else sb.kube.url
    say(f"API server      {api_url}  ({'kube-apiserver + etcd' if sb.tier == 'real' else 'emulator'})")
    say(f"artifact server {sb.nginx.url('artifacts/')}  (nginx)")
    say(f"OCI registry    {sb.registry.url}  (docker-registry)")

    step("applying the CRDs with kubectl, creating the namespace")
    crds = ["-f", str(ROOT / "deploy" / "crds" / "pulumi.com_stacks.yaml"),
            "-f", str(ROOT / "tests" / "e2e" / "crds")]
    out = sb.kubectl("apply", "--server-side", *crds).stdout
    show.command(["kubectl", "apply", "--server-side", "-f", "deploy/crds/pulumi.com_stacks.yaml",
                  "-f", "tests/e2e/crds/  # Flux's source CRDs, as Flux installs them"], out)
    if sb.tier == "real":
        sb.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=120s")
        sb.kube.wait_custom_resources_served()
    show.command(["kubectl", "create", "namespace", NAMESPACE],
                 sb.kubectl("create", "namespace", NAMESPACE).stdout)
    world = sb.start_world()
    cli = show.Cli(sb)

    step("applying the samples with kubectl: a Secret, a GitRepository and two Stacks")
    path = sb.dir / "samples.yaml"
    path.write_text(samples.manifests(sb.registry.host, world.backend_url, world.cloud_dir))
    out = sb.kubectl("apply", "--server-side", "-f", str(path)).stdout
    show.command(["kubectl", "apply", "--server-side", "-f", "samples.yaml"], out)
    say(f"{FLUX_STACK}: spec.fluxSource -> GitRepository {SOURCE} (no artifact yet)")
    say(f"{OCI_STACK}:  spec.ociSource  -> {sb.registry.ref(OCI_REPO, OCI_TAG)} (looked at every 5s)")
    say(f"both: file:// backend in the sandbox, passphrase from Secret {samples.PASSPHRASE_SECRET}")

    step("publishing revision 1 (greeting 'hello') as a Flux artifact and with pulumi-controller push")
    flux1, oci1 = publish(sb, "hello")

    step("running pulumi-controller until both Stacks are Ready")
    ctl = world.controller(namespace=NAMESPACE, log_level="info", shutdown_grace="10s")
    say(f"$ pulumi-controller run --namespace {NAMESPACE} --kubeconfig ... --pulumi-bin ... "
        f"(pid {ctl.proc.pid}, log {ctl.log_path.name})")
    wait_ready(sb, FLUX_STACK, flux1, args.timeout, "hello, world")
    wait_ready(sb, OCI_STACK, oci1, args.timeout, "hello, world")
    say(f"pulumi up runs so far: {len(world.updates())}; the cloud holds:")
    for line in show.cloud(world):
        say("  " + line)

    step("the Stacks and their outputs")
    cli.fallback_note()
    cli.get_stacks()
    cli.outputs(FLUX_STACK)
    cli.outputs(OCI_STACK)

    step("a change: revision 2 (greeting 'bonjour'), published both ways")
    mark = world.mark()
    flux2, oci2 = publish(sb, "bonjour")
    say("the tag stable moved to the new content; the GitRepository has a new revision:")
    wait_ready(sb, FLUX_STACK, flux2, args.timeout, "bonjour, world")
    wait_ready(sb, OCI_STACK, oci2, args.timeout, "bonjour, world")
    say(f"the change landed: {len(world.updates(since=mark))} pulumi up runs, one per Stack")
    cli.get_stacks()

    step(f"a rollback: pin {OCI_STACK} to revision 1's digest from its status.history")
    history = world.stack(OCI_STACK)["status"].get("history") or []
    for h in history:
        say(f"history: {show.short(h.get('revision', '?'))}  {h.get('type')} {h.get('result')}")
    previous = next((h["revision"] for h in history if h.get("revision") != oci2), None)
    if previous is None or "@" not in previous:
        raise DemoFailed(f"no earlier revision in {OCI_STACK}'s status.history: {history}")
    digest = previous.rsplit("@", 1)[1]
    patch = samples.pin_digest_patch(digest)
    out = sb.kubectl("patch", "stack", OCI_STACK, "-n", NAMESPACE, "--type", "merge",
                     "-p", patch).stdout
    show.command(["kubectl", "patch", "stack", OCI_STACK, "-n", NAMESPACE, "--type", "merge",
                  "-p", f"'{patch}'"], out)
    wait_ready(sb, OCI_STACK, None, args.timeout, "hello, world")
    cli.outputs(OCI_STACK)
    say(f"rolled back: {OCI_STACK} runs revision 1 again, {FLUX_STACK} stays on revision 2")
    for line in show.cloud(world):
        say("  " + line)


def on_sigterm(signum, frame):
    raise KeyboardInterrupt          # the same teardown as Ctrl-C


def teardown(sb, keep, failed):
    """Stops everything; returns False when something could not be stopped or removed."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # a second Ctrl-C must not cut it short
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    step("tearing down")
    if failed and sb.world and sb.world.controllers:
        say("controller log (last lines):")
        for line in sb.world.ctl.text().splitlines()[-15:]:
            say("  " + line[:200])
    errors, swept = sb.close()
    for what, err in errors:
        say(f"could not stop {what}: {err}")
    if swept:
        say(f"LEFTOVER processes killed by the final sweep: {swept}")
    if keep:
        say(f"stopped every process; sandbox kept in {sb.dir}")
        return not errors and not swept
    removed = sb.remove()
    say(f"stopped every process, removed {sb.dir}" if removed else f"could not remove {sb.dir}")
    return removed and not errors and not swept


def main():
    args = parse_args()
    signal.signal(signal.SIGTERM, on_sigterm)
    # Ctrl-C tears down even when the demo was started with SIGINT ignored (`make demo &`).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if not os.access(args.bin, os.X_OK):
        sys.exit(f"demo: {args.bin} is not built; run `make` (or `make demo`)")
    try:
        tier, why = choose_tier(args.tier)
    except DemoFailed as e:
        sys.exit(f"demo: {e}")
    banner(tier, why)
    work = pathlib.Path(tempfile.mkdtemp(prefix="pc-demo-"))
    os.chmod(work, 0o755)
    # Every temporary file of every child lands in the sandbox, and no docker login of the
    # machine's is used for the local registry.
    for var, sub in (("TMPDIR", "tmp"), ("DOCKER_CONFIG", "docker")):
        (work / sub).mkdir()
        os.environ[var] = str(work / sub)
    sb = Sandbox(tier, work, os.path.abspath(args.bin))
    rc = 1
    try:
        run(sb, args)
        rc = 0
    except KeyboardInterrupt:
        print("\ninterrupted: tearing down", flush=True)
        rc = 130
    except (DemoFailed, pytest.fail.Exception, pytest.skip.Exception) as e:
        print(f"\ndemo FAILED: {e}", flush=True)
    except Exception:
        print("\ndemo FAILED:", flush=True)
        traceback.print_exc()
    finally:
        clean = teardown(sb, args.keep, rc == 1)
    if rc == 0 and clean:
        print(f"\ndemo ok in {show.elapsed():.0f}s: both Stacks Ready, revision 2 landed, "
              f"one rollback, nothing left behind", flush=True)
    sys.exit(rc or (0 if clean else 1))


if __name__ == "__main__":
    main()
