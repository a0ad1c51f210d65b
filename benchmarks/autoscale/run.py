"""Autoscaling on a bursty trace (issue 24, item 5): pools fixed at the sizes the peak needs, against
both pools autoscaled by Dynamo's planner on load (queue and KV thresholds) and by the SLA planner
(sized from the project's performance model for the TTFT and ITL targets), on one seeded trace.

The graph is graph.yaml beside this file: gpt-oss-20b disaggregated on Dynamo's mocker (H200 model),
prefill and decode each autoscaled between 1 and 4 single-GPU workers, run 10x slower than modelled
(`--mocker-time-scale 10`) so this 2-core machine keeps up. Targets, and every time and rate below,
are in that slowed time: TTFT 3 s and ITL 50 ms (the graph's planner section). The fixed setup runs
both pools at 4 workers, the autoscale maximum.

Capacity (100%) is CAPACITY_RPS, a rate the fixed pools served with >= 99% of requests within both
targets in steady Poisson probes on this machine during development; the run probes the fixed pools
again before their trace, and reports the rate the performance model (Dynamo's offline replay of the
same mocker profiles) gives. The trace (trace.jsonl, written here, seeded) is open-loop Poisson arrivals in
phases of that capacity: 10%, rising steps to 100%, back down, a 60 s spike at 115%, and back to
10%, each step lasting two minutes or more. aiperf replays it (`--fixed-schedule`) and measures
every request: TTFT and ITL are its per-request figures (ITL = (request latency - TTFT) /
(output tokens - 1)). Pool sizes and the GPUs held by workers (serving or draining) are read from
the launcher's state every half second. Every listener of every graph gets a port free at the time.
Writes results.md, results.json, trace.jsonl and timeline.png beside this file; about 70 minutes
here:

    uv run python benchmarks/autoscale/run.py

While developing: `--setups fixed,load` runs some setups only, `--minutes 4` squeezes the trace into
4 minutes (`--minutes 10` is the one-minute steps of the runs before), `--probe-seconds 0` skips
the probes and `--out DIR` writes the results elsewhere.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import yaml  # noqa: E402

from dynamo_oss.bench import aiperf  # noqa: E402
from dynamo_oss.bench.host_load import CpuSampler  # noqa: E402
from dynamo_oss.bench.served import SERVE_LOG, served_graph, sweep_fields  # noqa: E402
from dynamo_oss.deployment.model import Deployment, build_deployment  # noqa: E402
from dynamo_oss.engines.mocker import replay_engine_args  # noqa: E402
from dynamo_oss.graph.loader import load_graph  # noqa: E402
from dynamo_oss.bench.ports import on_free_ports  # noqa: E402
from dynamo_oss.launch.state import RunState  # noqa: E402
from dynamo_oss.perf.costs import CostModel, fitted_factors, kv_handoff_ms  # noqa: E402
from dynamo_oss.perf.graphs import layout_from_deployment  # noqa: E402
from dynamo_oss.perf.profiles import simulated_timing  # noqa: E402
from dynamo_oss.planner.settings import sizing_spec, traffic_window_s  # noqa: E402
from dynamo_oss.planner.sizing import Load, Sizer  # noqa: E402

HERE = Path(__file__).parent
SLOW = 10.0
ISL, OSL = 4096, 128
SEED = 7
CAPACITY_RPS = 4.5  # slowed requests/s; see the module's docstring and results.md
# (seconds, share of capacity): the spike is the phase above 1.
PHASES = [
    (120, 0.10),
    (120, 0.25),
    (120, 0.50),
    (120, 0.75),
    (180, 1.00),
    (120, 0.50),
    (60, 1.15),
    (120, 0.25),
    (240, 0.10),
]
PROBES = (0.9, 1.0, 1.15)  # shares of capacity the fixed pools are probed at, steady
CAPACITY_SHARE = 0.99  # within both targets at the capacity
WINDOW_S, RECOVERED = 10.0, 0.95  # recovery: a rolling window of finished requests this much within both
SETUPS = {"fixed (peak)": "fixed", "load": "load", "sla": "sla"}
CORES = os.cpu_count() or 1


def base_graph() -> dict:
    return yaml.safe_load((HERE / "graph.yaml").read_text())


def targets() -> tuple[float, float]:
    planner = base_graph()["planner"]
    return planner["ttft_ms"], planner["itl_ms"]


def peak_sizes() -> dict[str, int]:
    return {role: pool["autoscale"]["max"] for role, pool in base_graph()["pools"].items()}


# ---- graphs ------------------------------------------------------------------------------------


def graph_for(setup: str, folder: Path) -> Path:
    """graph.yaml for `setup` on free ports: fixed pools at their autoscale maximum without a planner,
    or both pools autoscaled with the planner in that mode."""
    graph = on_free_ports(base_graph())
    pools = graph["pools"]
    if setup == "fixed":
        for pool in pools.values():
            pool["workers"] = pool.pop("autoscale")["max"]
        graph.pop("planner")
    else:
        graph["planner"]["mode"] = setup
    path = folder / "graph.yaml"
    path.write_text(yaml.safe_dump(graph, sort_keys=False))
    return path


def foresight_gpu_hours(phases: list[tuple[float, float]], folder: Path) -> float:
    """GPU-hours of the sizes the performance model gives each phase's rate (the sla mode's sizing,
    without its headroom), known in advance and held exactly for the phase: a planner with perfect
    foresight, no reaction time and instant start-up."""
    sizer = Sizer(sizing_spec(build_deployment(load_graph(graph_for("sla", folder))), SLOW))
    held = 0.0
    for seconds, share in phases:
        sizes = sizer.size(Load(requests_per_s=CAPACITY_RPS * share, isl=ISL, osl=OSL)).workers
        held += seconds * sum(sizes.values())  # one GPU a worker
    return held / 3600


# ---- the trace -----------------------------------------------------------------------------------


def phases_for(minutes: float | None) -> list[tuple[float, float]]:
    """PHASES, or the same shape squeezed into `minutes`."""
    stretch = 1.0 if minutes is None else minutes * 60 / sum(s for s, _ in PHASES)
    return [(s * stretch, share) for s, share in PHASES]


def arrivals_for(phases: list[tuple[float, float]], seed: int = SEED) -> list[float]:
    """Poisson arrivals at each phase's share of CAPACITY_RPS, in seconds from the start."""
    rng, start, arrivals = random.Random(seed), 0.0, []
    for seconds, share in phases:
        now = start + rng.expovariate(share * CAPACITY_RPS)
        while now < start + seconds:
            arrivals.append(now)
            now += rng.expovariate(share * CAPACITY_RPS)
        start += seconds
    return arrivals


