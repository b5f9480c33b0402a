"""The HTTP transport (aiohttp), thin: the app, its routes and plain endpoints, the liveness watchdog.

app       App: builds the serving state and the servings (ovserve_runtime.serving), routes to them, the error
          middleware, health/status/metrics/models/OpenAPI
watchdog  the liveness progress watchdog

What a request goes through (body, admission, readiness, prepare, submit, respond, release) is the serving
layer's (ovserve_runtime.serving); the protocol itself (request models, response builders, grammars) is
ovserve_runtime.openai.
"""

from .app import App, ServerConfig, failed_state

__all__ = ["App", "ServerConfig", "failed_state"]
