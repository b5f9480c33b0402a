"""Prompt tokenization in batches, on one thread, for the event loop (docs/runtime.md, "Serving architecture").

`openvino_genai.Tokenizer.encode` is an infer request of the tokenizer model: 0.25-0.45 ms per call on CPU
whatever the prompt's length, and it holds the GIL for part of it, so a burst of N requests used to spend
N calls (and N GIL handoffs) before the last one reached the engine. One call on a list costs about the
same as one call on a single prompt (64 prompts: 0.55 ms), so this encoder takes every prompt waiting when
it wakes and encodes them in one call: under light load a batch of one (no added wait), under a burst one
call for the burst. Rows are cut out of the padded batch by its attention mask; a batch never mixes
`add_special_tokens` values, and a long prompt is encoded alone (the batch is padded to its longest row).
One prompt cannot fail the others of its batch: when the batched call raises or returns fewer rows than
prompts (openvino-tokenizers gives a batch of empty strings one row), each prompt is encoded alone, and only
the one that fails alone gets the error.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from typing import Any

import numpy as np

log = logging.getLogger("ovserve.encoder")

MAX_BATCH = 64
ALONE_CHARS = 4096  # a prompt this long is encoded in a batch of its own


class BatchEncoder:
    """`await encode(text, add_special_tokens)` -> the prompt's token ids (int64, 1-D)."""

    def __init__(self, tokenizer: Any, max_batch: int = MAX_BATCH) -> None:
        self.tokenizer = tokenizer
        self.max_batch = max_batch
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="encoder", daemon=True)
        self._thread.start()

    async def encode(self, text: str, add_special_tokens: bool) -> np.ndarray:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._q.put((text, add_special_tokens, fut, loop))
        return await fut

    def close(self) -> None:
        self._q.put(None)

    # --- the encoder thread ----------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            items = [self._q.get()]
            while len(items) < self.max_batch:  # everything waiting now
                try:
                    items.append(self._q.get_nowait())
                except queue.Empty:
                    break
            # one call per add_special_tokens value; a long prompt alone (its row would pad the others)
            batches: dict[tuple, list] = {}
            for it in items:
                if it is not None:
                    alone = id(it) if len(it[0]) > ALONE_CHARS else None
                    batches.setdefault((it[1], alone), []).append(it)
            for batch in batches.values():
                self._encode(batch)
            if None in items:  # closed
                return

    def _encode(self, batch: list) -> None:
        results: list
        try:
            results = encode_rows(self.tokenizer, [b[0] for b in batch], batch[0][1])
        except Exception as exc:
            if len(batch) == 1:  # its own failure: a 500 at its handler
                log.exception("tokenizing a prompt failed")
                results = [exc]
            else:  # one prompt's failure stays its own: each alone
                log.warning("tokenizing %d prompts in one call failed (%s): each alone", len(batch), exc)
                results = [self._alone(b[0], b[1]) for b in batch]
        by_loop: dict[Any, list] = {}
        for (_t, _s, fut, loop), res in zip(batch, results, strict=True):
            by_loop.setdefault(loop, []).append((fut, res))
        for loop, pairs in by_loop.items():
            try:
                loop.call_soon_threadsafe(_resolve, pairs)  # one wakeup of the loop per batch
            except RuntimeError:
                pass  # that loop is closed: nobody waits

    def _alone(self, text: str, add_special_tokens: bool) -> np.ndarray | Exception:
        try:
            return encode_rows(self.tokenizer, [text], add_special_tokens)[0]
        except Exception as exc:
            log.exception("tokenizing a prompt failed")
            return exc


class RowsMismatch(RuntimeError):
    """The tokenizer returned another number of rows than texts."""


def encode_rows(tokenizer: Any, texts: list[str], add_special_tokens: bool) -> list[np.ndarray]:
    """One `encode` call for all texts; each text's ids without the batch's padding."""
    out = tokenizer.encode(texts, add_special_tokens=add_special_tokens)
    ids = np.asarray(out.input_ids.data)
    mask = np.asarray(out.attention_mask.data).astype(bool)
    if ids.shape[0] != len(texts) or mask.shape != ids.shape:
        raise RowsMismatch(f"{len(texts)} texts, {ids.shape[0]} rows of ids")
    return [np.ascontiguousarray(ids[i][mask[i]], dtype=np.int64) for i in range(len(texts))]


def _resolve(pairs: list) -> None:
    for fut, res in pairs:
        if fut.done():  # the handler went away (client disconnect)
            continue
        if isinstance(res, Exception):
            fut.set_exception(res)
        else:
            fut.set_result(res)
