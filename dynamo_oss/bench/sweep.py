"""A sweep: one aiperf run per concurrency against one endpoint, each stored as it finishes."""

from __future__ import annotations

from pathlib import Path

from dynamo_oss.bench import aiperf
from dynamo_oss.bench.host_load import CpuSampler
from dynamo_oss.bench.results import RunResult, Sweep


def run_sweep(sweep: Sweep, folder: Path) -> Sweep:
    """Run every concurrency of `sweep.parameters` in order, saving `folder/sweep.json` after each."""
    parameters = sweep.parameters
    total = len(parameters.concurrencies)
    for index, concurrency in enumerate(parameters.concurrencies, start=1):
        requests = parameters.requests_at(concurrency)
        _say(
            f"{sweep.label} run {index}/{total}: concurrency {concurrency}, {requests} requests "
            f"({parameters.warmup_at(concurrency)} warm-up)"
        )
        run = run_once(sweep, concurrency, folder)
        sweep.runs.append(run)
        sweep.save(folder)
        p = run.point
        note = f", {run.failed} failed" if run.failed else ""
        if run.machine_bound:
            note += f", MACHINE-BOUND (cores {run.host_cpu_busy:.0%} busy)"
        _say(
            f"{sweep.label} run {index}/{total}: {p.tok_s_user:.1f} tok/s/user, {p.tok_s_gpu:.1f} tok/s/GPU, "
            f"TTFT p50 {p.ttft_p50_ms:.0f} ms, ITL p50 {p.itl_p50_ms:.1f} ms{note}"
        )
    return sweep


def run_once(sweep: Sweep, concurrency: int, folder: Path) -> RunResult:
    artifacts = folder / "runs" / f"c{concurrency}"
    artifacts.mkdir(parents=True, exist_ok=True)
    argv = aiperf.command(sweep.endpoint, sweep.parameters, concurrency, artifacts)
    with CpuSampler() as cpu:
        aiperf.run(argv, artifacts, aiperf.environment(artifacts))
    window = aiperf.profiling_window_s(artifacts)
    point, failed, rate = aiperf.read_export(artifacts, concurrency=concurrency, gpus=sweep.parameters.gpus)
    return RunResult(
        concurrency=concurrency,
        point=point,
        failed=failed,
        request_rate=rate,
        host_cpu_busy=cpu.busy_between(*window) if window else None,
        artifacts=str(artifacts.relative_to(folder)),
    )


def _say(line: str) -> None:
    print(f"[dynamo-oss] bench {line}", flush=True)
