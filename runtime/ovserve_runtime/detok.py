"""Incremental detokenization that does not call the OpenVINO detokenizer once per token.

openvino_genai.Tokenizer.decode runs an OpenVINO infer request: about a millisecond per call, whatever the
length, and the event loop runs it once per token per stream. Instead:

* TokenTable decodes every token id once at load time (batched, each id after a fixed anchor token, so that
  a SentencePiece "leading space" survives) and keeps its text. Ids whose text is not a whole UTF-8 string
  (a byte-level piece of a multi-byte character shows U+FFFD) or that the check below disagrees with are
  marked unsafe. The table is only used when concatenating table texts reproduces decode() on a sample.
* Detokenizer emits table text for safe ids; when an unsafe id arrives it falls back to decoding a small
  window (the last few already-sent ids plus the pending ones, vLLM-style prefix/read offsets), holding back
  text that ends in U+FFFD for up to 4 tokens (the longest UTF-8 sequence).
"""

from __future__ import annotations

import logging
import random
import time

log = logging.getLogger("ovserve.detok")

_CHUNK = 2048
_CONTEXT = 4  # already-sent ids decoded in front of pending ones, so that spacing rules see their context


class TokenTable:
    """Per-id text, or None when this tokenizer cannot be decoded id by id."""

    def __init__(self, texts: list[str] | None, unsafe: frozenset[int]) -> None:
        self.texts = texts
        self.unsafe = unsafe

    @classmethod
    def build(cls, tokenizer, vocab_size: int | None = None, sample: int = 64) -> TokenTable:
        t0 = time.perf_counter()
        try:
            table = cls._build(tokenizer, vocab_size, sample)
        except Exception as exc:  # the table is an optimization: decode() stays correct without it
            log.warning("token table unavailable (%s); decoding per step", exc)
            return cls(None, frozenset())
        log.info(
            "token table: %s ids (%d unsafe) in %.2fs",
            len(table.texts) if table.texts else "no",
            len(table.unsafe),
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


class Detokenizer:
    """Turns a stream of token ids into text deltas (one Detokenizer per generation)."""

    HOLD = 4

    def __init__(self, tokenizer, table: TokenTable | None = None) -> None:
        self.tok = tokenizer
        self.table = table if table is not None and table.usable else None
        self.ids: list[int] = []
        self.sent = 0  # ids whose text has been emitted
        self.held = 0

    def add(self, ids: list[int]) -> str:
        table = self.table
        if table is not None and self.sent == len(self.ids) and self.sent > 0:
            texts, unsafe = table.texts, table.unsafe
            if not any(i in unsafe or i >= len(texts) for i in ids):
                self.ids.extend(ids)
                self.sent = len(self.ids)
                return "".join([texts[i] for i in ids])
        self.ids.extend(ids)
        return self._window(final=False)

    def flush(self) -> str:
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
