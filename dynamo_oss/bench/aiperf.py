"""aiperf, the load generator (NVIDIA's benchmark client, PyPI `aiperf`): one run's command line,
and its figures read back from its own export.

aiperf measures every figure; this module only asks it for a closed loop of streaming chat
requests of exact lengths (or for a multi-turn trace's conversations, `trace_command`), runs it
(`run`) and reads `profile_export_aiperf.json`, whose metrics are `{unit, avg, p1..p99, min, max,
std}`, or its per-request `profile_export.jsonl` (`request_records`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel, Field

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
# aiperf then names each conversation's session in X-Dynamo-Session-ID (its stable correlation id), the
# header Dynamo's frontend keeps a session on one worker by (--router-session-affinity-ttl-secs).
DYNAMO_SESSIONS_ENV = "AIPERF_HTTP_X_DYNAMO_SESSION_ID_FROM_CORRELATION_ID"
PER_REQUEST = "profile_export.jsonl"
STOP_TIMEOUT_S = 15.0


def environment(artifacts: Path, dynamo_sessions: bool = False) -> dict[str, str]:
    """The environment of an aiperf run: its dataset's memory-mapped files in the run's own folder,
    where aiperf's default, the system temp folder, kept one folder per run for good; with
    `dynamo_sessions`, every request of a conversation names its session as Dynamo's frontend reads it."""
    env = {**os.environ, MMAP_BASE_ENV: str(artifacts)}
    if dynamo_sessions:
        env[DYNAMO_SESSIONS_ENV] = "true"
    return env


def run(argv: list[str], artifacts: Path, env: dict[str, str]) -> int:
    """Run aiperf to the end, its output in the run's log; whatever stops the caller (Ctrl-C included)
    stops aiperf's processes too. Its exit status."""
    artifacts.mkdir(parents=True, exist_ok=True)
    with (artifacts / LOG).open("w") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        try:
            return process.wait()
        finally:
            _stop(process)


def _stop(process: subprocess.Popen) -> None:
    """aiperf runs many processes in its session: interrupt them all, then kill whatever is left."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def streaming_chat(base_url: str, model: str, tokenizer: str) -> list[str]:
    """What every aiperf run here begins with: `aiperf profile` of streaming chat with `model` at `base_url`."""
    argv = [sys.executable, "-m", "aiperf", "profile", "--url", base_url, "--endpoint-type", "chat", "--streaming"]
    return argv + ["--model", model, "--tokenizer", tokenizer]


def exported_to(artifacts: Path) -> list[str]:
    """What every aiperf run here ends with: its exports in `artifacts`, no console UI and no telemetry."""
    return ["--output-artifact-dir", str(artifacts), "--ui-type", "none", "--no-gpu-telemetry", "--no-server-metrics"]


def command(base_url: str, parameters: SweepParameters, concurrency: int, artifacts: Path) -> list[str]:
    """`aiperf profile` for one run. Lengths are exact: aiperf sends max_completion_tokens = OSL, and
    ignore_eos with min_tokens = OSL keeps a model from stopping early; token counts come from the
    server's usage, not from re-tokenizing the streamed text."""
    requests, warmup = parameters.requests_at(concurrency), parameters.warmup_at(concurrency)
    p = parameters
    argv = [
        *streaming_chat(base_url, p.model, p.tokenizer),
        "--synthetic-input-tokens-mean",
        str(p.isl),
        "--synthetic-input-tokens-stddev",
        "0",
        "--output-tokens-mean",
        str(p.osl),
        "--output-tokens-stddev",
        "0",
        "--extra-inputs",
        "ignore_eos:true",
        "--extra-inputs",
        f"min_tokens:{p.osl}",
        "--use-server-token-count",
        "--concurrency",
        str(concurrency),
        "--request-rate",
        f"{PACING_RATE:g}",
        "--arrival-pattern",
        "constant",
        "--request-count",
        str(requests),
        "--num-dataset-entries",
        str(requests + warmup),  # no prompt sent twice
        "--random-seed",
        str(p.seed_at(concurrency)),
        *exported_to(artifacts),
    ]
    if warmup:
        argv += ["--warmup-request-count", str(warmup)]
    return argv


def trace_command(
    base_url: str, *, model: str, tokenizer: str, trace: Path, lanes: int, sessions: int, artifacts: Path
) -> list[str]:
    """`aiperf profile` sending a multi-turn trace (aiperf's `mooncake_trace` rows: `session_id`, `text_input`,
    `output_length`, `delay` in ms) as streaming chat: each conversation's turns in order, each once the
    one before has finished and its delay has passed, with the conversation so far (its earlier turns and
    the answers the server gave) sent again in front of it; `lanes` conversations in flight, each holding
    its place while it waits, `sessions` of them in all (the trace's, in order, each once: the run ends
    when the last has ended). Output lengths are exact (ignore_eos), token counts the server's."""
    argv = [
        *streaming_chat(base_url, model, tokenizer),
        "--input-file",
        str(trace),
        "--custom-dataset-type",
        "mooncake_trace",
        "--extra-inputs",
        "ignore_eos:true",
        "--use-server-token-count",
        "--concurrency",
        str(lanes),
        "--request-rate",
        f"{PACING_RATE:g}",
        "--arrival-pattern",
        "constant",
        "--num-sessions",
        str(sessions),
        *exported_to(artifacts),
    ]
    return argv


class TracedRequest(BaseModel):
    """One request of a trace as aiperf timed it (profile_export.jsonl), token counts the server's usage."""

    conversation: str = Field(description="the trace's session_id")
    turn: int = Field(ge=0)
    start_ms: float = Field(description="when aiperf sent it, epoch milliseconds")
    ttft_ms: float | None
    e2e_ms: float | None
    input_tokens: int | None
    cached_tokens: int | None = Field(description="usage.prompt_tokens_details.cached_tokens")
    output_tokens: int | None
    error: str | None = None


def request_records(artifacts: Path) -> list[TracedRequest]:
    """Every request of the run, in aiperf's order."""
    records = []
    for line in (artifacts / PER_REQUEST).read_text().splitlines():
        row = json.loads(line)
        meta, values = row["metadata"], {key: m.get("value") for key, m in (row.get("metrics") or {}).items()}
        error = row.get("error")
        records.append(
            TracedRequest(
                conversation=meta["conversation_id"],
                turn=meta["turn_index"],
                start_ms=meta["request_start_ns"] / 1e6,
                ttft_ms=values.get("time_to_first_token"),
                e2e_ms=values.get("request_latency"),
                input_tokens=values.get("usage_prompt_tokens"),
                cached_tokens=values.get("usage_prompt_cache_read_tokens"),
                output_tokens=values.get("output_sequence_length"),
                error=json.dumps(error)[:500] if error else None,
            )
        )
    return records


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
