"""Batch work beside interactive traffic (issue 41, item 4): the autoscale benchmark's bursty interactive trace
on its sla-autoscaled graph, once alone and once with a batch of BATCH_LINES requests submitted through the Batch
API as the trace starts, to see what the batch costs the interactive requests, what it gets done, and the
GPU-hours it adds.

The graph, trace, targets and measurements are benchmarks/autoscale/run.py's (imported from it): gpt-oss-20b
disaggregated on Dynamo's mocker (H200 model), prefill and decode each autoscaled 1-4 by the sla planner, served
10x slower than modelled, targets TTFT 3 s and ITL 50 ms in that slowed time; aiperf replays the interactive
trace open-loop and measures every request (TTFT, and ITL = (latency - TTFT) / (output tokens - 1)). The batch
is BATCH_LINES chat requests of about BATCH_WORDS words (seeded) and exactly BATCH_OSL output tokens, uploaded
with the `openai` client and created just before the trace is replayed; its progress is read from
GET /v1/batches/{id} every 2 s, and the gateway's pacing window (dynamo_oss_gateway_batch_window) from its
metrics. When the trace ends the batch is cancelled, if it has not ended, and what it finished is counted.

    uv run python benchmarks/batch_beside/run.py

takes about 50 minutes here; `--minutes 10` squeezes the trace (as the autoscale benchmark's flag does) and
`--lines N` sizes the batch. Writes results.md, results.json and timeline.png beside this file.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import openai  # noqa: E402

HERE = Path(__file__).parent
_spec = importlib.util.spec_from_file_location("autoscale_bench", HERE.parent / "autoscale" / "run.py")
assert _spec is not None and _spec.loader is not None
autoscale = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(autoscale)

from dynamo_oss.bench.host_load import CpuSampler  # noqa: E402
from dynamo_oss.bench.served import SERVE_LOG, served_graph  # noqa: E402
from dynamo_oss.deployment.model import build_deployment  # noqa: E402
from dynamo_oss.graph.loader import load_graph  # noqa: E402

BATCH_LINES, BATCH_WORDS, BATCH_OSL = 4000, 700, 128
BATCH_SEED = 11
MODEL = "openai/gpt-oss-20b"
POLL_S = 2.0
WORDS = "ledger invoice settled quarterly review shipment customer account balance audit region forecast".split()


def batch_file(lines: int) -> bytes:
    """`lines` chat requests of BATCH_WORDS seeded words and exactly BATCH_OSL output tokens."""
    rng = random.Random(BATCH_SEED)
    rows = []
    for n in range(lines):
        prompt = " ".join(rng.choice(WORDS) for _ in range(BATCH_WORDS))
        messages = [{"role": "user", "content": f"{n}: {prompt}"}]
        body = {
            "model": MODEL,
            "messages": messages,
            "max_tokens": BATCH_OSL,
            "ignore_eos": True,
            "min_tokens": BATCH_OSL,
        }
        rows.append({"custom_id": f"line-{n}", "method": "POST", "url": "/v1/chat/completions", "body": body})
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


class BatchWatch:
    """Polls the batch's request counts and the gateway's pacing window every POLL_S."""

    def __init__(self, client: openai.OpenAI, batch_id: str, metrics_url: str) -> None:
        self.client, self.batch_id, self.metrics_url = client, batch_id, metrics_url
        self.samples: list[dict] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)  # an interrupted run exits, not waits for it

    def _run(self) -> None:
        while True:
            batch = self.client.batches.retrieve(self.batch_id)
            counts = batch.request_counts
            done, failed = (counts.completed, counts.failed) if counts else (0, 0)
            self.samples.append(
                {"t": time.time(), "status": batch.status, "done": done, "failed": failed, "window": self._window()}
            )
            if self.stopping.wait(POLL_S):
                return

    def _window(self) -> float | None:
        try:
            text = urllib.request.urlopen(self.metrics_url, timeout=5).read().decode()
        except OSError:
            return None
        window = [line for line in text.splitlines() if line.startswith("dynamo_oss_gateway_batch_window")]
        values = [float(line.rsplit(" ", 1)[1]) for line in window]
        return sum(values) if values else None


def run(with_batch: bool, trace: Path, work: Path, lines: int) -> dict:
    """The sla graph served, the trace replayed on it (beside a batch when `with_batch`), and its figures."""
    name = "sla + batch" if with_batch else "sla"
    folder = work / ("with-batch" if with_batch else "alone")
    folder.mkdir()
    graph = autoscale.graph_for("sla", folder)
    deployment = build_deployment(load_graph(graph), engine_override="mocker")
    print(f"[{name}] serving {graph}", flush=True)
    batch, watch = None, None
    before, started = os.times(), time.time()
    with CpuSampler() as cpu, served_graph(graph, folder / "run", engine="mocker", time_scale=autoscale.SLOW) as state:
        autoscale.warm_up(state)
        autoscale.settle(state, deployment, folder / "run")
        if with_batch:
            client = openai.OpenAI(base_url=state.endpoint, api_key="none", max_retries=3, timeout=120)
            uploaded = client.files.create(file=("batch.jsonl", batch_file(lines)), purpose="batch")
            batch = client.batches.create(
                input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
            )
            metrics = f"http://127.0.0.1:{deployment.observability.gateway_port}/metrics"  # type: ignore[union-attr]
            watch = BatchWatch(client, batch.id, metrics)
            watch.thread.start()
            print(f"[{name}] batch {batch.id} of {lines} requests created", flush=True)
        pools = autoscale.PoolWatch(folder / "run")
        pools.thread.start()
        print(f"[{name}] replaying {trace.name} with aiperf", flush=True)
        records = autoscale.replay(state, deployment, trace, folder / "aiperf", autoscale.SEED)
        pools.stopping.set()
        pools.thread.join()
        result = {"setup": name, **autoscale.summarize(records, pools.samples)}
        if batch is not None and watch is not None:
            watch.stopping.set()
            watch.thread.join()
            result["batch"] = batch_figures(client, batch.id, watch.samples, records, lines)
    stopped, after = time.time(), os.times()
    # The graph and aiperf are this process's children, reaped by the time the graph has stopped.
    ours = after.children_user + after.children_system - before.children_user - before.children_system
    busy = (cpu.busy_between(started, stopped) or 0.0) * autoscale.CORES
    result["cores_busy"], result["cores_outside"] = busy, busy - ours / (stopped - started)
    decisions = [line for line in (folder / SERVE_LOG).read_text().splitlines() if "planner decision" in line]
    result["resizes"] = sum("->" in line for line in decisions)
    done = f", batch {result['batch']['done']} done" if "batch" in result else ""
    print(f"[{name}] within both {result['within_both']:.1%}, {result['gpu_hours']:.3f} GPU-hours{done}", flush=True)
    return result


def batch_figures(client: openai.OpenAI, batch_id: str, samples: list[dict], records: list[dict], lines: int) -> dict:
    """What the batch finished while the trace ran (from its first interactive request to its last), then its end."""
    start, end = min(r["start_s"] for r in records), max(r["end_s"] for r in records)
    during = [s for s in samples if start <= s["t"] <= end] or samples[-1:]
    done_at_end = during[-1]["done"]
    finished = client.batches.retrieve(batch_id)
    if finished.status not in ("completed", "failed", "expired", "cancelled"):
        client.batches.cancel(batch_id)
        finished = ended_after_cancel(client, batch_id)
    usage = finished.usage
    ended_at = finished.completed_at or finished.cancelled_at or time.time()
    output_tokens = usage.output_tokens if usage else 0
    return {
        "lines": lines,
        "done": done_at_end,
        "failed": during[-1]["failed"],
        "status_at_trace_end": during[-1]["status"],
        "final_status": finished.status,
        "requests_per_s": done_at_end / (end - start),
        "output_tokens": output_tokens,
        "output_tokens_per_s": output_tokens / max(1.0, ended_at - start),
        "timeline": [(s["t"] - start, s["done"], s["window"]) for s in samples],
    }


def ended_after_cancel(client: openai.OpenAI, batch_id: str, timeout_s: float = 120) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        batch = client.batches.retrieve(batch_id)
        if batch.status in ("completed", "failed", "expired", "cancelled"):
            return batch
        time.sleep(POLL_S)  # a client's poll of its batch, as the Batch API is used
    raise TimeoutError(f"batch {batch_id} did not end within {timeout_s} s of its cancel")


def provenance(started: float) -> str:
    """When and on which code the run was made."""
    code = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE).stdout
    return f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))} at code {code.strip() or 'unknown'}."


def write_results(results: list[dict], command: str, ran: str, out: Path, lines: int, phases: list) -> None:
    ttft, itl = autoscale.targets()
    alone, beside = results
    batch = beside["batch"]
    kept = [{key: value for key, value in r.items() if key != "records"} for r in results]
    summary = {"command": command, "ran": ran, "phases": phases, "results": kept}
    (out / "results.json").write_text(json.dumps(summary, indent=1))
    rows = [
        "| setup | interactive within both targets | TTFT p50 / p99 | ITL p50 / p99 | worker-GPU-hours | mean GPUs "
        "| resizes | batch requests done during the trace | batch requests/s | failed | cores busy (outside) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        b = r.get("batch")
        done = f"{b['done']} of {lines}" if b else "-"
        rate = f"{b['requests_per_s']:.2f}" if b else "-"
        rows.append(
            f"| {r['setup']} | {r['within_both']:.1%} | {r['ttft_p50_ms']:.0f} / {r['ttft_p99_ms']:.0f} ms "
            f"| {r['itl_p50_ms']:.1f} / {r['itl_p99_ms']:.1f} ms | {r['gpu_hours']:.3f} | {r['mean_gpus']:.2f} "
            f"| {r['resizes']} | {done} | {rate} | {r['failed']} | {r['cores_busy']:.2f} ({r['cores_outside']:.2f}) |"
        )
    added = beside["gpu_hours"] / alone["gpu_hours"] - 1
    drop = alone["within_both"] - beside["within_both"]
    text = [
        "# Batch work beside interactive traffic",
        "",
        f"Command: `{command}`. The autoscale benchmark's graph and bursty trace (benchmarks/autoscale: gpt-oss-20b "
        f"disaggregated on Dynamo's mocker, H200 model, both pools autoscaled 1-4 by the sla planner, served "
        f"{autoscale.SLOW:g}x slower than modelled; every time and GPU-hour is in that slowed time), alone and with "
        f"a batch of {lines} chat requests (about {BATCH_WORDS} words in, exactly {BATCH_OSL} tokens out) created "
        "through the Batch API as the trace starts. Targets: TTFT <= "
        f"{ttft:g} ms and ITL <= {itl:g} ms for each interactive request (aiperf's per-request TTFT, and ITL = "
        "(latency - TTFT) / (output tokens - 1)); the planner's targets are what the gateway paces batch requests "
        f"by. {ran}",
        "",
        *rows,
        "",
        f"- Interactive requests within both targets: {alone['within_both']:.1%} alone, {beside['within_both']:.1%} "
        f"beside the batch ({drop * 100:+.1f} points{' lost' if drop > 0 else ''}).",
        f"- Worker-GPU-hours: {alone['gpu_hours']:.3f} alone, {beside['gpu_hours']:.3f} beside the batch "
        f"({added:+.0%}): the planner sizes the pools for the interactive traffic, with the batch's requests taken "
        "off what it observes (dynamo_oss/planner/batch_work.py).",
        f"- The batch finished {batch['done']} of its {lines} requests during the trace ({batch['requests_per_s']:.2f} "
        f"requests/s, {batch['output_tokens']} output tokens by its end, status {batch['status_at_trace_end']} when "
        f"the trace ended, then {batch['final_status']}).",
        "",
        f"Cores busy: of this machine's {autoscale.CORES}, from starting the graph to stopping it (/proc/stat), and in "
        "brackets what processes outside the benchmark (neither the graph nor aiperf) used of them: above about 0.1, "
        "the two runs shared the machine with other work and compare less well.",
        "",
        "![pools, batch progress and the pacing window](timeline.png)",
        "",
    ]
    (out / "results.md").write_text("\n".join(text))
    plot(results, out)


def plot(results: list[dict], out: Path) -> None:
    figure, axes = plt.subplots(3, 1, figsize=(12, 9), sharex=True)
    for r, style in zip(results, ("-", "--"), strict=True):
        times = [t for t, _, _ in r["timeline"]]
        axes[0].step(times, [gpus for _, _, gpus in r["timeline"]], where="post", linestyle=style, label=r["setup"])
    axes[0].set_ylabel("GPUs held by workers")
    axes[0].legend()
    batch = results[1]["batch"]
    axes[1].plot([t for t, _, _ in batch["timeline"]], [done for _, done, _ in batch["timeline"]])
    axes[1].set_ylabel("batch requests done")
    axes[2].step([t for t, _, _ in batch["timeline"]], [w or 0 for _, _, w in batch["timeline"]], where="post")
    axes[2].set_ylabel("pacing window\n(batch requests at once)")
    axes[2].set_xlabel("seconds into the trace (slowed time)")
    figure.tight_layout()
    figure.savefig(out / "timeline.png", dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, help="squeeze the trace into this many (slowed) minutes")
    parser.add_argument("--lines", type=int, default=BATCH_LINES, help="requests in the batch")
    parser.add_argument("--out", type=Path, default=HERE, help="where results.md, results.json and the plot go")
    args = parser.parse_args()
    started = time.time()
    work = Path(tempfile.mkdtemp(prefix="batch-beside-"))
    print(f"logs and aiperf exports in {work}", flush=True)
    phases = autoscale.phases_for(args.minutes)
    trace = autoscale.write_trace(work / "trace.jsonl", autoscale.arrivals_for(phases))
    results = [run(with_batch, trace, work, args.lines) for with_batch in (False, True)]
    given = [("--minutes", args.minutes), ("--lines", args.lines if args.lines != BATCH_LINES else None)]
    flags = "".join(f" {flag} {value:g}" for flag, value in given if value is not None)
    args.out.mkdir(parents=True, exist_ok=True)
    command = f"uv run python benchmarks/batch_beside/run.py{flags}"
    write_results(results, command, provenance(started), args.out, args.lines, phases)
    print(f"wrote {args.out / 'results.md'}", flush=True)


if __name__ == "__main__":
    main()
