"""AIConfigurator beside the model: its single-point estimates of the calibration rows it can express.

NVIDIA's AIConfigurator (PyPI `aiconfigurator`) predicts an engine's step times from kernels measured on
each GPU (its SILICON database), where this model derives them from the datasheet and fitted factors. Set
beside each other on the same published rows, the two show where the model and a measured-kernel
estimate part, and where both miss the publication.

AIConfigurator is not a dependency: its runtime and kernel data are about 115 MB, and only this
comparison uses it. `dynamo calibrate --aic PYTHON` runs `aic_driver.py` with PYTHON, an interpreter of
an environment with `aiconfigurator==AIC_VERSION` installed, and stores its estimates in
`aic_reference.json`, which `dynamo calibrate` shows without it:

    uv venv /tmp/aic && uv pip install -p /tmp/aic aiconfigurator==0.12.0
    uv run dynamo calibrate --aic /tmp/aic/bin/python

What AIConfigurator is asked: its aggregated (in-flight batching) estimate of one worker of the row's
pool, at the row's input and output lengths, with the row's concurrency spread over the pool's workers
and attention ranks as the batch, its token budget as the context tokens, its KV precision and MoE kernel (`pool_fields`), and for a
speculative row `nextn` drafts of which the row's acceptance profile keeps `tokens_per_step - 1` a step.
Rows it cannot express this way are left out: disaggregated pools, and offline runs (every request
queued at once, whose figure is the ceiling the KV cache sets, not a batch's speed).
benchmarks/aic_studies asks it more (single prefill and decode steps, disaggregated layouts) through
the same query.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from dynamo_oss.perf.calibration import PublishedRow
    from dynamo_oss.perf.layout import Layout, Role

AIC_VERSION = "0.12.0"
AIC_REFERENCE_PATH = Path(__file__).with_name("aic_reference.json")
AIC_DRIVER_PATH = Path(__file__).with_name("aic_driver.py")
AIC_MODEL = "openai/gpt-oss-120b"
AIC_SYSTEMS = {"b200": "b200_sxm", "h200": "h200_sxm", "h100": "h100_sxm", "gb200": "gb200"}
AIC_TIMEOUT_S = 1800


class AicQuery(BaseModel):
    """One question as AIConfigurator's `cli_estimate` takes it: every field but `key` is one of its keyword
    arguments, by its name (None: left to AIConfigurator). `mode` agg is one worker's in-flight batching
    estimate; static_ctx one prefill pass of `batch_size` prompts, static_gen one decode step."""

    model_config = ConfigDict(frozen=True)

    key: str
    mode: str = "agg"
    model_path: str = AIC_MODEL
    system_name: str
    backend_name: str
    isl: int
    osl: int
    prefix: int = Field(0, description="prompt tokens found cached, of isl")
    batch_size: int = Field(description="sequences per attention rank of one worker")
    ctx_tokens: int | None = None
    tp_size: int
    attention_dp_size: int
    moe_tp_size: int
    moe_ep_size: int
    kvcache_quant_mode: str
    moe_quant_mode: str | None = Field(
        None, description="its MoE kernel; None: its own choice, the W4A16 MXFP4 kernel on every GPU"
    )
    nextn: int = 0
    nextn_accepted: float | None = None
    # mode disagg: each pool's worker, as the fields above name one worker of an aggregated pool
    prefill_tp_size: int | None = None
    prefill_attention_dp_size: int | None = None
    prefill_moe_tp_size: int | None = None
    prefill_moe_ep_size: int | None = None
    prefill_batch_size: int | None = None
    prefill_num_workers: int | None = None
    decode_tp_size: int | None = None
    decode_attention_dp_size: int | None = None
    decode_moe_tp_size: int | None = None
    decode_moe_ep_size: int | None = None
    decode_batch_size: int | None = None
    decode_num_workers: int | None = None


class AicEstimate(BaseModel):
    """AIConfigurator's answer for one row, or why it gave none."""

    key: str
    backend_version: str | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    tok_s_user: float | None = None
    tok_s_gpu: float | None = None
    concurrency: float | None = None
    kv_cache_warning: str | None = None
    breakdown: dict[str, float] | None = Field(None, description="a static estimate's time per operation, ms")
    error: str | None = None


