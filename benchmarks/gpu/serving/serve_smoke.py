"""The gptoss engine served over HTTP on one GPU: Dynamo's frontend in front of gptoss workers on random
weights of a gpt-oss model's shapes, requests streamed through it. A smoke run, not a benchmark.

    python -m benchmarks.gpu.serving.serve_smoke --assets DIR --out DIR [--model gpt-oss-20b] [--layout agg disagg]

Layouts, one after the other in one run:
- agg: one aggregated worker (graphs/gptoss/engines/gpt-oss-120b-h200-agg.yaml);
- disagg: one prefill and one decode worker on the same GPU (the -prefill and -decode engine files), the
  KV of every request handed from the one to the other through NIXL in the flow Dynamo's frontend drives.
  Each worker's KV is capped (SMOKE_KV_TOKENS) so both fit beside each other.
The greedy completions are sent to every layout alike: the same random weights (the engine files' seed)
and the same kernels give the same tokens, so a disaggregated answer that differs from the aggregated one
is a handoff that lost or misplaced KV (reported per request, `same_as_agg`).

The processes and DIR (--assets) are served.py's, with round-robin routing. Each request's TTFT and ITL
are measured by this client as aiperf defines them (ITL =
(end-to-end - TTFT) / (output tokens - 1)); with random weights the text is nonsense, and the tokens are
`max_tokens` long with `ignore_eos`. Writes DIR/serve_smoke.json and every process's log.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from benchmarks.gpu.serving.served import MODELS, PORT, Layout, Worker, served
from dynamo_oss.catalog.models import GPT_OSS_120B, ModelShape

SMOKE_KV_TOKENS = 262_144  # each disaggregated worker's KV cap, so two fit on one GPU beside their weights
LAYOUTS = {
    "agg": Layout("agg", (Worker("agg", "agg", 0),), router="round-robin"),
    "disagg": Layout(
        "disagg",
        (Worker("prefill", "prefill", 0, SMOKE_KV_TOKENS), Worker("decode", "decode", 0, SMOKE_KV_TOKENS)),
        router="round-robin",
    ),
}
MAX_TOKENS = 64
API_PATH = {"chat": "chat/completions", "completions": "completions"}
PROMPTS = ["Name a prime number.", "Say hello.", "What is 2 + 2?", "Write a haiku about GPUs."]
LONG_PROMPT = " ".join(f"item {i}: the {i % 7}th colour of {i % 13} birds." for i in range(300))  # ~4k tokens


def streamed(api: str, prompt: str, model: ModelShape) -> dict:
    """One streamed greedy request; TTFT at its first chunk that carries text, ITL as aiperf's."""
    body: dict = {
        "model": model.served_name,
        "temperature": 0.0,
        "max_tokens": MAX_TOKENS,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "min_tokens": MAX_TOKENS,
    }
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    sent = time.perf_counter()
    first, usage, text, status = None, None, [], None
    with httpx.stream("POST", f"http://127.0.0.1:{PORT}/v1/{API_PATH[api]}", json=body, timeout=120) as answer:
        status = answer.status_code
        for line in answer.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                piece = choice.get("text") or (delta.get("content") or "") + (delta.get("reasoning_content") or "")
                if piece and first is None:
                    first = time.perf_counter()
                text.append(piece)
    ended = time.perf_counter()
    tokens = (usage or {}).get("completion_tokens") or 0
    ttft = (first - sent) * 1000 if first else None
    itl = ((ended - first) * 1000 / (tokens - 1)) if first and tokens > 1 else None
    return {
        "api": api,
        "prompt": prompt,
        "status": status,
        "ttft_ms": ttft,
        "itl_ms": itl,
        "output_tokens": tokens,
        "usage": usage,
        "text": "".join(text),
    }


def serve(layout: str, model: ModelShape, assets: Path, out: Path) -> dict:
    """One layout served, its requests sent, its processes stopped; what it answered."""
    report: dict = {}
    try:
        with served(LAYOUTS[layout], model, assets, out) as started:
            report.update(started)
            print(f"{layout}: served after {report['ready_s']:.0f} s", flush=True)
            report["one_at_a_time"] = [streamed("completions", prompt, model) for prompt in [*PROMPTS, LONG_PROMPT]]
            report["chat"] = [streamed("chat", prompt, model) for prompt in PROMPTS]
            with ThreadPoolExecutor(len(PROMPTS)) as pool:
                report["four_at_once"] = list(pool.map(lambda prompt: streamed("completions", prompt, model), PROMPTS))
    except Exception as error:  # noqa: BLE001 - reported with the logs
        report["error"] = f"{type(error).__name__}: {error}"
        print(f"{layout}: {report['error']}", flush=True)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assets", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", choices=sorted(MODELS), default=GPT_OSS_120B.name)
    parser.add_argument("--layout", nargs="+", choices=sorted(LAYOUTS), default=["agg"])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    model = MODELS[args.model]
    report: dict = {"model": model.name}
    for layout in args.layout:
        report[layout] = serve(layout, model, args.assets, args.out)
    if "agg" in report and "disagg" in report:  # greedy, alone: the same tokens, or KV went astray
        pairs = zip(report["agg"].get("one_at_a_time", []), report["disagg"].get("one_at_a_time", []))
        report["same_as_agg"] = [agg["text"] == disagg["text"] for agg, disagg in pairs]
    print(json.dumps({k: v for k, v in report.items() if k not in LAYOUTS}, indent=1), flush=True)
    (args.out / "serve_smoke.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
