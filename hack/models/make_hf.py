"""Create tiny random Hugging Face checkpoints with a locally trained tokenizer (no hub access).

usage: python make_hf.py llm OUT_DIR [--hidden 64 --inter 128 --layers 2 --heads 4 --kv 2]
       python make_hf.py llava OUT_DIR
"""

from __future__ import annotations

import argparse
import os
import random
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    CLIPImageProcessor,
    CLIPVisionConfig,
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    LlavaConfig,
    LlavaForConditionalGeneration,
    LlavaProcessor,
    PreTrainedTokenizerFast,
)

WORDS = (
    "hello world the quick brown fox jumps over lazy dog openvino genai kubernetes operator "
    "serving runtime model pipeline token batch cache attention paged continuous scheduler "
    "user assistant system question answer yes no maybe please thank you good morning night "
    "one two three four five six seven eight nine ten red green blue yellow black white cat "
    "house tree river mountain city road car train plane ship book page word letter number"
).split()

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + '</s>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)

VLM_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<image>\n' }}{% elif item['type'] == 'text' %}{{ item['text'] }}"
    "{% endif %}{% endfor %}{% endif %}"
    "{{ '</s>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)

SPECIALS = ["<unk>", "<s>", "</s>", "<pad>", "<|user|>", "<|assistant|>", "<|system|>"]


def build_tokenizer(vocab_size: int = 1000) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    rnd = random.Random(0)
    corpus = [" ".join(rnd.choice(WORDS) for _ in range(12)) for _ in range(600)]
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        additional_special_tokens=["<|user|>", "<|assistant|>", "<|system|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _gen_config(tok, out: str) -> None:
    GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    ).save_pretrained(out)


def make_llm(out: str, hidden: int, inter: int, layers: int, heads: int, kv: int, max_pos: int) -> None:
    torch.manual_seed(0)
    tok = build_tokenizer()
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        max_position_embeddings=max_pos,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg).eval()
    model.save_pretrained(out)
    tok.save_pretrained(out)
    _gen_config(tok, out)
    print(f"llm: vocab={len(tok)} params={sum(p.numel() for p in model.parameters())} -> {out}")


def make_llava(out: str) -> None:
    torch.manual_seed(0)
    tok = build_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<|user|>", "<|assistant|>", "<|system|>", "<image>"]})
    tok.chat_template = VLM_CHAT_TEMPLATE
    image_id = tok.convert_tokens_to_ids("<image>")
    img, patch = 32, 8
    vcfg = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=img,
        patch_size=patch,
        projection_dim=32,
    )
    tcfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    cfg = LlavaConfig(
        vision_config=vcfg,
        text_config=tcfg,
        image_token_index=image_id,
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        image_seq_length=(img // patch) ** 2,
    )
    model = LlavaForConditionalGeneration(cfg).eval()
    ip = CLIPImageProcessor(
        size={"shortest_edge": img},
        crop_size={"height": img, "width": img},
        do_center_crop=True,
        do_resize=True,
        do_normalize=True,
        image_mean=[0.48145466, 0.4578275, 0.40821073],
        image_std=[0.26862954, 0.26130258, 0.27577711],
    )
    proc = LlavaProcessor(
        image_processor=ip,
        tokenizer=tok,
        patch_size=patch,
        vision_feature_select_strategy="default",
        chat_template=VLM_CHAT_TEMPLATE,
        num_additional_image_tokens=1,
    )
    model.save_pretrained(out)
    proc.save_pretrained(out)
    tok.save_pretrained(out)
    _gen_config(tok, out)
    print(f"llava: params={sum(p.numel() for p in model.parameters())} image_token_id={image_id} -> {out}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["llm", "llava"])
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--inter", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv", type=int, default=2)
    ap.add_argument("--max-pos", type=int, default=512)
    a = ap.parse_args()
    t0 = time.time()
    if a.kind == "llm":
        make_llm(a.out, a.hidden, a.inter, a.layers, a.heads, a.kv, a.max_pos)
    else:
        make_llava(a.out)
    print(f"  built in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
