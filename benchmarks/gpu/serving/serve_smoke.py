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

DIR (--assets) holds `model-<name>/` (the model folder the project builds: tokenizer, harmony template,
config) and `tiktoken/` (the o200k ranks Dynamo's harmony parsers read), as .whl/serving_assets.tar.xz packs
them. The processes are started as `dynamo serve` starts them (command lines from the project's own
FrontendConfig and GptOssEngine.worker_argv), with Dynamo's file discovery and TCP request plane in place
of etcd and NATS, which the device has not: the graph's other processes (gateway, Prometheus) are not
started. Each request's TTFT and ITL are measured by this client as aiperf defines them (ITL =
(end-to-end - TTFT) / (output tokens - 1)); with random weights the text is nonsense, and the tokens are
`max_tokens` long with `ignore_eos`. Writes DIR/serve_smoke.json and every process's log.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import yaml

from dynamo_oss.catalog.models import GPT_OSS_20B, GPT_OSS_120B, ModelShape
from dynamo_oss.catalog.names import component_for
from dynamo_oss.deployment.commands import FrontendConfig
from dynamo_oss.engines import WorkerContext
from dynamo_oss.engines.gptoss.engine import ENGINE

REPO = Path(__file__).resolve().parents[3]
ENGINES = REPO / "graphs" / "gptoss" / "engines"
ROLES = {"agg": ["agg"], "disagg": ["prefill", "decode"]}
MODELS = {model.name: model for model in (GPT_OSS_20B, GPT_OSS_120B)}
NAMESPACE, PORT, SYSTEM_PORT = "smoke", 18000, 18100
READY_TIMEOUT_S = 400.0
SMOKE_KV_TOKENS = 262_144  # each disaggregated worker's KV cap, so two fit on one GPU beside their weights
MAX_TOKENS = 64
API_PATH = {"chat": "chat/completions", "completions": "completions"}
PROMPTS = ["Name a prime number.", "Say hello.", "What is 2 + 2?", "Write a haiku about GPUs."]
LONG_PROMPT = " ".join(f"item {i}: the {i % 7}th colour of {i % 13} birds." for i in range(300))  # ~4k tokens


def environment(assets: Path, run: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DYN_NAMESPACE": NAMESPACE,
        "DYN_DISCOVERY_BACKEND": "file",
        "DYN_FILE_KV": str(run / "discovery"),
        "DYN_REQUEST_PLANE": "tcp",
        "DYN_EVENT_PLANE": "zmq",
        "DYN_TCP_RPC_HOST": "127.0.0.1",
        "DYN_TCP_RESPONSE_STREAM_HOST": "127.0.0.1",
        "DYN_SYSTEM_HOST": "127.0.0.1",
        "DYN_SYSTEM_PORT": str(SYSTEM_PORT),
        "TIKTOKEN_ENCODINGS_BASE": str(assets / "tiktoken"),
        "PYTHONUNBUFFERED": "1",
    }


def engine_file(role: str, layout: str, run: Path) -> Path:
    """The shipped engine file of `role`; beside another worker on one GPU, with its KV capped."""
    shipped = ENGINES / f"gpt-oss-120b-h200-{role}.yaml"
    if layout == "agg":
        return shipped
    args = yaml.safe_load(shipped.read_text())
    args["kv_cache_config"]["max_tokens"] = SMOKE_KV_TOKENS
    path = run / f"{role}.yaml"
    path.write_text(yaml.safe_dump(args))
    return path


def commands(assets: Path, model: ModelShape, layout: str, run: Path) -> dict[str, list[str]]:
    """The frontend's and each worker's command line, by process name."""
    frontend = FrontendConfig(router="round-robin", migration_limit=0, listen=("127.0.0.1", PORT), namespace=NAMESPACE)
    argv = {"frontend": [sys.executable, *frontend.args()]}
    for role in ROLES[layout]:
        path = engine_file(role, layout, run)
        context = WorkerContext(
            role=role,
            served_name=model.served_name,
            model_path=model.served_name,  # not a local folder: random weights of the shape
            model_folder=assets / f"model-{model.name}",
            max_context=model.max_context,
            engine_args_file=path,
            shape=ENGINE.read_shape(path, 1),
            endpoint=f"dyn://{NAMESPACE}.{component_for(role)}.generate",
        )
        argv[role] = [sys.executable, *ENGINE.worker_argv(context)]
    return argv


def wait_served(processes: dict[str, subprocess.Popen], model: ModelShape, deadline: float) -> float:
    started = time.monotonic()
    while time.monotonic() < deadline:
        for name, process in processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode} before the model was served")
        try:
            listed = httpx.get(f"http://127.0.0.1:{PORT}/v1/models", timeout=2).json()
            if any(entry["id"] == model.served_name for entry in listed.get("data", [])):
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        time.sleep(1)  # a poll of the frontend's model list, with the deadline above
    raise TimeoutError(f"the model was not served within {READY_TIMEOUT_S:.0f} s")


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
    run = Path(f"/tmp/serve-smoke-{layout}")
    run.mkdir(exist_ok=True)
    env = environment(assets, run)
    argv = commands(assets, model, layout, run)
    report: dict = {"commands": {name: command[1:] for name, command in argv.items()}}
    processes = {}
    for index, (name, command) in enumerate(argv.items()):
        log = (out / f"{layout}-{name}.log").open("w")
        process_env = {**env, "DYN_SYSTEM_PORT": str(SYSTEM_PORT + index)}
        processes[name] = subprocess.Popen(command, env=process_env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        report["ready_s"] = wait_served(processes, model, time.monotonic() + READY_TIMEOUT_S)
        print(f"{layout}: served after {report['ready_s']:.0f} s", flush=True)
        report["one_at_a_time"] = [streamed("completions", prompt, model) for prompt in [*PROMPTS, LONG_PROMPT]]
        report["chat"] = [streamed("chat", prompt, model) for prompt in PROMPTS]
        with ThreadPoolExecutor(len(PROMPTS)) as pool:
            report["four_at_once"] = list(pool.map(lambda prompt: streamed("completions", prompt, model), PROMPTS))
    except Exception as error:  # noqa: BLE001 - reported with the logs
        report["error"] = f"{type(error).__name__}: {error}"
        print(f"{layout}: {report['error']}", flush=True)
    finally:
        for process in processes.values():
            process.terminate()
        for process in processes.values():
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assets", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", choices=sorted(MODELS), default=GPT_OSS_120B.name)
    parser.add_argument("--layout", nargs="+", choices=sorted(ROLES), default=["agg"])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    model = MODELS[args.model]
    report: dict = {"model": model.name}
    for layout in args.layout:
        report[layout] = serve(layout, model, args.assets, args.out)
    if "agg" in report and "disagg" in report:  # greedy, alone: the same tokens, or KV went astray
        pairs = zip(report["agg"].get("one_at_a_time", []), report["disagg"].get("one_at_a_time", []))
        report["same_as_agg"] = [agg["text"] == disagg["text"] for agg, disagg in pairs]
    print(json.dumps({k: v for k, v in report.items() if k not in ROLES}, indent=1), flush=True)
    (args.out / "serve_smoke.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
