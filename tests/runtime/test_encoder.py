"""The batch encoder (runtime/ovserve_runtime/encoder.py) on the tiny model's real openvino tokenizer: a row cut
out of a batched `encode` is exactly what a call on that prompt alone gives, whatever else shares the batch;
concurrent callers each get their own prompt's ids; a failing prompt fails its own caller only."""

from __future__ import annotations

import asyncio
import random

import numpy as np
import openvino_genai as g
import pytest
from ovserve_runtime.encoder import ALONE_CHARS, BatchEncoder, encode_rows

PROMPTS = [
    "",
    "a",
    "hello world",
    "  leading and trailing spaces  ",
    "Grüße aus Köln, ça va? 你好\uff0c世界 🙂 مرحبا",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "line one\nline two\r\n\ttabbed",
    "x" * 3000,
    " ".join(str(i) for i in range(400)),
]


@pytest.fixture(scope="module")
def tokenizer(tiny_models):
    return g.Tokenizer(str(tiny_models / "tiny-llm"), INFERENCE_NUM_THREADS=1)


def alone(tok, text: str, special: bool) -> list[int]:
    return tok.encode(text, add_special_tokens=special).input_ids.data[0].tolist()


@pytest.mark.parametrize("special", [True, False])
def test_batched_rows_equal_single_calls(tokenizer, special):
    rng = random.Random(7)
    for _ in range(5):
        texts = rng.sample(PROMPTS, k=rng.randint(2, len(PROMPTS)))
        rows = encode_rows(tokenizer, texts, special)
        assert [r.tolist() for r in rows] == [alone(tokenizer, t, special) for t in texts]
        assert all(r.dtype == np.int64 and r.ndim == 1 for r in rows)


def test_concurrent_callers_each_get_their_prompt(tokenizer):
    prompts = [(f"request {i}: " + PROMPTS[i % len(PROMPTS)] + " " * (i % 3), i % 2 == 0) for i in range(150)]
    prompts.append(("y" * (ALONE_CHARS + 10), True))  # encoded in a batch of its own

    async def main():
        enc = BatchEncoder(tokenizer, max_batch=16)
        try:
            return await asyncio.gather(*(enc.encode(t, s) for t, s in prompts))
        finally:
            enc.close()

    got = asyncio.run(main())
    assert [r.tolist() for r in got] == [alone(tokenizer, t, s) for t, s in prompts]


class Failing:
    """The real tokenizer, raising for prompts that contain 'boom' (a tokenizer failure is rare but real:
    the batch's callers must all hear of it, and the encoder must keep serving)."""

    def __init__(self, tok) -> None:
        self.tok = tok

    def encode(self, texts, add_special_tokens: bool):
        if any("boom" in t for t in texts):
            raise RuntimeError("tokenizer failed")
        return self.tok.encode(texts, add_special_tokens=add_special_tokens)


def test_a_failing_call_reaches_its_callers_and_the_encoder_goes_on(tokenizer):
    async def main():
        enc = BatchEncoder(Failing(tokenizer))
        try:
            bad = await asyncio.gather(*(enc.encode(t, True) for t in ["a", "boom", "b"]), return_exceptions=True)
            after = await enc.encode("hello world", True)
            return bad, after
        finally:
            enc.close()

    bad, after = asyncio.run(main())
    assert isinstance(bad[1], RuntimeError)
    assert [bad[0].tolist(), bad[2].tolist()] == [alone(tokenizer, "a", True), alone(tokenizer, "b", True)]
    assert after.tolist() == alone(tokenizer, "hello world", True)


@pytest.mark.parametrize("special", [True, False])
def test_a_batch_of_empty_prompts_gives_each_its_row(tokenizer, special):
    """openvino-tokenizers answers a batch of empty strings with one row (the fuzzer's two concurrent
    `"prompt": ""` completions got a 500 each): each caller still gets its own ids."""

    async def main():
        enc = BatchEncoder(tokenizer)
        try:
            return await asyncio.gather(*(enc.encode("", special) for _ in range(3)))
        finally:
            enc.close()

    assert [r.tolist() for r in asyncio.run(main())] == [alone(tokenizer, "", special)] * 3
