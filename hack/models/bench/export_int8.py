"""Export a local checkpoint to OpenVINO IR with int8 weight compression (+ tokenizer/detokenizer).

usage: python export_int8.py HF_DIR OUT_DIR
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
    # int8 weights, explicitly (optimum only compresses models over 1B parameters by itself)
    xml = os.path.join(a.out, "openvino_model.xml")
    model = nncf.compress_weights(ov.Core().read_model(xml), mode=nncf.CompressWeightsMode.INT8_ASYM)
    ov.save_model(model, xml + ".int8.xml")
    del model
    for ext in ("xml", "bin"):
        os.replace(xml[:-3] + "xml.int8." + ext, xml[:-3] + ext)
    print(f"  exported int8 in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
