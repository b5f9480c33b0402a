"""OpenVINO's compiled-model cache on a node volume (--cache-dir): which directory a serving's blobs go to, when
they are reused, how concurrent pods share it, and how the volume stays bounded (docs/startup.md).

OpenVINO itself reuses a blob from CACHE_DIR when its hash of the model and compile properties matches. The
runtime adds one KEY directory per (OpenVINO and openvino-genai versions, device, model digest, the plugin
properties that change compilation) under the root, so that:
- a blob is never offered to another version or model, and a miss that a version change caused is visible
  (another key directory with the same model, device and properties but other versions: `previous`);
- pods of one node share it safely: OpenVINO writes a blob in place and locks only within its process, so the
  runtime holds an fcntl lock on the key directory while it constructs (exclusive while the entry is being
  written, shared while it is only read);
- an entry is verified before use: the manifest written after a successful start lists each blob's size and
  mtime; a blob that differs (truncated, rewritten by a crashed writer) wipes the entry and compiles afresh,
  and says so. OpenVINO does not checksum blobs, and neither does this (a bit flip of same size and mtime
  goes unseen): bounded cost, stat only;
- an entry OpenVINO could not import (it compiled again and rewrote the blob at the second start: measured with
  OpenVINO 2026.4.1 for every PagedAttention model, i.e. the continuous-batching pipelines on CPU, "Runtime info
  k_head_size and num_k_heads are required for PagedAttention node" at import) is marked not reusable: its blobs
  are removed and later starts with that key compile without the cache instead of writing a blob that is never
  read (`CacheNotReusable`); a new OpenVINO version is a new key and is tried again;
- the root stays under --cache-max-gb: least-recently-used key directories (by the time of their last start)
  are removed after a start, never one that another pod holds locked, never the one in use.
Nothing here raises into the start: every failure (unwritable root, full disk, lock wait past the bound)
becomes a `Bypass`, and the model compiles without the cache.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from .report import CacheState

log = logging.getLogger("ovserve.cache")

MODEL_SUFFIXES = (".xml", ".bin")  # the IR files whose names, sizes and mtimes are the model digest
BLOB_SUFFIX = ".blob"  # what OpenVINO writes into CACHE_DIR
LOCK_FILE = ".lock"
MANIFEST = "manifest.json"  # written once a start from this entry succeeded; its mtime is the last use
LOCK_WAIT_S = 900.0  # another pod compiling this key: wait this long, then compile without the cache
LOCK_POLL_S = 0.2
FREE_SPACE_FACTOR = 1.2  # a miss needs about the weights' size free (measured: blob 476 MiB for 490 MiB IR)

# Reasons the cache was not used, or an entry was not (CacheReport.message starts with one)
BYPASS_UNWRITABLE = "CacheUnwritable"
BYPASS_NO_SPACE = "CacheNoSpace"
BYPASS_LOCK_TIMEOUT = "CacheLockTimeout"
BYPASS_FAILED = "CacheConstructionFailed"
ENTRY_UNREADABLE = "CacheEntryUnreadable"
ENTRY_RECOMPILED = "CacheEntryRecompiled"
NOT_REUSABLE = "CacheNotReusable"


class Key(BaseModel):
    """What a compiled blob depends on beyond OpenVINO's own hash."""

    model_config = ConfigDict(frozen=True)

    openvino: str
    openvino_genai: str
    device: str
    model_digest: str
    properties: dict[str, str]  # the plugin properties given to compilation (CACHE_DIR excluded)

    def stem(self) -> str:
        """The key without the versions: equal stems with other versions are the same model after an upgrade."""
        return _hash([self.device, self.model_digest, *sorted(f"{k}={v}" for k, v in self.properties.items())])[:16]

    def name(self) -> str:
        """The key directory's name: `<stem>-<versions hash>`."""
        return f"{self.stem()}-{_hash([self.openvino, self.openvino_genai])[:8]}"


def _hash(parts: list[str]) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def make_key(openvino: str, openvino_genai: str, device: str, model_digest: str, properties: dict) -> Key:
    props = {str(k): str(v) for k, v in properties.items() if str(k) != "CACHE_DIR"}
    return Key(
        openvino=openvino,
        openvino_genai=openvino_genai,
        device=device.upper(),
        model_digest=model_digest,
        properties=props,
    )


def digest_of(files: list[tuple[str, int, int]]) -> str:
    """The model digest from (relative name, size, mtime_ns) of its IR files, in any order."""
    return _hash([f"{n}:{s}:{m}" for n, s, m in sorted(files)])


