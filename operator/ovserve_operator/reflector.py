"""The operator's own list and watch of the LLMServings and of their children (pods, Deployments, Services): a
reflector, as client-go calls it, feeding the caches (cache.py).

Why not kopf for these: kopf keeps a memory record for every object it watches, and runs a worker task per
object for each burst of events, idling 5 s after it; the events waiting for a worker wait as raw bodies. When it
lists a kind, every object gets one at once: a new leader at 5,000 LLMServings (~16,000 children) peaked at 831
MiB, and kept most of it; a bulk create of 1,000 LLMServings kept ~1,900 raw events queued for 100 s
(docs/operator.md, Scale).
Here a LIST is read in pages of `PAGE` objects, each page reduced to the snapshots that a status is computed
from and handed to the loop before the next page is read; nothing per object is kept but that snapshot.

One `Reflector` per (kind, namespace) runs in a thread of its own (the client is synchronous):

1. LIST in pages, with the children's label selector; the pages are handed over in order (`Sink.listed`), then
   `Sink.synced` with every uid listed: what the cache holds and that LIST no longer returns was deleted while
   no watch ran, and is dropped.
2. WATCH from the LIST's resourceVersion, with bookmarks, for at most `WATCH_S`, then again from the last
   resourceVersion seen. A 410 Gone (that version is older than the apiserver keeps) starts over at 1.
3. Any other error: the same step again after a back-off (1 s, doubling to 30 s). A refusal (401, 403: e.g. a
   watched namespace deleted with its RoleBinding) is told to the sink once (`Sink.refused`), and that it went
   through again (`Sink.readable`): the namespace is degraded, never the whole operator (cache.ListGate).

The resourceVersion to watch from advances only after an event was handed over: an event whose handling raised
is delivered again by the next watch, never skipped.

`Sink` calls come from the reflector's thread; intake.py reduces each object to its snapshot there, hands it
to the event loop, and waits for each page to be taken, so a slow loop slows the LIST instead of piling pages
up in memory (watch events are handed over without waiting: the apiserver drops a watcher that lags).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal, Protocol

from .kube import error_status, error_text

log = logging.getLogger(__name__)

PAGE = 100  # objects per LIST page (a page of pods decodes to ~5 MiB of Python objects, freed page by page)
WATCH_S = 300  # a watch request's timeoutSeconds: then the next one starts from the last resourceVersion
BACKOFF_S = (1.0, 30.0)  # first and longest pause after an error
REFUSED = frozenset({401, 403})  # a LIST or watch the apiserver refuses to this identity: retried, but told

Obj = dict[str, Any]
Action = Literal["event", "bookmark", "relist", "error"]


class Sink(Protocol):
    """Where a reflector's results go (called from its thread)."""

    def listed(self, reflector: Reflector, items: list[Obj], first: bool) -> None:
        """One page of a LIST (`first`: the first page of a new LIST)."""

    def synced(self, reflector: Reflector, uids: set[str]) -> None:
        """A LIST ended: `uids` is everything it returned."""

    def event(self, reflector: Reflector, event_type: str, obj: Obj) -> None:
        """One watch event: ADDED, MODIFIED or DELETED."""

    def refused(self, reflector: Reflector, message: str) -> None:
        """Its LIST or watch is refused (`REFUSED`; the apiserver's message): retried with back-off meanwhile.
        Told again only when the message changes."""

    def readable(self, reflector: Reflector) -> None:
        """A LIST or watch went through after `refused` (before any page or event of it is handed over)."""


def classify(event: Obj) -> Action:
    """What one decoded watch line asks for: an object event, a bookmark (only its resourceVersion counts),
    a fresh LIST (410 Gone: the version watched from is no longer kept), or an error (retry the watch)."""
    kind = event.get("type")
    if kind in ("ADDED", "MODIFIED", "DELETED"):
        return "event"
    if kind == "BOOKMARK":
        return "bookmark"
    if kind == "ERROR" and (event.get("object") or {}).get("code") == 410:
        return "relist"
    return "error"


def resource_version(obj: Obj) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion") or None


def next_backoff(current: float) -> float:
    return min(BACKOFF_S[1], max(BACKOFF_S[0], current * 2))


class Gone(Exception):
    """The apiserver no longer keeps the resourceVersion watched from (410): LIST again."""


