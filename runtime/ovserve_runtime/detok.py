"""Incremental detokenization that does not call the OpenVINO detokenizer once per token.

openvino_genai.Tokenizer.decode runs an OpenVINO infer request: about a millisecond per call, whatever the
length, and the event loop runs it once per token per stream. Instead:

* TokenTable decodes every token id once at load time (batched, each id after a fixed anchor token, so that
  a SentencePiece "leading space" survives) and keeps its text. Ids whose text is not a whole UTF-8 string
  (a byte-level piece of a multi-byte character shows U+FFFD) or that the check below disagrees with are
  marked unsafe. The table is only used when concatenating table texts reproduces decode() on a sample.
* Byte-exact mode, when the tokenizer allows it (byte-level BPE: openvino_genai's get_vocab() gives each
  token's raw bytes): every id has its bytes, the first id of a stream its own (decode([id]) may strip a
  leading space), and a stream is one incremental UTF-8 decoder over the concatenated bytes, with
  errors="replace" like decode(). No decode() call at all per stream, split characters included. Used only
  when it reproduces decode() on random sequences over the whole vocabulary and on multilingual text.
* Otherwise Detokenizer emits table text for safe ids; when an unsafe id arrives it falls back to decoding
  a small window (the last few already-sent ids plus the pending ones, vLLM-style prefix/read offsets),
  holding back text that ends in U+FFFD for up to 4 tokens (the longest UTF-8 sequence).
"""

from __future__ import annotations

import logging
import random
import time

log = logging.getLogger("ovserve.detok")

_CHUNK = 2048
_CONTEXT = 4  # already-sent ids decoded in front of pending ones, so that spacing rules see their context
# what the byte-exact tables are checked on besides random ids: split multi-byte characters of every length
_SAMPLE_TEXT = "naïve café ünïcödé ☃ 日本語のテキスト 🙂🚀 Ωμέγα привет 한국어 done"


class TokenTable:
    """Per-id text, or None when this tokenizer cannot be decoded id by id."""

    def __init__(
        self,
        texts: list[str] | None,
        unsafe: frozenset[int],
        first: list[bytes] | None = None,
        rest: list[bytes] | None = None,
    ) -> None:
        self.texts = texts
        self.unsafe = unsafe
        self.first = first  # byte-exact mode: the bytes of an id that starts a stream
        self.rest = rest  # ... and of an id after others

    @classmethod
    def build(cls, tokenizer, vocab_size: int | None = None, sample: int = 64) -> TokenTable:
        t0 = time.perf_counter()
        try:
            table = cls._build(tokenizer, vocab_size, sample)
        except Exception as exc:  # the table is an optimization: decode() stays correct without it
            log.warning("token table unavailable (%s); decoding per step", exc)
            return cls(None, frozenset())
        if table.usable:
            try:
                table.first, table.rest = _byte_tables(tokenizer, table, sample)
            except Exception as exc:  # an optimization too
                log.info("byte-exact detokenization unavailable (%s)", exc)
        log.info(
            "token table: %s ids (%d unsafe, byte-exact %s) in %.2fs",
            len(table.texts) if table.texts else "no",
            len(table.unsafe),
            "yes" if table.byte_exact else "no",
            time.perf_counter() - t0,
        )
        return table

    @classmethod
    def _build(cls, tok, vocab_size: int | None, sample: int) -> TokenTable:
        vocab = vocab_size or len(tok.get_vocab())
        anchor_ids = tok.encode("a", add_special_tokens=False).input_ids.data[0].tolist()
        if len(anchor_ids) != 1:
            return cls(None, frozenset())
        anchor = anchor_ids[0]
        base = tok.decode([anchor])
        texts: list[str] = []
        unsafe: set[int] = set()
        for start in range(0, vocab, _CHUNK):
            ids = range(start, min(vocab, start + _CHUNK))
            for i, full in zip(ids, tok.decode([[anchor, i] for i in ids]), strict=True):
                if not full.startswith(base) or "\ufffd" in full:
                    unsafe.add(i)
                    texts.append("")
                else:
                    texts.append(full[len(base) :])
        table = cls(texts, frozenset(unsafe))
        # the check: concatenated table texts must equal decode() of random safe sequences
        rnd = random.Random(0)
        safe = [i for i in range(vocab) if i not in unsafe]
        seqs = [[rnd.choice(safe) for _ in range(rnd.randint(2, 12))] for _ in range(sample)]
        for seq, text in zip(seqs, tok.decode(seqs), strict=True):
            first = tok.decode([seq[0]])  # decode() may strip the first token's leading space
            if text != first + "".join(texts[i] for i in seq[1:]):
                log.info("token table disagrees with decode() (%r); decoding per step", text[:40])
                return cls(None, frozenset())
        return table

    @property
    def usable(self) -> bool:
        return self.texts is not None

    @property
    def byte_exact(self) -> bool:
        return self.first is not None and self.rest is not None