def write_trace(path: Path, arrivals: list[float]) -> Path:
    rows = [{"timestamp": round(t * 1000), "input_length": ISL, "output_length": OSL} for t in arrivals]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


# ---- capacity, in the performance model ----------------------------------------------------------


def replay_within(peak_graph: Path, rate: float, requests: int = 1500) -> float:
    """Share of requests within both targets when the graph's pools take Poisson arrivals at `rate`
    (slowed requests per second), in Dynamo's offline replay of the profiles `dynamo serve` runs."""
    from dynamo.replay import run_synthetic_trace_replay

    layout = layout_from_deployment(build_deployment(load_graph(peak_graph), engine_override="mocker"))
    args: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="autoscale-capacity-") as tmp:
        for role, pool in layout.pools.items():
            timing = simulated_timing(layout, role, Path(tmp) / f"{role}.npz")
            timing.profile.write()
            args[f"{role}_engine_args"] = replay_engine_args(timing, role, pool.tp)
            args[f"num_{role}_workers"] = pool.workers
        report = run_synthetic_trace_replay(
            ISL,
            OSL,
            requests,
            request_rate=rate * SLOW,
            arrival_seed=SEED,
            router_mode="kv_router",
            capture_per_request=True,
            **args,
        )
    ttft, itl = (target / SLOW for target in targets())
    return statistics.fmean(r["ttft_ms"] <= ttft and r["itl_ms"] <= itl for r in report.per_request)


def model_capacity(peak_graph: Path) -> float:
    """The highest rate, in steps of 0.1 slowed request/s, at which the replay keeps CAPACITY_SHARE
    (up in steps of 1, then of 0.1). The replay logs every request at info: it runs at warn, which the
    graphs served later do not inherit."""
    rate, level = 0.0, os.environ.get("DYN_LOG")
    os.environ["DYN_LOG"] = "warn"
    try:
        for step in (1.0, 0.1):
            while replay_within(peak_graph, rate + step) >= CAPACITY_SHARE:
                rate = round(rate + step, 1)
    finally:
        os.environ.pop("DYN_LOG") if level is None else os.environ.update(DYN_LOG=level)
    return rate


# ---- serving ---------------------------------------------------------------------------------------


