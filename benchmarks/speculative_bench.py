"""Speculative decoding over HTTP (`runtime_bench.py --speculative`): no speculation vs a draft model vs prompt
lookup, on the same model, streams and prompts.

Per mode an ovserve-runtime (LM_CB) serves N concurrent streaming /v3/completions (greedy, ignore_eos,
--max-tokens each), `--reps` bursts, modes interleaved per rep so that load from other work hits them alike.
Figures: throughput, TTFT and TPOT (p50), and from the server's /metrics the speculative counters of the run:
decode steps, draft tokens proposed (known for a draft with a fixed count), accepted tokens, acceptance rate
(accepted / proposed) and accepted tokens per decode step. `cost` = the mode's throughput / no speculation's.

What the figures mean with random weights (every model of hack/models): they measure what speculation costs or
saves on these models' greedy output, not on real text. A draft that does not predict the model (tiny-llm-draft
for tiny-bench, bench-qwen-draft-untied for bench-qwen) has acceptance near zero, and its figures are the PRICE of
a draft that is never right: every decode step runs the draft num_assistant_tokens times and the model verifies
num_assistant_tokens + 1 positions, to keep one token. Acceptance near one with random weights is an artefact:
bench-qwen's greedy output repeats one token, which a tied-embedding random draft (bench-qwen-draft) repeats too,
and which prompt lookup finds as an n-gram of the text so far. Prompt lookup proposes only where an n-gram
matches, at nearly no drafting cost. Real gains need trained models whose draft agrees with them (Intel measured
1.3-1.4x on Qwen3-8B with a small draft); run this with `--models <model> --draft <draft>` on such a pair.
"""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

COUNTERS = (
    "ovserve_speculative_steps_total",
    "ovserve_speculative_draft_tokens_total",
    "ovserve_speculative_accepted_tokens_total",
)


def scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out = dict.fromkeys(COUNTERS, 0.0)
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in out:
            out[name] = float(value)
    return out


def modes(a, drafts: list[Path]) -> dict[str, list[str]]:
    """The servers of one run: none, each draft ('draft', or 'draft:<name>' with several), prompt lookup."""
    out = {"none": []}
    for draft in drafts:
        mode = "draft" if len(drafts) == 1 else f"draft:{draft.name}"
        out[mode] = ["--draft-model-path", str(draft), "--num-assistant-tokens", str(a.num_assistant_tokens)]
    out["promptLookup"] = [
        "--prompt-lookup",
        "--num-assistant-tokens",
        str(a.num_assistant_tokens),
        "--max-ngram-size",
        str(a.max_ngram_size),
    ]
    return out


def run(a, models_dir: Path) -> None:
    import runtime_bench as rb

    streams = [int(x) for x in a.streams.split(",") if x]
    for name in a.models.split(","):
        model = Path(name) if Path(name).is_dir() else models_dir / name
        if not model.is_dir():
            print(f"skipping {name}: {model} does not exist")
            continue
        drafts = []
        for d in (a.draft or "tiny-llm-draft").split(","):
            draft = Path(d) if Path(d).is_dir() else models_dir / d
            if draft.is_dir():
                drafts.append(draft)
            else:
                print(f"no draft {draft}: its mode skipped (hack/models/draft/build.sh, hack/models/bench-qwen.sh)")
        servers: dict[str, rb.Server] = {}
        try:
            for mode, extra in modes(a, drafts).items():
                servers[mode] = rb.Server(str(model), "LM_CB", a.threads, [*extra, *a.server_args.split()])
            res = asyncio.run(_measure(a, rb, servers, streams))
        finally:
            for s in servers.values():
                s.stop()
        _print(model.name, drafts, res, a)


async def _measure(a, rb, servers, streams) -> dict:
    res: dict = {n: {m: {"runs": [], "counts": dict.fromkeys(COUNTERS, 0.0)} for m in servers} for n in streams}
    clients = {}
    for mode, srv in servers.items():
        clients[mode] = await rb.HttpClient(srv.url, a.client, rb.client_policy(a)).__aenter__()
        await clients[mode].run(1, 4)  # warm-up
    try:
        for n in streams:
            for _ in range(a.reps):
                for mode, srv in servers.items():
                    before = scrape(srv.url)
                    res[n][mode]["runs"].append(await clients[mode].run(n, a.max_tokens))
                    after = scrape(srv.url)
                    for k in COUNTERS:
                        res[n][mode]["counts"][k] += after[k] - before[k]
    finally:
        for c in clients.values():
            await c.__aexit__(None, None, None)
    return {n: {m: {**rb.summarize(d["runs"]), "counts": d["counts"]} for m, d in by.items()} for n, by in res.items()}


def _print(name: str, drafts: list[Path], res: dict, a) -> None:
    print(
        f"\n### {name}: speculative decoding over HTTP (draft {', '.join(d.name for d in drafts) or 'none'}, "
        f"num_assistant_tokens {a.num_assistant_tokens}, prompt lookup max_ngram_size {a.max_ngram_size}; "
        f"{a.max_tokens} tokens, greedy, medians of {a.reps} bursts)\n"
    )
    print(
        "| streams | mode | tok/s | cost vs none | TTFT p50 ms | TPOT p50 ms | decode steps | proposed | accepted "
        "| acceptance | accepted/step |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n, by in res.items():
        base = by["none"]["tok_s"]
        for mode, d in by.items():
            c = d["counts"]
            steps, proposed, accepted = (c[k] for k in COUNTERS)
            rate = f"{accepted / proposed:.3f}" if proposed else "n/a"
            per_step = f"{accepted / steps:.3f}" if steps else "n/a"
            print(
                f"| {n} | {mode} | {d['tok_s']:.0f} | {d['tok_s'] / base:.2f} | {d['ttft_p50_ms']:.1f} "
                f"| {d['tpot_p50_ms']:.2f} | {steps:.0f} | {proposed:.0f} | {accepted:.0f} | {rate} | {per_step} |"
            )
    print(
        "\nRandom weights: acceptance near zero (a draft that does not predict the model) makes `cost` the price of "
        "turning speculation on with a draft that is never right; acceptance near one comes from a greedy output "
        "that repeats one token (a random model's), not from a good draft. Prompt lookup's proposed count is not "
        "exposed by openvino-genai's add_request/step API (n/a)."
    )
    if any(t != int(n) * a.max_tokens for n, by in res.items() for d in by.values() for t in d["tokens"]):
        print("WARNING: some runs generated another number of tokens than streams x max_tokens")
