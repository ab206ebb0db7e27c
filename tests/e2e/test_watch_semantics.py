"""Watch semantics the controller's informers rely on, compared both ways: the
emulator and the real kube-apiserver (fixture `any_kubeapi`) must give the same
answers to the same requests.

These were "recorded" only (compared by hand once, then asserted against the
emulator) while the real server ran on Debian's etcd 3.4, which cannot serve a
watch-list request (`sendInitialEvents=true`): the real tier now runs etcd 3.7,
the line kube-apiserver 1.37 is built against, and the comparison runs every time.
"""
import pytest

from kubeapi.client import KubeError
from test_kubeapi_api import GV, collect as take, rv, stack


def test_watch_list_sends_initial_events_then_a_bookmark(any_kubeapi):
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    created = [c.create(stack(n, ns), "stacks", ns) for n in ("a", "b")]
    gen = c.watch(GV, "stacks", ns, sendInitialEvents="true",
                  resourceVersionMatch="NotOlderThan", allowWatchBookmarks="true",
                  timeoutSeconds=20)
    try:
        first = take(gen, 3)
        assert [e["type"] for e in first] == ["ADDED", "ADDED", "BOOKMARK"]
        assert sorted(e["object"]["metadata"]["name"] for e in first[:2]) == ["a", "b"]
        mark = first[2]["object"]
        assert mark["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
        # The bookmark's version covers every initial event, so a client that
        # resumes from it misses nothing and replays nothing.
        assert rv(mark) >= max(rv(o) for o in created)
        c.create(stack("c", ns), "stacks", ns)
        later = take(gen, 1)[0]
        assert later["type"] == "ADDED" and later["object"]["metadata"]["name"] == "c"
        assert rv(later["object"]) > rv(mark)
    finally:
        gen.close()


def test_watch_list_needs_not_older_than(any_kubeapi):
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    with pytest.raises(KubeError) as info:
        next(c.watch(GV, "stacks", ns, sendInitialEvents="true", timeoutSeconds=1))
    assert info.value.code == 422


def test_watch_from_a_list_sees_later_changes_in_order(any_kubeapi):
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    c.create(stack("a", ns), "stacks", ns)
    listed = c.list(GV, "stacks", ns)
    gen = c.watch(GV, "stacks", ns, resourceVersion=listed["metadata"]["resourceVersion"],
                  timeoutSeconds=20)
    try:
        c.patch(GV, "stacks", "a", {"spec": {"stack": "prod"}}, ns)
        c.delete(GV, "stacks", "a", ns)
        evs = take(gen, 2)
        assert [e["type"] for e in evs] == ["MODIFIED", "DELETED"]
        assert [e["object"]["spec"]["stack"] for e in evs] == ["prod", "prod"]
        assert rv(evs[1]["object"]) > rv(evs[0]["object"])
    finally:
        gen.close()


def test_timeout_seconds_ends_a_quiet_watch_cleanly(any_kubeapi):
    c, ns = any_kubeapi.client, any_kubeapi.namespace
    obj = c.create(stack("a", ns), "stacks", ns)
    # The generator returns (no WatchBroken) when the server ends the body itself.
    assert list(c.watch(GV, "stacks", ns, resourceVersion=str(rv(obj)), timeoutSeconds=1)) == []
