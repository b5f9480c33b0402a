"""The pure parts of the children's reflector (reflector.py): what a watch line asks for, the back-off, and the
splitting of a watch stream into JSON lines. The list and watch against a real apiserver are in
tests/operator/test_reflector.py."""

from __future__ import annotations

import json

import pytest
from ovserve_operator import reflector

CLASSIFY = {
    "added": ({"type": "ADDED", "object": {}}, "event"),
    "modified": ({"type": "MODIFIED", "object": {}}, "event"),
    "deleted": ({"type": "DELETED", "object": {}}, "event"),
    "bookmark: only its resourceVersion counts": ({"type": "BOOKMARK", "object": {}}, "bookmark"),
    "410 Gone: list again": (
        {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}},
        "relist",
    ),
    "another error: watch again after a pause": ({"type": "ERROR", "object": {"code": 500}}, "error"),
    "an error without a status": ({"type": "ERROR"}, "error"),
    "an unknown type": ({"type": "SURPRISE", "object": {}}, "error"),
}


@pytest.mark.parametrize("event,want", list(CLASSIFY.values()), ids=list(CLASSIFY))
def test_classify(event, want):
    assert reflector.classify(event) == want


@pytest.mark.parametrize("current,want", [(0.0, 1.0), (1.0, 2.0), (8.0, 16.0), (16.0, 30.0), (30.0, 30.0)])
def test_backoff_doubles_from_one_second_to_thirty(current, want):
    assert reflector.next_backoff(current) == want


def _stream(*events: dict) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


A = {"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "5"}}}
B = {"type": "MODIFIED", "object": {"metadata": {"name": "b é", "resourceVersion": "6"}}}
WHOLE = _stream(A, B)

LINES = {
    "one chunk, two lines": ([WHOLE], [A, B]),
    "a line split across chunks": ([WHOLE[:10], WHOLE[10:40], WHOLE[40:]], [A, B]),
    "byte by byte (a multi-byte character split too)": ([WHOLE[i : i + 1] for i in range(len(WHOLE))], [A, B]),
    "blank lines (keep-alives) skipped": ([b"\n", _stream(A), b"  \n"], [A]),
    "an unfinished last line is not decoded": ([_stream(A) + b'{"type": "ADD'], [A]),
    "nothing": ([], []),
}


@pytest.mark.parametrize("chunks,want", list(LINES.values()), ids=list(LINES))
def test_json_lines(chunks, want):
    assert list(reflector.json_lines(chunks)) == want


@pytest.mark.parametrize(
    "obj,want", [({"metadata": {"resourceVersion": "7"}}, "7"), ({"metadata": {}}, None), ({}, None)]
)
def test_resource_version(obj, want):
    assert reflector.resource_version(obj) == want
