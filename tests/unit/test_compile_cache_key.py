"""The compiled-model cache's pure parts and its directory discipline (compilecache.py; issue 42): the key, the
hit/miss outcome, LRU eviction, locking between starts, and the start report's backwards compatibility."""

from __future__ import annotations

import fcntl
import os

import pytest
from ovserve_runtime import compilecache as cc
from ovserve_runtime.report import CacheState, RuntimeReport, StartupReport

BASE = {"openvino": "2026.4.1", "openvino_genai": "2026.4.1.0", "device": "CPU", "model_digest": "d1"}
PROPS = {"KV_CACHE_PRECISION": "u8", "INFERENCE_PRECISION_HINT": "f32"}


def _key(props: dict | None = None, **over: str) -> cc.Key:
    args = {**BASE, **over}
    return cc.make_key(args["openvino"], args["openvino_genai"], args["device"], args["model_digest"], props or PROPS)


@pytest.mark.parametrize(
    ("change", "same_name", "same_stem"),
    [
        ({}, True, True),
        ({"openvino": "2026.5.0"}, False, True),  # a version change: same stem, the previous entry is found
        ({"openvino_genai": "2026.5.0.0"}, False, True),
        ({"device": "GPU"}, False, False),
        ({"device": "cpu"}, True, True),  # device names are upper-cased, as OpenVINO reads them
        ({"model_digest": "d2"}, False, False),
        ({"props": {"KV_CACHE_PRECISION": "f16", "INFERENCE_PRECISION_HINT": "f32"}}, False, False),
        ({"props": {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "u8"}}, True, True),  # order
        ({"props": {**PROPS, "CACHE_DIR": "/elsewhere"}}, True, True),  # the cache's own place is no key
        ({"props": {**PROPS, "INFERENCE_NUM_THREADS": 4}}, False, False),
    ],
)
def test_key(change, same_name, same_stem):
    change = dict(change)
    props = change.pop("props", None)
    a, b = _key(), _key(props, **change)
    assert (a.name() == b.name()) is same_name
    assert (a.stem() == b.stem()) is same_stem
    assert b.name().startswith(b.stem() + "-")


def test_model_digest_follows_names_sizes_and_mtimes(tmp_path):
    (tmp_path / "openvino_model.xml").write_text("<xml/>")
    (tmp_path / "openvino_model.bin").write_bytes(b"\0" * 10)
    (tmp_path / "config.json").write_text("{}")  # not an IR file: not in the digest
    d1 = cc.digest_of(cc.model_files(tmp_path))
    (tmp_path / "config.json").write_text('{"a": 1}')
    assert cc.digest_of(cc.model_files(tmp_path)) == d1
    (tmp_path / "openvino_model.bin").write_bytes(b"\0" * 11)
    assert cc.digest_of(cc.model_files(tmp_path)) != d1
    assert cc.digest_of([("a", 1, 2), ("b", 3, 4)]) == cc.digest_of([("b", 3, 4), ("a", 1, 2)])


@pytest.mark.parametrize(
    ("manifest", "before", "after", "state", "message"),
    [
        (None, {}, {"x.blob": (5, 1)}, CacheState.MISS, ""),  # cold
        ({"x.blob": (5, 1)}, {"x.blob": (5, 1)}, {"x.blob": (5, 1)}, CacheState.HIT, ""),
        ({"x.blob": (5, 1)}, {"x.blob": (5, 1)}, {"x.blob": (5, 2)}, CacheState.MISS, cc.ENTRY_RECOMPILED),
        (
            {"x.blob": (5, 1)},
            {"x.blob": (5, 1)},
            {"x.blob": (5, 1), "y.blob": (3, 3)},
            CacheState.MISS,
            cc.ENTRY_RECOMPILED,
        ),
        ({}, {}, {}, CacheState.MISS, ""),  # an empty manifest is no hit
    ],
)
def test_outcome(manifest, before, after, state, message):
    got_state, got_message = cc.outcome(manifest, before, after)
    assert got_state == state
    assert got_message.startswith(message)


@pytest.mark.parametrize(
    ("entries", "keep", "bound", "evicted"),
    [
        ([("a", 10, 1.0), ("b", 10, 2.0)], "b", 100, []),  # under the bound
        ([("a", 10, 1.0), ("b", 10, 2.0), ("c", 10, 3.0)], "c", 20, ["a"]),  # least recently used first
        ([("a", 10, 3.0), ("b", 10, 2.0), ("c", 10, 1.0)], "c", 10, ["b", "a"]),  # never the one in use
        ([("a", 50, 1.0)], "a", 10, []),  # the one in use alone over the bound: kept
        ([("a", 10, 1.0), ("b", 10, 1.0), ("c", 5, 9.0)], "c", 15, ["a"]),  # ties: by name
    ],
)
def test_evict_plan(entries, keep, bound, evicted):
    assert cc.evict_plan(entries, keep, bound) == evicted


