"""ovserve Kubernetes operator (kopf)."""
