"""Export a local BERT checkpoint to OpenVINO IR (+ tokenizer) with optimum-intel, and carry over its
sentence-transformers config (optimum exports the transformer only; the runtime reads pooling from it).

usage: python export_ov.py HF_DIR OUT_DIR --task feature-extraction|text-classification
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ST_FILES = ("modules.json", "1_Pooling", "2_Normalize", "config_sentence_transformers.json")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("hf_dir")
    ap.add_argument("out")
    ap.add_argument("--task", required=True, choices=["feature-extraction", "text-classification"])
    a = ap.parse_args()
    t0 = time.time()
    from optimum.exporters.openvino import main_export

    # library "transformers": with modules.json present optimum would export a sentence-transformers model
    # (pooling inside the IR); the runtime is meant to pool, as for the hub's OpenVINO exports
    main_export(
        a.hf_dir, a.out, task=a.task, library_name="transformers", convert_tokenizer=True, local_files_only=True
    )
    src, dst = Path(a.hf_dir), Path(a.out)
    for name in ST_FILES:
        p = src / name
        if p.is_dir():
            shutil.copytree(p, dst / name, dirs_exist_ok=True)
        elif p.is_file():
            shutil.copy2(p, dst / name)
    outputs = (dst / "openvino_model.xml").read_text().count('type="Result"')
    print(f"  openvino_model.xml: {outputs} outputs; exported {a.task} in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
