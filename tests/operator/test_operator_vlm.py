"""End-to-end on the real cluster: the operator serving the tiny VLMs (runtime pods on the node).

AUTO on an SDPA VLM resolves VLM_CB and answers an image chat through its Service; AUTO on the SDPA-free
VLM falls back visibly to VLM; a pinned VLM_CB on it fails and is never downgraded.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
import urllib.request

import numpy as np
import pytest

from . import test_operator_e2e as e2e
from .test_operator_e2e import (
    assert_refused_and_never_downgraded,
    condition,
    has_event,
    llms,
    pvc_model,
    row,
    status,
    wait_phase,
)

pytestmark = [pytest.mark.cluster]

runtime = e2e.runtime  # the tiny models on the PVC "models" of the test namespace


def png_data_url(seed: int = 0) -> str:
    from ovserve_runtime.images import encode_png

    img = np.random.RandomState(seed).randint(0, 255, (40, 48, 3), dtype=np.uint8)
    return "data:image/png;base64," + base64.b64encode(encode_png(img)).decode()


def service_url(cluster, namespace: str, name: str) -> str:
    """status.endpoint with its host (the Service's DNS name; no cluster DNS here) swapped for the ClusterIP."""
    endpoint = status(cluster, namespace, name)["endpoint"]
    url = urllib.parse.urlsplit(endpoint)
    assert url.hostname == f"{name}.{namespace}.svc", endpoint
    ip = cluster.get("service", name, namespace)["spec"]["clusterIP"]
    return urllib.parse.urlunsplit(url._replace(netloc=f"{ip}:{url.port}"))


def post_json(url: str, body: dict, timeout: float = 120) -> tuple[int, dict]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, json.loads(r.read())


def test_auto_on_sdpa_vlm_resolves_vlm_cb_and_serves_images(cluster, operator, namespace, runtime):
    cluster.apply(llms("vlm", {"model": pvc_model("tiny-vlm")}), namespace)
    st = wait_phase(cluster, namespace, "vlm", "Ready", 360)
    r = row(cluster, namespace, "vlm")
    assert (r["REQUESTED"], r["RESOLVED"], r["FALLBACK"], r["DEVICE"], r["READY"], r["PHASE"]) == (
        "AUTO",
        "VLM_CB",
        "",
        "CPU",
        "1/1",
        "Ready",
    )
    assert st["pipeline"]["continuousBatching"] is True and st["pipeline"]["fallback"] is False
    assert condition(st, "Ready")["status"] == "True"
    assert condition(st, "Fallback")["status"] == "False"

    base = service_url(cluster, namespace, "vlm")
    msg = [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": png_data_url()}},
                {"type": "text", "text": "describe the picture"},
            ],
        }
    ]
    code, body = post_json(
        f"{base}/chat/completions",
        {"model": "vlm", "messages": msg, "max_tokens": 4, "ignore_eos": True},
    )
    assert code == 200, body
    usage = body["usage"]
    assert usage["completion_tokens"] == 4, body
    assert usage["prompt_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert body["choices"][0]["message"]["role"] == "assistant"


def test_sdpa_free_vlm_auto_falls_back_and_pinned_cb_fails(cluster, operator, namespace, runtime):
    cluster.apply(llms("vfb", {"model": pvc_model("tiny-vlm-nosdpa")}), namespace)
    cluster.apply(llms("vpin", {"model": pvc_model("tiny-vlm-nosdpa"), "pipelineType": "VLM_CB"}), namespace)

    # AUTO: falls back to the legacy VLM pipeline, visibly
    st = wait_phase(cluster, namespace, "vfb", "Ready", 360)
    r = row(cluster, namespace, "vfb")
    assert (r["REQUESTED"], r["RESOLVED"], r["FALLBACK"], r["READY"], r["PHASE"]) == (
        "AUTO",
        "VLM",
        "PagedAttentionNotSupported",
        "1/1",
        "Ready",
    )
    assert st["pipeline"]["continuousBatching"] is False and st["pipeline"]["fallback"] is True
    fb = condition(st, "Fallback")
    assert fb["status"] == "True" and fb["reason"] == "PagedAttentionNotSupported"
    cluster.wait_for(
        lambda: has_event(cluster, namespace, "vfb", "Warning", "PipelineFallback"),
        30,
        "Warning PipelineFallback event",
    )

    # pinned VLM_CB: Failed, never downgraded
    assert_refused_and_never_downgraded(cluster, namespace, "vpin", "VLM_CB", checks=5)
