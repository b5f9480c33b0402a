"""Create a tiny random-weight Whisper checkpoint with a locally trained tokenizer (no hub access).

The tokenizer is a byte-level BPE trained here on a small word list, followed by Whisper's special tokens in
Whisper's order (<|endoftext|>, <|startoftranscript|>, one token per language, <|translate|>, <|transcribe|>,
<|startoflm|>, <|startofprev|>, <|nospeech|>, <|notimestamps|>, then the 1,501 timestamps <|0.00|>..<|30.00|>),
so that openvino-genai's WhisperPipeline finds every id its generation config names. The generation config
carries what the hub's multilingual Whisper checkpoints carry (lang_to_id, task_to_id, alignment_heads, ...).

usage: python make_hf.py OUT_DIR [--d-model 64 --layers 2 --heads 4 --ffn 128]
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    GenerationConfig,
    WhisperConfig,
    WhisperFeatureExtractor,
    WhisperForConditionalGeneration,
    WhisperProcessor,
    WhisperTokenizer,
)
from transformers.models.whisper.tokenization_whisper import LANGUAGES

WORDS = (
    "hello world the quick brown fox jumps over lazy dog openvino genai kubernetes operator "
    "serving runtime model pipeline speech audio whisper transcription translation one two three "
    "four five six seven eight nine ten red green blue cat house tree river mountain city road"
).split()

EOT = "<|endoftext|>"
SOT = "<|startoftranscript|>"
TASKS = ("<|translate|>", "<|transcribe|>")
TAIL = ("<|startoflm|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>")
TIMESTAMPS = tuple(f"<|{i * 0.02:.2f}|>" for i in range(1501))


def build_tokenizer(work: Path, vocab_size: int = 600) -> WhisperTokenizer:
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    rnd = random.Random(0)
    tok.train_from_iterator([" ".join(rnd.choice(WORDS) for _ in range(12)) for _ in range(600)], trainer=trainer)
    vocab = tok.get_vocab()
    vocab[EOT] = len(vocab)  # Whisper's <|endoftext|> is the last token of the BPE vocabulary
    tok.model.save(str(work))  # merges.txt
    merges = [tuple(line.split(" ")) for line in (work / "merges.txt").read_text().splitlines()[1:] if line]
    specials = [SOT, *(f"<|{code}|>" for code in LANGUAGES), *TASKS, *TAIL, *TIMESTAMPS]
    wt = WhisperTokenizer(
        vocab=vocab,
        merges=merges,
        unk_token=EOT,
        bos_token=EOT,
        eos_token=EOT,
        pad_token=EOT,
    )
    wt.add_special_tokens({"additional_special_tokens": specials[: -len(TIMESTAMPS)]})
    wt.add_tokens(list(TIMESTAMPS))  # the hub's checkpoints add the timestamps as ordinary added tokens
    return wt


def generation_config(tok: WhisperTokenizer, layers: int, heads: int) -> GenerationConfig:
    ids = tok.convert_tokens_to_ids
    eot, sot = ids(EOT), ids(SOT)
    return GenerationConfig(
        decoder_start_token_id=sot,
        bos_token_id=eot,
        eos_token_id=eot,
        pad_token_id=eot,
        max_length=448,
        is_multilingual=True,
        lang_to_id={f"<|{code}|>": ids(f"<|{code}|>") for code in LANGUAGES},
        task_to_id={"translate": ids(TASKS[0]), "transcribe": ids(TASKS[1])},
        no_timestamps_token_id=ids("<|notimestamps|>"),
        prev_sot_token_id=ids("<|startofprev|>"),
        max_initial_timestamp_index=50,
        begin_suppress_tokens=[ids("\u0120"), eot],  # Ġ (a space) and <|endoftext|>, as the hub's
        suppress_tokens=[],
        forced_decoder_ids=None,
        alignment_heads=[[layers - 1, h] for h in range(heads)],
        return_timestamps=False,
    )


def make_whisper(out: str, d_model: int, layers: int, heads: int, ffn: int) -> None:
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        tok = build_tokenizer(Path(tmp))
    cfg = WhisperConfig(
        vocab_size=len(tok),
        num_mel_bins=80,
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ffn,
        decoder_ffn_dim=ffn,
        max_source_positions=1500,
        max_target_positions=448,
        decoder_start_token_id=tok.convert_tokens_to_ids(SOT),
        bos_token_id=tok.eos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.eos_token_id,
        begin_suppress_tokens=None,
        suppress_tokens=None,
    )
    model = WhisperForConditionalGeneration(cfg).eval()
    model.generation_config = generation_config(tok, layers, heads)
    model.save_pretrained(out)
    proc = WhisperProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=80), tokenizer=tok)
    proc.save_pretrained(out)
    print(f"whisper: vocab={len(tok)} params={sum(p.numel() for p in model.parameters())} -> {out}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=128)
    a = ap.parse_args()
    t0 = time.time()
    make_whisper(a.out, a.d_model, a.layers, a.heads, a.ffn)
    print(f"  built in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
