"""Small helpers shared by the streamed output parsers (tools.py, reasoning.py).

Pure: no openvino, no I/O. A parser is fed text deltas as the detokenizer produces them; a marker such as
`<tool_call>` may arrive split over several deltas, so text that could still be the start of a marker is
held back (`hold_back`), and whitespace next to a marker is trimmed the same way whether the text came in
one piece or many (`TrimmedText`).
"""

from __future__ import annotations


def hold_back(text: str, *markers: str) -> int:
    """How many characters at the end of `text` could be the beginning of one of `markers` (and must wait
    for the next delta before they are known to be plain text)."""
    longest = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), longest, -1):
            if text.endswith(marker[:n]):
                longest = n
                break
    return longest


class TrimmedText:
    """A text stream whose pieces next to a marker lose their whitespace on that side.

    `add` passes text on except trailing whitespace, which waits: it goes out in front of the next
    non-whitespace text, or is dropped by `cut` (a marker follows it). After `cut`, leading whitespace is
    dropped too. `finish` lets the waiting whitespace out (the text ended without a marker after it)."""

    __slots__ = ("_pending", "_skip")

    def __init__(self, *, strip_start: bool = False) -> None:
        self._pending: list[str] = []  # pieces, joined once: a long run of whitespace costs linear time
        self._skip = strip_start

    def add(self, text: str) -> str:
        if self._skip:
            text = text.lstrip()
            if not text:
                return ""
            self._skip = False
        body = text.rstrip()
        if not body:
            if text:
                self._pending.append(text)
            return ""
        out = "".join(self._pending) + body
        self._pending = [text[len(body) :]] if len(body) < len(text) else []
        return out

    def cut(self) -> None:
        self._pending, self._skip = [], True

    def finish(self) -> str:
        out, self._pending = "".join(self._pending), []
        return out
