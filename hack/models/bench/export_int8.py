"""Export a local checkpoint to OpenVINO IR with weight compression (+ tokenizer/detokenizer).

usage: python export_int8.py HF_DIR OUT_DIR [--mode int8_asym|int8_sym|int4_sym|int4_asym] [--group-size 128]
(int4: data-free, every layer in 4 bits, nncf keeps the embeddings int8)
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("hf_dir")
    ap.add_argument("out")
    ap.add_argument("--mode", default="int8_asym", choices=["int8_asym", "int8_sym", "int4_sym", "int4_asym"])
    ap.add_argument("--group-size", type=int, default=128, help="int4 only")
    a = ap.parse_args()
    t0 = time.time()
    import nncf
    import openvino as ov
    from optimum.exporters.openvino import main_export

    main_export(
        a.hf_dir,
        a.out,
        task="text-generation-with-past",
        convert_tokenizer=True,
        model_loading_kwargs={"attn_implementation": "sdpa"},
        local_files_only=True,
    )
    # compressed weights, explicitly (optimum only compresses models over 1B parameters by itself)
    xml = os.path.join(a.out, "openvino_model.xml")
    mode = getattr(nncf.CompressWeightsMode, a.mode.upper())
    extra = {"group_size": a.group_size, "ratio": 1.0} if a.mode.startswith("int4") else {}
    model = nncf.compress_weights(ov.Core().read_model(xml), mode=mode, **extra)
    ov.save_model(model, xml + ".int8.xml")
    del model
    for ext in ("xml", "bin"):
        os.replace(xml[:-3] + "xml.int8." + ext, xml[:-3] + ext)
    print(f"  exported {a.mode} in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
