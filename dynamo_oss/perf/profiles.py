"""A pool as Dynamo's mocker sees it: a timing profile (.npz) and the capacities beside it,
handed to the mocker engine (dynamo_oss.engines.mocker) as a `SimulatedTiming`.

How the mocker of ai-dynamo 1.6.0 uses a `dynamo_profile` (read from its perf_model and
tried with its offline replay; see tests/perf/test_profiles.py):

- a prefill pass costs prefill_ttft_ms interpolated at the pass's new tokens (batch times
  new tokens per prompt, prefix hits excluded), extrapolated linearly; a prompt longer than
  max_num_batched_tokens pays that per chunk, intercept included;
- a decode step costs decode_itl bilinearly interpolated at (tokens of context summed over
  the batch, mean context), at least 1 ms;
- an aggregated step costs the prefill chunk's time plus the decode batch's;
- with dp_size > 1 every attention rank schedules its own batch on its own KV blocks.

So the tables below are per attention rank, and the prefill curve is built for the
workload's prompt length: a pass of n new tokens is charged the attention of tokens spread
over whole prompts, so that the chunks of a prompt add up to the prompt's prefill. An
aggregated worker's prefill curve is the chunk's marginal cost beside the decode batch the
workload runs (the mixed step minus the decode step), so that the mocker's sum is the
one-pass mixed step of `costs`: weights read and fixed overheads are paid once per step,
not once for the chunk and again for the batch. Measured on an H200, a mixed step costs
0.62-0.96 of chunk alone + batch alone (benchmarks/gpu/mixed_step), and the saving grows
with the batch, so a curve taken beside one decode (nearly additive) or beside a fixed
batch misses it.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from dynamo_oss.engines import PlannedFile, SimulatedTiming
from dynamo_oss.engines.trtllm import DEFAULT_TOKENS_PER_BLOCK
from dynamo_oss.perf.costs import (
    CostModel,
    Factors,
    attention_spans,
    fitted_factors,
    kv_handoff_bandwidth,
)
from dynamo_oss.perf.layout import Layout, Role
from dynamo_oss.perf.measured_steps import MeasuredSteps
from dynamo_oss.perf.speculation import CHAT, AcceptanceProfile

BLOCK_SIZE = DEFAULT_TOKENS_PER_BLOCK  # the mocker stands in for TensorRT-LLM, so it keeps its KV block


def _grid(top: float, points: int) -> np.ndarray:
    """1 .. top, geometric: step costs bend most at small batches and short contexts."""
    return np.unique(np.geomspace(1.0, max(top, 2.0), points).round(3))


def prefill_curve_ms(
    cost: CostModel,
    role: Role,
    new: ArrayLike,
    prompt_tokens: int | None = None,
    decode_batch: float = 1.0,
    cached_tokens: int = 0,
) -> np.ndarray:
    """What the mocker charges a pass of `new` prompt tokens (the profile's prefill curve).

    prompt_tokens: the workload's prompt length, over which a pass's new tokens are spread;
    None charges each pass as one whole prompt of that many tokens. cached_tokens: the context a
    prompt's new tokens follow, found in the KV cache (a conversation's earlier turns), which they
    attend. An aggregated pool's pass is the chunk's marginal cost beside `decode_batch` sequences
    decoding on the rank (at the prompt's context), which the mocker's decode table then adds.
    """
    new = np.asarray(new, dtype=float)
    prompt = new if prompt_tokens is None else np.full_like(new, float(prompt_tokens))
    full, window = attention_spans(float(cached_tokens), prompt, cost.shape.sliding_window)
    chunk = {
        "prefill_tokens": new,
        "prefill_full_span": full,
        "prefill_window_span": window,
        "prefill_seqs": new / prompt,
    }
    if role != "agg":
        return cost.step_ms(**chunk)
    beside = {"decode_seqs": decode_batch, "decode_context": cached_tokens + prompt}
    return cost.step_ms(**chunk, **beside) - cost.step_ms(**beside)


def profile_tables(
    cost: CostModel,
    role: Role,
    prompt_tokens: int | None = None,
    decode_batch: float = 1.0,
    cached_tokens: int = 0,
    steps: MeasuredSteps | None = None,
) -> dict[str, np.ndarray]:
    """The five arrays of a dynamo_profile for one pool role; prompt_tokens, decode_batch and
    cached_tokens as in `prefill_curve_ms`; from an engine's measured `steps` where given, else the cost's."""
    shape = cost.shape
    new = _grid(4 * max(cost.pool.max_num_tokens, prompt_tokens or 0), 64)
    context = _grid(shape.max_context, 40)
    active = _grid(1.05 * max(cost.kv_capacity_tokens(), shape.max_context), 72)
    if steps is not None:
        return steps.profile_tables(role, (new, context, active), prompt_tokens, decode_batch, cached_tokens)
    prefill = prefill_curve_ms(cost, role, new, prompt_tokens, decode_batch, cached_tokens)
    kv, ctx = np.meshgrid(active, context, indexing="ij")
    decode = cost.decode_ms(kv / ctx, ctx)
    return {
        "prefill_isl": new,
        "prefill_ttft_ms": np.maximum(prefill, 0.0),
        "decode_active_kv_tokens": active,
        "decode_context_length": context,
        "decode_itl": decode,
    }


def simulated_timing(
    layout: Layout,
    role: Role,
    profile: str | Path,
    *,
    prompt_tokens: int | None = None,
    decode_batch: float = 1.0,
    acceptance: AcceptanceProfile = CHAT,
    cached_tokens: int = 0,
    factors: Factors | None = None,
    steps: MeasuredSteps | None = None,
) -> SimulatedTiming:
    """The speed and capacity of one worker of `layout`'s `role` pool, its profile to be written
    at `profile` (the mocker's --planner-profile-data, or its dynamo_profile timing model).

    prompt_tokens, decode_batch and cached_tokens describe the workload (`profile_tables`); a served graph,
    which knows neither, charges a chunk as one whole prompt beside one decode. A speculative pool's
    decode steps are its drafting and verifying steps, and the mocker draws the drafts each step keeps
    from `acceptance` (chat traffic's unless the workload says). `steps`: an engine's measured steps in place
    of the cost model's (measured_steps.py); the capacities stay the cost model's."""
    factors = factors or fitted_factors()
    pool = layout.pools[role]
    cost = CostModel.for_pool(layout, role, factors)
    tables = profile_tables(cost, role, prompt_tokens, decode_batch, cached_tokens, steps)
    about = {
        "layout": layout.model_dump(),
        "role": role,
        "prompt_tokens": prompt_tokens,
        "decode_batch": decode_batch,
        "cached_tokens": cached_tokens,
    }
    buffer = io.BytesIO()
    np.savez(buffer, **{k: v.astype(np.float64) for k, v in tables.items()}, dynamo_oss=np.asarray(json.dumps(about)))
    handoff = role == "prefill"
    return SimulatedTiming(
        profile=PlannedFile(
            path=Path(profile), purpose=f"mocker timing profile, {role} pool", content=buffer.getvalue()
        ),
        imitates=layout.engine,
        attention_ranks=pool.ranks,
        block_size=BLOCK_SIZE,
        num_gpu_blocks=max(1, cost.kv_capacity_tokens() // BLOCK_SIZE),
        max_num_seqs=pool.max_batch,
        max_num_batched_tokens=pool.max_num_tokens,
        kv_transfer_gbps=kv_transfer_bandwidth_gbps(layout, factors) if handoff else None,
        kv_bytes_per_token=kv_transfer_bytes_per_token(layout, prompt_tokens) if handoff else None,
        accept_rates=acceptance.accept_rates(pool.draft_tokens) if pool.draft_tokens and role != "prefill" else None,
    )


def kv_transfer_bytes_per_token(layout: Layout, prompt_tokens: int | None = None) -> int:
    """KV bytes per prompt token for the prefill mocker's --kv-bytes-per-token.

    The mocker charges a constant per token; TensorRT-LLM sends whole blocks, and of gpt-oss's
    window layers only the last few (`kv_cache`), so the handoff of a `prompt_tokens` prompt is
    spread over its tokens. Not given: the full-attention layers' bytes per token alone, which is
    what long prompts tend to.
    """
    kv = CostModel.for_pool(layout, "prefill").kv_cache
    if prompt_tokens is None:
        return round(kv.kv_shards * kv.full_pool.block_bytes / kv.block_tokens)
    return round(kv.sequence_bytes(prompt_tokens) / prompt_tokens)


def kv_transfer_bandwidth_gbps(layout: Layout, factors: Factors | None = None) -> float:
    """Decimal GB/s from a prefill to a decode worker, for the mocker's --kv-transfer-bandwidth."""
    return kv_handoff_bandwidth(layout, factors or fitted_factors()) / 1e9
