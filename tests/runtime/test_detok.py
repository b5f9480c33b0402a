"""Token-table detokenization streams exactly what decode() of the whole sequence gives."""

from __future__ import annotations

import random

import pytest
from ovserve_runtime.detok import Detokenizer, TokenTable

pytestmark = pytest.mark.runtime


@pytest.fixture(scope="module")
def tok(tiny_models):
    import openvino_genai as g

    return g.Tokenizer(str(tiny_models / "tiny-llm"))


@pytest.fixture(scope="module")
def table(tok):
    t = TokenTable.build(tok)
    assert t.usable  # the byte-level BPE of the tiny models passes the sample check
    assert t.unsafe  # byte pieces of multi-byte characters exist and are marked
    return t


def _stream(tok, table, ids: list[int], rnd: random.Random) -> str:
    d, out, i = Detokenizer(tok, table), "", 0
    while i < len(ids):
        k = rnd.randint(1, 3)
        out += d.add(ids[i : i + k])
        i += k
    return out + d.flush()


def test_random_token_streams_match_decode(tok, table):
    rnd = random.Random(7)
    vocab = len(tok.get_vocab())
    for _ in range(40):
        ids = [rnd.randrange(vocab) for _ in range(rnd.randint(1, 48))]
        assert _stream(tok, table, ids, rnd) == tok.decode(ids)


@pytest.mark.parametrize("text", ["hello world the quick brown fox", "naïve café ünïcödé ☃ 日本語 🙂 done"])
def test_text_round_trips_including_split_utf8(tok, table, text):
    ids = tok.encode(text, add_special_tokens=False).input_ids.data[0].tolist()
    assert _stream(tok, table, ids, random.Random(0)) == tok.decode(ids)
    # one token at a time, as a stream sees them: no U+FFFD leaks out for split characters
    d = Detokenizer(tok, table)
    deltas = [d.add([i]) for i in ids] + [d.flush()]
    assert "".join(deltas) == tok.decode(ids)
    assert not any("\ufffd" in x for x in deltas)


def test_without_a_table_the_window_path_is_exact(tok):
    rnd = random.Random(3)
    vocab = len(tok.get_vocab())
    ids = [rnd.randrange(vocab) for _ in range(30)]
    assert _stream(tok, None, ids, rnd) == tok.decode(ids)


def test_the_tiny_models_tokenizer_is_byte_exact(table):
    assert table.byte_exact


class _Counting:
    """The real tokenizer, counting decode() calls."""

    def __init__(self, tok) -> None:
        self.tok, self.calls = tok, 0

    def decode(self, *args, **kwargs):
        self.calls += 1
        return self.tok.decode(*args, **kwargs)


def test_byte_exact_streams_never_call_decode(tok, table):
    rnd = random.Random(11)
    vocab = len(tok.get_vocab())
    for _ in range(200):
        ids = [rnd.randrange(vocab) for _ in range(rnd.randint(1, 64))]
        counting = _Counting(tok)
        assert _stream(counting, table, ids, rnd) == tok.decode(ids)
        assert counting.calls == 0


def test_ids_beyond_the_tokenizer_fall_back_to_decode(tok, table):
    vocab = len(tok.get_vocab())
    ids = tok.encode("hello naïve world", add_special_tokens=False).input_ids.data[0].tolist()
    ids = [*ids[:2], vocab + 5, *ids[2:]]  # a padded model vocabulary can produce an id the tokenizer lacks
    d = Detokenizer(tok, table)
    assert "".join(d.add([i]) for i in ids) + d.flush() == tok.decode(ids)


@pytest.mark.parametrize("lead", range(0x80, 0x100, 3))
def test_invalid_utf8_is_replaced_like_the_openvino_detokenizer(tok, lead):
    """Every lead byte, with continuations of every range, truncated or followed by text: Utf8Stream gives
    exactly what the OpenVINO detokenizer gives for the same byte tokens."""
    from ovserve_runtime.detok import Utf8Stream

    byte_id = {piece: i for piece, i in tok.get_vocab().items() if len(piece) == 1}
    for cont in (0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF):
        for k in range(5):
            for tail in (b"", b"a", "é".encode(), b"\xe3"):
                data = bytes([lead]) + bytes([cont]) * k + tail
                u = Utf8Stream()
                assert u.feed(data) + u.end() == tok.decode([byte_id[bytes([b])] for b in data]), data
