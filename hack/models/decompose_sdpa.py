"""Copy an OpenVINO model directory, rewriting one IR so that it has NO ScaledDotProductAttention op.

This mimics exports (e.g. some Gemma ones) whose IR lacks SDPA: openvino-genai's SDPAToPagedAttention
transformation then fails with its real error, and continuous batching is impossible.
Each SDPA(q, k, v, mask, scale) becomes Softmax(q @ k^T * scale + mask) @ v.

usage: python decompose_sdpa.py SRC_DIR DST_DIR [IR_NAME]   (IR_NAME default: openvino_model,
       for a VLM: openvino_language_model)
"""

from __future__ import annotations

import math
import os
import shutil
import sys

import numpy as np
import openvino as ov
import openvino.opset13 as ops


def decompose(model: ov.Model) -> int:
    n = 0
    for node in model.get_ordered_ops():
        if node.get_type_name() != "ScaledDotProductAttention":
            continue
        attrs = node.get_attributes()
        ins = [i.get_source_output() for i in node.inputs()]
        q, k, v = ins[0], ins[1], ins[2]
        mask = ins[3] if len(ins) > 3 else None
        scale = ins[4] if len(ins) > 4 else None
        if len(ins) > 5:
            raise RuntimeError("SDPA with a sink input is not handled")
        if attrs.get("causal"):
            raise RuntimeError("causal=True SDPA is not handled by this rewrite")
        et = q.get_element_type()
        scores = ops.matmul(q, k, transpose_a=False, transpose_b=True)
        if scale is None:
            e = q.get_partial_shape()[-1].get_length()
            scale = ops.constant(np.array(1.0 / math.sqrt(e), dtype=np.float32)).output(0)
        if scale.get_element_type() != et:
            scale = ops.convert(scale, et).output(0)
        scores = ops.multiply(scores, scale)
        if mask is not None:
            if mask.get_element_type() == ov.Type.boolean:
                neg = ops.constant(np.array(-65504.0, dtype=np.float32))
                zero = ops.constant(np.array(0.0, dtype=np.float32))
                mask = ops.select(mask, zero, neg).output(0)
            scores = ops.add(scores, mask)
        probs = ops.softmax(scores, -1)
        out = ops.matmul(probs, v, transpose_a=False, transpose_b=False)
        out.set_friendly_name(node.get_friendly_name() + "/decomposed")
        node.output(0).replace(out.output(0))
        n += 1
    model.validate_nodes_and_infer_types()
    return n


def main(src: str, dst: str, name: str = "openvino_model") -> None:
    os.makedirs(dst, exist_ok=True)
    for f in os.listdir(src):
        p = os.path.join(src, f)
        if f not in (f"{name}.xml", f"{name}.bin") and os.path.isfile(p):
            shutil.copy2(p, os.path.join(dst, f))
    m = ov.Core().read_model(os.path.join(src, f"{name}.xml"))
    n = decompose(m)
    ov.save_model(m, os.path.join(dst, f"{name}.xml"), compress_to_fp16=False)
    with open(os.path.join(dst, f"{name}.xml")) as fh:
        left = fh.read().count('type="ScaledDotProductAttention"')
    print(f"  {name}: decomposed {n} SDPA ops, {left} left")
    if left:
        raise SystemExit("SDPA ops remain")


if __name__ == "__main__":
    main(*sys.argv[1:4])
