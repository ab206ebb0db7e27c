"""base/http.h against nginx, through the test tool tests/tools/http_get.c:
what the commands cannot show directly."""
import os
import subprocess
import time

from artifacts import flux_tarball


def http_get(pc_tools, *args, timeout=60):
    r = subprocess.run([os.path.join(pc_tools, "http_get"), *map(str, args)], capture_output=True,
                       text=True, timeout=timeout)
    return r.returncode, r.stdout.splitlines(), r.stderr


def test_connections_are_reused_across_requests(pc_tools, nginx):
    nginx.put("reuse.txt", b"hello\n")
    url = nginx.url("artifacts/reuse.txt")
    rc, lines, err = http_get(pc_tools, url, url, url)
    assert rc == 0, err
    assert lines == ["200 6"] * 3
    conns = nginx.connections("/reuse.txt")
    assert len(conns) == 3 and len(set(conns)) == 1


def test_cancel_from_another_thread(pc_tools, nginx):
    nginx.put("cancel.bin", flux_tarball({"x": os.urandom(4096)}))
    start = time.monotonic()
    rc, lines, err = http_get(pc_tools, "--cancel-after-ms", 300, nginx.url("slow/cancel.bin"), timeout=30)
    assert rc == 1
    assert lines[0].startswith("error canceled"), lines
    # The 1 byte/s download would take over an hour; cancellation ended it.
    assert time.monotonic() - start < 25


def test_post_is_not_retried_on_500_but_get_is(pc_tools, nginx):
    url = nginx.url("post-fails")
    rc, lines, _ = http_get(pc_tools, "--method", "POST", "--retries", 2, url)
    assert lines == ["500 3"]
    assert [s for s, _ in nginx.requests("/post-fails")] == [500]
    rc, lines, _ = http_get(pc_tools, "--retries", 2, url)
    assert lines == ["500 3"]
    assert [s for s, _ in nginx.requests("/post-fails")] == [500, 500, 500, 500]


def test_error_body_is_kept(pc_tools, nginx):
    rc, lines, _ = http_get(pc_tools, "--retries", 0, nginx.url("artifacts/does-not-exist"))
    status, size = lines[0].split()
    assert status == "404" and int(size) > 0
