"""One request's fault stays its own across the engine-core process (issue 38, item 2): the child survives a
bad message and forgets a finished request at once; the HTTP side never blocks its event loop on the pipe,
and a request whose delivery raises fails alone. Real pipelines on the tiny model, a real child process."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import signal
import threading
import time

import pytest
from ovserve_runtime.engine import GenRequest, construct_cb
from ovserve_runtime.engine import SchedulerOptions as Sched
from ovserve_runtime.engine.core import CBCore
from ovserve_runtime.engine.inprocess import cb_client
from ovserve_runtime.engine.process import STARTED, ChildServer, PipeSink, ProcessClient
from ovserve_runtime.engine.request import Events
from ovserve_runtime.engine.wire import config_to_dict, recv
from ovserve_runtime.report import PipelineType as P

pytestmark = pytest.mark.runtime

THREADS = {"INFERENCE_NUM_THREADS": 1}


@pytest.fixture
def child(tiny_models):
    """The child's side in this process: ChildServer and a CBCore on the real pipeline, writing step messages
    to a pipe whose other end the test reads as the HTTP side would."""
    ours, theirs = mp.Pipe()
    pipe = construct_cb(str(tiny_models / "tiny-llm"), "CPU", Sched(), THREADS)
    sink = PipeSink(theirs)
    core = CBCore(pipe, P.LM_CB, sink, max_active=8)
    server = ChildServer(core, sink)
    core.start()
    yield server, ours, pipe
    core.stop()


def _add(rid: int, pipe, max_new: int = 4) -> tuple:
    import openvino_genai as g

    cfg = g.GenerationConfig()
    cfg.max_new_tokens, cfg.ignore_eos = max_new, True
    ids = pipe.get_tokenizer().encode(f"hello {rid}").input_ids.data[0].tolist()
    return ("add", rid, ids, True, config_to_dict(cfg), 0)


def _ends(conn, rids: set[int], timeout: float = 30) -> dict[int, tuple[str, object]]:
    """Each request's end (done or error), as the HTTP side reads them off the pipe: not its tokens, nor the
    `started` event (when the pipeline took it: the queue-wait metric's end) that comes before its first token."""
    ends: dict[int, tuple[str, object]] = {}
    deadline = time.monotonic() + timeout
    while set(ends) != rids:
        assert conn.poll(max(0.0, deadline - time.monotonic())), f"no end for {rids - set(ends)}"
        msg = recv(conn)
        if msg[0] == "step":
            ends.update({rid: (kind, value) for rid, kind, value in msg[1] if kind not in ("tokens", STARTED)})
    return ends


def test_a_bad_message_answers_its_request_and_the_child_goes_on(child):
    server, conn, pipe = child
    good = _add(1, pipe)
    bad_config = ("add", 2, good[2], True, {**good[4], "no_such_field": 1}, 0)
    bad_ids = ("add", 3, ["not", "ids"], True, good[4], 0)
    assert server.handle_bytes(b"\x80\x05not a pickle") is True
    for msg in [("bogus",), (), "not a tuple", ("add", 4), ("cancel",), bad_config, bad_ids, good]:
        assert server.handle(msg) is True
    ends = _ends(conn, {1, 2, 3, 4})
    assert ends[1] == ("done", "length")
    assert ends[4][0] == "error"  # an "add" with no more than its id: still answered
    assert ends[2][0] == "error" and "no_such_field" in ends[2][1]
    assert ends[3][0] == "error"
    assert server.handle(("stop",)) is False


def test_a_finished_request_is_forgotten_at_once(child):
    server, conn, pipe = child
    for rid in range(1, 9):
        server.handle(_add(rid, pipe))
    ends = _ends(conn, set(range(1, 9)))
    assert all(end == ("done", "length") for end in ends.values())
    assert server.reqs == {}  # not kept until 4,096 accumulate, with their prompt tensors
    server.handle(_add(9, pipe, max_new=400))
    server.handle(("cancel", 9))
    assert _ends(conn, {9})[9] == ("done", "cancelled")
    assert server.reqs == {}


@pytest.fixture
def client(tiny_models):
    c = ProcessClient(str(tiny_models / "tiny-llm"), "CPU", Sched(), THREADS, P.LM_CB)
    c.start()
    yield c
    with contextlib.suppress(ProcessLookupError):  # never left stopped
        os.kill(c.proc.pid, signal.SIGCONT)
    c.stop()


def _request(client, loop, text: str, max_new: int = 4, prompt_len: int | None = None) -> GenRequest:
    cfg = client.new_config()
    cfg.max_new_tokens, cfg.ignore_eos = max_new, True
    ids = client.tokenizer.encode(text).input_ids
    if prompt_len is not None:  # a long prompt (a list of ids crosses the pipe as it is)
        ids = (ids.data[0].tolist() * prompt_len)[:prompt_len]
    return GenRequest(config=cfg, max_new_tokens=max_new, input_ids=ids, loop=loop, events=Events())


async def _last(req: GenRequest, timeout: float = 60) -> tuple:
    while True:
        kind, value = await asyncio.wait_for(req.events.get(), timeout)
        if kind != "tokens":
            return kind, value


def test_sends_never_block_the_event_loop_on_a_full_pipe(client):
    """The child reads between steps only; stopped here (SIGSTOP) it reads nothing. 48 adds of 16,000-token
    prompts (~2 MB) fill the pipe many times over: the old blocking write held the loop until the child read."""

    async def run() -> tuple[float, list]:
        loop = asyncio.get_running_loop()
        client.attach(loop)
        await asyncio.sleep(0.5)  # the echo: the loop reads the pipe from here on
        os.kill(client.proc.pid, signal.SIGSTOP)
        # a blocked loop would hang this test: the child is let go after 5 s whatever happens
        rescue = threading.Timer(5, os.kill, (client.proc.pid, signal.SIGCONT))
        rescue.start()
        reqs = [_request(client, loop, f"long {i}", 1, prompt_len=16_000) for i in range(48)]
        t0 = time.monotonic()
        for r in reqs:
            client.submit(r)
        blocked = time.monotonic() - t0
        for r in reqs:
            client.cancel(r)
        os.kill(client.proc.pid, signal.SIGCONT)
        rescue.cancel()
        ends = await asyncio.gather(*(_last(r) for r in reqs))
        ok = _request(client, loop, "after")
        client.submit(ok)
        return blocked, [*ends, await _last(ok)]

    blocked, ends = asyncio.run(run())
    assert blocked < 1.0, f"the event loop was blocked {blocked:.1f} s writing to the engine process"
    assert all(kind in ("done", "error") for kind, _ in ends), ends  # every request answered
    assert ends[-1] == ("done", "length")


@pytest.fixture(params=["engine-process", "in-process"])
def any_client(request, tiny_models):
    """Both transports: the child's (ProcessClient) and the in-process core's (LoopSink)."""
    if request.param == "engine-process":
        yield request.getfixturevalue("client")
        return
    c = cb_client(construct_cb(str(tiny_models / "tiny-llm"), "CPU", Sched(), THREADS), P.LM_CB, max_active=8)
    c.start()
    yield c
    c.stop()


def test_a_request_whose_delivery_raises_fails_alone(any_client):
    client = any_client

    async def run() -> list:
        loop = asyncio.get_running_loop()
        client.attach(loop)
        await asyncio.sleep(0.5)
        reqs = [_request(client, loop, f"req {i}", max_new=16) for i in range(6)]

        def broken(ids: list[int]) -> bool:
            raise RecursionError("a parser on the loop")

        reqs[2].sink = broken
        for r in reqs:
            client.submit(r)
        ends = await asyncio.gather(*(_last(r) for r in reqs))
        for r in reqs:
            client.cancel(r)  # as the handler does when it ends
        after = _request(client, loop, "after")
        client.submit(after)
        return [*ends, await _last(after)]

    ends = asyncio.run(run())
    assert ends[2][0] == "error" and "RecursionError" in ends[2][1]
    assert [e for i, e in enumerate(ends) if i != 2] == [("done", "length")] * 6
    assert client.fatal is None and client.running == 0


def test_the_engine_process_survives_a_bad_message(client):
    """What the old child's loop died of (anything but EOFError/OSError): the engine turned fatal for all."""

    async def run() -> tuple:
        loop = asyncio.get_running_loop()
        client.attach(loop)
        await asyncio.sleep(0.5)
        client._send(("add", 10_000, ["not", "ids"], True, {}, 0))  # a faulty HTTP side's message
        client._send(("no such message",))
        client._writer.put(b"\x80\x05not a pickle")
        ok = _request(client, loop, "after")
        client.submit(ok)
        return await _last(ok, 30)

    assert asyncio.run(run()) == ("done", "length")
    assert client.fatal is None and client.proc.is_alive()
