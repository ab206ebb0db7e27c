"""The controller runtime against slow callbacks and hostile API servers (issue 10):
leader election that keeps renewing while a callback blocks, metadata-only informers,
and informers that back off and bound what a server can make them do (410 storms,
endless continue chains, list replies that ignore `limit`).

The driver is tests/tools/kube_rt_tool.c; hostile servers are plain-HTTP loopback
servers started by the test itself (a kubeconfig with an http:// server carries no
credentials, so nothing secret is sent to them).
"""
import json
import os
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kube_fixtures import wait_for


class Tool:
    """One kube_rt_tool process: commands on stdin, answers on stdout, JSON log lines
    on stderr (kept in a file)."""

    def __init__(self, pc_tools, tmp_path, *args):
        self.err_path = tmp_path / f"kube_rt_tool-{args[0]}-{time.monotonic_ns()}.log"
        self.err = open(self.err_path, "w")
        self.proc = subprocess.Popen([os.path.join(pc_tools, "kube_rt_tool"), *map(str, args)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err, text=True)

    def ask(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.line()

    def line(self):
        out = self.proc.stdout.readline()
        if not out:
            raise AssertionError(f"kube_rt_tool ended (exit {self.proc.wait()}):\n"
                                 + self.err_path.read_text()[-4000:])
        return out.rstrip("\n")

    def log(self):
        """The JSON log records (every stderr line must be one)."""
        return [json.loads(line) for line in self.err_path.read_text().splitlines() if line]

    def close(self, timeout=60):
        self.proc.stdin.close()
        rest = self.proc.stdout.read()
        rc = self.proc.wait(timeout)
        self.err.close()
        assert rc == 0, f"kube_rt_tool exited {rc}:\n" + self.err_path.read_text()[-4000:]
        return rest


@pytest.fixture
def rt_tool(pc_tools, tmp_path):
    started = []

    def start(*args):
        t = Tool(pc_tools, tmp_path, *args)
        started.append(t)
        return t
    yield start
    for t in started:
        if t.proc.poll() is None:
            t.proc.kill()
            t.proc.wait()


def last_seq(api):
    items = api.requests()
    return items[-1]["seq"] if items else 0


# -- leader election ----------------------------------------------------------------


def test_slow_on_started_does_not_stop_renewals(kubeapi, rt_tool, tmp_path):
    """on_started blocks for three lease durations; the Lease must be renewed all along
    (the old elector called it on the renew thread: no renewal, a second leader)."""
    kc = kubeapi.write_kubeconfig(tmp_path / "kubeconfig")
    t = rt_tool("leader", kc, "default", "slow-callback", 3000, 2000, 500, 9000)
    assert t.line() == "started"
    since = last_seq(kubeapi)
    assert t.line() == "callback-returned"
    renewals = [r for r in kubeapi.requests(since)
                if r["method"] == "PUT" and r["path"].endswith("/leases/slow-callback")
                and r["code"] == 200]
    # one every retry period (0.5 s) in 9 s; far more than the 3 s lease needs
    assert len(renewals) >= 6, renewals
    lease = kubeapi.get("coordination.k8s.io/v1", "leases", "slow-callback", "default")
    assert lease["spec"]["holderIdentity"]
    rest = t.close()
    assert "lost" not in rest.split()
    assert "stopped" in rest.split()