class Reflector:
    """List and watch one kind in one namespace ("" = every namespace), objects matching `selector`.

    `list_fn(**kwargs)` GETs the kind's collection (`list_function`) and returns the HTTP response unread: bodies
    are decoded once, as plain dicts, never as client models."""

    def __init__(
        self, kind: str, namespace: str, selector: str, list_fn: Callable[..., Any], sink: Sink, page: int = PAGE
    ) -> None:
        self.kind, self.namespace, self.selector = kind, namespace, selector
        self.list_fn, self.sink, self.page = list_fn, sink, page
        self.resource_version: str | None = None  # where the next watch starts; None: LIST first
        self.lists = 0  # LISTs completed (1 after the start; more after a 410)
        self.refusal: str | None = None  # the apiserver's message while its LIST or watch is refused
        self.stop = threading.Event()
        self._response: Any = None
        self._thread: threading.Thread | None = None

    @property
    def name(self) -> str:
        return f"{self.kind} in {self.namespace or 'every namespace'}"

    # --------------------------------------------------------------------------- the steps
    def list_once(self) -> None:
        """LIST every page, handing each over; then `synced`. Sets the resourceVersion to watch from."""
        token: str | None = None
        uids: set[str] = set()
        first = True
        while True:
            kwargs: dict[str, Any] = {"label_selector": self.selector, "limit": self.page, "_request_timeout": 60}
            if token:
                kwargs["_continue"] = token
            page = self._get(**kwargs)
            self._went_through()
            items = page.get("items") or []
            uids.update((i.get("metadata") or {}).get("uid") or "" for i in items)
            self.sink.listed(self, items, first)
            first = False
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                self.resource_version = meta.get("resourceVersion") or None
                break
        self.sink.synced(self, uids)
        self.lists += 1

    def watch_once(self) -> None:
        """One watch request from the current resourceVersion until the server ends it (`WATCH_S`) or `stop`.
        Raises Gone on a 410."""
        response = self.list_fn(
            label_selector=self.selector,
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=self.resource_version,
            timeout_seconds=WATCH_S,
            _request_timeout=(10, WATCH_S + 30),
        )
        self._response = response
        self._went_through()
        try:
            for event in json_lines(response.stream(amt=None, decode_content=False)):
                if self.stop.is_set():
                    return
                action = classify(event)
                obj = event.get("object") or {}
                if action == "relist":
                    raise Gone(obj.get("message") or "410 Gone")
                if action == "error":
                    raise RuntimeError(f"watch error: {obj.get('message') or event}")
                if action == "event":
                    self.sink.event(self, event["type"], obj)
                # only now that it was handed over: if that raised, the next watch starts before this event
                self.resource_version = resource_version(obj) or self.resource_version
        finally:
            self._response = None
            response.close()
            response.release_conn()

    def run(self) -> None:
        """LIST, then watch for ever (until `stop`), listing again after a 410; errors back off."""
        pause = 0.0
        while not self.stop.is_set():
            try:
                if self.resource_version is None:
                    self.list_once()
                self.watch_once()
                pause = 0.0
            except Exception as e:
                if self.stop.is_set():
                    return
                if isinstance(e, Gone) or error_status(e) == 410:  # a watch's, or a LIST's continue token
                    log.info("%s: %s: listing again", self.name, error_text(e))
                    self.resource_version = None
                    continue
                if (code := error_status(e)) in REFUSED:
                    self._refused(f"HTTP {code}: {error_text(e) or type(e).__name__}")
                pause = next_backoff(pause)
                log.warning("%s: %s: again in %.0f s", self.name, error_text(e) or type(e).__name__, pause)
                self.stop.wait(pause)

    def _refused(self, message: str) -> None:
        if message != self.refusal:
            self.refusal = message
            self.sink.refused(self, message)

    def _went_through(self) -> None:
        if self.refusal is not None:
            self.refusal = None
            self.sink.readable(self)

    # --------------------------------------------------------------------------- thread
    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=f"reflector {self.name}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop: the running watch is cut (its socket shut), the thread ends."""
        self.stop.set()
        _shutdown(self._response)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end (after `close`); True when it has."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self._thread is None or not self._thread.is_alive()

    def _get(self, **kwargs: Any) -> Obj:
        response = self.list_fn(**kwargs)
        try:
            return json.loads(response.data)
        finally:
            response.release_conn()


def json_lines(chunks: Iterable[bytes]) -> Iterator[Obj]:
    """A watch stream's JSON lines, decoded (a line may span chunks, a chunk hold several lines)."""
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                yield json.loads(line)


def _shutdown(response: Any) -> None:
    """Unblock a thread reading `response` (the client's own Watch.stop does the same)."""
    import socket

    sock = getattr(getattr(response, "connection", None), "sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def list_function(kube: Any, api_version: str, kind: str, namespace: str) -> Callable[..., Any]:
    """GET on the collection of `kind` in `namespace` ("" = every namespace), through the operator's dynamic
    client (kube.Kube): the response comes back unread, as the raw HTTP response. (Not the typed CoreV1Api:
    building it costs 21 MiB of validators.)"""
    from functools import partial

    path = kube.resource(api_version, kind).path(namespace=namespace or None)
    return partial(kube.dyn.request, "GET", path, serialize=False)
