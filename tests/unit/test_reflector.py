"""The pure parts of the children's reflector (reflector.py): what a watch line asks for, the back-off, and the
splitting of a watch stream into JSON lines. The list and watch against a real apiserver are in
tests/operator/test_reflector.py."""

from __future__ import annotations

import json
import time

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


# ------------------------------------------------------------------ the loop, on a stand-in of the raw HTTP response
# (the reflector against the real apiserver: tests/operator/test_reflector.py)


class _Response:
    """What `list_function` returns: a LIST page (`data`) or a watch stream that ends when `stop` is set."""

    def __init__(self, data: dict | None = None, events: tuple = (), stop=None) -> None:
        self.data = json.dumps(data or {}).encode()
        self.events, self.stop = events, stop

    def stream(self, amt=None, decode_content=False):
        yield _stream(*self.events)
        if self.stop is not None:
            self.stop.wait(5)

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class _Refused(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status, self.body = status, json.dumps({"message": "pods is forbidden"})


class _Sink:
    def __init__(self, fail_on: str = "") -> None:
        self.calls: list[tuple] = []
        self.fail_on = fail_on

    def listed(self, r, items, first):
        self.calls.append(("listed", [i["metadata"]["name"] for i in items]))

    def synced(self, r, uids):
        self.calls.append(("synced",))

    def event(self, r, event_type, obj):
        name = obj["metadata"]["name"]
        if name == self.fail_on:
            self.fail_on = ""
            raise RuntimeError(f"handling {name} failed")
        self.calls.append((event_type, name))

    def refused(self, r, message):
        self.calls.append(("refused", message))

    def readable(self, r):
        self.calls.append(("readable",))


def test_the_resource_version_advances_only_after_the_event_was_handled():
    """Issue 38: an event whose handling raised is watched again from the version before it, never skipped."""
    sink = _Sink(fail_on="b é")
    watched_from: list[str] = []

    def list_fn(**kwargs):
        watched_from.append(kwargs["resource_version"])
        return _Response(events=(A, B) if kwargs["resource_version"] == "4" else (B,))

    r = reflector.Reflector("Pod", "ns", "", list_fn, sink)
    r.resource_version = "4"
    with pytest.raises(RuntimeError):
        r.watch_once()
    assert r.resource_version == "5" and sink.calls == [("ADDED", "a")]
    r.watch_once()  # from 5: b again, handled this time
    assert watched_from == ["4", "5"] and r.resource_version == "6" and sink.calls[1:] == [("MODIFIED", "b é")]


def test_a_refusal_is_told_once_and_readable_before_the_first_page(monkeypatch):
    """Issue 38: a LIST refused (403) is retried with back-off; the sink hears it once, then `readable` before
    the pages of the LIST that goes through."""
    monkeypatch.setattr(reflector, "BACKOFF_S", (0.01, 0.01))
    answers = [_Refused(403), _Refused(403), _Refused(401)]
    r: reflector.Reflector

    def list_fn(**kwargs):
        if answers:
            raise answers.pop(0)
        if kwargs.get("watch"):
            return _Response(stop=r.stop)
        return _Response({"items": [{"metadata": {"name": "p", "uid": "u"}}], "metadata": {"resourceVersion": "9"}})

    sink = _Sink()
    r = reflector.Reflector("Pod", "ns", "", list_fn, sink)
    r.start()
    try:
        deadline = time.monotonic() + 10
        while ("synced",) not in sink.calls and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        r.close()
        r.stop.set()
    assert r.join(10)
    assert sink.calls == [
        ("refused", "HTTP 403: pods is forbidden"),
        ("refused", "HTTP 401: pods is forbidden"),  # another answer: told again
        ("readable",),
        ("listed", ["p"]),
        ("synced",),
    ]
    assert r.refusal is None and r.resource_version == "9"
