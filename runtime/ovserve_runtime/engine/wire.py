"""What crosses the pipe between the HTTP process and the engine-core child (process.py): pickled builtin
values, and a GenerationConfig as a dict of the fields the server sets (also used to copy a request's config
for the n > 1 choices of one request)."""

from __future__ import annotations

import pickle
from typing import Any

# GenerationConfig fields the server sets; they cross the pipe as plain values
CONFIG_FIELDS = (
    "max_new_tokens",
    "do_sample",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "min_new_tokens",
    "logprobs",
    "rng_seed",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "stop_strings",
    "ignore_eos",
    "eos_token_id",
    "stop_token_ids",
    "apply_chat_template",
    "num_assistant_tokens",
    "assistant_confidence_threshold",
    "max_ngram_size",
)

# StructuredOutputConfig fields the server sets (a regex or a grammar); it crosses the pipe as a dict of them
STRUCTURED_FIELDS = ("json_schema", "regex", "grammar")


def encode(msg) -> bytes:
    """Plain pickle on the pipe: the messages hold only builtin types, and multiprocessing's ForkingPickler
    costs twice as much per message (one message per step)."""
    return pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)


def send(conn, msg) -> None:
    conn.send_bytes(encode(msg))


def decode(data: bytes) -> Any:
    return pickle.loads(data)


def recv(conn):
    return decode(conn.recv_bytes())


def config_to_dict(cfg) -> dict[str, Any]:
    d = {k: getattr(cfg, k) for k in CONFIG_FIELDS}
    so = cfg.structured_output_config
    if so is not None:
        d["structured_output_config"] = {k: getattr(so, k) for k in STRUCTURED_FIELDS if getattr(so, k)}
    return d


def config_from_dict(d: dict[str, Any]):
    import openvino_genai as g

    c = g.GenerationConfig()
    for k, v in d.items():
        if k == "structured_output_config":
            v = g.StructuredOutputConfig(**v)
        setattr(c, k, v)
    return c
