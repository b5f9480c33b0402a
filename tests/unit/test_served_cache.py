"""kube.ServedCache: an optional API's discovery is asked at most every SERVED_TTL_S, and an API installed (or
removed) later is noticed after it; Keda and Gie are its two instances."""

from __future__ import annotations

import pytest
from ovserve_operator import autoscaling_io, routing_io
from ovserve_operator.kube import SERVED_TTL_S, ServedCache


class FakeDiscovery:
    """Kube.served over a list of answers, counting the calls (the only method ServedCache uses)."""

    def __init__(self, answers: list[bool]) -> None:
        self.answers, self.asked = answers, []

    def served(self, group_version: str, plural: str) -> bool:
        self.asked.append((group_version, plural))
        return self.answers[len(self.asked) - 1]


@pytest.mark.parametrize(
    "times, answers, want, calls",
    [
        ([0.0, 1.0, SERVED_TTL_S - 0.1], [False], [False, False, False], 1),  # cached within the TTL
        ([0.0, SERVED_TTL_S + 0.1], [False, True], [False, True], 2),  # installed later: noticed after the TTL
        ([0.0, SERVED_TTL_S + 0.1, SERVED_TTL_S + 1], [True, False], [True, False, False], 2),  # removed later
    ],
)
def test_asked_at_most_every_ttl(times, answers, want, calls):
    now = [0.0]
    cache = ServedCache("example.com/v1", "widgets", clock=lambda: now[0])
    kube = FakeDiscovery(answers)
    got = []
    for t in times:
        now[0] = t
        got.append(cache.served(kube))  # type: ignore[arg-type]
    assert got == want and len(kube.asked) == calls
    assert set(kube.asked) == {("example.com/v1", "widgets")}


def test_keda_and_gie_ask_for_their_apis():
    keda, gie = FakeDiscovery([True]), FakeDiscovery([True])
    autoscaling_io.Keda().served(keda)  # type: ignore[arg-type]
    routing_io.Gie().served(gie)  # type: ignore[arg-type]
    assert keda.asked == [("keda.sh/v1alpha1", "scaledobjects")]
    assert gie.asked == [("inference.networking.k8s.io/v1", "inferencepools")]
