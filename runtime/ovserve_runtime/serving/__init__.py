"""The serving layer: one request wrapper for every endpoint, its siblings, and the state they share.

state     ServerConfig (from the flags) and ServingState: report, metrics, engine, encoder, admission, drain,
          prepare pool, grammars, parsers, support, limits; counts(), prompt_limit, the 429 and readiness 503s
base      Serving: handle(request) = task check, body (413/408), admit or 429, prepare, submit or 503, track,
          respond, then untrack, cancel, release, count; read_body, error_response
generate  GenerationServing and its siblings ChatServing and CompletionServing (streams, n choices, answers)
responses ResponsesServing: the Responses API, a sibling of chat (its store: responsestore.py)
task      TaskServing: embeddings and rerank (the task's service prepares and responds; tasks/ loads it)
audio     AudioServing: OpenAI's audio API (transcriptions, translations; multipart in, formats and SSE out)
prepare   a validated body -> an engine GenRequest, from a small Context (never the server)
output    the per-request output path: token ids -> text -> response or stream chunks (stream interval here)
sse       SSEWriter: server-sent events on aiohttp's own StreamResponse

It imports neither the HTTP app (http/, which builds the state and the servings and routes to them) nor the
task loaders (tasks/). The protocol itself (request models, response builders, grammars) is ovserve_runtime.openai.
"""

from .audio import AudioServing
from .base import INLINE_BODY_BYTES, REFUSAL, STREAMING, Serving, error_response, read_body, wrong_task
from .generate import ChatServing, CompletionServing, GenerationServing
from .responses import ResponsesServing
from .state import ServerConfig, ServingState
from .task import TaskServing

__all__ = [
    "INLINE_BODY_BYTES",
    "REFUSAL",
    "STREAMING",
    "AudioServing",
    "ChatServing",
    "CompletionServing",
    "GenerationServing",
    "ResponsesServing",
    "ServerConfig",
    "Serving",
    "ServingState",
    "TaskServing",
    "error_response",
    "read_body",
    "wrong_task",
]
