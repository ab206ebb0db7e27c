"""Shutdown while the watches are busy (both tiers).

SIGTERM stops every informer; a Secret's, ConfigMap's, source's or Job's change
handler looks its Stacks up in the Stack informer's index, so none of them may run
once the Stack informer is freed (stack_ctl_unwatch).  A burst of Secret events keeps
the Secret informer's handler busy (each event walks the Stacks that read the Secret)
while Stack events keep the Stack watch moving, so both informers stop at about the
same moment; the controller must exit 0 with no sanitizer report, round after round.
The window is a few instructions wide, so this rarely catches the old order; the
deterministic check (a Secret handler held in its Stack lookup while unwatch runs) is
tests/unit/test_stack_shutdown.c.
"""
import threading

from kube_fixtures import wait_for
from stack_fixtures import stack_world  # noqa: F401 (fixture)

ROUNDS = 8
SECRETS = 3
READERS = 30
SECRET_EVENTS = 'pulumi_controller_watch_events_total{kind="Secret"}'


def _burst_secret(world, stop, index):
    """Rewrites one Secret until told to stop (each write is one watch event)."""
    n = 0
    while not stop.is_set():
        world.secret(f"burst-{index}", {"n": str(n)})
        n += 1


def _burst_stack(world, stop):
    """Keeps the Stack watch busy with label changes (which queue nothing)."""
    n = 0
    while not stop.is_set():
        world.patch_stack(f"reader-{n % READERS}", {"metadata": {"labels": {"burst": str(n)}}})
        n += 1


def test_sigterm_during_a_burst_of_secret_events_exits_cleanly(stack_world):
    w = stack_world
    for i in range(SECRETS):
        w.secret(f"burst-{i}", {"n": "start"})
    # Stacks that read every Secret: each Secret event walks them in the Stack index.
    # (Their source never comes: they wait, and run nothing.)
    refs = {f"BURST_{i}": {"type": "Secret", "secret": {"name": f"burst-{i}", "key": "n"}}
            for i in range(SECRETS)}
    for i in range(READERS):
        w.git_stack(f"reader-{i}", "never-made", envRefs=refs)
    for round_ in range(ROUNDS):
        ctl = w.controller()
        ctl.wait_log("caches synced")
        stop = threading.Event()
        writers = [threading.Thread(target=_burst_secret, args=(w, stop, i), daemon=True)
                   for i in range(SECRETS)]
        writers.append(threading.Thread(target=_burst_stack, args=(w, stop), daemon=True))
        before = ctl.metrics().get(SECRET_EVENTS, 0)
        for t in writers:
            t.start()
        try:
            # The burst reaches the controller before it is told to stop.
            wait_for(lambda: ctl.metrics().get(SECRET_EVENTS, 0) >= before + 20, 60,
                     interval=0.02, what="Secret events to arrive")
            rc = ctl.stop()
        finally:
            stop.set()
            for t in writers:
                t.join(30)
        report = ctl.sanitizer_report()
        assert report is None, f"round {round_}: sanitizer report:\n{report}"
        assert rc == 0, f"round {round_}: controller exited {rc}:\n{ctl.text()[-3000:]}"
