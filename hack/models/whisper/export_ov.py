"""Export a local Whisper checkpoint to OpenVINO IR (+ tokenizer and detokenizer) with optimum-intel, the shape
openvino-genai's WhisperPipeline reads (encoder, stateful decoder with past, generation and preprocessor configs).

usage: python export_ov.py HF_DIR OUT_DIR
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TASK = "automatic-speech-recognition-with-past"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("hf_dir")
    ap.add_argument("out")
    a = ap.parse_args()
    t0 = time.time()
    from optimum.exporters.openvino import main_export

    main_export(a.hf_dir, a.out, task=TASK, convert_tokenizer=True, local_files_only=True)
    files = sorted(p.name for p in Path(a.out).glob("openvino_*.xml"))
    print(f"  {', '.join(files)}; exported {TASK} in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
