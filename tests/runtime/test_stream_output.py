"""StreamOutput's event order: text held by the stream interval goes out before an engine error, and the
error is the last event before [DONE] (CI once saw held text written after the error chunk)."""

from __future__ import annotations

import asyncio
import json

import pytest
from ovserve_runtime.detok import Detokenizer
from ovserve_runtime.openai.responses import Chunks
from ovserve_runtime.serving.output import StreamOutput

pytestmark = pytest.mark.runtime


@pytest.fixture(scope="module")
def tok(tiny_models):
    import openvino_genai as g

    return g.Tokenizer(str(tiny_models / "tiny-llm"))


class _Request:
    """What StreamOutput reads of an engine request."""

    def __init__(self) -> None:
        self.events: asyncio.Queue = asyncio.Queue()
        self.logprobs = False
        self.sink = None
        self.generated = 0


class _Writer:
    """Records the bytes of each write; always ready (a client that keeps up)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def can_write_now(self) -> bool:
        return True

    def write_now(self, data: bytes) -> None:
        self.writes.append(data)

    async def write(self, data: bytes) -> None:
        self.writes.append(data)

    async def close(self, data: bytes) -> None:
        self.writes.append(data)


def _events(writes: list[bytes]) -> list[str]:
    return [line[6:] for line in b"".join(writes).decode().split("\n") if line.startswith("data: ")]


@pytest.mark.parametrize("chat", [True, False], ids=["chat", "completions"])
@pytest.mark.parametrize("held", [True, False], ids=["held-text", "nothing-held"])
def test_error_is_the_last_event_and_text_before_it_is_not_lost(tok, chat, held):
    ids = tok.encode(" one two three four five", add_special_tokens=False).input_ids.data[0].tolist()

    async def main() -> list[str]:
        greq, writer = _Request(), _Writer()
        chunks = Chunks("r", chat, "m", 0, include_usage=False)
        # a long interval holds everything the sink takes after the first write
        out = StreamOutput(greq, writer, chunks, Detokenizer(tok), interval=60.0 if held else 0.0)
        task = asyncio.ensure_future(out.run(("tokens", ids[:1]), prompt_tokens=3))
        while greq.sink is None:  # the first chunk is out: the engine now hands tokens to the sink
            await asyncio.sleep(0)
        for i in ids[1:]:
            assert greq.sink([i])
        assert bool(out.held) == held
        greq.events.put_nowait(("error", "engine process exited"))
        await task
        return _events(writer.writes)

    events = asyncio.run(main())
    assert events[-1] == "[DONE]"
    assert "engine process exited" in json.loads(events[-2])["error"]["message"]
    texts = [json.loads(e)["choices"][0] for e in events[:-2]]
    text = "".join((c["delta"].get("content") or "") if chat else c["text"] for c in texts)
    assert text == tok.decode(ids)  # every token generated before the error reached the client
    assert all(c["finish_reason"] is None for c in texts)  # an error is no finish