class AicReference(BaseModel):
    """What `dynamo calibrate --aic` stored: the queries and AIConfigurator's estimates."""

    aiconfigurator: str
    queries: list[AicQuery]
    estimates: list[AicEstimate]

    def by_key(self) -> dict[str, AicEstimate]:
        return {estimate.key: estimate for estimate in self.estimates}


def aic_query(row: PublishedRow) -> AicQuery | None:
    """The row as AIConfigurator's aggregated estimate takes it; None for a row it cannot express."""
    layout = row.layout
    offline = row.requests <= row.concurrency  # every request queued at once: a ceiling, not a batch
    if set(layout.pools) != {"agg"} or offline:
        return None
    pool = layout.pools["agg"]
    batch = math.ceil(row.concurrency / (pool.workers * pool.ranks))
    drafts = pool.draft_tokens
    return AicQuery(
        key=row.key,
        **pool_fields(layout, "agg"),
        isl=row.workload.isl,
        osl=row.workload.osl,
        batch_size=batch,
        ctx_tokens=pool.max_num_tokens,
        nextn=drafts,
        nextn_accepted=row.workload.profile.tokens_per_step(drafts) - 1 if drafts else None,
    )


def pool_fields(layout: Layout, role: Role) -> dict[str, object]:
    """What AIConfigurator is told of one worker of a pool: its GPU, engine, parallelism, KV precision and
    MoE kernel. On Blackwell that kernel is named: TensorRT-LLM runs MXFP4 experts as W4A8 there (MXFP8
    activations, TensorRT-LLM blog 9, as the model charges them), and AIConfigurator's own choice, W4A16,
    is 2.4x slower at a batch-1 decode step on a B200 TP8 (59 against 142 ms of TTFT, 2.2 against 3.3 ms a
    step, 1k/2k)."""
    pool = layout.pools[role]
    ep = pool.expert_parallel
    blackwell_mxfp4 = layout.gpu.has_fp4 and layout.precision.experts == "mxfp4"
    return {
        "system_name": AIC_SYSTEMS[layout.hardware],
        "backend_name": layout.engine,
        "tp_size": 1 if pool.attention_dp else pool.tp,
        "attention_dp_size": pool.ranks,
        "moe_tp_size": pool.tp // ep,
        "moe_ep_size": ep,
        "kvcache_quant_mode": "fp8" if layout.precision.kv_cache == "fp8" else "bfloat16",
        "moe_quant_mode": "w4a8_mxfp4_mxfp8" if blackwell_mxfp4 else None,
    }


def run_aic(python: Path, queries: list[AicQuery]) -> AicReference:
    """AIConfigurator's estimates of `queries`, through `python`'s environment."""
    payload = json.dumps([query.model_dump() for query in queries])
    done = subprocess.run(
        [str(python), str(AIC_DRIVER_PATH)],
        input=payload,
        capture_output=True,
        text=True,
        timeout=AIC_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{python} {AIC_DRIVER_PATH.name} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    out = json.loads(done.stdout)
    if out["aiconfigurator"] != AIC_VERSION:
        raise RuntimeError(f"{python} has aiconfigurator {out['aiconfigurator']}, not {AIC_VERSION}")
    return AicReference(aiconfigurator=out["aiconfigurator"], queries=queries, estimates=out["estimates"])


def stored_reference() -> AicReference | None:
    """The estimates `dynamo calibrate --aic` last stored, if any."""
    if not AIC_REFERENCE_PATH.exists():
        return None
    return AicReference.model_validate_json(AIC_REFERENCE_PATH.read_text())


def aic_metric(estimate: AicEstimate | None, metric: str) -> float | None:
    """A calibration metric from AIConfigurator's estimate, on the row's publisher's definition: 1000 / TPOT
    for InferenceMAX's, its per-user rate for aiperf's, its TTFT for both TTFTs (a single point has no
    distribution)."""
    if estimate is None or estimate.error is not None:
        return None
    if metric == "tok_s_user_tpot":
        return 1000 / estimate.tpot_ms if estimate.tpot_ms else None
    if metric in ("ttft_ms", "ttft_p50_ms"):
        return estimate.ttft_ms
    if metric in ("tok_s_user", "tok_s_gpu"):
        return getattr(estimate, metric)
    return None  # tok_s_user_e2e: no row AIConfigurator is asked has it
