"""Init container: download a Hugging Face Hub repository (an OpenVINO IR export) into a directory.

    python -m ovserve_operator.hfdownload --repo OWNER/NAME [--revision main] --dest DIR

Standard library only. The token comes from $HF_TOKEN (a secretKeyRef), never from an argument, and is
never printed: error messages are built from the URL path and HTTP status only. HF_ENDPOINT overrides
https://huggingface.co (mirrors, tests).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

DEFAULT_ENDPOINT = "https://huggingface.co"


class DownloadError(RuntimeError):
    pass


def _request(url: str, token: str | None) -> urllib.request.Request:
    req = urllib.request.Request(url, headers={"User-Agent": "ovserve-model-download/0.1"})
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    return req


def _open(url: str, token: str | None, timeout: float):
    try:
        return urllib.request.urlopen(_request(url, token), timeout=timeout)
    except urllib.error.HTTPError as e:
        hint = " (gated or private: set huggingFace.tokenSecretRef)" if e.code in (401, 403) and not token else ""
        raise DownloadError(f"{urllib.parse.urlsplit(url).path}: HTTP {e.code}{hint}") from None
    except (urllib.error.URLError, OSError) as e:
        raise DownloadError(f"{urllib.parse.urlsplit(url).path}: {getattr(e, 'reason', e)}") from None


def list_files(endpoint: str, repo: str, revision: str, token: str | None, timeout: float = 30) -> list[str]:
    url = f"{endpoint}/api/models/{repo}/revision/{urllib.parse.quote(revision, safe='')}"
    with _open(url, token, timeout) as resp:
        info = json.loads(resp.read())
    files = [s["rfilename"] for s in info.get("siblings", []) if s.get("rfilename")]
    if not files:
        raise DownloadError(f"{repo}@{revision}: the repository lists no files")
    return files


def download(
    repo: str,
    revision: str,
    dest: Path,
    *,
    token: str | None = None,
    endpoint: str = DEFAULT_ENDPOINT,
    timeout: float = 60,
) -> list[str]:
    files = list_files(endpoint, repo, revision, token)
    dest.mkdir(parents=True, exist_ok=True)
    for rel in files:
        target = (dest / rel).resolve()
        if dest.resolve() not in target.parents:
            raise DownloadError(f"refusing a path outside the destination: {rel!r}")
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        url = f"{endpoint}/{repo}/resolve/{urllib.parse.quote(revision, safe='')}/{urllib.parse.quote(rel)}"
        with (
            _open(url, token, timeout) as resp,
            tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as tmp,
        ):
            shutil.copyfileobj(resp, tmp, 1 << 20)
        os.replace(tmp.name, target)
        print(f"downloaded {rel}", flush=True)
    return files


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ovserve_operator.hfdownload", description=__doc__.splitlines()[0])
    p.add_argument("--repo", required=True)
    p.add_argument("--revision", default="main")
    p.add_argument("--dest", required=True, type=Path)
    args = p.parse_args(argv)
    endpoint = os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")
    try:
        files = download(
            args.repo, args.revision, args.dest, token=os.environ.get("HF_TOKEN") or None, endpoint=endpoint
        )
    except DownloadError as e:
        print(f"model download failed: {args.repo}@{args.revision}: {e}", file=sys.stderr, flush=True)
        try:
            Path("/dev/termination-log").write_text(f"model download failed: {args.repo}@{args.revision}: {e}\n")
        except OSError:
            pass
        return 1
    print(f"{args.repo}@{args.revision}: {len(files)} files in {args.dest}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
