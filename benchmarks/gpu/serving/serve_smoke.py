"""The gptoss engine served over HTTP on one GPU: Dynamo's frontend in front of one aggregated gptoss worker
(random weights of gpt-oss-120b's shapes), chat requests streamed through it. A smoke run, not a benchmark.

    python -m benchmarks.gpu.serving.serve_smoke --assets DIR --out DIR

DIR (--assets) holds `model/` (the model folder the project builds: tokenizer, harmony template, config)
and `tiktoken/` (the o200k ranks Dynamo's harmony parsers read), as .whl/serving_assets.tar.xz packs them.
Both processes are started as `dynamo serve` starts them (the frontend's and the worker's command lines
come from the project's own FrontendConfig and GptOssEngine.worker_argv, the worker's engine file is
graphs/gptoss/engines/gpt-oss-120b-h200-agg.yaml), with Dynamo's file discovery and TCP request plane in
place of etcd and NATS, which the device has not: the graph's other processes (gateway, Prometheus) are
not started. Each request's TTFT and ITL are measured by this client as aiperf defines them (ITL =
(end-to-end - TTFT) / (output tokens - 1)); with random weights the text is nonsense, and the tokens are
`max_tokens` long with `ignore_eos`. Writes DIR/serve_smoke.json and the two processes' logs.
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

from dynamo_oss.catalog.models import GPT_OSS_120B
from dynamo_oss.catalog.names import component_for
from dynamo_oss.deployment.commands import FrontendConfig
from dynamo_oss.engines import WorkerContext
from dynamo_oss.engines.gptoss.engine import ENGINE

REPO = Path(__file__).resolve().parents[3]
ENGINE_FILE = REPO / "graphs" / "gptoss" / "engines" / "gpt-oss-120b-h200-agg.yaml"
NAMESPACE, PORT, SYSTEM_PORT = "smoke", 18000, 18100
READY_TIMEOUT_S = 400.0
MAX_TOKENS = 64
API_PATH = {"chat": "chat/completions", "completions": "completions"}
PROMPTS = ["Name a prime number.", "Say hello.", "What is 2 + 2?", "Write a haiku about GPUs."]


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


def commands(assets: Path) -> tuple[list[str], list[str]]:
    frontend = FrontendConfig(router="round-robin", migration_limit=0, listen=("127.0.0.1", PORT), namespace=NAMESPACE)
    context = WorkerContext(
        role="agg",
        served_name=GPT_OSS_120B.served_name,
        model_path=GPT_OSS_120B.served_name,  # not a local folder: random weights of the shape
        model_folder=assets / "model",
        max_context=GPT_OSS_120B.max_context,
        engine_args_file=ENGINE_FILE,
        shape=ENGINE.read_shape(ENGINE_FILE, 1),
        endpoint=f"dyn://{NAMESPACE}.{component_for('agg')}.generate",
    )
    return [sys.executable, *frontend.args()], [sys.executable, *ENGINE.worker_argv(context)]


def wait_served(processes: dict[str, subprocess.Popen], deadline: float) -> float:
    started = time.monotonic()
    while time.monotonic() < deadline:
        for name, process in processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode} before the model was served")
        try:
            listed = httpx.get(f"http://127.0.0.1:{PORT}/v1/models", timeout=2).json()
            if any(model["id"] == GPT_OSS_120B.served_name for model in listed.get("data", [])):
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        time.sleep(1)  # a poll of the frontend's model list, with the deadline above
    raise TimeoutError(f"the model was not served within {READY_TIMEOUT_S:.0f} s")


def streamed(api: str, prompt: str) -> dict:
    """One streamed request; TTFT at its first chunk that carries text, ITL as aiperf's."""
    body: dict = {
        "model": GPT_OSS_120B.served_name,
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
        "text_start": "".join(text)[:120],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assets", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    run = Path("/tmp/serve-smoke")
    run.mkdir(exist_ok=True)
    env = environment(args.assets, run)
    frontend_argv, worker_argv = commands(args.assets)
    report: dict = {"frontend": frontend_argv[1:], "worker": worker_argv[1:]}
    logs = {name: (args.out / f"{name}.log").open("w") for name in ("frontend", "worker")}
    processes = {
        name: subprocess.Popen(argv, env=env, stdout=logs[name], stderr=subprocess.STDOUT, cwd=REPO)
        for name, argv in (("frontend", frontend_argv), ("worker", worker_argv))
    }
    try:
        report["ready_s"] = wait_served(processes, time.monotonic() + READY_TIMEOUT_S)
        print(f"served after {report['ready_s']:.0f} s", flush=True)
        report["chat"] = [streamed("chat", prompt) for prompt in PROMPTS]
        report["one_at_a_time"] = [streamed("completions", prompt) for prompt in PROMPTS]
        with ThreadPoolExecutor(len(PROMPTS)) as pool:
            report["four_at_once"] = list(pool.map(lambda prompt: streamed("completions", prompt), PROMPTS))
        print(json.dumps(report, indent=1), flush=True)
    except Exception as error:  # noqa: BLE001 - reported with the logs
        report["error"] = f"{type(error).__name__}: {error}"
        print(report["error"], flush=True)
    finally:
        for process in processes.values():
            process.terminate()
        for process in processes.values():
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
        (args.out / "serve_smoke.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
