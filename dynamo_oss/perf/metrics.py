"""Serving figures from per-request records, each defined as the tool that publishes it defines it.

A figure means what its name means elsewhere, so every field below says whose definition it
follows, and `DEFINITIONS` carries the same words into every table, JSON file and plot:
- aiperf (`output_token_throughput_per_user`, `inter_token_latency`, `time_to_first_token`):
  per request ITL = (e2e - TTFT) / (OSL - 1), and tok/s/user = the mean over requests of 1 / ITL;
  Dynamo's Pareto scripts (benchmarks/llm/plot_pareto.py) plot this against output tok/s/GPU.
- InferenceMAX (utils/process_result.py): interactivity = 1000 / mean TPOT, where TPOT is the same
  per-request figure as aiperf's ITL; its tok/s/GPU counts input and output tokens.
- Dynamo's benchmarks/utils/plot.py: OSL / e2e, which counts the wait for the first token.
Dynamo replay's own `mean_output_token_throughput_per_user` (a mean of 1000 / gap over every
inter-token gap) is none of these and is not used.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, Field

DEFINITIONS: dict[str, str] = {
    "tok_s_user": "aiperf output_token_throughput_per_user: mean over requests of 1000 / ITL_ms, "
    "ITL = (e2e - TTFT) / (OSL - 1)",
    "tok_s_user_tpot": "InferenceMAX interactivity: 1000 / mean over requests of TPOT_ms, TPOT = (e2e - TTFT) / (OSL - 1)",
    "tok_s_user_e2e": "mean over requests of OSL / e2e (TTFT included; Dynamo benchmarks/utils/plot.py)",
    "tok_s_gpu": "output tokens / benchmark duration / GPUs of all pools (Dynamo plot_pareto.py, aiperf)",
    "total_tok_s_gpu": "(input + output) tokens / benchmark duration / GPUs of all pools (InferenceMAX)",
    "output_tok_s": "output tokens / benchmark duration, first request sent to last response done",
    "ttft_*_ms": "aiperf time_to_first_token percentile over requests",
    "itl_*_ms": "aiperf inter_token_latency percentile over requests, ITL = (e2e - TTFT) / (OSL - 1)",
    "gap_p99_ms": "p99 over every inter-token gap of every request (the stutter a user sees; Dynamo replay)",
}


class RequestRecord(BaseModel):
    """One finished request, as a benchmark client sees it."""

    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=1)
    start_ms: float = Field(description="when the request was sent")
    ttft_ms: float = Field(ge=0, description="time to the first output token")
    e2e_ms: float = Field(ge=0, description="time to the last output token")

    @property
    def itl_ms(self) -> float | None:
        """aiperf's inter-token latency of this request; None with a single output token."""
        if self.output_tokens < 2:
            return None
        return (self.e2e_ms - self.ttft_ms) / (self.output_tokens - 1)


class ServingPoint(BaseModel):
    """What a benchmark at one concurrency reports; see `DEFINITIONS` for each figure."""

    concurrency: int
    requests: int
    gpus: int
    tok_s_user: float = Field(description=DEFINITIONS["tok_s_user"])
    tok_s_user_tpot: float = Field(description=DEFINITIONS["tok_s_user_tpot"])
    tok_s_user_e2e: float = Field(description=DEFINITIONS["tok_s_user_e2e"])
    tok_s_gpu: float = Field(description=DEFINITIONS["tok_s_gpu"])
    total_tok_s_gpu: float = Field(description=DEFINITIONS["total_tok_s_gpu"])
    output_tok_s: float = Field(description=DEFINITIONS["output_tok_s"])
    ttft_mean_ms: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p50_ms: float
    itl_p99_ms: float
    gap_p99_ms: float | None = Field(None, description=DEFINITIONS["gap_p99_ms"])


def serving_point(
    records: Sequence[RequestRecord], *, concurrency: int, gpus: int, gap_p99_ms: float | None = None
) -> ServingPoint:
    """The figures of one run from its requests' records."""
    if not records:
        raise ValueError("no finished request to compute figures from")
    itls = np.array([r.itl_ms for r in records if r.itl_ms is not None and r.itl_ms > 0])
    ttfts = np.array([r.ttft_ms for r in records])
    start = min(r.start_ms for r in records)
    end = max(r.start_ms + r.e2e_ms for r in records)
    seconds = (end - start) / 1e3
    output = sum(r.output_tokens for r in records)
    total = output + sum(r.input_tokens for r in records)
    return ServingPoint(
        concurrency=concurrency,
        requests=len(records),
        gpus=gpus,
        tok_s_user=float(np.mean(1e3 / itls)) if len(itls) else 0.0,
        tok_s_user_tpot=float(1e3 / np.mean(itls)) if len(itls) else 0.0,
        tok_s_user_e2e=float(np.mean([r.output_tokens / (r.e2e_ms / 1e3) for r in records if r.e2e_ms > 0])),
        tok_s_gpu=output / seconds / gpus,
        total_tok_s_gpu=total / seconds / gpus,
        output_tok_s=output / seconds,
        ttft_mean_ms=float(np.mean(ttfts)),
        ttft_p50_ms=float(np.percentile(ttfts, 50)),
        ttft_p99_ms=float(np.percentile(ttfts, 99)),
        itl_p50_ms=float(np.percentile(itls, 50)) if len(itls) else 0.0,
        itl_p99_ms=float(np.percentile(itls, 99)) if len(itls) else 0.0,
        gap_p99_ms=gap_p99_ms,
    )
