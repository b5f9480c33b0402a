"""Lease-based leader election against an in-memory Lease with optimistic concurrency."""

from __future__ import annotations

import copy
import threading

import pytest
from ovserve_operator.leader import LeaderElector


class Conflict(Exception):
    pass


class FakeLeases:
    def __init__(self):
        self.obj = None
        self.rv = 0
        self.lock = threading.Lock()
        self.fail = False

    def get(self, ns, name):
        if self.fail:
            raise OSError("apiserver unreachable")
        return copy.deepcopy(self.obj)

    def create(self, ns, body):
        with self.lock:
            if self.fail:
                raise OSError("apiserver unreachable")
            if self.obj is not None:
                raise Conflict("exists")
            self.rv += 1
            self.obj = copy.deepcopy(body)
            self.obj["metadata"]["resourceVersion"] = str(self.rv)

    def replace(self, ns, name, body):
        with self.lock:
            if self.fail:
                raise OSError("apiserver unreachable")
            if body["metadata"].get("resourceVersion") != self.obj["metadata"]["resourceVersion"]:
                raise Conflict("resourceVersion changed")
            self.rv += 1
            self.obj = copy.deepcopy(body)
            self.obj["metadata"]["resourceVersion"] = str(self.rv)

    def is_conflict(self, exc):
        return isinstance(exc, Conflict)

    @property
    def holder(self):
        return (self.obj or {}).get("spec", {}).get("holderIdentity")


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def elector(leases, identity, clock, **kw):
    return LeaderElector(
        leases,
        namespace="ns",
        name="lease",
        identity=identity,
        lease_duration=15,
        renew_deadline=10,
        retry_period=2,
        clock=clock,
        **kw,
    )


def test_first_acquires_second_waits_then_takes_over_after_expiry():
    leases, clock = FakeLeases(), Clock()
    a, b = elector(leases, "a", clock), elector(leases, "b", clock)
    assert a.try_acquire_or_renew() is True
    assert leases.holder == "a" and leases.obj["spec"]["leaseTransitions"] == 0
    assert b.try_acquire_or_renew() is False
    clock.t += 10
    assert a.try_acquire_or_renew() is True  # renews
    clock.t += 10
    assert b.try_acquire_or_renew() is False  # renewal was observed 10 s ago: not expired
    clock.t += 16  # a stopped renewing
    assert b.try_acquire_or_renew() is True
    assert leases.holder == "b" and leases.obj["spec"]["leaseTransitions"] == 1
    assert a.try_acquire_or_renew() is False


def test_release_lets_standby_take_over_at_once():
    leases, clock = FakeLeases(), Clock()
    a, b = elector(leases, "a", clock), elector(leases, "b", clock)
    assert a.try_acquire_or_renew()
    a.is_leader.set()
    assert not b.try_acquire_or_renew()
    a.release()
    assert leases.holder is None and not a.is_leader.is_set()
    assert b.try_acquire_or_renew()
    assert leases.holder == "b"


def test_concurrent_takeover_has_one_winner():
    leases, clock = FakeLeases(), Clock()
    a, b = elector(leases, "a", clock), elector(leases, "b", clock)
    # both observe an empty lease record, then race
    leases.obj = {"metadata": {"name": "lease", "resourceVersion": "0"}, "spec": {"holderIdentity": None}}
    snap = leases.get("ns", "lease")
    leases.get = lambda ns, name, _s=snap: copy.deepcopy(_s)  # both read the same version
    assert a.try_acquire_or_renew() is True
    with pytest.raises(Conflict):
        b.try_acquire_or_renew()


def test_run_loop_steps_down_when_renewal_fails():
    leases = FakeLeases()
    el = LeaderElector(
        leases,
        namespace="ns",
        name="lease",
        identity="a",
        lease_duration=1.5,
        renew_deadline=0.5,
        retry_period=0.05,
    )
    stop = threading.Event()
    t = threading.Thread(target=el.run, args=(stop,), daemon=True)
    t.start()
    assert el.is_leader.wait(2)
    leases.fail = True
    assert el.lost.wait(3)
    assert not el.is_leader.is_set()
    t.join(2)
    assert not t.is_alive()
    stop.set()


