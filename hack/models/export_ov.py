"""Export a local Hugging Face checkpoint to OpenVINO IR (+ tokenizer/detokenizer) with optimum-intel.

usage: python export_ov.py HF_DIR OUT_DIR [--task TASK]  (text-generation-with-past, text-generation,
       image-text-to-text)
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
    ap.add_argument("--task", default="text-generation-with-past")
    a = ap.parse_args()
    t0 = time.time()
    from optimum.exporters.openvino import main_export

    main_export(
        a.hf_dir,
        a.out,
        task=a.task,
        convert_tokenizer=True,
        model_loading_kwargs={"attn_implementation": "sdpa"},
        local_files_only=True,
    )
    for f in sorted(os.listdir(a.out)):
        if f.endswith(".xml"):
            with open(os.path.join(a.out, f)) as fh:
                n = fh.read().count('type="ScaledDotProductAttention"')
            print(f"  {f}: ScaledDotProductAttention ops: {n}")
    print(f"  exported {a.task} in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
