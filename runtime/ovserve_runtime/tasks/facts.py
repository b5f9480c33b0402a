"""Read what a model directory says about its task (tasks/resolve.py decides): the IR's outputs and inputs
(openvino reads the graph; no compilation), config.json's architecture and labels, and the
sentence-transformers config of an embedding model."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from .. import resolve as pipeline_resolve
from .resolve import ModelFacts, SentenceTransformers

log = logging.getLogger("ovserve.tasks")

ST_MODULES = "modules.json"
WHISPER_ENCODER_XML = "openvino_encoder_model.xml"  # optimum-intel's automatic-speech-recognition export
WHISPER_DECODER_XML = "openvino_decoder_model.xml"
SPEECH_MODEL_TYPES = ("whisper",)  # config.json model_type values WhisperPipeline serves
ST_POOLING = "sentence_transformers.models.Pooling"


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def speech_evidence(root: Path, cfg: dict) -> str | None:
    """Why the directory is a Whisper export (its encoder and decoder IR, config.json agreeing), else None."""
    if not ((root / WHISPER_ENCODER_XML).is_file() and (root / WHISPER_DECODER_XML).is_file()):
        return None
    model_type = cfg.get("model_type")
    if model_type is None:
        return f"{WHISPER_ENCODER_XML} + {WHISPER_DECODER_XML} (no config.json model_type)"
    if model_type in SPEECH_MODEL_TYPES:
        return f"{WHISPER_ENCODER_XML} + {WHISPER_DECODER_XML}, config.json model_type {model_type}"
    return None  # another encoder-decoder (e.g. a T5 export): not speech


def read_facts(model_path: str) -> ModelFacts:
    root = Path(model_path)
    layout = pipeline_resolve.inspect_dir(root)
    cfg = _json(root / "config.json")
    archs = tuple(a for a in cfg.get("architectures") or () if isinstance(a, str))
    labels = cfg.get("id2label")
    num_labels = len(labels) if isinstance(labels, dict) else cfg.get("num_labels")
    if not isinstance(num_labels, int):
        num_labels = None
    outputs: dict[str, tuple[int | None, ...]] = {}
    inputs: tuple[str, ...] = ()
    xml = root / pipeline_resolve.LM_XML
    if layout.has_lm and not layout.has_vlm:
        try:
            import openvino as ov

            model = ov.Core().read_model(str(xml))
            for out in model.outputs:
                shape = out.get_partial_shape()
                dims = tuple(d.get_length() if d.is_static else None for d in shape) if shape.rank.is_static else ()
                for name in out.get_names() or {out.get_any_name()}:
                    outputs[name] = dims
            inputs = tuple(sorted(n for i in model.inputs for n in i.get_names()))
        except Exception as exc:  # unreadable IR: the pipeline's own construction says what is wrong
            log.warning("could not read %s for the task: %s", xml, exc)
    return ModelFacts(
        vlm=layout.has_vlm,
        has_ir=layout.has_lm,
        outputs=outputs,
        inputs=inputs,
        architectures=archs,
        num_labels=num_labels,
        speech=speech_evidence(root, cfg),
    )


def read_sentence_transformers(model_path: str) -> SentenceTransformers | None:
    """modules.json and its Pooling module's config; None when the model has no sentence-transformers config."""
    root = Path(model_path)
    try:
        modules = json.loads((root / ST_MODULES).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(modules, list):
        return None
    types = tuple(str(m.get("type", "")) for m in modules if isinstance(m, dict))
    pooling = None
    for m in modules:
        if isinstance(m, dict) and m.get("type") == ST_POOLING:
            pooling = _json(root / str(m.get("path", "")) / "config.json") or None
    return SentenceTransformers(pooling_config=pooling, modules=types)


def embedding_size(facts: ModelFacts) -> int | None:
    for name in ("last_hidden_state", "token_embeddings", "sentence_embedding"):
        shape = facts.outputs.get(name)
        if shape and shape[-1] is not None:
            return shape[-1]
    return None
