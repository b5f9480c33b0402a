"""A new generation's apply never waits for the pods' readback: Controller.sync decides it from the caches alone
(observe.cached, decide.begin) and starts it (act.begin) before the pods are read back (observe.read); the status is
still computed beside it, and the pass ends when both are done.

Driven through the real Controller.sync with a fake API client; the readback is held until the apply was seen.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from ovserve_operator import intake, readback
from ovserve_operator import spec as api
from ovserve_operator.controller import Controller
from ovserve_operator.settings import Settings

from .podfixtures import pod

NS, NAME, UID = "ns", "a", "uid-a"


class FakeKube:
    """Every child absent, every apply accepted; what was applied and patched recorded."""

    def __init__(self) -> None:
        self.applied: list[str] = []
        self.applied_event = threading.Event()
        self.patched: list[dict[str, Any]] = []

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        return None

    def apply_exact(self, obj: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        self.applied.append(obj["kind"])
        self.applied_event.set()
        return obj, []

    def patch_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.patched.append(patch)

    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        pass

    def list_pod_events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return []

    def served(self, group_version: str, plural: str) -> bool:
        return False  # no KEDA


def snapshot(generation: int) -> dict[str, Any]:
    body = {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {"name": NAME, "namespace": NS, "uid": UID, "generation": generation, "resourceVersion": "1"},
        "spec": {"model": {"hostPath": {"path": "/models/tiny"}}, "replicas": 1},
    }
    return intake.llmserving_snapshot(body, NS, NAME)


@pytest.mark.parametrize("generation_applied", [False, True])
def test_a_new_generation_is_applied_before_the_pods_are_read_back(monkeypatch, generation_applied):
    kube = FakeKube()
    ctl = Controller(Settings(allow_host_path=True), kube=kube)  # type: ignore[arg-type]
    ctl.pods.put("pod-uid", (NS, NAME), intake.pod_snapshot(pod("a-1")))
    seen_during_readback: list[list[str]] = []

    async def held_readback(pods: Any, **_: Any) -> dict[str, readback.Reading]:
        # the pods answer only once the apply went out (or after 1 s: a pod that never answers)
        await asyncio.get_running_loop().run_in_executor(None, kube.applied_event.wait, 1.0)
        seen_during_readback.append(list(kube.applied))
        return {}

    monkeypatch.setattr(readback, "read_reports", held_readback)

    async def scenario() -> None:
        if generation_applied:  # this leader applied generation 1 already: a pass only reads and writes status
            memory = ctl.memories.of((NS, NAME), UID)
            memory.applied_generation = memory.attempted_generation = 1
            memory.applied_at = 0.0
        patched = await ctl.sync(snapshot(1))
        assert patched  # the status is written in the same pass
        await ctl.stop()

    asyncio.run(scenario())
    if generation_applied:  # nothing applied before the readback (the children, absent, are re-applied after it)
        assert seen_during_readback == [[]]
    else:
        # applied while the readback waited: the apply did not wait for the pods
        children = ["Service", "Deployment"]  # one replica: no PodDisruptionBudget
        assert seen_during_readback == [children] and kube.applied == children
