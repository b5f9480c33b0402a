"""`stop` with OpenAI's meaning: the text ends before the first stop string, which is not in it.

openvino-genai stops generating at a stop string, but leaves it in the output when it lies inside one
token (measured: stop "sti" on the token " question" answered " question"). So the server cuts the text
itself. `StopCut` does it incrementally for a stream: the last len(longest stop) - 1 characters wait, since
they may begin a stop string that the next token completes. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable


class StopCut:
    def __init__(self, stops: Iterable[str]) -> None:
        self.stops = tuple(s for s in stops if s)
        self.keep = max((len(s) for s in self.stops), default=1) - 1
        self.buf = ""
        self.done = False  # a stop string was found: nothing more is text

    def feed(self, text: str) -> str:
        """The part of the text so far that is surely before any stop string."""
        if self.done or not text:
            return ""
        self.buf += text
        found = [i for s in self.stops if (i := self.buf.find(s)) >= 0]
        if found:
            out, self.buf, self.done = self.buf[: min(found)], "", True
            return out
        if len(self.buf) <= self.keep:
            return ""
        cut = len(self.buf) - self.keep
        out, self.buf = self.buf[:cut], self.buf[cut:]
        return out

    def flush(self) -> str:
        """The end of the text (what waited, unless a stop string was found)."""
        out, self.buf = ("" if self.done else self.buf), ""
        return out


def cut(text: str, stops: Iterable[str]) -> str:
    """The whole text before the first stop string."""
    c = StopCut(stops)
    return c.feed(text) + c.flush()


class StopText:
    """A Detokenizer whose text ends before the first stop string (same add/flush surface)."""

    def __init__(self, detok, stops: Iterable[str]) -> None:
        self.detok = detok
        self.tok = detok.tok
        self.cut = StopCut(stops)

    def add(self, ids: list[int]) -> str:
        return self.cut.feed(self.detok.add(ids))

    def flush(self) -> str:
        return self.cut.feed(self.detok.flush()) + self.cut.flush()
