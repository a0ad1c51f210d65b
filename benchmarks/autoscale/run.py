"""Autoscaling against fixed pools on a bursty trace: the share of requests within the TTFT and ITL
targets with Dynamo's planner sizing the decode pool, against decode pools fixed at 1 and at 2
workers, all on the same trace. (On the committed trace the planner averaged 2.2 decode workers: about the
GPUs of the fixed pair.)

The graph is graph.yaml beside this file: gpt-oss-20b disaggregated on the mocker (H200 model),
one prefill worker, decode autoscaled between 1 and 3 workers, run 10x slower than modelled
(`--mocker-time-scale 10`) so this 2-core machine keeps up. Targets, in that slowed time:
TTFT 3 s and ITL 120 ms (the graph's planner section). The trace (trace.jsonl, written here,
seeded) is open-loop Poisson arrivals: quiet, burst, quiet, burst, quiet. aiperf replays it
(`--fixed-schedule`) and measures every request; TTFT and ITL are aiperf's per-request figures
(ITL: (request latency - TTFT) / (output tokens - 1)). GPUs are counted every half second from the
launcher's state (workers serving or draining). Writes results.md, results.json and timeline.png
beside this file; about 20 minutes here:

    uv run python benchmarks/autoscale/run.py
"""

from __future__ import annotations

import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import yaml  # noqa: E402

from dynamo_oss.bench.served import SERVE_LOG, served_graph, sweep_fields  # noqa: E402
from dynamo_oss.deployment.model import build_deployment  # noqa: E402
from dynamo_oss.graph.loader import load_graph  # noqa: E402
from dynamo_oss.launch.state import RunState  # noqa: E402

HERE = Path(__file__).parent
SLOW = 10.0
ISL, OSL = 256, 300
PHASES = [(45, 0.2), (75, 4.0), (45, 0.2), (75, 4.0), (45, 0.2)]  # (seconds, requests per second)
SEED = 7
SETUPS = {"planner (decode 1-3)": None, "fixed decode 1": 1, "fixed decode 2": 2}


def write_trace(path: Path) -> list[float]:
    """Poisson arrivals at each phase's rate; returns the arrival times in seconds."""
    rng, now, arrivals = random.Random(SEED), 0.0, []
    start = 0.0
    for seconds, rate in PHASES:
        now = start + rng.expovariate(rate)
        while now < start + seconds:
            arrivals.append(now)
            now += rng.expovariate(rate)
        start += seconds
    lines = [json.dumps({"timestamp": int(t * 1000), "input_length": ISL, "output_length": OSL}) for t in arrivals]
    path.write_text("\n".join(lines) + "\n")
    return arrivals


def graph_for(decode_workers: int | None, folder: Path) -> Path:
    graph = yaml.safe_load((HERE / "graph.yaml").read_text())
    if decode_workers is not None:
        graph["pools"]["decode"] = {"workers": decode_workers, "engine": "mocker"}
        graph.pop("planner")
    path = folder / "graph.yaml"
    path.write_text(yaml.safe_dump(graph))
    return path


