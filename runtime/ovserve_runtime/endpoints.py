"""Where the runtime answers: its HTTP paths, its port and its termination-message file.

The server registers these paths, the CLI's flags default to this port and file, and the operator points its
probes, its readback and the pod's arguments at them. One place, so that they cannot drift apart.
"""

from __future__ import annotations

API_PREFIXES = ("/v3", "/v1")  # the OpenAI-compatible API under both (OpenVINO Model Server uses /v3)
STATUS = "/v1/status"  # the RuntimeReport (report.py)
LIVE = "/v2/health/live"  # the process serves HTTP (startup and liveness probes)
READY = "/v2/health/ready"  # the pipeline is loaded and takes requests (readiness probe)
METRICS = "/metrics"  # Prometheus text format (metrics.py)
OPENAPI = "/openapi.json"  # the OpenAPI document of this API (openapi.py); also under each API prefix

PORT = 8000
TERMINATION_LOG = "/dev/termination-log"  # the Kubernetes default terminationMessagePath