def warm_up(state: RunState) -> None:
    """Eight short requests at once before any measured one, so that no first request to a worker
    (connections and caches set up once) is measured."""
    body = json.dumps(
        {"model": state.served_name, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}
    ).encode()
    request = urllib.request.Request(f"{state.endpoint}/chat/completions", body, {"Content-Type": "application/json"})
    threads = [threading.Thread(target=lambda: urllib.request.urlopen(request, timeout=120).read()) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def settle(state: RunState, deployment: Deployment, run_dir: Path, timeout_s: float = 300) -> None:
    """Wait until the warm-up has left the planner's view: every autoscaled pool back at its minimum, and
    held there for a traffic window and a look, so the trace starts from the smallest pools (as after a
    quiet night) whichever planner runs, and no planner sizes for the warm-up's eight requests."""
    planner = deployment.planner
    assert planner is not None
    quiet_s = traffic_window_s(deployment) + planner.interval_s
    smallest = {pool.role: pool.autoscale.min for pool in deployment.pools if pool.autoscale}
    deadline, since = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        pools = {p.role: (p.live, p.draining) for p in RunState.read(run_dir).pools}
        at_min = all(pools.get(role) == (count, 0) for role, count in smallest.items())
        since = (since or time.monotonic()) if at_min else None
        if since is not None and time.monotonic() - since >= quiet_s:
            return
        time.sleep(0.5)
    raise TimeoutError(
        f"the pools of {state.endpoint} were not back at {smallest} for {quiet_s} s within {timeout_s} s"
    )


def replay(state: RunState, deployment: Deployment, trace: Path, artifacts: Path, seed: int) -> list[dict]:
    """aiperf sends `trace` open-loop and times every request; its per-request records."""
    tokenizer = str(sweep_fields(deployment)["tokenizer"])
    argv = [
        *aiperf.streaming_chat(state.endpoint.removesuffix("/v1"), state.served_name, tokenizer),
        "--input-file",
        str(trace),
        "--custom-dataset-type",
        "mooncake_trace",
        "--fixed-schedule",
        "--extra-inputs",
        "ignore_eos:true",
        "--extra-inputs",
        f"min_tokens:{OSL}",
        "--use-server-token-count",
        "--random-seed",
        str(seed),  # the seed makes the prompts: none repeats
        *aiperf.exported_to(artifacts),
    ]
    if aiperf.run(argv, artifacts, aiperf.environment(artifacts)):
        raise RuntimeError(f"aiperf failed on the trace; see {artifacts / aiperf.LOG}")
    return read_records(artifacts / "profile_export.jsonl")


def read_records(path: Path) -> list[dict]:
    ttft_target, itl_target = targets()
    rows = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        metrics = {key: value["value"] for key, value in (row.get("metrics") or {}).items()}
        failed = bool(row.get("error")) or metrics.get("inter_token_latency") is None
        rows.append(
            {
                "start_s": row["metadata"]["request_start_ns"] / 1e9,
                "end_s": row["metadata"]["request_end_ns"] / 1e9,
                "ttft_ms": metrics.get("time_to_first_token"),
                "itl_ms": metrics.get("inter_token_latency"),
                "failed": failed,
                "ok": not failed
                and metrics["time_to_first_token"] <= ttft_target
                and metrics["inter_token_latency"] <= itl_target,
            }
        )
    return rows


class PoolWatch:
    """Samples the launcher's state file: live and draining workers per pool, and GPUs held by workers."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir, self.samples = run_dir, []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)  # an interrupted run exits, not waits for it

    def _run(self) -> None:
        while True:
            state = RunState.read(self.run_dir)
            pools = {p.role: (p.live, p.draining) for p in state.pools}
            gpus = sum(len(p.gpus) for p in state.processes if p.kind == "worker" and p.pid is not None)
            self.samples.append({"t": time.time(), "pools": pools, "gpus": gpus})
            if self.stopping.wait(0.5):
                return


def run(name: str, setup: str, trace: Path, work: Path, probe_s: float) -> dict:
    """Serve the setup's graph, replay the trace on it (the fixed pools are probed first), and sum up."""
    folder = work / setup
    folder.mkdir()
    graph = graph_for(setup, folder)
    deployment = build_deployment(load_graph(graph), engine_override="mocker")
    print(f"[{name}] serving {graph}", flush=True)
    before, started, probes = os.times(), time.time(), []
    with CpuSampler() as cpu:
        with served_graph(graph, folder / "run", engine="mocker", time_scale=SLOW) as state:
            warm_up(state)
            if deployment.planner is not None:
                settle(state, deployment, folder / "run")
            for i, share in enumerate(PROBES if setup == "fixed" and probe_s else ()):
                steady = write_trace(folder / f"probe-{share:g}.jsonl", arrivals_for([(probe_s, share)], SEED + 1 + i))
                records = replay(state, deployment, steady, folder / f"probe-{share:g}", SEED + 1 + i)
                probes.append({"share": share, **latency_summary(records)})
                print(f"[{name}] probe at {share:.0%}: {probes[-1]['within_both']:.1%} within both", flush=True)
            watch = PoolWatch(folder / "run")
            watch.thread.start()
            print(f"[{name}] replaying {trace.name} with aiperf", flush=True)
            records = replay(state, deployment, trace, folder / "aiperf", SEED)
            watch.stopping.set()
            watch.thread.join()
        stopped, after = time.time(), os.times()
    decisions = [line.strip() for line in (folder / SERVE_LOG).read_text().splitlines() if "planner decision" in line]
    result = {"setup": name, "decisions": decisions, "probes": probes, **summarize(records, watch.samples)}
    # The graph and aiperf are this process's children, reaped by the time the graph has stopped.
    ours = after.children_user + after.children_system - before.children_user - before.children_system
    busy = cpu.busy_between(started, stopped) or 0.0
    result["cores_busy"], result["cores_outside"] = busy * CORES, busy * CORES - ours / (stopped - started)
    print(
        f"[{name}] {result['requests']} requests, {result['failed']} failed, within both {result['within_both']:.1%}, "
        f"{result['gpu_hours']:.3f} GPU-hours, mean GPUs {result['mean_gpus']:.2f}, cores busy "
        f"{result['cores_busy']:.2f} (outside the benchmark {result['cores_outside']:.2f})",
        flush=True,
    )
    return result


# ---- figures ---------------------------------------------------------------------------------------


def latency_summary(records: list[dict]) -> dict:
    ttft_target, itl_target = targets()
    served = [r for r in records if not r["failed"]]

    def pct(key: str, q: float) -> float:
        values = sorted(r[key] for r in served)
        return values[min(len(values) - 1, int(q * len(values)))]

    return {
        "requests": len(records),
        "failed": len(records) - len(served),
        "within_ttft": sum(r["ttft_ms"] <= ttft_target for r in served) / len(records),
        "within_itl": sum(r["itl_ms"] <= itl_target for r in served) / len(records),
        "within_both": sum(r["ok"] for r in records) / len(records),
        "ttft_p50_ms": pct("ttft_ms", 0.5),
        "ttft_p99_ms": pct("ttft_ms", 0.99),
        "itl_p50_ms": pct("itl_ms", 0.5),
        "itl_p99_ms": pct("itl_ms", 0.99),
    }


def summarize(records: list[dict], samples: list[dict]) -> dict:
    """The setup's figures; times in seconds from its first request (slowed time)."""
    start, end = min(r["start_s"] for r in records), max(r["end_s"] for r in records)
    # Each sample holds from its time until the next one's; the last one before the first request holds from then.
    first = max([i for i, s in enumerate(samples) if s["t"] <= start], default=0)
    window = [s for s in samples[first:] if s["t"] <= end]
    edges = [max(s["t"], start) for s in window] + [end]
    gpu_s = sum(s["gpus"] * (edges[i + 1] - edges[i]) for i, s in enumerate(window))
    within = sum(r["ok"] for r in records)
    return {
        **latency_summary(records),
        "gpu_hours": gpu_s / 3600,
        "goodput_per_gpu_hour": within / (gpu_s / 3600),
        "mean_gpus": gpu_s / (end - start),
        "span_s": end - start,
        "timeline": [(s["t"] - start, s["pools"], s["gpus"]) for s in window],
        "records": [(r["start_s"] - start, r["end_s"] - start, r["ttft_ms"], r["itl_ms"], r["ok"]) for r in records],
    }


def recovery_s(result: dict, spike_start: float) -> float | None:
    """Seconds from the spike's start to the first moment t from which on every WINDOW_S window of
    finished requests, (t' - WINDOW_S, t'] for all t' >= t, has at least RECOVERED of them within both
    targets (a window where nothing finished counts as met); None if that never happens."""
    finished = sorted((end, ok) for _, end, _, _, ok in result["records"])
    recovered, t = spike_start, spike_start
    while t <= finished[-1][0] + WINDOW_S:
        inside = [ok for end, ok in finished if t - WINDOW_S < end <= t]
        if inside and sum(inside) / len(inside) < RECOVERED:
            recovered = None
        elif recovered is None:
            recovered = t
        t += 0.5
    return None if recovered is None else recovered - spike_start


def by_phase(result: dict, phases: list[tuple[float, float]]) -> list[dict]:
    """Each phase's share of requests (by arrival) within both targets, and the mean GPUs held during it;
    last, the share of all requests outside the spike."""
    rows, start, timeline = [], 0.0, result["timeline"]
    for seconds, share in phases:
        inside = [ok for begin, _, _, _, ok in result["records"] if start <= begin < start + seconds]
        # each sample holds until the next; the phase's GPU-seconds are the overlaps of those steps with it
        steps = zip(timeline, [t for t, _, _ in timeline[1:]] + [result["span_s"]], strict=True)
        gpu_s = sum(gpus * max(0.0, min(until, start + seconds) - max(t, start)) for (t, _, gpus), until in steps)
        rows.append({"within": sum(inside) / len(inside) if inside else None, "mean_gpus": gpu_s / seconds})
        start += seconds
    spike = next(i for i, (_, share) in enumerate(phases) if share > 1)
    start = sum(s for s, _ in phases[:spike])
    outside = [ok for begin, _, _, _, ok in result["records"] if not start <= begin < start + phases[spike][0]]
    rows.append({"within": sum(outside) / len(outside), "mean_gpus": None})
    return rows


def refusals(result: dict) -> list[str]:
    """What followed each decision the launcher refused: how many more decisions, and when the pools last changed."""
    lines = []
    for index, line in enumerate(result["decisions"]):
        if " refused: " in line:
            later = [d for d in result["decisions"][index + 1 :] if " -> " in d]
            sizes = [(t, json.dumps(pools, sort_keys=True)) for t, pools, _ in result["timeline"]]
            changes = [t for (t, now), (_, before) in zip(sizes[1:], sizes, strict=False) if now != before]
            changed = max(changes, default=0.0)
            lines.append(
                f"- {result['setup']}: `{line.split('] ', 1)[-1]}`; the planner resized {len(later)} more "
                f"time(s) after it, and the pools last changed {changed:.0f} s into the trace."
            )
    return lines


# ---- results ---------------------------------------------------------------------------------------


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def modelled_lone_ttft_ms() -> float:
    """TTFT of a request alone in the performance model, slowed: its prefill, the KV handoff and a decode step."""
    with tempfile.TemporaryDirectory() as tmp:
        deployment = build_deployment(load_graph(graph_for("fixed", Path(tmp))), engine_override="mocker")
    layout = layout_from_deployment(deployment)
    prefill, decode = (CostModel.for_pool(layout, role, fitted_factors()) for role in ("prefill", "decode"))
    return SLOW * (prefill.prompt_ms(ISL) + kv_handoff_ms(layout, ISL) + float(decode.decode_ms(1, ISL)))


def limits(results: list[dict], phases: list, modelled: float) -> list[str]:
    """What the mocker on this machine cannot show, with this run's figures."""
    fixed = next((r for r in results if r["setup"] == "fixed (peak)"), results[0])
    quiet = sorted(ttft for begin, _, ttft, _, _ in fixed["records"] if begin < phases[0][0] and ttft is not None)
    starts = [seconds for r in results for seconds in growth_seconds(r["decisions"])]
    minutes, shortest = sum(s for s, _ in phases) / 60, min(s for s, share in phases if share <= 1)
    took = f"{min(starts):.1f}-{max(starts):.1f} s" if starts else "a few seconds"
    return [
        "What the mocker on this machine limits:",
        "",
        "- Host overhead the performance model does not have. Every worker is a process on this machine's "
        f"{CORES} cores, beside Dynamo's frontend, the gateway, etcd, NATS, Prometheus, the planner and aiperf. A lone "
        f"request's TTFT is modelled at {modelled_lone_ttft_ms():.0f} ms (prefill of {ISL} tokens, KV handoff, one "
        f"decode step, slowed); served, the {fixed['setup']} setup's median in the first phase was "
        f"{quiet[len(quiet) // 2]:.0f} ms ({quiet[len(quiet) // 2] / modelled_lone_ttft_ms() - 1:+.0%}), and the "
        "gap grows when the cores are busy. The sla mode sizes pools from the model, which has none of it.",
        f"- Start-up: a new mocker worker served {took} after the decision here (a tenth of that in modelled "
        "time), and starting one took about 1.3 CPU-seconds when measured alone on this machine, taken from the "
        "workers already serving (a resize that starts four takes both cores for a few seconds); a TensorRT-LLM "
        "worker loading gpt-oss takes minutes, on its own GPU. On GPUs, a planner reacts to the spike much "
        "later against the trace, and pools that shrink and grow again pay that start-up each time, so the "
        "GPU-hours saved here are an upper bound for the same trace on GPUs.",
        f"- Slowed time: the mocker runs {SLOW:g}x slower than modelled, so the trace's {minutes:g} minutes are "
        f"{minutes / SLOW:g} of modelled H200 time and GPU-hours here are slowed hours (real ones are a tenth); the "
        "ratios between setups do not depend on it.",
        f"- Swings packed tight: the trace's steps last {shortest:g} s or more, while a real day's last tens of "
        "minutes. A reactive planner pays its reaction at every rise (the traffic window it reads the rate over, "
        "its look interval, a worker's start-up) and its scale-down window at every fall, a share of the trace "
        "that grows as the steps shorten: `--minutes 10` replays the same trace in half the time.",
        "- One run per setup: the trace and the prompts are seeded, but the machine is shared (cores outside the "
        "benchmark in the table) and no setup was repeated, so how much a rerun moves these figures is not measured.",
        "",
    ]


def growth_seconds(decisions: list[str]) -> list[float]:
    """How long each decision that grew a pool took to carry out (`N: prefill 1 -> 2` ... `N: done in X s`)."""
    grew, took = set(), {}
    for line in decisions:
        number, _, what = line.partition("planner decision ")[2].partition(": ")
        if what.startswith("done in "):
            took[number] = float(what.split()[2])
        elif any(int(b) > int(a) for a, b in (part.split()[-3::2] for part in what.split(", ") if " -> " in part)):
            grew.add(number)
    return [took[number] for number in grew if number in took]


def best_probe(probes: list[dict]) -> str:
    kept = [p["share"] for p in probes if p["within_both"] >= CAPACITY_SHARE]
    return f"{max(kept):.0%} ({max(kept) * CAPACITY_RPS:.2f}/s)" if kept else "none of them"


def verdicts(results: list[dict], foresight: float) -> list[str]:
    by = {r["setup"]: r for r in results}
    fixed, load, sla = by.get("fixed (peak)"), by.get("load"), by.get("sla")
    if sla is None:
        return ["- sla was not run, so its targets are not judged here."]
    lines = [
        f"- sla keeps >= 95% of requests within both targets: **{'met' if sla['within_both'] >= 0.95 else 'missed'}** "
        f"({sla['within_both']:.1%})."
    ]
    if fixed:
        ratio = sla["gpu_hours"] / fixed["gpu_hours"]
        lines.append(
            f"- sla uses <= 65% of the fixed pools' worker-GPU-hours: **{'met' if ratio <= 0.65 else 'missed'}** "
            f"({ratio:.0%}: {sla['gpu_hours']:.3f} against {fixed['gpu_hours']:.3f}). For scale: the sizes the "
            "performance model gives each phase's rate (the sla mode's sizing without its headroom), known in "
            "advance and held exactly for the phase, with no reaction time and no start-up, would hold "
            f"{foresight:.3f} ({foresight / fixed['gpu_hours']:.0%})."
        )
    if load:
        better = sla["goodput_per_gpu_hour"] > load["goodput_per_gpu_hour"]
        lines.append(
            f"- sla beats load on goodput per GPU-hour: **{'met' if better else 'missed'}** "
            f"({sla['goodput_per_gpu_hour']:.0f} against {load['goodput_per_gpu_hour']:.0f})."
        )
    failed = ", ".join(f"{r['setup']} {r['failed']}" for r in results)
    none_failed = all(r["failed"] == 0 for r in results)
    lines.append(f"- no failed requests: **{'met' if none_failed else 'missed'}** ({failed}).")
    return lines


def write_results(
    results: list[dict], phases: list, arrivals: list[float], modelled: float, foresight: float, out: Path, command: str
) -> None:
    ttft_target, itl_target = targets()
    spike_index = next(i for i, (_, p) in enumerate(phases) if p > 1)
    spike, spike_share = sum(s for s, _ in phases[:spike_index]), phases[spike_index][1]
    fixed = next((r for r in results if r["setup"] == "fixed (peak)"), None)
    for r in results:
        r["recovery_s"] = recovery_s(r, spike)
        r["by_phase"] = by_phase(r, phases)
        r["gpu_hours_vs_fixed"] = r["gpu_hours"] / fixed["gpu_hours"] if fixed else None
    summary = {
        "capacity_rps": CAPACITY_RPS,
        "model_capacity_rps": modelled,
        "foresight_gpu_hours": foresight,
        "command": command,
        "phases": phases,
        "results": results,
    }
    # one line per list of numbers (a request's record, a pool's live and draining workers)
    numbers = r"\[([-+.,\s\deEtruefalsn]*)\]"
    text = re.sub(numbers, lambda m: "[" + " ".join(m.group(1).split()) + "]", json.dumps(summary, indent=1))
    (out / "results.json").write_text(text)
    table = [
        "| setup | within both targets | worker-GPU-hours | of fixed | goodput per GPU-hour | spike to targets met "
        "again | failed | mean GPUs | TTFT p50 / p99 | ITL p50 / p99 | resizes | cores busy (outside) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        back = "never" if r["recovery_s"] is None else f"{r['recovery_s']:.1f} s"
        table.append(
            f"| {r['setup']} | {r['within_both']:.1%} ({sum(x[4] for x in r['records'])}/{r['requests']}) "
            f"| {r['gpu_hours']:.3f} | {percent(r['gpu_hours_vs_fixed'])} | {r['goodput_per_gpu_hour']:.0f} | {back} "
            f"| {r['failed']} | {r['mean_gpus']:.2f} | {r['ttft_p50_ms']:.0f} / {r['ttft_p99_ms']:.0f} ms "
            f"| {r['itl_p50_ms']:.1f} / {r['itl_p99_ms']:.1f} ms | {sum('->' in d for d in r['decisions'])} "
            f"| {r['cores_busy']:.2f} ({r['cores_outside']:.2f}) |"
        )
    phase_rows = [
        "| phase | " + " | ".join(r["setup"] for r in results) + " |",
        "|---|" + "---:|" * len(results),
        *[
            f"| {s:g} s at {p:.0%} ({p * CAPACITY_RPS:.2f}/s) | "
            + " | ".join(f"{percent(r['by_phase'][i]['within'])}, {r['by_phase'][i]['mean_gpus']:.1f}" for r in results)
            + " |"
            for i, (s, p) in enumerate(phases)
        ],
        "| all but the spike | " + " | ".join(f"{r['by_phase'][-1]['within']:.1%}" for r in results) + " |",
    ]
    notes = [line for r in results for line in refusals(r)]
    notes = ["Decisions the launcher refused:", "", *notes, ""] if notes else []
    probes = [p for r in results for p in r["probes"]]
    at_spike = [p for p in probes if p["share"] == spike_share]
    spike_probe = f" (this run's probe at that rate: {at_spike[0]['within_both']:.1%} within both)" if at_spike else ""
    probe_lines = (
        [
            "| rate | requests | within both | within TTFT | within ITL | TTFT p50 / p99 | ITL p50 / p99 |",
            "|---|---:|---:|---:|---:|---:|---:|",
            *[
                f"| {p['share']:.0%} ({p['share'] * CAPACITY_RPS:.2f}/s) | {p['requests']} | {p['within_both']:.1%} "
                f"| {p['within_ttft']:.1%} | {p['within_itl']:.1%} | {p['ttft_p50_ms']:.0f} / {p['ttft_p99_ms']:.0f} ms "
                f"| {p['itl_p50_ms']:.1f} / {p['itl_p99_ms']:.1f} ms |"
                for p in probes
            ],
        ]
        if probes
        else ["(not probed in this run)"]
    )
    decisions = [
        line
        for r in results
        if r["decisions"]
        for line in [f"{r['setup']} ({len(r['decisions'])} lines):", "", *[f"- `{d}`" for d in r["decisions"]], ""]
    ]
    text = [
        "# Autoscaling on a bursty trace: fixed pools, load mode and sla mode",
        "",
        f"Command: `{command}`. Graph: benchmarks/autoscale/graph.yaml, gpt-oss-20b disaggregated on Dynamo's "
        "mocker (H200 model, one GPU per worker), "
        + " and ".join(f"{role} autoscaled between 1 and {most}" for role, most in peak_sizes().items())
        + f" workers, served {SLOW:g}x slower than modelled "
        "(`--mocker-time-scale`): every time, rate and GPU-hour here is in that slowed time (real hours are a "
        "tenth). Every listener of each graph is on a port free at the time.",
        "",
        "Setups, each on the same trace: **fixed (peak)**: both pools fixed at their autoscale maximum, no planner; "
        "**load**: `planner.mode: load`, Dynamo 1.6's planner adding or removing one worker of a pool when a "
        "prefill queue or a decode KV cache crosses the graph's thresholds; **sla**: `planner.mode: sla`, each "
        "pool sized from the project's performance model for the graph's TTFT and ITL targets.",
        "",
        f"Targets: TTFT <= {ttft_target:g} ms and ITL <= {itl_target:g} ms for each request.",
        "",
        f"Capacity (100%): {CAPACITY_RPS:g} requests/s, a rate the fixed pools kept >= {CAPACITY_SHARE:.0%} of "
        "requests within both targets in 60 s steady Poisson probes on this machine (since the mocker's H200 model "
        "charges MXFP4 experts at their measured share, issue 27; 5.0/s before). This run probed the fixed pools "
        f"again before their trace (below; {CAPACITY_SHARE:.0%} or more within both up to {best_probe(probes)}). "
        f"The spike goes to {spike_share:.0%} of capacity, a rate the peak pools still serve{spike_probe}: a spike "
        "past what the peak pools serve is a question of how many GPUs to own, which no autoscaler bounded by the "
        "same pools answers (the runs before this one spiked to 130%, and the fixed pools themselves kept 65% of "
        "the spike's requests within both). The performance model alone (Dynamo's offline replay of the same "
        f"mocker profiles, steady Poisson arrivals, >= {CAPACITY_SHARE:.0%} within both) puts capacity at "
        f"{modelled:.1f} requests/s.",
        "",
        *probe_lines,
        "",
        f"Trace: {len(arrivals)} requests of ISL {ISL} / OSL {OSL}, Poisson arrivals (seed {SEED}) in phases "
        + ", ".join(f"{s:g} s at {p:.0%}" for s, p in phases)
        + f"; the spike is the {phases[spike_index][0]:g} s at {phases[spike_index][1]:.0%} from {spike:g} s. aiperf "
        "0.13 replays it open-loop (`--fixed-schedule`) after eight short warm-up requests.",
        "",
        *table,
        "",
        *verdicts(results, foresight),
        "",
        "Columns:",
        "",
        "- *within both targets*: requests with TTFT and ITL both within target, among all requests sent (a "
        "failed request counts as missing). TTFT and ITL are aiperf's per-request figures from its "
        "`profile_export.jsonl`: TTFT from sending the request to the first token, ITL = (request latency - TTFT) "
        "/ (output tokens - 1), output tokens from the server's usage.",
        "- *worker-GPU-hours*: the integral over time of the GPUs held by worker processes (serving or draining; "
        "each sample holds until the next), sampled every 0.5 s from the launcher's state, from the first "
        "request sent to the last one finished, in slowed hours. *of fixed*: against the fixed setup's.",
        "- *goodput per GPU-hour*: requests within both targets / worker-GPU-hours.",
        f"- *spike to targets met again*: from the spike's start to the first moment t from which on every "
        f"{WINDOW_S:g} s window of finished requests (by finish time, (t' - {WINDOW_S:g} s, t'] for every t' >= t, "
        f"stepped by 0.5 s, to the end of the run) has >= {RECOVERED:.0%} within both targets; 0 if no window "
        "from the spike on fell short.",
        "- *failed*: requests aiperf recorded with an error. *mean GPUs*: worker-GPU-hours over the same span. "
        "*resizes*: planner decisions the launcher carried out (`A -> B` lines in the serve log). *cores busy*: "
        f"of this machine's {CORES}, from starting the graph to stopping it (/proc/stat), and in brackets what "
        "processes outside the benchmark (neither the graph nor aiperf) used of them.",
        "",
        "By phase: the share of the phase's requests (by arrival) within both targets, and the mean GPUs held by "
        "workers during it:",
        "",
        *phase_rows,
        "",
        *notes,
        "![pool sizes and latency over time](timeline.png)",
        "",
        *limits(results, phases, modelled),
        "The planners' decisions, as the launcher logged them:",
        "",
        *decisions,
    ]
    (out / "results.md").write_text("\n".join(text))
    plot(results, arrivals, out)


def plot(results: list[dict], arrivals: list[float], out: Path) -> None:
    ttft_target, itl_target = targets()
    figure, axes = plt.subplots(len(results), 3, figsize=(16, 3.4 * len(results)), sharex=True, squeeze=False)
    bins = range(0, int(max(arrivals)) + 11, 10)
    for row, r in zip(axes, results, strict=True):
        times = [t for t, _, _ in r["timeline"]]
        for role, colour, width in (("prefill", "tab:blue", 3.5), ("decode", "tab:orange", 1.5)):
            row[0].step(
                times,
                [pools[role][0] + pools[role][1] for _, pools, _ in r["timeline"]],
                where="post",
                color=colour,
                linewidth=width,
                label=f"{role} workers",
            )
        row[0].set_ylabel(f"{r['setup']}\nworkers (live + draining)")
        row[0].set_ylim(0, max(peak_sizes().values()) + 0.5)
        rate_axis = row[0].twinx()
        rate_axis.hist(arrivals, bins=bins, weights=[0.1] * len(arrivals), color="grey", alpha=0.3)
        rate_axis.set_ylabel("requests/s sent")
        for column, index, target, label in ((1, 2, ttft_target / 1000, "TTFT (s)"), (2, 3, itl_target, "ITL (ms)")):
            scale = 1000 if index == 2 else 1
            for ok, colour in ((True, "tab:green"), (False, "tab:red")):
                group = [x for x in r["records"] if x[4] == ok and x[index] is not None]
                starts = [x[0] for x in group]
                row[column].plot(starts, [x[index] / scale for x in group], ".", markersize=2, color=colour)
            row[column].axhline(target, color="black", linewidth=0.8, linestyle="--")
            row[column].set_ylabel(f"{label}\nby request start")
        row[1].set_yscale("log")
    axes[0][0].legend(loc="upper left", fontsize=8)
    axes[0][0].set_title("pool sizes; grey: requests sent per second")
    axes[0][1].set_title("TTFT (green: within both targets, red: not; dashed: target)")
    axes[0][2].set_title("ITL")
    for column in axes[-1]:
        column.set_xlabel("seconds into the trace (slowed time)")
    figure.tight_layout()
    figure.savefig(out / "timeline.png", dpi=100)


def report_again(out: Path, work: Path) -> None:
    """results.md and the plot from a run's results.json, with the same trace (it is seeded)."""
    summary = json.loads((out / "results.json").read_text())
    phases = [tuple(phase) for phase in summary["phases"]]
    command = summary.get("command", "uv run python benchmarks/autoscale/run.py")
    write_results(
        summary["results"],
        phases,
        arrivals_for(phases),
        summary["model_capacity_rps"],
        foresight_gpu_hours(phases, work),
        out,
        command,
    )
    print(f"wrote {out / 'results.md'} again from {out / 'results.json'}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setups", default=",".join(SETUPS.values()), help="fixed,load,sla (default: all)")
    parser.add_argument("--minutes", type=float, help="squeeze the trace into this many (slowed) minutes")
    parser.add_argument("--probe-seconds", type=float, default=60.0, help="each capacity probe; 0 skips them")
    parser.add_argument("--out", type=Path, default=HERE, help="where results.md, results.json and the plot go")
    parser.add_argument(
        "--report",
        action="store_true",
        help="serve nothing: write results.md and the plot again "
        "from OUT/results.json (after a change to how they are written)",
    )
    args = parser.parse_args()
    chosen = args.setups.split(",")
    work = Path(tempfile.mkdtemp(prefix="autoscale-bench-"))
    if args.report:
        report_again(args.out, work)
        return
    print(f"logs and aiperf exports in {work}", flush=True)
    modelled = model_capacity(graph_for("fixed", work))
    phases = phases_for(args.minutes)
    foresight = foresight_gpu_hours(phases, work)
    arrivals = arrivals_for(phases)
    print(
        f"capacity {CAPACITY_RPS:g} requests/s ({modelled:.1f} in the performance model); trace of "
        f"{len(arrivals)} requests, {sum(s for s, _ in phases):.0f} s",
        flush=True,
    )
    trace = write_trace(work / "trace.jsonl", arrivals)
    args.out.mkdir(parents=True, exist_ok=True)
    write_trace(args.out / "trace.jsonl", arrivals)
    started = time.monotonic()
    results = [run(name, setup, trace, work, args.probe_seconds) for name, setup in SETUPS.items() if setup in chosen]
    flags = [
        ("--setups", args.setups if args.setups != parser.get_default("setups") else None),
        ("--minutes", args.minutes),
        ("--probe-seconds", args.probe_seconds if args.probe_seconds != 60 else None),
    ]
    command = "uv run python benchmarks/autoscale/run.py" + "".join(
        f" {f} {v:g}" if isinstance(v, float) else f" {f} {v}" for f, v in flags if v is not None
    )
    write_results(results, phases, arrivals, modelled, foresight, args.out, command)
    minutes = (time.monotonic() - started) / 60
    print(f"wrote {args.out / 'results.md'} after {minutes:.1f} minutes of serving", flush=True)


if __name__ == "__main__":
    main()
