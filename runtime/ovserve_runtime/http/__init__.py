"""The HTTP transport (aiohttp): routes, admission, the SSE writer, the per-request output path.

app       App: routes, health/status/metrics, the generation handler (body read, admission, submit, answer)
prepare   a validated body -> an engine GenRequest (template, images, tokenization, limits, config)
output    the per-request output path: token ids -> text -> response or stream chunks (stream interval here)
sse       SSEWriter: server-sent events on aiohttp's own StreamResponse
watchdog  the liveness progress watchdog

The protocol itself (request models, response builders, grammars) is ovserve_runtime.openai.
"""

from .app import App, ServerConfig, failed_state

__all__ = ["App", "ServerConfig", "failed_state"]
