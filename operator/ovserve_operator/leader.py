"""Leader election on a coordination.k8s.io/v1 Lease (client-go's algorithm, simplified).

A replica acts only while it holds the Lease. Expiry is judged on the local monotonic clock from the
moment this replica last saw the Lease record change (as client-go does), so clock skew between
nodes does not matter. A leader that cannot renew within the renew deadline steps down; on a clean
shutdown it releases the Lease so that a standby takes over at once.

A deleted Lease is recreated (the chart's RBAC grants `create` on Leases in the release namespace): by the
leader at its next renewal, keeping the labels and annotations it last saw (Helm's ownership marks, so that
`helm upgrade` adopts the new object); a standby recreates it only once the last holder it saw has had
the lease duration to do so, so a deletion never makes two leaders.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


def _now_micro() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """`client` has get(ns, name) -> dict | None, create(ns, body), replace(ns, name, body) and
    optionally is_conflict(exc) (kube.LeaseAdapter; a fake in the unit tests)."""

    def __init__(
        self,
        client: Any,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.clock = clock
        self.is_leader = threading.Event()
        self.lost = threading.Event()  # set when leadership was held and then lost
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0
        self.last_error = ""
        self.observed_holder = ""
        self._marks: dict[str, dict[str, str]] = {}  # the Lease's labels and annotations, kept on recreation

    # ------------------------------------------------------------------ one attempt (testable)
    def try_acquire_or_renew(self) -> bool:
        now_s = self.clock()
        lease = self.client.get(self.namespace, self.name)
        stamp = _now_micro()
        duration = round(self.lease_duration)
        if lease is None:
            holder = (self._observed or (None,))[0]
            if holder and holder != self.identity and now_s < self._observed_at + duration:
                return False  # deleted while another replica held it: give that one the lease duration
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace, **copy.deepcopy(self._marks)},
                "spec": {
                    "holderIdentity": self.identity,
                    "leaseDurationSeconds": duration,
                    "acquireTime": stamp,
                    "renewTime": stamp,
                    "leaseTransitions": 0,
                },
            }
            self.client.create(self.namespace, body)
            self._observe(body["spec"], now_s)
            return True
        meta = lease.get("metadata") or {}
        self._marks = {k: dict(meta[k]) for k in ("labels", "annotations") if meta.get(k)}
        spec = lease.get("spec") or {}
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed, self._observed_at = record, now_s
        holder = spec.get("holderIdentity") or ""
        self.observed_holder = holder
        held_by_other = holder and holder != self.identity
        observed_duration = spec.get("leaseDurationSeconds") or duration
        if held_by_other and now_s < self._observed_at + observed_duration:
            return False
        new_spec = dict(spec)
        new_spec.update(holderIdentity=self.identity, leaseDurationSeconds=duration, renewTime=stamp)
        if holder != self.identity:
            new_spec["acquireTime"] = stamp
            new_spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            # Keep the Lease's own metadata (Helm's labels and annotations): a replace writes all of it.
            "metadata": {
                **{k: v for k, v in (lease.get("metadata") or {}).items() if k != "managedFields"},
                "name": self.name,
                "namespace": self.namespace,
            },
            "spec": new_spec,
        }
        self.client.replace(self.namespace, self.name, body)  # optimistic: 409 when someone else won
        self._observe(new_spec, now_s)
        return True

    def _observe(self, spec: dict, now_s: float) -> None:
        self._observed = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseTransitions"))
        self._observed_at = now_s
        self._last_renew = now_s

    def release(self) -> None:
        """Give the Lease up (clean shutdown) so that a standby need not wait for expiry."""
        if not self.is_leader.is_set():
            return
        try:
            lease = self.client.get(self.namespace, self.name)
            if lease and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                spec = dict(lease["spec"])
                spec.update(holderIdentity=None, leaseDurationSeconds=1, renewTime=_now_micro())
                lease["spec"] = spec
                self.client.replace(self.namespace, self.name, lease)
                log.info("released lease %s/%s", self.namespace, self.name)
        except Exception as e:  # best effort
            log.warning("could not release lease %s/%s: %s", self.namespace, self.name, e)
        finally:
            self.is_leader.clear()

    # ------------------------------------------------------------------ loop
    def run(self, stop: threading.Event) -> None:
        """Acquire, then renew every retry period; step down (set `lost`) past the renew deadline."""
        log.info("leader election: lease %s/%s, identity %s", self.namespace, self.name, self.identity)
        while not stop.is_set():
            try:
                ok = self.try_acquire_or_renew()
                self.last_error = ""
            except Exception as e:
                ok = False
                self.last_error = f"{type(e).__name__}: {e}"
                if not (hasattr(self.client, "is_conflict") and self.client.is_conflict(e)):
                    log.warning("lease %s/%s: %s", self.namespace, self.name, self.last_error)
            if ok and not self.is_leader.is_set():
                log.info("became leader (lease %s/%s)", self.namespace, self.name)
                self.is_leader.set()
            elif (
                not ok
                and self.is_leader.is_set()
                and (
                    self.clock() - self._last_renew > self.renew_deadline
                    or (self.observed_holder and self.observed_holder != self.identity)
                )
            ):
                log.error(
                    "lost leadership of lease %s/%s (holder now %r, last renewed %.0fs ago)",
                    self.namespace,
                    self.name,
                    self.observed_holder,
                    self.clock() - self._last_renew,
                )
                self.is_leader.clear()
                self.lost.set()
                return
            stop.wait(self.retry_period)
