"""Create tiny random BERT checkpoints with a WordPiece vocabulary trained locally (no hub access).

usage: python make_hf.py embed OUT_DIR [--hidden 32 --layers 2 --heads 2 --inter 64]
       python make_hf.py rerank OUT_DIR [...]

embed:  BertModel (an encoder without head) plus a sentence-transformers config (modules.json, 1_Pooling
        with mean pooling, a Normalize module), so that the runtime's pooling and normalization come from the
        model and differ from openvino-genai's defaults (CLS).
rerank: BertForSequenceClassification with one label (a cross-encoder).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import BertConfig, BertForSequenceClassification, BertModel, PreTrainedTokenizerFast

WORDS = (
    "hello world the quick brown fox jumps over lazy dog openvino genai kubernetes operator "
    "serving runtime model pipeline token batch cache attention embedding rerank query document "
    "search retrieval vector index question answer paris france capital river city mountain "
    "one two three four five six seven eight nine ten red green blue cat house tree book page"
).split()
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def build_tokenizer(vocab_size: int = 600) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False)
    rnd = random.Random(0)
    corpus = [" ".join(rnd.choice(WORDS) for _ in range(12)) for _ in range(600)]
    tok.train_from_iterator(corpus, trainer=trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=512,
        # BERT's inputs: with token_type_ids the converted OpenVINO tokenizer emits them too (pairs: the
        # document's are 1), which the cross-encoder's IR takes as an input
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
    )


def sentence_transformers_files(out: str, hidden: int) -> None:
    """modules.json + 1_Pooling/config.json (mean pooling) + a Normalize module, as sentence-transformers saves."""
    root = Path(out)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (root / "modules.json").write_text(json.dumps(modules, indent=2))
    (root / "1_Pooling").mkdir(exist_ok=True)
    pooling = {
        "word_embedding_dimension": hidden,
        "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False,
        "include_prompt": True,
    }
    (root / "1_Pooling" / "config.json").write_text(json.dumps(pooling, indent=2))
    (root / "2_Normalize").mkdir(exist_ok=True)


def make(kind: str, out: str, hidden: int, layers: int, heads: int, inter: int, max_pos: int) -> None:
    torch.manual_seed(0)
    tok = build_tokenizer()
    cfg = BertConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=inter,
        max_position_embeddings=max_pos,
        pad_token_id=tok.pad_token_id,
    )
    if kind == "embed":
        model = BertModel(cfg, add_pooling_layer=False).eval()
    else:
        cfg.num_labels = 1
        model = BertForSequenceClassification(cfg).eval()
    model.save_pretrained(out)
    tok.save_pretrained(out)
    if kind == "embed":
        sentence_transformers_files(out, hidden)
    print(f"bert-{kind}: vocab={len(tok)} params={sum(p.numel() for p in model.parameters())} -> {out}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["embed", "rerank"])
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--inter", type=int, default=64)
    ap.add_argument("--max-pos", type=int, default=128)
    a = ap.parse_args()
    t0 = time.time()
    make(a.kind, a.out, a.hidden, a.layers, a.heads, a.inter, a.max_pos)
    print(f"  built in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
