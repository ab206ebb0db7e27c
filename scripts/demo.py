#!/usr/bin/python3
"""`make demo`: pulumi-controller doing its main job in a local sandbox on loopback: two
Stacks from one program published as a Flux artifact and with `pulumi-controller push`, a new
revision rolled out, one rollback, and everything torn down (also on Ctrl-C or SIGTERM).  The
real kube-apiserver, etcd and pulumi CLI when `make deps-real` has built them, else the
emulator and the pulumi stand-in; the first lines say which.  See docs/demo.md.
"""
import argparse
import os
import pathlib
import signal
import sys
import tempfile
import traceback


def quit_quietly(signum, frame):
    raise SystemExit(130)


# Until handle_interrupts() (nothing is started before it), an interrupt just ends the demo.
signal.signal(signal.SIGINT, quit_quietly)
signal.signal(signal.SIGTERM, quit_quietly)

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import pytest  # noqa: E402  (the fixture classes report a missing binary with pytest.fail)

from demo import show, steps  # noqa: E402
from demo.sandbox import (KUBECTL, REAL_BIN, SOURCE_CONTROLLER, Sandbox,  # noqa: E402
                          handle_interrupts, missing_real_parts, real_flux_built,
                          real_versions)
from demo.show import say, step  # noqa: E402
from demo.steps import DemoFailed  # noqa: E402


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
    if want != "emulator" and not missing:
        return "real", "built by `make deps-real`"
    if not os.access(KUBECTL, os.X_OK) and not os.access(REAL_BIN / "kubectl", os.X_OK):
        raise DemoFailed(f"no kubectl: install one as {KUBECTL}, or run `make deps-real`")
    if want == "emulator":
        return "emulator", "--tier emulator"
    return "emulator", f"{missing[0]} is not built; `make deps-real` builds the real ones"


def banner(tier, why):
    print("pulumi-controller demo: Stacks from a Flux artifact and an OCI artifact, on loopback")
    if tier == "real":
        say(f"tier: REAL  {real_versions()} (.real/bin, {why})")
    else:
        say("tier: EMULATOR  the API-server emulator (tests/e2e/kubeapi) and the pulumi "
            "stand-in (tests/e2e/pulumi_standin)")
        say(f"      ({why})")
    if tier == "real" and real_flux_built():
        say("source-controller: REAL (.real/bin/source-controller and kustomize-controller), "
            "fetching from a Git server on loopback")
        return
    why_not = "the emulator tier runs no Flux controller" if SOURCE_CONTROLLER.exists() \
        else "not in .real/bin; `make deps-real` builds it"
    say("source-controller: PLAYED BY THE DEMO: nginx serves the artifact and the demo writes")
    say("      the GitRepository's status.artifact as source-controller would")
    say(f"      ({why_not})")


def teardown(sb, keep, failed):
    """Stops everything; returns False when something could not be stopped or removed."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # a second Ctrl-C must not cut it short
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    step("tearing down")
    if failed and sb.world and sb.world.controllers:
        say("controller log (last lines):")
        for line in sb.world.ctl.text().splitlines()[-15:]:
            say("  " + line[:200])
    errors, orphans, swept = sb.close()
    if orphans:
        say(f"stopped {orphans} process(es) whose start the interrupt had cut short")
    for what, err in errors:
        say(f"could not stop {what}: {err}")
    if swept:
        for proc in swept:
            say(f"LEFTOVER process killed by the final sweep: {proc}")
    if keep:
        say(f"stopped every process; sandbox kept in {sb.dir}")
        return not errors and not swept
    removed = sb.remove()
    say(f"stopped every process, removed {sb.dir}" if removed else f"could not remove {sb.dir}")
    return removed and not errors and not swept


def main():
    args = parse_args()
    if not os.access(args.bin, os.X_OK):
        sys.exit(f"demo: {args.bin} is not built; run `make` (or `make demo`)")
    try:
        tier, why = choose_tier(args.tier)
    except DemoFailed as e:
        sys.exit(f"demo: {e}")
    banner(tier, why)
    sb = Sandbox(tier, tempfile.mkdtemp(prefix="pc-demo-"), os.path.abspath(args.bin))
    rc = 1
    # From here Ctrl-C and SIGTERM tear down alike (also when started with SIGINT ignored,
    # as by `make demo &`).
    handle_interrupts()
    try:
        os.chmod(sb.dir, 0o755)
        # Every temporary file of every child lands in the sandbox, and no docker login of
        # the machine's is used for the local registry.
        for var, sub in (("TMPDIR", "tmp"), ("DOCKER_CONFIG", "docker")):
            (sb.dir / sub).mkdir()
            os.environ[var] = str(sb.dir / sub)
        steps.run(sb, args.timeout)
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