def test_entry_lifecycle_hit_then_eviction_and_previous_version(tmp_path):
    old = _key(openvino="2026.3.0")
    e = cc.open_entry(tmp_path, old, need_bytes=0)
    assert isinstance(e, cc.Entry) and e.previous is None
    (e.dir / "1.blob").write_bytes(b"x" * 100)
    assert e.finish(True, None) == (CacheState.MISS, "")

    new = _key()
    e = cc.open_entry(tmp_path, new, need_bytes=0)
    assert isinstance(e, cc.Entry) and e.previous == "OpenVINO 2026.3.0 / openvino-genai 2026.4.1.0"
    (e.dir / "2.blob").write_bytes(b"y" * 100)
    os.utime(tmp_path / old.name() / cc.MANIFEST, (1, 1))  # the old version's entry was used long ago
    assert e.finish(True, max_bytes=150)[0] == CacheState.MISS
    assert not (tmp_path / old.name()).exists(), "the least recently used entry over the bound is evicted"

    e = cc.open_entry(tmp_path, new, need_bytes=0)
    assert isinstance(e, cc.Entry) and e.previous is None
    assert e.finish(True, None) == (CacheState.HIT, "")


def test_a_truncated_blob_is_wiped_and_said(tmp_path):
    e = cc.open_entry(tmp_path, _key(), need_bytes=0)
    assert isinstance(e, cc.Entry)
    (e.dir / "1.blob").write_bytes(b"x" * 100)
    e.finish(True, None)
    (e.dir / "1.blob").write_bytes(b"x" * 10)
    e = cc.open_entry(tmp_path, _key(), need_bytes=0)
    assert isinstance(e, cc.Entry) and e.message.startswith(cc.ENTRY_UNREADABLE)
    assert not list(e.dir.glob("*.blob"))
    e.release()


def test_a_start_holding_the_key_makes_another_wait_then_bypass(tmp_path):
    key = _key()
    first = cc.open_entry(tmp_path, key, need_bytes=0)  # a cold entry: held exclusively while compiling
    assert isinstance(first, cc.Entry)
    second = cc.open_entry(tmp_path, key, need_bytes=0, wait_s=0.3)
    assert isinstance(second, cc.Bypass) and second.message.startswith(cc.BYPASS_LOCK_TIMEOUT)
    first.finish(True, None)
    readers = [cc.open_entry(tmp_path, key, need_bytes=0, wait_s=0.3) for _ in range(2)]  # written: shared
    assert all(isinstance(r, cc.Entry) for r in readers), readers
    fd = os.open(first.dir / cc.LOCK_FILE, os.O_RDWR)
    with pytest.raises(BlockingIOError):
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # eviction cannot take an entry in use
    os.close(fd)
    for r in readers:
        r.release()


def test_unwritable_root_and_no_space_bypass(tmp_path):
    not_dir = tmp_path / "file"
    not_dir.write_text("")
    got = cc.open_entry(not_dir, _key(), need_bytes=0)
    assert isinstance(got, cc.Bypass) and got.message.startswith(cc.BYPASS_UNWRITABLE)
    got = cc.open_entry(tmp_path / "c", _key(), need_bytes=1 << 60)
    assert isinstance(got, cc.Bypass) and got.message.startswith(cc.BYPASS_NO_SPACE)


def test_not_reusable_entry_bypasses(tmp_path):
    e = cc.open_entry(tmp_path, _key(), need_bytes=0)
    assert isinstance(e, cc.Entry)
    (e.dir / "1.blob").write_bytes(b"x")
    e.finish(True, None)
    e = cc.open_entry(tmp_path, _key(), need_bytes=0)
    assert isinstance(e, cc.Entry)
    (e.dir / "1.blob").write_bytes(b"yy")  # OpenVINO compiled again and rewrote it
    state, message = e.finish(True, None)
    assert state == CacheState.MISS and "not reusable" in message
    got = cc.open_entry(tmp_path, _key(), need_bytes=0)
    assert isinstance(got, cc.Bypass) and got.message.startswith(cc.NOT_REUSABLE)


def test_report_without_startup_still_parses():
    old = RuntimeReport().model_dump_json(exclude={"startup"})
    assert RuntimeReport.model_validate_json(old).startup is None
    r = RuntimeReport(startup=StartupReport(compileSeconds=1.5, cache=CacheState.HIT))
    assert RuntimeReport.model_validate_json(r.model_dump_json()).startup.cache == CacheState.HIT
