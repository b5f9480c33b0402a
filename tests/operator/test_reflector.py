"""The children's reflector (reflector.py) against the real apiserver: a LIST in pages, then the watch (objects
added, relabelled out of the selector, deleted), and a fresh LIST after a 410 Gone; an event whose handling
failed is watched again, not skipped; a refused LIST is told to the sink, and that it goes through again.

Services stand in for every child kind (the reflector does not look inside the objects); no operator runs.
"""

from __future__ import annotations

import threading
import time

from ovserve_operator import reflector
from ovserve_operator.kube import Kube

from ..conftest import wait_for

LABEL = "ovserve.dev/reflector-test"


class Recorder:
    """A reflector.Sink that keeps every call, in order (calls come from the reflector's thread)."""

    def __init__(self, fail_once: str = "") -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple] = []
        self.fail_once = fail_once  # the first event of this object raises, as a failed handling would

    def listed(self, r, items, first):
        with self.lock:
            self.calls.append(("listed", first, sorted(i["metadata"]["name"] for i in items)))

    def synced(self, r, uids):
        with self.lock:
            self.calls.append(("synced", len(uids)))

    def event(self, r, event_type, obj):
        with self.lock:
            if obj["metadata"]["name"] == self.fail_once:
                self.fail_once = ""
                raise RuntimeError("handling failed")
            self.calls.append((event_type, obj["metadata"]["name"]))

    def refused(self, r, message):
        with self.lock:
            self.calls.append(("refused", message))

    def readable(self, r):
        with self.lock:
            self.calls.append(("readable",))

    def snapshot(self) -> list[tuple]:
        with self.lock:
            return list(self.calls)


def service(name: str, labelled: bool = True) -> dict:
    labels = {LABEL: "yes"} if labelled else {"other": "yes"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {"ports": [{"port": 80}], "selector": {"app": name}},
    }


def test_lists_in_pages_then_watches_then_lists_again_after_410(cluster, namespace):
    cluster.apply([service("a"), service("b"), service("c"), service("x", labelled=False)], namespace)
    sink = Recorder()
    list_fn = reflector.list_function(Kube(), "v1", "Service", namespace)
    r = reflector.Reflector("Service", namespace, LABEL, list_fn, sink, page=2)
    r.start()
    try:
        wait_for(lambda: ("synced", 3) in sink.snapshot(), 60, "the first LIST")
        # two pages of at most 2, the first one flagged; the unlabelled Service never listed
        assert sink.snapshot()[:3] == [("listed", True, ["a", "b"]), ("listed", False, ["c"]), ("synced", 3)]
        assert r.resource_version and r.lists == 1

        cluster.apply(service("d"), namespace)
        cluster.apply(service("a", labelled=False), namespace)  # relabelled out of the selector
        cluster.delete("service", "b", namespace)
        want = [("ADDED", "d"), ("DELETED", "a"), ("DELETED", "b")]
        wait_for(lambda: [c for c in sink.snapshot()[3:] if c[0] != "MODIFIED"] == want, 60, f"events {want}")
    finally:
        r.close()

    # A resourceVersion the apiserver no longer keeps (older than its watch cache): 410 Gone, then a fresh LIST.
    again = Recorder()
    r2 = reflector.Reflector("Service", namespace, LABEL, list_fn, again, page=500)
    r2.resource_version = "1"
    r2.start()
    try:
        wait_for(lambda: ("synced", 2) in again.snapshot(), 60, "a LIST after the 410")
        assert again.snapshot()[0] == ("listed", True, ["c", "d"]) and r2.lists == 1
    finally:
        r2.close()
    started = time.monotonic()
    # closing cuts the running watch: the thread ends at once, not at the watch's timeout
    assert r2.join(10) and time.monotonic() - started < 10


def test_an_event_whose_handling_failed_is_watched_again(cluster, namespace):
    """Issue 38: the resourceVersion advances only after the event was handled. The handling of `d`'s ADDED
    raises: the watch starts again from the version before it, and `d` arrives (skipped before: the version had
    advanced past it)."""
    sink = Recorder(fail_once="d")
    r = reflector.Reflector(
        "Service", namespace, LABEL, reflector.list_function(Kube(), "v1", "Service", namespace), sink
    )
    r.start()
    try:
        wait_for(lambda: ("synced", 0) in sink.snapshot(), 60, "the first LIST")
        cluster.apply(service("d"), namespace)
        wait_for(lambda: ("ADDED", "d") in sink.snapshot(), 30, "d's ADDED again after its handling failed")
        assert not sink.fail_once
    finally:
        r.close()


def test_a_refused_list_is_told_and_readable_again_once_granted(cluster, namespace, tmp_path):
    """Issue 38: an identity without the right to list (a namespace whose RoleBinding is gone) is refused (403):
    the sink hears it once while the reflector retries; once a RoleBinding grants it, `readable`, then the LIST."""
    from kubernetes import config

    from .conftest import service_account_kubeconfig

    cluster.apply(service("a"), namespace)
    # the ServiceAccount's cluster-wide rights: none on Services
    with service_account_kubeconfig(cluster, namespace, [], tmp_path / "sa.kubeconfig") as path:
        kube = Kube(config.new_client_from_config(config_file=str(path)))
        sink = Recorder()
        r = reflector.Reflector(
            "Service", namespace, LABEL, reflector.list_function(kube, "v1", "Service", namespace), sink
        )
        r.start()
        try:
            wait_for(lambda: sink.snapshot()[:1] and sink.snapshot()[0][0] == "refused", 30, "the refusal")
            (call,) = sink.snapshot()
            assert call[1].startswith("HTTP 403: ") and "forbidden" in call[1] and r.lists == 0
            cluster.kubectl(
                "create",
                "rolebinding",
                "read-services",
                "-n",
                namespace,
                "--clusterrole=view",
                f"--serviceaccount={namespace}:operator",
            )
            wait_for(lambda: ("synced", 1) in sink.snapshot(), 90, "the LIST once granted")
            assert sink.snapshot() == [call, ("readable",), ("listed", True, ["a"]), ("synced", 1)]
        finally:
            r.close()