class PoolWatch:
    """Samples the launcher's state file: GPUs held (workers serving or draining) and decode workers."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir, self.samples = run_dir, []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        while not self.stopping.wait(0.5):
            state = RunState.read(self.run_dir)
            decode = next(p for p in state.pools if p.role == "decode")
            gpus = sum(len(p.gpus) for p in state.processes if p.kind == "worker" and p.pid is not None)
            self.samples.append((time.time(), decode.live, decode.draining, gpus))


def run(name: str, decode_workers: int | None, trace: Path, work: Path) -> dict:
    folder = work / name.replace(" ", "-").replace("(", "").replace(")", "")
    folder.mkdir()
    graph = graph_for(decode_workers, folder)
    deployment = build_deployment(load_graph(graph), engine_override="mocker")
    print(f"[{name}] serving {graph}", flush=True)
    with served_graph(graph, folder / "run", engine="mocker", time_scale=SLOW) as state:
        watch = PoolWatch(folder / "run")
        watch.thread.start()
        artifacts = folder / "aiperf"
        argv = [
            sys.executable, "-m", "aiperf", "profile",
            "--url", state.endpoint.removesuffix("/v1"), "--endpoint-type", "chat", "--streaming",
            "--model", state.served_name, "--tokenizer", str(sweep_fields(deployment)["tokenizer"]),
            "--input-file", str(trace), "--custom-dataset-type", "mooncake_trace", "--fixed-schedule",
            "--extra-inputs", "ignore_eos:true", "--extra-inputs", f"min_tokens:{OSL}",
            "--use-server-token-count", "--random-seed", str(SEED),
            "--output-artifact-dir", str(artifacts), "--ui-type", "none", "--no-gpu-telemetry", "--no-server-metrics",
        ]  # fmt: skip
        print(f"[{name}] replaying {trace.name} with aiperf", flush=True)
        with (folder / "aiperf.log").open("w") as log:
            subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, check=True)
        watch.stopping.set()
        watch.thread.join()
    decisions = [line for line in (folder / SERVE_LOG).read_text().splitlines() if "planner decision" in line]
    records = read_records(artifacts / "profile_export.jsonl")
    result = summarize(name, records, watch.samples)
    result["decisions"] = decisions
    print(f"[{name}] {result['requests']} requests, {result['failed']} failed, within both targets "
          f"{result['within_both']:.0%}, mean GPUs {result['mean_gpus']:.2f}", flush=True)  # fmt: skip
    return result


def read_records(path: Path) -> list[dict]:
    rows = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        metrics = {key: value["value"] for key, value in (row.get("metrics") or {}).items()}
        rows.append({
            "start_s": row["metadata"]["request_start_ns"] / 1e9,
            "ttft_ms": metrics.get("time_to_first_token"),
            "itl_ms": metrics.get("inter_token_latency"),
            "failed": bool(row.get("error")),
        })  # fmt: skip
    return rows


def summarize(name: str, records: list[dict], samples: list[tuple]) -> dict:
    targets = yaml.safe_load((HERE / "graph.yaml").read_text())["planner"]
    ok = [r for r in records if not r["failed"] and r["ttft_ms"] is not None and r["itl_ms"] is not None]
    within_ttft = sum(r["ttft_ms"] <= targets["ttft_ms"] for r in ok)
    within_itl = sum(r["itl_ms"] <= targets["itl_ms"] for r in ok)
    within_both = sum(r["ttft_ms"] <= targets["ttft_ms"] and r["itl_ms"] <= targets["itl_ms"] for r in ok)
    ttfts, itls = sorted(r["ttft_ms"] for r in ok), sorted(r["itl_ms"] for r in ok)

    def pct(values: list[float], q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))]

    start = min(r["start_s"] for r in records)
    return {
        "setup": name,
        "requests": len(records),
        "failed": len(records) - len(ok),
        "within_ttft": within_ttft / len(records),
        "within_itl": within_itl / len(records),
        "within_both": within_both / len(records),
        "ttft_p50_ms": pct(ttfts, 0.5), "ttft_p99_ms": pct(ttfts, 0.99),
        "itl_p50_ms": pct(itls, 0.5), "itl_p99_ms": pct(itls, 0.99),
        "mean_gpus": statistics.fmean(s[3] for s in samples),
        "timeline": [(s[0] - start, s[1], s[2], s[3]) for s in samples if s[0] >= start],
        "records": [(r["start_s"] - start, r["ttft_ms"], r["itl_ms"]) for r in ok],
    }  # fmt: skip


def write_results(results: list[dict], arrivals: list[float]) -> None:
    targets = yaml.safe_load((HERE / "graph.yaml").read_text())["planner"]
    (HERE / "results.json").write_text(json.dumps(results, indent=1))
    rows = [
        "| setup | mean GPUs | requests | failed | within TTFT target | within ITL target | within both "
        "| TTFT p50 / p99 | ITL p50 / p99 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        rows.append(
            f"| {r['setup']} | {r['mean_gpus']:.2f} | {r['requests']} | {r['failed']} | {r['within_ttft']:.0%} "
            f"| {r['within_itl']:.0%} | {r['within_both']:.0%} | {r['ttft_p50_ms']:.0f} / {r['ttft_p99_ms']:.0f} ms "
            f"| {r['itl_p50_ms']:.0f} / {r['itl_p99_ms']:.0f} ms |"
        )
    planner = results[0]
    bounds = (50, 60, 70, 80, targets["itl_ms"])
    sensitivity = [
        "| setup | " + " | ".join(f"ITL <= {b:g} ms" for b in bounds) + " |",
        "|---|" + "---:|" * len(bounds),
        *[f"| {r['setup']} | " + " | ".join(f"{share_within(r, b):.0%}" for b in bounds) + " |" for r in results],
    ]
    text = [
        "# Autoscaling against fixed pools on a bursty trace", "",
        "Command: `uv run python benchmarks/autoscale/run.py` (about 20 minutes here). Graph: "
        "benchmarks/autoscale/graph.yaml, gpt-oss-20b disaggregated on Dynamo's mocker (H200 model), one prefill "
        f"worker, served {SLOW:g}x slower than modelled. Trace: {len(arrivals)} requests, ISL {ISL} / OSL {OSL}, "
        "Poisson arrivals in phases " + ", ".join(f"{s} s at {r:g}/s" for s, r in PHASES) + f" (seed {SEED}), "
        "replayed open-loop by aiperf 0.13 (`--fixed-schedule`).", "",
        f"Targets (in the slowed time): TTFT <= {targets['ttft_ms']:g} ms and ITL <= {targets['itl_ms']:g} ms. "
        "TTFT and ITL are aiperf's per-request figures (ITL = (request latency - TTFT) / (output tokens - 1)); a "
        "share counts the requests within a target among all requests sent. Mean GPUs: the GPUs of the workers "
        "running (serving or draining), sampled every 0.5 s from the launcher's state, averaged over the run.", "",
        *rows, "",
        "The same runs against other ITL targets (share of all requests sent):", "",
        *sensitivity, "",
        f"The planner's decisions ({len(planner['decisions'])}):", "",
        *[f"- `{line.strip()}`" for line in planner["decisions"]], "",
        "![pool sizes and latency over time](timeline.png)", "",
    ]  # fmt: skip
    (HERE / "results.md").write_text("\n".join(text))
    plot(results, arrivals, targets)


def share_within(result: dict, itl_ms: float) -> float:
    return sum(itl <= itl_ms for _, _, itl in result["records"]) / result["requests"]


def plot(results: list[dict], arrivals: list[float], targets: dict) -> None:
    figure, axes = plt.subplots(4, 1, figsize=(10, 11), sharex=True)
    bins = range(0, int(max(arrivals)) + 11, 10)
    axes[0].hist(arrivals, bins=bins, color="grey")
    axes[0].set_ylabel("requests sent\nper 10 s")
    for r in results:
        times = [t for t, *_ in r["timeline"]]
        axes[1].step(times, [s[3] for s in r["timeline"]], where="post", label=r["setup"])
        starts = [t for t, _, _ in r["records"]]
        axes[2].plot(starts, [ttft / 1000 for _, ttft, _ in r["records"]], ".", markersize=3, label=r["setup"])
        axes[3].plot(starts, [itl for _, _, itl in r["records"]], ".", markersize=3, label=r["setup"])
    axes[1].set_ylabel("GPUs held\n(workers)")
    axes[2].axhline(targets["ttft_ms"] / 1000, color="red", linewidth=0.8)
    axes[2].set_ylabel("TTFT (s)\nby request start")
    axes[2].set_yscale("log")
    axes[3].axhline(targets["itl_ms"], color="red", linewidth=0.8)
    axes[3].set_ylabel("ITL (ms)\nby request start")
    axes[3].set_xlabel("seconds into the trace (red: target)")
    axes[1].legend(loc="upper left", fontsize=8)
    figure.tight_layout()
    figure.savefig(HERE / "timeline.png", dpi=110)


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="autoscale-bench-"))
    print(f"logs and aiperf exports in {work}", flush=True)
    trace = work / "trace.jsonl"
    arrivals = write_trace(trace)
    shutil.copy(trace, HERE / "trace.jsonl")
    results = [run(name, workers, trace, work) for name, workers in SETUPS.items()]
    write_results(results, arrivals)
    print(f"wrote {HERE / 'results.md'}", flush=True)


if __name__ == "__main__":
    main()