def model_files(model_dir: str | Path, extra_dirs: tuple[str, ...] = ()) -> list[tuple[str, int, int]]:
    """(name, size, mtime_ns) of the .xml/.bin files of the model directory (and a draft model's): stat only."""
    out = []
    for i, d in enumerate((str(model_dir), *extra_dirs)):
        for p in sorted(Path(d).iterdir()):
            if p.is_file() and p.suffix in MODEL_SUFFIXES:
                st = p.stat()
                out.append((f"{i}/{p.name}", st.st_size, st.st_mtime_ns))
    return out


Snapshot = dict[str, tuple[int, int]]  # blob name -> (size, mtime_ns)


def snapshot(key_dir: Path) -> Snapshot:
    out: Snapshot = {}
    for p in key_dir.iterdir():
        if p.suffix == BLOB_SUFFIX and p.is_file():
            st = p.stat()
            out[p.name] = (st.st_size, st.st_mtime_ns)
    return out


def outcome(manifest: Snapshot | None, before: Snapshot, after: Snapshot) -> tuple[CacheState, str]:
    """Hit or miss from the verified manifest and the blobs before and after construction."""
    if manifest and before == after and all(after.get(k) == v for k, v in manifest.items()):
        return CacheState.HIT, ""
    if manifest and before != after:
        return CacheState.MISS, f"{ENTRY_RECOMPILED}: OpenVINO compiled again and rewrote the entry"
    return CacheState.MISS, ""


def evict_plan(entries: list[tuple[str, int, float]], keep: str, max_bytes: int) -> list[str]:
    """The key directories to remove, least recently used first, until the total fits `max_bytes`.
    `entries`: (name, bytes, last use); `keep` (the one in use) is never removed."""
    total = sum(b for _, b, _ in entries)
    out = []
    for name, size, _ in sorted(entries, key=lambda e: (e[2], e[0])):
        if total <= max_bytes:
            break
        if name == keep:
            continue
        out.append(name)
        total -= size
    return out


def dir_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.iterdir() if p.is_file())


@dataclass
class Bypass:
    """The cache is not used for this start; `message` says why (reason constant first)."""

    message: str


@dataclass
class Entry:
    """A locked key directory, ready for construction: give `dir` to CACHE_DIR, then call `finish`."""

    root: Path
    key: Key
    dir: Path
    fd: int
    manifest: Snapshot | None
    before: Snapshot
    previous: str | None = None  # "OpenVINO x / openvino-genai y" of another key dir with this stem
    message: str = ""  # an entry wiped as unreadable says so
    done: bool = field(default=False)

    def finish(self, ok: bool, max_bytes: int | None) -> tuple[CacheState, str]:
        """After construction: the outcome, the manifest written on success, the lock released, eviction run."""
        try:
            after = snapshot(self.dir)
            state, msg = outcome(self.manifest, self.before, after)
            if ok and msg.startswith(ENTRY_RECOMPILED):  # OpenVINO cannot import it: stop writing it
                for name in after:
                    (self.dir / name).unlink()
                _write_manifest(self.dir, {}, self.key, reusable=False)
                msg += "; marked not reusable, later starts compile without the cache"
            elif ok:
                _write_manifest(self.dir, after, self.key)
        except OSError as exc:
            state, msg = CacheState.MISS, f"{BYPASS_UNWRITABLE}: {exc}"
        finally:
            self.release()
        if ok and max_bytes is not None:
            with contextlib.suppress(OSError):
                evict(self.root, self.dir.name, max_bytes)
        return state, "; ".join(m for m in (self.message, msg) if m)

    def release(self) -> None:
        if not self.done:
            self.done = True
            with contextlib.suppress(OSError):
                os.close(self.fd)


def _write_manifest(d: Path, blobs: Snapshot, key: Key, reusable: bool = True) -> None:
    tmp = d / f"{MANIFEST}.{os.getpid()}.tmp"  # readers under a shared lock each write their own
    tmp.write_text(json.dumps({"key": key.model_dump(), "blobs": blobs, "reusable": reusable}))
    os.replace(tmp, d / MANIFEST)  # atomic: a reader sees the old manifest or the new one


def _read_manifest(d: Path) -> tuple[Snapshot | None, dict | None]:
    """(blobs, key) of the manifest; (None, None) when there is none or it does not parse. A not-reusable entry's
    key has `reusable: False`."""
    try:
        data = json.loads((d / MANIFEST).read_text())
        blobs = {k: (int(v[0]), int(v[1])) for k, v in data["blobs"].items()}
        return blobs, {**data["key"], "reusable": bool(data.get("reusable", True))}
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None, None