def test_run_loop_steps_down_when_someone_else_holds_it():
    leases = FakeLeases()
    el = LeaderElector(
        leases,
        namespace="ns",
        name="lease",
        identity="a",
        lease_duration=3,
        renew_deadline=2,
        retry_period=0.05,
    )
    stop = threading.Event()
    threading.Thread(target=el.run, args=(stop,), daemon=True).start()
    assert el.is_leader.wait(2)
    with leases.lock:
        leases.obj["spec"]["holderIdentity"] = "intruder"
        leases.rv += 1
        leases.obj["metadata"]["resourceVersion"] = str(leases.rv)
    assert el.lost.wait(2)
    stop.set()


def test_acquire_renew_and_release_keep_the_leases_own_metadata():
    """The chart creates the Lease with Helm's labels and annotations; a replace must not wipe them
    (helm uninstall would then leave the Lease behind)."""
    helm_meta = {
        "labels": {"app.kubernetes.io/managed-by": "Helm"},
        "annotations": {"meta.helm.sh/release-name": "ovserve"},
    }
    leases, clock = FakeLeases(), Clock()
    leases.obj = {"metadata": {"name": "lease", "resourceVersion": "0", **copy.deepcopy(helm_meta)}, "spec": {}}
    a, b = elector(leases, "a", clock), elector(leases, "b", clock)
    assert a.try_acquire_or_renew()  # acquire
    assert a.try_acquire_or_renew()  # renew
    a.is_leader.set()
    a.release()
    assert b.try_acquire_or_renew()  # takeover
    assert leases.holder == "b"
    for key, value in helm_meta.items():
        assert leases.obj["metadata"][key] == value


HELM_MARKS = {
    "labels": {"app.kubernetes.io/managed-by": "Helm"},
    "annotations": {"meta.helm.sh/release-name": "ovs", "meta.helm.sh/release-namespace": "ovserve-system"},
}


@pytest.mark.parametrize(
    "leader_alive,recreated_by,after_s",
    [
        (True, "a", 2),  # the leader recreates it at its next renewal
        (False, "b", 16),  # a dead leader: a standby recreates it once the lease duration has passed
    ],
)
def test_deleted_lease_is_recreated_with_its_marks_and_never_two_leaders(leader_alive, recreated_by, after_s):
    leases, clock = FakeLeases(), Clock()
    leases.obj = {"metadata": {"name": "lease", "namespace": "ns", **copy.deepcopy(HELM_MARKS)}, "spec": {}}
    leases.obj["metadata"]["resourceVersion"] = "0"
    a, b = elector(leases, "a", clock), elector(leases, "b", clock)
    assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    leases.obj = None  # kubectl delete lease
    for _ in range(after_s // 2):
        clock.t += 2
        if leader_alive:
            a.try_acquire_or_renew()
        b_won = b.try_acquire_or_renew()
        # a standby never recreates it while the holder it saw may still renew
        assert not (b_won and leader_alive)
    assert leases.holder == recreated_by
    meta = leases.obj["metadata"]
    assert meta["labels"] == HELM_MARKS["labels"] and meta["annotations"] == HELM_MARKS["annotations"]


def test_standby_waits_the_lease_duration_before_recreating():
    leases, clock = FakeLeases(), Clock()
    a, b = elector(leases, "a", clock), elector(leases, "b", clock)
    assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    leases.obj = None
    clock.t += 14
    assert not b.try_acquire_or_renew() and leases.obj is None
    clock.t += 2
    assert b.try_acquire_or_renew() and leases.holder == "b"
    # the old leader, back, sees another holder: it does not take the Lease back
    assert not a.try_acquire_or_renew()
