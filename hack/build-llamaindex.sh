#!/usr/bin/env bash
# LlamaIndex's Whisper reader for tests/runtime/test_audio.py only (never in the image): a venv of the pinned
# hack/clients/llamaindex-whisper.txt, cached outside git and keyed by that file's hash (its own venv: the reader
# needs openai<3, the project pins openai 3). Idempotent: a no-op when the venv of that hash is there. Prints the
# venv's python on stdout (the test fixture reads the last line). ~1.5 min cold.
#
#   hack/build-llamaindex.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/versions.env"
pins=$root/hack/clients/llamaindex-whisper.txt
key=$(sha256sum "$pins" | cut -c1-12)
dir=$OVSERVE_CACHE/venv-llamaindex-$key
if [ ! -x "$dir/.ready" ]; then
  echo "[llamaindex] pip install -r $pins into $dir" >&2
  rm -rf "$dir"
  python3 -m venv "$dir"
  "$dir/bin/pip" install -q --disable-pip-version-check -r "$pins" >&2
  "$dir/bin/python" -c "from llama_index.readers.whisper import WhisperReader" >&2
  printf '#!/bin/true\n' >"$dir/.ready" && chmod +x "$dir/.ready"
fi
echo "$dir/bin/python"
