"""Create a Qwen2-shaped checkpoint with random weights and a locally trained byte-level BPE vocabulary.

Benchmark-only (never used by tests). The defaults are Qwen2.5-0.5B-Instruct's shape: hidden 896, 24 layers,
14 heads / 2 KV heads, intermediate 4864, tied embeddings, vocab 151936; the flags make smaller models of the
same architecture (bench-qwen.sh's variants). The tokenizer is a byte-level BPE trained here on a synthetic
corpus (no model hub), so detokenization costs what a vocabulary of that size costs.

usage: python make_qwen_shape.py OUT_DIR [--vocab 151936] [--layers 24] [--hidden 896] [--inter 4864]
         [--heads 14] [--kv 2] [--untied]

--untied gives the model its own random output head instead of the tied embeddings. Why it matters for a draft:
with tied embeddings and small random weights a 2-layer model's greedy choice is the input token again, and
bench-qwen's greedy output repeats one token from its first, so a tied draft "predicts" bench-qwen (measured:
96-99% of its proposals accepted); an untied head proposes unrelated tokens, a draft that is never right.
"""

from __future__ import annotations

import argparse
import os
import random
import string
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def corpus(words: int, seed: int = 0):
    """Random pseudo-words (letters, digits, some accents): enough distinct substrings for ~150k merges."""
    rnd = random.Random(seed)
    alphabet = string.ascii_lowercase + string.ascii_uppercase + string.digits + "éàüößç"
    for _ in range(words // 16):
        yield " ".join("".join(rnd.choice(alphabet) for _ in range(rnd.randint(2, 9))) for _ in range(16))


def build_tokenizer(vocab: int) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab - 200,  # room for the specials, as Qwen's vocab_size exceeds its tokenizer
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(1_500_000), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=896)
    ap.add_argument("--inter", type=int, default=4864)
    ap.add_argument("--heads", type=int, default=14)
    ap.add_argument("--kv", type=int, default=2)
    ap.add_argument("--untied", action="store_true", help="a random output head, not the tied embeddings")
    a = ap.parse_args()
    t0 = time.time()
    torch.manual_seed(0)
    tok = build_tokenizer(a.vocab)
    print(f"qwen-shape: tokenizer vocab={len(tok)} in {time.time() - t0:.0f}s")
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    pad = tok.convert_tokens_to_ids("<|endoftext|>")
    cfg = Qwen2Config(
        vocab_size=a.vocab,
        hidden_size=a.hidden,
        intermediate_size=a.inter,
        num_hidden_layers=a.layers,
        num_attention_heads=a.heads,
        num_key_value_heads=a.kv,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        tie_word_embeddings=not a.untied,
        bos_token_id=pad,
        eos_token_id=eos,
        pad_token_id=pad,
    )
    model = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():  # small random weights keep activations finite in fp16/int8 paths
        for p in model.parameters():
            p.mul_(0.5)
    model.save_pretrained(a.out)
    tok.save_pretrained(a.out)
    GenerationConfig(eos_token_id=eos, pad_token_id=pad).save_pretrained(a.out)
    n = sum(p.numel() for p in model.parameters())
    print(f"qwen-shape: params={n} hidden={a.hidden} layers={a.layers} vocab={a.vocab} -> {a.out}")
    print(f"  built in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