def _lock(d: Path, mode: int, wait_s: float) -> int | None:
    """An fd holding `mode` on d/.lock of the directory that is at d now (an evicted one is retried); None
    after `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        d.mkdir(parents=True, exist_ok=True)
        fd = os.open(d / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > deadline:
                    os.close(fd)
                    return None
                time.sleep(LOCK_POLL_S)
        try:
            same = os.fstat(fd).st_ino == os.stat(d / LOCK_FILE).st_ino
        except OSError:
            same = False
        if same:
            return fd
        os.close(fd)  # evicted while we waited: take the new directory's lock


def _previous(root: Path, key: Key) -> str | None:
    for d in sorted(root.glob(f"{key.stem()}-*")):
        if d.name == key.name():
            continue
        _, k = _read_manifest(d)
        if k:
            return f"OpenVINO {k.get('openvino')} / openvino-genai {k.get('openvino_genai')}"
    return None


def open_entry(root: str | Path, key: Key, need_bytes: int, wait_s: float = LOCK_WAIT_S) -> Entry | Bypass:
    """Lock the key directory (shared when a manifest is there, else exclusive) and verify its entry."""
    root = Path(root)
    d = root / key.name()
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
        previous = _previous(root, key)
        manifest, meta = _read_manifest(d) if d.exists() else (None, None)
        if meta is not None and not meta["reusable"]:
            with contextlib.suppress(OSError):
                os.utime(d / MANIFEST)  # in use: not the first to evict
            return Bypass(
                f"{NOT_REUSABLE}: OpenVINO {key.openvino} compiled this model again at an earlier start instead of "
                "loading its blob (it cannot import it); compiling without the cache"
            )
        fd = _lock(d, fcntl.LOCK_SH if manifest is not None else fcntl.LOCK_EX, wait_s)
        if fd is None:
            return Bypass(f"{BYPASS_LOCK_TIMEOUT}: another start held {d} for more than {wait_s:g}s")
        manifest, _ = _read_manifest(d)
        before = snapshot(d)
        message = ""
        if manifest is None or any(before.get(k) != v for k, v in manifest.items()):
            # being written, or unreadable: only an exclusive holder may write (or wipe) it
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            fd = _lock(d, fcntl.LOCK_EX, wait_s)
            if fd is None:
                return Bypass(f"{BYPASS_LOCK_TIMEOUT}: another start held {d} for more than {wait_s:g}s")
            manifest, _ = _read_manifest(d)
            before = snapshot(d)
            if manifest is not None and any(before.get(k) != v for k, v in manifest.items()):
                message = f"{ENTRY_UNREADABLE}: a blob differs from the manifest (truncated or rewritten); wiped"
                log.warning("compiled-model cache %s: %s", d, message)
                for p in d.iterdir():
                    if p.name != LOCK_FILE:
                        p.unlink()
                manifest, before = None, {}
            if manifest is None:
                free = shutil.disk_usage(d).free
                if free < need_bytes * FREE_SPACE_FACTOR:
                    os.close(fd)
                    return Bypass(
                        f"{BYPASS_NO_SPACE}: {free >> 20} MiB free under {root}, about "
                        f"{int(need_bytes * FREE_SPACE_FACTOR) >> 20} MiB needed"
                    )
        return Entry(root, key, d, fd, manifest, before, previous, message)
    except OSError as exc:
        return Bypass(f"{BYPASS_UNWRITABLE}: {exc}")


def evict(root: Path, keep: str, max_bytes: int) -> list[str]:
    """Remove least-recently-used key directories over `max_bytes`; a locked one (another pod) is skipped."""
    entries = []
    for d in root.iterdir():
        if d.is_dir() and not d.name.startswith("."):
            try:
                used = (d / MANIFEST).stat().st_mtime
            except OSError:
                used = 0.0
            entries.append((d.name, dir_bytes(d), used))
    removed = []
    for name in evict_plan(entries, keep, max_bytes):
        d = root / name
        fd = _lock(d, fcntl.LOCK_EX, 0.0)
        if fd is None:
            continue
        try:
            shutil.rmtree(d)
            removed.append(name)
            log.info("compiled-model cache: evicted %s (least recently used; bound %d MiB)", name, max_bytes >> 20)
        finally:
            os.close(fd)
    return removed
