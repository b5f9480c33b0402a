"""Make a copy of a model directory serve another chat template (and a longer context).

usage: python3 set_template.py SRC_DIR OUT_DIR TEMPLATE.jinja [--max-pos N]

The weights and tokenizer stay those of SRC_DIR; the template goes where openvino-genai and transformers
read it: the `chat_template` rt_info of openvino_tokenizer.xml (edited in place, the rest of the IR
untouched), chat_template.jinja and tokenizer_config.json. Tool prompts are long (the tiny tokenizer spells
most of their words a byte or two per token), so config.json's max_position_embeddings is raised: the
exported graph computes rotary positions on the fly, it has no table of 512 positions.
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path
from xml.sax.saxutils import quoteattr


def xml_attr(text: str) -> str:
    """An XML attribute value (quotes included) that keeps newlines and tabs through parsing."""
    return quoteattr(text, {"\n": "&#10;", "\r": "&#13;", "\t": "&#9;"})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("template")
    ap.add_argument("--max-pos", type=int, default=4096)
    a = ap.parse_args()
    src, out = Path(a.src), Path(a.out)
    template = Path(a.template).read_text()
    shutil.copytree(src, out, ignore=shutil.ignore_patterns(".ovserve-stamp"))

    xml = out / "openvino_tokenizer.xml"
    text = xml.read_text()
    line = f"<chat_template value={xml_attr(template)} />"
    text, n = re.subn(r"<chat_template value=\"[^\"]*\" />", lambda _: line, text)
    if n != 1:
        raise SystemExit(f"{xml}: expected one chat_template rt_info entry, found {n}")
    xml.write_text(text)

    (out / "chat_template.jinja").write_text(template)
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = template
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")

    model_cfg_path = out / "config.json"
    model_cfg = json.loads(model_cfg_path.read_text())
    model_cfg["max_position_embeddings"] = a.max_pos
    model_cfg_path.write_text(json.dumps(model_cfg, indent=2) + "\n")
    print(f"chat: {out.name} <- {src.name} + {Path(a.template).name} (max_position_embeddings {a.max_pos})")


if __name__ == "__main__":
    main()
