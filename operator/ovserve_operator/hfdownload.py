"""Init container: download a Hugging Face Hub repository (an OpenVINO IR export) into a directory.

    python -m ovserve_operator.hfdownload --repo OWNER/NAME [--revision main] --dest DIR

huggingface_hub's snapshot_download does the transfer (revision pinning, resume of interrupted files,
ETag checks, file names with `..` refused); its HTTP client drops the Authorization header when a
redirect leaves the endpoint's host (the Hub sends file downloads to CDN hosts), so the token only ever
reaches the endpoint. The token comes from $HF_TOKEN (a secretKeyRef), never from an argument, and is
never printed. HF_ENDPOINT overrides https://huggingface.co; a plain-http endpoint is refused unless
OVSERVE_HF_ALLOW_HTTP=true (a mirror inside the cluster). Progress goes to stdout every few seconds.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from ovserve_runtime import endpoints

DEFAULT_ENDPOINT = "https://huggingface.co"
ALLOW_HTTP_ENV = "OVSERVE_HF_ALLOW_HTTP"
TERMINATION_LOG = Path(endpoints.TERMINATION_LOG)  # the init container's (the Kubernetes default)


class DownloadError(RuntimeError):
    pass


def check_endpoint(endpoint: str, allow_http: bool) -> str:
    """The endpoint without a trailing slash; https only unless plain http is allowed (pure)."""
    parts = urllib.parse.urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise DownloadError(f"HF_ENDPOINT: expected an http(s) URL, got {endpoint!r}")
    if parts.scheme == "http" and not allow_http:
        raise DownloadError(
            f"HF_ENDPOINT {endpoint} is plain http: the token and the model would travel unencrypted; "
            f"set {ALLOW_HTTP_ENV}=true (operator setting OVSERVE_HF_ALLOW_HTTP) only for a mirror you trust"
        )
    return endpoint.rstrip("/")


def _hub():
    # Read by huggingface_hub at import: no telemetry, no token from a file, our own progress lines.
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import huggingface_hub

    return huggingface_hub


def _describe(e: BaseException, token: str | None) -> str:
    """A one-line reason for a failed download, with the token scrubbed (never printed).

    huggingface_hub wraps HTTP errors (e.g. in DryRunError); the HTTP status and path in its cause say more."""
    chain: list[BaseException] = []
    c: BaseException | None = e
    while c is not None and len(chain) < 8:
        chain.append(c)
        c = c.__cause__ or c.__context__
    http = next((x for x in chain if getattr(getattr(x, "response", None), "status_code", None)), None)
    if http is not None:
        resp = http.response  # type: ignore[attr-defined]
        msg = f"HTTP {resp.status_code} from {urllib.parse.urlsplit(str(resp.url)).path}"
        if resp.status_code in (401, 403):
            msg += " (the token is wrong)" if token else " (gated or private: set huggingFace.tokenSecretRef)"
        elif resp.status_code == 404:
            msg += " (no such repository, revision or file)"
    else:
        text = str(e).strip().splitlines()[0] if str(e).strip() else ""
        msg = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return msg.replace(token, "***") if token else msg


def _du(dest: Path) -> int:
    """Bytes under dest, partial downloads included (huggingface_hub keeps them under dest/.cache)."""
    total = 0
    for root, _dirs, names in os.walk(dest):
        for n in names:
            try:
                total += os.lstat(os.path.join(root, n)).st_size
            except OSError:
                pass
    return total


def _progress(dest: Path, total: int, every_s: float, say: Callable[[str], None]) -> threading.Event:
    stop = threading.Event()
    start = _du(dest)

    def loop() -> None:
        while not stop.wait(every_s):
            have, mib = _du(dest), 2**20
            pct = f" ({100 * have / total:.0f}%)" if total else ""
            say(f"downloading: {(have - start) / mib:.1f} MiB this run, {have / mib:.1f} of {total / mib:.1f} MiB{pct}")

    threading.Thread(target=loop, daemon=True, name="progress").start()
    return stop


def download(
    repo: str,
    revision: str,
    dest: Path,
    *,
    token: str | None = None,
    endpoint: str = DEFAULT_ENDPOINT,
    allow_http: bool = False,
    progress_every_s: float = 10.0,
    say: Callable[[str], None] = lambda line: print(line, flush=True),
) -> list[str]:
    """Download repo@revision into dest (resuming what an earlier attempt left); the repository's file names."""
    endpoint = check_endpoint(endpoint, allow_http)
    hub = _hub()
    dest.mkdir(parents=True, exist_ok=True)
    kw = {"repo_id": repo, "revision": revision, "local_dir": dest, "token": token or False, "endpoint": endpoint}
    try:
        plan = hub.snapshot_download(**kw, dry_run=True)
        root = dest.resolve()
        for f in plan:  # huggingface_hub refuses `..` itself; this also covers absolute names and symlinks
            if root not in (dest / f.filename).resolve().parents:
                raise DownloadError(f"refusing a file outside the destination: {f.filename!r}")
        todo = [f for f in plan if f.will_download]
        total = sum(f.file_size or 0 for f in plan)
        say(f"{repo}@{revision}: {len(plan)} files, {total / 2**20:.1f} MiB, {len(todo)} to download")
        stop = _progress(dest, total, progress_every_s, say)
        try:
            hub.snapshot_download(**kw, max_workers=4)
        finally:
            stop.set()
    except DownloadError:
        raise
    except Exception as e:  # huggingface_hub's HTTP, repository and validation errors
        raise DownloadError(_describe(e, token)) from None
    return [f.filename for f in plan]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ovserve_operator.hfdownload", description=__doc__.splitlines()[0])
    p.add_argument("--repo", required=True)
    p.add_argument("--revision", default="main")
    p.add_argument("--dest", required=True, type=Path)
    args = p.parse_args(argv)
    allow_http = os.environ.get(ALLOW_HTTP_ENV, "").strip().lower() in ("1", "true", "yes", "on")
    try:
        files = download(
            args.repo,
            args.revision,
            args.dest,
            token=os.environ.get("HF_TOKEN") or None,
            endpoint=os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT,
            allow_http=allow_http,
        )
    except DownloadError as e:
        line = f"model download failed: {args.repo}@{args.revision}: {e}"
        print(line, file=sys.stderr, flush=True)
        try:
            TERMINATION_LOG.write_text(line + "\n")
        except OSError:
            pass
        return 1
    print(f"{args.repo}@{args.revision}: {len(files)} files in {args.dest}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
