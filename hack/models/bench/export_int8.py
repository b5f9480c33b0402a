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
    from optimum.exporters.openvino import main_export
    from optimum.intel import OVConfig, OVWeightQuantizationConfig

    main_export(
        a.hf_dir,
        a.out,
        task="text-generation-with-past",
        convert_tokenizer=True,
        ov_config=OVConfig(quantization_config=OVWeightQuantizationConfig(bits=8)),
        model_loading_kwargs={"attn_implementation": "sdpa"},
        local_files_only=True,
    )
    print(f"  exported int8 in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
