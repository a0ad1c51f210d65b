"""aiperf, the load generator (NVIDIA's benchmark client, PyPI `aiperf`): one run's command line,
and its figures read back from its own export.

aiperf measures every figure; this module only asks it for a closed loop of streaming chat
requests of exact lengths and reads `profile_export_aiperf.json`, whose metrics are
`{unit, avg, p1..p99, min, max, std}`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from dynamo_oss.bench.results import SweepParameters
from dynamo_oss.catalog.errors import UserError
from dynamo_oss.perf.metrics import ServingPoint

# In plain concurrency mode aiperf's timing manager polls for a free slot without sleeping, which
# takes a whole core of a small machine from the deployment it measures. A request-rate ceiling far
# above what any endpoint here completes makes it sleep between checks instead; the concurrency
# still caps the requests in flight, and a freed slot waits at most 1 / PACING_RATE to refill.
PACING_RATE = 1000.0  # requests per second
EXPORT = "profile_export_aiperf.json"
PHASES = "phase_manifest.json"
LOG = "aiperf-console.log"
MMAP_BASE_ENV = "AIPERF_DATASET_MMAP_BASE_PATH"  # where aiperf memory-maps its dataset


def environment(artifacts: Path) -> dict[str, str]:
    """The environment of an aiperf run: its dataset's memory-mapped files in the run's own folder,
    where aiperf's default, the system temp folder, kept one folder per run for good."""
    return {**os.environ, MMAP_BASE_ENV: str(artifacts)}


def command(base_url: str, parameters: SweepParameters, concurrency: int, artifacts: Path) -> list[str]:
    """`aiperf profile` for one run. Lengths are exact: aiperf sends max_completion_tokens = OSL, and
    ignore_eos with min_tokens = OSL keeps a model from stopping early; token counts come from the
    server's usage, not from re-tokenizing the streamed text."""
    requests, warmup = parameters.requests_at(concurrency), parameters.warmup_at(concurrency)
    p = parameters
    argv = [
        sys.executable, "-m", "aiperf", "profile",
        "--url", base_url, "--endpoint-type", "chat", "--streaming",
        "--model", p.model, "--tokenizer", p.tokenizer,
        "--synthetic-input-tokens-mean", str(p.isl), "--synthetic-input-tokens-stddev", "0",
        "--output-tokens-mean", str(p.osl), "--output-tokens-stddev", "0",
        "--extra-inputs", "ignore_eos:true", "--extra-inputs", f"min_tokens:{p.osl}",
        "--use-server-token-count",
        "--concurrency", str(concurrency), "--request-rate", f"{PACING_RATE:g}", "--arrival-pattern", "constant",
        "--request-count", str(requests),
        "--num-dataset-entries", str(requests + warmup),  # no prompt sent twice
        "--random-seed", str(p.seed_at(concurrency)),
        "--output-artifact-dir", str(artifacts),
        "--ui-type", "none", "--no-gpu-telemetry", "--no-server-metrics",
    ]  # fmt: skip
    if warmup:
        argv += ["--warmup-request-count", str(warmup)]
    return argv


def profiling_window_s(artifacts: Path) -> tuple[float, float] | None:
    """When the measured phase started and ended (epoch seconds), from aiperf's phase manifest."""
    try:
        phases = json.loads((artifacts / PHASES).read_text())["phases"]
    except (FileNotFoundError, KeyError, ValueError):
        return None
    measured = [p for p in phases if p.get("phase_kind") == "profiling"]
    return (measured[0]["start_ns"] / 1e9, measured[0]["end_ns"] / 1e9) if measured else None


def read_export(artifacts: Path, *, concurrency: int, gpus: int) -> tuple[ServingPoint, int, float]:
    """The run's figures under the simulation's names, its failed requests, and its request rate."""
    path = artifacts / EXPORT
    try:
        export = json.loads(path.read_text())
    except FileNotFoundError:
        tail = "\n".join((artifacts / LOG).read_text(errors="replace").splitlines()[-25:])
        raise UserError(f"aiperf wrote no results ({path} is missing); its output ends:\n{tail}") from None
    failed = sum(int(e.get("count", 0)) for e in export.get("error_summary") or [])

    def metric(name: str, stat: str = "avg") -> float:
        try:
            return float(export[name][stat])
        except (KeyError, TypeError):
            raise UserError(
                f"aiperf measured no '{name}' ({failed} request(s) failed: {_errors(export)}); "
                f"its output is in {artifacts / LOG}"
            ) from None

    output_tok_s = metric("output_token_throughput")
    point = ServingPoint(
        concurrency=concurrency,
        requests=int(metric("request_count")),
        gpus=gpus,
        tok_s_user=metric("output_token_throughput_per_user"),
        tok_s_user_tpot=1e3 / metric("inter_token_latency"),
        tok_s_user_e2e=metric("e2e_output_token_throughput"),
        tok_s_gpu=output_tok_s / gpus,
        total_tok_s_gpu=metric("total_token_throughput") / gpus,
        output_tok_s=output_tok_s,
        ttft_mean_ms=metric("time_to_first_token"),
        ttft_p50_ms=metric("time_to_first_token", "p50"),
        ttft_p99_ms=metric("time_to_first_token", "p99"),
        itl_p50_ms=metric("inter_token_latency", "p50"),
        itl_p99_ms=metric("inter_token_latency", "p99"),
    )
    return point, failed, metric("request_throughput")


def _errors(export: dict) -> str:
    summary = export.get("error_summary") or []
    return (
        "; ".join(f"{e.get('count')} x {json.dumps(e.get('error_details'))[:200]}" for e in summary) or "none reported"
    )
