"""Benchmark: the cost of constrained decoding (response_format) against unconstrained decoding.

The raw ContinuousBatchingPipeline of a model, N requests at once, --max-tokens tokens each, greedy:
  none          no constraint (ignore_eos: every request runs to --max-tokens)
  json_schema   the compact regex ovserve builds for a JSON schema whose one string field is unbounded, so that
                the output runs to --max-tokens too (outlines-core + integer ranges, openvino_genai regex)
  json_object   the compact JSON-object EBNF grammar of response_format json_object
  genai schema  openvino-genai's own json_schema mode (XGrammar, free whitespace), for comparison
Prints wall time per generated token and the ratio to unconstrained, plus the first output of each (genai's
own schema mode shows its whitespace runs). Usage:
    python benchmarks/constrained_bench.py [--model tiny-bench] [--streams 16] [--max-tokens 64]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 999}, "note": {"type": "string"}},
    "required": ["id", "note"],
    "additionalProperties": False,
}


def main() -> None:
    import openvino_genai as g
    from ovserve_runtime.openai import grammar

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny-bench")
    p.add_argument("--streams", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--reps", type=int, default=2)
    a = p.parse_args()
    path = (
        a.model
        if os.path.isdir(a.model)
        else str(Path(os.environ.get("OVSERVE_MODELS", "/var/cache/ovserve/models")) / a.model)
    )
    pipe = g.ContinuousBatchingPipeline(path, g.SchedulerConfig(), "CPU")
    tok = pipe.get_tokenizer()
    prompts = [tok.encode(f"request {i}: write a note").input_ids for i in range(a.streams)]
    modes = {
        "none": None,
        "json_schema": {"regex": grammar.schema_regex(SCHEMA)},
        "json_object": {"grammar": grammar.JSON_OBJECT_EBNF},
        "genai schema": {"json_schema": json.dumps(SCHEMA)},
    }
    results = {}
    for name, so in modes.items():
        best = None
        for _ in range(a.reps):
            cfgs = []
            for _p in prompts:
                c = g.GenerationConfig()
                c.max_new_tokens = a.max_tokens
                c.do_sample = False
                if so is None:
                    c.ignore_eos = True
                else:
                    c.structured_output_config = g.StructuredOutputConfig(**so)
                cfgs.append(c)
            t = time.perf_counter()
            out = pipe.generate(prompts, cfgs)
            dt = time.perf_counter() - t
            tokens = sum(len(r.m_generation_ids[0]) for r in out)
            per = dt / tokens
            if best is None or per < best[0]:
                best = (per, tokens, tok.decode(out[0].m_generation_ids[0]))
        results[name] = best
    base = results["none"][0]
    print(f"model {a.model}, {a.streams} requests at once, max {a.max_tokens} tokens, best of {a.reps}\n")
    print("| mode | tokens | ms per token | vs unconstrained | first output (start) |")
    print("|---|---|---|---|---|")
    for name, (per, tokens, text) in results.items():
        print(f"| {name} | {tokens} | {per * 1000:.2f} | {per / base:.2f}x | `{text[:40]!r}` |")


if __name__ == "__main__":
    main()
