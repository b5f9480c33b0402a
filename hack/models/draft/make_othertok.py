"""A draft-shaped tiny Llama whose tokenizer is trained to another vocabulary than tiny-llm's (400 tokens
instead of the 562 tiny-llm saturates at): openvino-genai must not speculate with it (DraftModelIncompatible).

usage: python make_othertok.py OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import make_hf  # the tiny models' builder, one folder up


def main() -> None:
    train = make_hf.build_tokenizer
    make_hf.build_tokenizer = lambda vocab_size=400: train(vocab_size)  # another vocabulary, same corpus
    make_hf.make_llm(sys.argv[1], hidden=32, inter=64, layers=1, heads=2, kv=1, max_pos=512)


if __name__ == "__main__":
    main()
