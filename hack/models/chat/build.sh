#!/usr/bin/env bash
# Build the tiny models with real chat templates that render tools and reasoning: copies of tiny-llm (same
# random weights and tokenizer) with another chat template and a 4096-token context.
#
#   hack/models/chat/build.sh          all of them
#   hack/models/chat/build.sh NAME...  only the named ones
#
#   tiny-qwen25    Qwen2.5-Instruct's template: tools as Hermes <tool_call> JSON
#   tiny-qwen3     Qwen3 Thinking-2507's: Hermes tools, and the prompt opens <think>
#   tiny-qwen3-hybrid  Qwen3's hybrid template: Hermes tools, thinking switched by enable_thinking (false: the
#                  prompt holds an empty <think></think>)
#   tiny-llama31   Llama 3.1 Instruct's: tools as JSON {"name", "parameters"}
#   tiny-llama32   Llama 3.2's pythonic tool template (vLLM's): tools as [f(a=1)]
#
# Output: ${OVSERVE_MODELS:-/var/cache/ovserve/models}/<name>. Each holds .ovserve-stamp: a hash of this
# folder plus tiny-llm's own stamp, so that changing these templates rebuilds only these models and the
# other tiny models' stamps do not depend on this folder. Needs tiny-llm (built by ../build.sh when missing).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../../.." && pwd)
. "$root/hack/versions.env"
MODELS=${OVSERVE_MODELS:-/var/cache/ovserve/models}
log() { printf '[models %s] %s\n' "$(date +%T)" "$*" >&2; }

declare -A TEMPLATE=(
  [tiny-qwen25]=qwen2.5.jinja
  [tiny-qwen3]=qwen3-thinking.jinja
  [tiny-qwen3-hybrid]=qwen3.jinja
  [tiny-llama31]=llama3.1.jinja
  [tiny-llama32]=llama3.2-pythonic.jinja
)
ALL=(tiny-qwen25 tiny-qwen3 tiny-qwen3-hybrid tiny-llama31 tiny-llama32)
targets=()
for a in "$@"; do
  case $a in
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) [ -n "${TEMPLATE[$a]:-}" ] || { echo "unknown model: $a" >&2; exit 2; }; targets+=("$a") ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${ALL[@]}")

"$root/hack/models/build.sh" tiny-llm
key=$( { cat "$here"/build.sh "$here"/*.py "$here"/*.jinja; cat "$MODELS/tiny-llm/.ovserve-stamp"; } | sha256sum | cut -c1-16)
fresh() { [ "$(cat "$MODELS/$1/.ovserve-stamp" 2>/dev/null)" = "$key" ]; }

exec 9>"$MODELS/.chat-build.lock"
flock 9
work=$(mktemp -d "$MODELS/.chat-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
for name in "${targets[@]}"; do
  fresh "$name" && continue
  python3 "$here/set_template.py" "$MODELS/tiny-llm" "$work/$name" "$here/${TEMPLATE[$name]}" >&2
  echo "$key" > "$work/$name/.ovserve-stamp"
  chmod -R a+rX "$work/$name"
  rm -rf "$MODELS/$name.old"
  [ ! -e "$MODELS/$name" ] || mv "$MODELS/$name" "$MODELS/$name.old"
  mv "$work/$name" "$MODELS/$name"
  rm -rf "$MODELS/$name.old"
  log "built $name"
done
log "up to date in $MODELS: ${targets[*]}"
