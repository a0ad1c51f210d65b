"""Median device time of one call, and the card's two ceilings, measured the way METHOD.md asks.

Why each choice:
- Inputs rotate among several sets (the caller's `step(i)` picks set i), so a small problem is
  not timed out of the 60 MB L2.
- Calls are captured in a CUDA graph and the graph's replays are timed with CUDA events, so
  microsecond kernels are timed without launch gaps (serving engines replay graphs too). Where
  capture fails the same loop is timed eagerly, and the row says so.
- The median of many replays is reported, with the 10th and 90th percentiles as the spread.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch

from benchmarks.gpu.common.roofline import Ceilings

L2_BYTES = 60e6  # H200; rotation aims at several times this
TARGET_SET_BYTES = 4 * L2_BYTES


@dataclass(frozen=True)
class Timing:
    median_s: float
    p10_s: float
    p90_s: float
    method: str  # "graph" or "eager"


def rotation_sets(bytes_per_set: float, most: int = 256) -> int:
    """How many input sets to rotate among so that together they exceed several L2s."""
    return max(1, min(most, math.ceil(TARGET_SET_BYTES / max(bytes_per_set, 1.0))))


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _events_time(run: Callable[[], None], repeats: int) -> list[float]:
    """Seconds per `run()`, one pair of CUDA events around each."""
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return times


def measure(step: Callable[[int], object], sets: int = 1, budget_s: float = 0.25) -> Timing:
    """Time `step(i)` (i counts calls, to rotate among `sets` input sets) on the current CUDA device."""
    calls = 0

    def call() -> None:
        nonlocal calls
        step(calls)
        calls += 1

    for _ in range(3):  # compile, autotune, allocate
        call()
    torch.cuda.synchronize()
    estimate = statistics.median(_events_time(call, 3))
    inner = max(sets, min(50, math.ceil(1e-3 / max(estimate, 1e-7))))
    repeats = max(10, min(100, math.ceil(budget_s / max(estimate * inner, 1e-7))))
    try:
        graph = torch.cuda.CUDAGraph()
        capture_stream = torch.cuda.Stream()
        capture_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(capture_stream):
            call()  # warm the side stream, as torch's graph docs advise
            with torch.cuda.graph(graph, stream=capture_stream):
                for _ in range(inner):
                    call()
        torch.cuda.current_stream().wait_stream(capture_stream)
        graph.replay()
        times = [t / inner for t in _events_time(graph.replay, repeats)]
        method = "graph"
        del graph
    except Exception:  # noqa: BLE001 - capture refused (host sync, allocation): time eagerly instead
        torch.cuda.synchronize()

        def loop() -> None:
            for _ in range(inner):
                call()

        times = [t / inner for t in _events_time(loop, repeats)]
        method = "eager"
    return Timing(statistics.median(times), _percentile(times, 0.1), _percentile(times, 0.9), method)


def measure_ceilings() -> Ceilings:
    """A large bf16 GEMM on random data, and streaming bandwidth over 1 GiB buffers.

    The GEMM runs for a while untimed first, so clocks have risen (without that: 669 TFLOP/s
    against 712 on an H200 here). Bandwidth is the faster of an elementwise copy kernel (bytes read +
    written) and a read-only sum, not a plain `copy_`: captured in a CUDA graph, that becomes a memcpy
    node (likely served by the copy engines) and moved 2.66 TB/s against 4.26 for the kernel.
    """
    n = 8192
    a = [torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    b = [torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    for _ in range(300):
        a[0] @ b[0]
    gemm = measure(lambda i: a[i % 2] @ b[i % 2], sets=2, budget_s=1.0)
    src = torch.randn(2**29, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    copy = measure(lambda i: torch.mul(src, 2.0, out=dst), budget_s=1.0)
    read = measure(lambda i: src.sum(dtype=torch.float32), budget_s=1.0)
    detail = {
        "gemm_8192_tflops": 2 * n**3 / gemm.median_s / 1e12,
        "copy_kernel_gbps": 2 * src.nbytes / copy.median_s / 1e9,
        "read_gbps": src.nbytes / read.median_s / 1e9,
    }
    return Ceilings(
        tflops=detail["gemm_8192_tflops"],
        gbps=max(detail["copy_kernel_gbps"], detail["read_gbps"]),
        detail=detail,
    )
