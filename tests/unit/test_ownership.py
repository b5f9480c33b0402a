"""No takeover of objects that carry a child's name but belong to someone else (pure)."""

from __future__ import annotations

import pytest
from ovserve_operator import ownership

UID = "uid-1"


def obj(refs=None, kind="Service"):
    return {"kind": kind, "metadata": {"name": "m", "namespace": "ns", "ownerReferences": refs or []}}


@pytest.mark.parametrize(
    "existing,want",
    [
        (None, None),
        (obj([{"kind": "LLMServing", "name": "m", "uid": UID, "controller": True}]), None),
        (obj(), "Service ns/m already exists and is not controlled by this LLMServing"),
        (
            obj([{"kind": "LLMServing", "name": "m", "uid": UID, "controller": False}]),
            "not controlled by this LLMServing",
        ),  # an owner, but not the controller: still not ours to rewrite
        (
            obj([{"kind": "Application", "name": "shop", "uid": "x", "controller": True}], kind="Deployment"),
            "Deployment ns/m is controlled by Application shop, not by this LLMServing: left alone",
        ),
        (
            obj([{"kind": "LLMServing", "name": "m", "uid": "old-uid", "controller": True}]),
            "deleted and re-created",
        ),
    ],
)
def test_conflict(existing, want):
    got = ownership.conflict(existing, UID)
    if want is None:
        assert got is None
    else:
        assert got is not None and want in got