class Utf8Stream:
    """Bytes to text the way openvino_tokenizers' detokenizer does it (its UTF8Validate op in replace mode,
    then UTF-8 decoding with replacement), incrementally. It differs from Python's own "replace" on invalid
    input: a lead byte F5-F7 starts a 4-byte sequence, a truncated sequence is one U+FFFD whatever its second
    byte, an overlong one is one U+FFFD per byte."""

    _MIN = (0, 0, 0x80, 0x800, 0x10000)  # smallest code point of an n-byte sequence

    def __init__(self) -> None:
        self.need = 0  # continuation bytes still expected
        self.size = 0
        self.cp = 0
        self.pending = bytearray()

    def feed(self, data: bytes) -> str:
        if not self.need and data.isascii():
            return data.decode("ascii")
        out = bytearray()
        for b in data:
            if self.need:
                if b >> 6 == 0b10:
                    self.need -= 1
                    self.cp |= (b & 0x3F) << (6 * self.need)
                    self.pending.append(b)
                    if not self.need:
                        out += b"\xef\xbf\xbd" * self.size if self.cp < self._MIN[self.size] else self.pending
                    continue
                out += b"\xef\xbf\xbd"  # a broken sequence; this byte starts afresh
                self.need = 0
            if b < 0x80:
                out.append(b)
            elif b >> 5 == 0b110:
                self._start(b, 2, b & 0x1F)
            elif b >> 4 == 0b1110:
                self._start(b, 3, b & 0x0F)
            elif b >> 3 == 0b11110:
                self._start(b, 4, b & 0x07)
            else:
                out += b"\xef\xbf\xbd"
        return out.decode("utf-8", "replace")

    def _start(self, b: int, size: int, bits: int) -> None:
        self.size, self.need = size, size - 1
        self.cp = bits << (6 * self.need)
        self.pending = bytearray([b])

    def end(self) -> str:
        truncated, self.need = self.need > 0, 0
        return "\ufffd" if truncated else ""


def _utf8(first: list[bytes], rest: list[bytes], ids: list[int]) -> str:
    if not ids:
        return ""
    u = Utf8Stream()
    return u.feed(first[ids[0]] + b"".join(rest[i] for i in ids[1:])) + u.end()


def _byte_tables(tok, table: TokenTable, sample: int) -> tuple[list[bytes] | None, list[bytes] | None]:
    """Per-id bytes (first position, later positions), or (None, None) when they do not reproduce decode()."""
    texts = table.texts or []
    vocab = len(texts)
    raw: dict[int, bytes] = {}
    for piece, i in tok.get_vocab().items():
        raw[int(i)] = piece if isinstance(piece, bytes) else str(piece).encode()
    if any(i not in raw for i in table.unsafe):
        return None, None
    rest = [raw[i] if i in table.unsafe else texts[i].encode() for i in range(vocab)]
    first: list[bytes] = []
    for start in range(0, vocab, _CHUNK):
        ids = range(start, min(vocab, start + _CHUNK))
        for i, alone in zip(ids, tok.decode([[i] for i in ids]), strict=True):
            first.append(raw[i] if i in table.unsafe else alone.encode())
    rnd = random.Random(1)
    seqs = [[rnd.randrange(vocab) for _ in range(rnd.randint(1, 12))] for _ in range(sample)]
    # byte pieces are rare in a large vocabulary: sequences mostly of them, with some whole tokens between
    pieces = sorted(table.unsafe) or [0]
    for _ in range(4 * sample):
        seqs.append([rnd.choice(pieces) if rnd.random() < 0.8 else rnd.randrange(vocab) for _ in range(16)])
    seqs += [tok.encode(_SAMPLE_TEXT, add_special_tokens=False).input_ids.data[0].tolist()]
    for seq, text in zip(seqs, tok.decode(seqs), strict=True):
        if _utf8(first, rest, seq) != text:
            log.info("byte tables disagree with decode() (%r)", text[:40])
            return None, None
    return first, rest


class Detokenizer:
    """Turns a stream of token ids into text deltas (one Detokenizer per generation)."""

    HOLD = 4

    def __init__(self, tokenizer, table: TokenTable | None = None) -> None:
        self.tok = tokenizer
        self.table = table if table is not None and table.usable else None
        self.ids: list[int] = []
        self.sent = 0  # ids whose text has been emitted
        self.held = 0
        self.utf8 = Utf8Stream() if self.table and self.table.byte_exact else None
        self.emitted = 0  # characters emitted in byte-exact mode

    def add(self, ids: list[int]) -> str:
        if self.utf8 is not None:
            return self._add_bytes(ids)
        table = self.table
        if table is not None and self.sent == len(self.ids) and self.sent > 0:
            texts, unsafe = table.texts, table.unsafe
            if not any(i in unsafe or i >= len(texts) for i in ids):
                self.ids.extend(ids)
                self.sent = len(self.ids)
                return "".join([texts[i] for i in ids])
        self.ids.extend(ids)
        return self._window(final=False)

    def _add_bytes(self, ids: list[int]) -> str:
        table = self.table
        first, rest = table.first, table.rest
        if any(not 0 <= i < len(rest) for i in ids):
            # an id the tokenizer does not know (a model vocabulary padded beyond it): decode() says what the
            # stream is now, and the window path takes over for the rest of it
            self.utf8 = None
            self.ids.extend(ids)
            self.sent = len(self.ids)
            return self.tok.decode(self.ids)[self.emitted :]
        data = b"".join(rest[i] for i in ids)
        if not self.ids:
            data = first[ids[0]] + data[len(rest[ids[0]]) :]
        self.ids.extend(ids)
        text = self.utf8.feed(data)
        self.emitted += len(text)
        return text

    def flush(self) -> str:
        if self.utf8 is not None:
            return self.utf8.end()
        return self._window(final=True) if self.sent < len(self.ids) else ""

    def _window(self, final: bool) -> str:
        start = max(0, self.sent - _CONTEXT)
        prev = self.tok.decode(self.ids[start : self.sent]) if self.sent > start else ""
        text = self.tok.decode(self.ids[start:])
        if not final and text.endswith("\ufffd") and self.held < self.HOLD:
            self.held += 1
            return ""
        self.held = 0
        self.sent = len(self.ids)
        if text.startswith(prev):
            return text[len(prev) :]
        # a context that decodes differently with more ids after it: emit what is new by length
        return text[len(prev) :] if len(text) > len(prev) else ""
