"""Step costs of gpt-oss on one worker: a roofline per kernel group, plus named overheads.

One engine step runs every decoder layer once over the step's tokens: new prompt tokens
(prefill, possibly a chunk of a longer prompt) and one token per decoding sequence, in one
pass that reads the weights once. Each kernel group (attention projections, the prompt
tokens' attention, the decode batch's attention, the MoE experts, the output head) costs
the larger of its FLOPs at the reachable tensor rate and its bytes at the reachable HBM
bandwidth; the groups run one after another. Collectives between the worker's GPUs
and fixed overheads come on top. Only `Factors` are not derived from shapes
(`models.ModelShape`) and datasheets (`hardware.Hardware`); how close kernels and links get
to the datasheet is an `Efficiencies` per GPU generation: measured on H200s for Hopper
(hopper_measured.json), priors for Blackwell.

All times are for one attention rank (the whole worker unless attention is data-parallel)
with every rank of the worker equally loaded, in milliseconds. Inputs may be numpy arrays:
profiles evaluate whole grids at once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from pydantic import BaseModel, ConfigDict, Field

from dynamo_oss.catalog.hardware import ComputeDtype, Hardware
from dynamo_oss.catalog.models import DraftHead, ModelShape
from dynamo_oss.perf.kv_cache import KvCache
from dynamo_oss.perf.layout import Engine, Layout, PoolLayout, Precision, Role

BYTES_PER_ELEMENT = {"bf16": 2.0, "fp8": 1.0, "mxfp4": 4.25 / 8}  # MXFP4: 4 bits + an 8-bit scale per 32
DENSE_BYTES = 2.0  # attention, embedding and head weights and activations are BF16

# Memory left for the KV cache: TensorRT-LLM gives it this fraction of what is free after the
# weights (kv_cache_free_gpu_memory_fraction of blog 9's max-throughput config) ...
KV_MEMORY_FRACTION = 0.9
# ... after this reserve for the CUDA context, activations, CUDA graphs and workspaces (an
# assumption: no published figure splits it out).
RUNTIME_RESERVE_BYTES = 6e9


_FRACTION = {"gt": 0, "le": 1}


class Efficiencies(BaseModel):
    """How close one GPU generation's kernels and links get to its datasheet (`hardware.Hardware`).

    `compute`, `memory` and `link` are fractions of the datasheet rates; the expert and attention
    fields are fractions of the `compute` or `memory` rate that those kernels reach on top, so 1.0
    means "as fast as a plain GEMM / a copy".
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    compute: float = Field(description="fraction of peak tensor FLOP/s that dense GEMMs reach", **_FRACTION)
    memory: float = Field(description="fraction of HBM bandwidth that streaming weight and KV reads reach", **_FRACTION)
    link: float = Field(description="fraction of NVLink (or NIC) bandwidth that collectives reach", **_FRACTION)
    kv_handoff: float = Field(
        description="fraction of NVLink bandwidth that a prefill-to-decode KV handoff reaches", **_FRACTION
    )
    expert_compute: float = Field(
        1.0, description="MoE expert GEMMs when compute-bound, share of `compute`", **_FRACTION
    )
    expert_memory: float = Field(1.0, description="MoE expert weight reads, share of `memory`", **_FRACTION)
    expert_memory_mxfp4: float | None = Field(
        None,
        description="MoE expert weight reads when the experts are MXFP4, share of `memory` (on Hopper they run "
        "W4A16: the kernel unpacks FP4 to BF16 tiles); None: as `expert_memory`",
        **_FRACTION,
    )
    attention_compute: float = Field(1.0, description="attention FLOPs (prefill), share of `compute`", **_FRACTION)


HOPPER_MEASURED_PATH = Path(__file__).with_name("hopper_measured.json")
MEASURED_GPUS = ("h200",)  # where hopper_measured.json's efficiencies were measured
# The fitted compute efficiency is Blackwell's: only Blackwell has long-input rows to pin it. The H100,
# neither measured nor covered at long input, keeps the prior its short-input rows fit.
PRIOR_COMPUTE_EFFICIENCY = 0.76
PRIOR_COMPUTE_GPUS = ("h100",)


def hopper_measured() -> Efficiencies:
    """Hopper's efficiencies as measured on H200s (benchmarks/gpu/CALIBRATION.md): written by
    `uv run python benchmarks/gpu/hopper_factors.py` from the two results.json files there."""
    return Efficiencies.model_validate(json.loads(HOPPER_MEASURED_PATH.read_text())["efficiencies"])


class Factors(BaseModel):
    """Everything the model does not derive: how close engines get to the hardware.

    Defaults are the priors; `calibration` fits the overheads to published serving figures
    and stores them in fitted_factors.json (see `fitted_factors`). Hopper GPUs use the
    efficiencies measured on H200s (`hopper`, from hopper_measured.json, not refitted);
    the three efficiencies below apply to the others (Blackwell).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    compute_efficiency: float = Field(
        PRIOR_COMPUTE_EFFICIENCY,
        gt=0,
        le=1,
        description="Fraction of peak tensor FLOP/s that GEMMs and attention reach on Blackwell. Prior 0.76, "
        "from a first H200 check (a bf16 GEMM 8192x2880x5760 at about 750 of 989 TFLOP/s); fitted since the "
        "calibration has 8k-input rows, whose prefill it sets. The H100 keeps the prior.",
    )
    memory_efficiency: float = Field(
        0.90,
        gt=0,
        le=1,
        description="Fraction of HBM bandwidth that streaming weights and KV reach (Blackwell). A prior: device "
        "copy about 4.3 of 4.8 TB/s on a lent H200.",
    )
    link_efficiency: float = Field(
        0.87,
        gt=0,
        le=1,
        description="Fraction of NVLink bandwidth reached by collectives and KV transfers (Blackwell; NIC "
        "transfers everywhere). A prior: peer copy 391 of 450 GB/s between two NVLinked H200s.",
    )
    hopper: Efficiencies | None = Field(
        default_factory=hopper_measured,
        exclude=True,  # stored in hopper_measured.json, not in fitted_factors.json
        description="Efficiencies measured on H200s, used for the H200 (MEASURED_GPUS); None gives it the "
        "three priors above, as the model had them before the measurements.",
    )
    layer_overhead_us: float = Field(
        40.0,
        ge=0,
        description="Fixed time per decoder layer per step: launch gaps and the floor of the dozen small "
        "kernels (norms, RoPE, routing, quantisation, sampling prep) that no roofline term covers, even "
        "under CUDA graphs. Fitted.",
    )
    collective_latency_us: float = Field(
        8.0,
        ge=0,
        description="Latency of one collective between a worker's GPUs (two per layer when tp > 1), on "
        "top of its bytes over NVLink: about that of TensorRT-LLM's one-shot NVLink all-reduce for small "
        "messages. A prior, not fitted: the published points cannot tell it from the layer overhead "
        "(every multi-GPU point pays both, the one TP1 point is bound by HBM).",
    )
    sequence_overhead_us: float = Field(
        20.0,
        ge=0,
        description="Host time per running sequence per step: scheduling, sampling, detokenising and "
        "streaming, which grows with the batch. Fitted.",
    )
    engine_overhead_factor: dict[Engine, float] = Field(
        default_factory=lambda: {"trtllm": 1.0, "vllm": 1.5},
        description="Per-engine factor: the engine's fixed costs (the three overheads above) relative to "
        "TensorRT-LLM's, which the model targets. Rooflines do not depend on the engine. vLLM's is fitted "
        "on the published vLLM rows (all on Hopper).",
    )
    verify_routing_overlap: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Share of the experts a verified draft position routes to that the position before it "
        "in the same sequence already routed to: the weights a speculative step reads grow by (1 - this) "
        "of a token's experts per draft. Fitted on the published speculative rows.",
    )
    verified_draft_overhead_us: float = Field(
        10.0,
        ge=0,
        description="Time per drafted token verified, beyond its rooflines: the routing, permutes and "
        "sampling every position of the pass pays, which grows with the batch where the rooflines do not. "
        "Fitted on the published speculative rows.",
    )
    draft_step_layers: float = Field(
        2.0,
        ge=0,
        description="Fixed time of one EAGLE3 draft pass, in decoder layers' `layer_overhead_us`: its "
        "fused projection, layer, output head and sampling are a few more kernels than one layer's. Fitted "
        "on the published speculative rows (it comes out near 0: under CUDA graphs a draft pass costs its "
        "rooflines).",
    )
    client_ttft_overhead_ms: float = Field(
        25.0,
        ge=0,
        description="Request path outside the engine that client-side TTFT includes and the mocker does "
        "not simulate: HTTP, tokenisation, scheduling hand-off, first chunk back. Fitted; added only when "
        "comparing with published TTFT.",
    )

    def efficiencies(self, gpu: Hardware) -> Efficiencies:
        """The efficiencies `gpu` runs at: measured ones where we measured (H200), else the priors.
        H100 keeps the priors: its HBM3 and its kernels were not measured, and the H200 values
        put the published H100 figures past the tolerance."""
        if gpu.name in MEASURED_GPUS and self.hopper is not None:
            return self.hopper
        return Efficiencies(
            compute=PRIOR_COMPUTE_EFFICIENCY if gpu.name in PRIOR_COMPUTE_GPUS else self.compute_efficiency,
            memory=self.memory_efficiency,
            link=self.link_efficiency,
            kv_handoff=self.link_efficiency,
        )


FITTED_FACTORS_PATH = Path(__file__).with_name("fitted_factors.json")


def fitted_factors() -> Factors:
    """The factors last fitted by `dynamo calibrate --refit` (the priors if never fitted)."""
    if FITTED_FACTORS_PATH.exists():
        return Factors.model_validate_json(FITTED_FACTORS_PATH.read_text())
    return Factors()


def kv_shards(pool: PoolLayout, shape: ModelShape) -> int:
    """GPUs that split one sequence's KV: its KV heads split up to their count, then replicate;
    under attention DP a sequence lives on one GPU."""
    return 1 if pool.attention_dp else min(pool.tp, shape.num_key_value_heads)


def window_key_sum(position: ArrayLike, window: int) -> np.ndarray:
    """Keys attended by the first `position` tokens of a sequence in a sliding-window layer, summed."""
    x = np.asarray(position, dtype=float)
    return np.where(x <= window, x * (x + 1) / 2, window * (window + 1) / 2 + (x - window) * window)


def attention_spans(cached: ArrayLike, new: ArrayLike, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean keys each of `new` tokens attends in full and in window layers, after `cached` tokens."""
    cached = np.asarray(cached, dtype=float)
    new = np.maximum(np.asarray(new, dtype=float), 1e-9)
    full = cached + (new + 1) / 2
    windowed = (window_key_sum(cached + new, window) - window_key_sum(cached, window)) / new
    return full, windowed


class CostModel:
    """Step times of one pool's worker for a model, a GPU and a precision."""

    def __init__(
        self,
        shape: ModelShape,
        gpu: Hardware,
        pool: PoolLayout,
        precision: Precision | None = None,
        engine: Engine = "trtllm",
        factors: Factors | None = None,
    ) -> None:
        self.shape, self.gpu, self.pool, self.precision = shape, gpu, pool, precision or Precision()
        self.factors = factors or Factors()
        self.efficiency = self.factors.efficiencies(gpu)
        self.overhead_factor = self.factors.engine_overhead_factor[engine]

    @classmethod
    def for_pool(cls, layout: Layout, role: Role, factors: Factors | None = None) -> CostModel:
        return cls(layout.shape, layout.gpu, layout.pools[role], layout.precision, layout.engine, factors)

    # ---- shapes -----------------------------------------------------------------------
    @property
    def attention_params_per_layer(self) -> float:
        """Q, K, V and O projections plus the router: the dense weights of one layer."""
        s = self.shape
        q = s.num_attention_heads * s.head_dim
        kv = 2 * s.num_key_value_heads * s.head_dim
        return s.hidden_size * (q + kv) + q * s.hidden_size + s.hidden_size * s.num_experts

    @property
    def expert_params(self) -> float:
        """One expert: fused gate and up projection (SwiGLU) and down projection."""
        return 3 * self.shape.hidden_size * self.shape.intermediate_size

    @property
    def vocab_params(self) -> float:
        return self.shape.vocab_size * self.shape.hidden_size

    @property
    def kv_element_bytes(self) -> float:
        return BYTES_PER_ELEMENT[self.precision.kv_cache]

    @property
    def draft_head(self) -> DraftHead:
        """The EAGLE3 head a speculative pool runs, at the model's widths."""
        return DraftHead(target=self.shape)

    @property
    def kv_cache(self) -> KvCache:
        """One attention rank's KV cache as TensorRT-LLM lays it out (`kv_cache`)."""
        return KvCache(
            shape=self.shape,
            element_bytes=self.kv_element_bytes,
            kv_shards=self._kv_shards,
            windowed=self.pool.windowed_kv,
        )

    # ---- sharding ---------------------------------------------------------------------
    @property
    def _attention_shards(self) -> int:
        """GPUs that split one sequence's attention weights and FLOPs (1 under attention DP)."""
        return 1 if self.pool.attention_dp else self.pool.tp

    @property
    def _kv_shards(self) -> int:
        return kv_shards(self.pool, self.shape)

    @property
    def _moe_dtype(self) -> ComputeDtype:
        """MXFP4 experts run as W4A8 (MXFP8 activations) on Blackwell and as W4A16 on Hopper
        (TensorRT-LLM blog 9, 'Using the MXFP4 checkpoints')."""
        experts = self.precision.experts
        if experts == "mxfp4":
            return "fp8" if self.gpu.has_fp4 else "bf16"
        return experts

    @property
    def _expert_memory(self) -> float:
        """Expert weight reads' share of `memory`: MXFP4 experts (the checkpoint's) have their own where it
        was measured (the H200); other dtypes, and MXFP4 elsewhere, the BF16-derived `expert_memory`."""
        e = self.efficiency
        if self.precision.experts == "mxfp4" and e.expert_memory_mxfp4 is not None:
            return e.expert_memory_mxfp4
        return e.expert_memory

    def weight_bytes_per_gpu(self) -> float:
        """Weights resident on each GPU: experts split over all GPUs, the rest per attention shard."""
        s = self.shape
        dense = (self.attention_params_per_layer * s.num_layers + 2 * self.vocab_params) * DENSE_BYTES
        experts = s.num_experts * s.num_layers * self.expert_params * BYTES_PER_ELEMENT[self.precision.experts]
        return dense / self._attention_shards + experts / self.pool.tp

    def kv_budget_bytes(self) -> float:
        """KV cache memory on each GPU: a fraction of what the weights and the runtime leave, or less
        where the engine caps it (kv_cache_config.max_gpu_total_bytes: the smaller of the two is used)."""
        free = self.gpu.hbm_bytes - self.weight_bytes_per_gpu() - RUNTIME_RESERVE_BYTES
        budget = max(0.0, KV_MEMORY_FRACTION * free)
        return budget if self.pool.kv_memory_bytes is None else min(budget, float(self.pool.kv_memory_bytes))

    def kv_capacity_tokens(self) -> int:
        """Context tokens the full-attention KV of one attention rank holds (its blocks times 32)."""
        return self.kv_cache.context_tokens(self.kv_budget_bytes())

    def largest_batch(self, context: int) -> int:
        """Most sequences of `context` tokens one attention rank runs at once: its batch limit, or
        what its KV cache holds, whichever is fewer."""
        return min(self.pool.max_batch, self.kv_cache.sequences(self.kv_budget_bytes(), context))

    # ---- one step -----------------------------------------------------------------------
    def _roofline(
        self, flops: np.ndarray, nbytes: np.ndarray, dtype: ComputeDtype, compute: float = 1.0, memory: float = 1.0
    ) -> np.ndarray:
        """Time of a kernel group: its FLOPs or its bytes, whichever takes longer; `compute` and
        `memory` are the group's own share of the GEMM and copy rates (`Efficiencies`)."""
        e = self.efficiency
        return np.maximum(
            flops / (self.gpu.flops(dtype) * e.compute * compute),
            nbytes / (self.gpu.hbm_bandwidth * e.memory * memory),
        )

    def step_terms(
        self,
        *,
        prefill_tokens: ArrayLike = 0.0,
        prefill_full_span: ArrayLike = 0.0,
        prefill_window_span: ArrayLike = 0.0,
        prefill_seqs: ArrayLike = 0.0,
        decode_seqs: ArrayLike = 0.0,
        decode_context: ArrayLike = 0.0,
        draft_tokens: int | None = None,
    ) -> dict[str, np.ndarray]:
        """Each named term of one step, in seconds; the step time is their sum.

        prefill_tokens: new prompt tokens in the step; their mean attention spans in full and
        window layers come from `attention_spans`; prefill_seqs: prompts whose last token is in
        the step (they need the output head); decode_seqs: sequences decoding at mean context
        decode_context. draft_tokens (default: the pool's): with N > 0 each decoding sequence is
        verified at N + 1 positions in the pass (they share one read of its KV) and the draft head
        then drafts N tokens (`_draft_head`), a speculative step as TensorRT-LLM's one-model EAGLE3 runs it.
        """
        s, f, pool = self.shape, self.factors, self.pool
        drafts = pool.draft_tokens if draft_tokens is None else draft_tokens
        n = np.asarray(prefill_tokens, dtype=float)
        seqs = np.asarray(decode_seqs, dtype=float)
        b = seqs * (drafts + 1)  # decode positions in the pass
        ctx = np.asarray(decode_context, dtype=float)
        tokens = n + b
        moe_tokens = tokens * pool.ranks  # the MoE of a worker sees every rank's tokens
        shards = self._attention_shards
        full, win = s.full_attention_layers, s.window_layers

        prefill_keys = n * (full * np.asarray(prefill_full_span) + win * np.asarray(prefill_window_span))
        context_keys = full * ctx + win * np.minimum(ctx, s.sliding_window)
        kv_layer_token = s.kv_bytes_per_layer_token(self.kv_element_bytes)

        # A sequence's verified positions are consecutive tokens, whose routers pick many of the same experts.
        routed = (n + seqs * (1 + drafts * (1 - f.verify_routing_overlap))) * pool.ranks
        touched = s.num_experts * (1 - (1 - s.experts_per_token / s.num_experts) ** routed)
        expert_bytes = self.expert_params * BYTES_PER_ELEMENT[self.precision.experts]
        head_rows = b + np.asarray(prefill_seqs, dtype=float)

        terms = {
            "attention_projections": self._roofline(
                2 * self.attention_params_per_layer * s.num_layers * tokens / shards,
                np.full_like(tokens, self.attention_params_per_layer * s.num_layers * DENSE_BYTES / shards),
                "bf16",
            ),
            # The prompt tokens' attention and the decode batch's are two kernels, one after the other
            # (TensorRT-LLM's context and generation attention), so the batch's KV reads do not hide
            # behind the chunk's FLOPs: with one roofline over both, the model's mixed step over its
            # parts came out up to 25% below that measured on an H200 (benchmarks/gpu/mixed_step).
            "prefill_attention": self._attention(prefill_keys, n * s.num_layers * kv_layer_token),
            "decode_attention": self._attention(b * context_keys, seqs * context_keys * kv_layer_token),
            "experts": self._roofline(
                2 * self.expert_params * s.experts_per_token * s.num_layers * moe_tokens / pool.tp,
                touched * expert_bytes * s.num_layers / pool.tp,
                self._moe_dtype,
                compute=self.efficiency.expert_compute,
                memory=self._expert_memory,
            ),
            "output_head": self._roofline(
                2 * self.vocab_params * head_rows / shards,
                np.where(head_rows > 0, self.vocab_params * DENSE_BYTES / shards, 0.0),
                "bf16",
            ),
            "collectives": s.num_layers * self._collective_seconds(tokens),
            "layer_overhead": np.full_like(tokens, s.num_layers * f.layer_overhead_us * 1e-6 * self.overhead_factor),
            "sequence_overhead": (
                (seqs + np.asarray(prefill_seqs, dtype=float)) * f.sequence_overhead_us
                + seqs * drafts * f.verified_draft_overhead_us
            )
            * 1e-6
            * self.overhead_factor,
            "draft_head": self._draft_head(n, np.asarray(prefill_full_span, dtype=float), seqs, ctx, drafts),
        }
        return terms

    def _draft_head(
        self, prompt_tokens: np.ndarray, prompt_span: np.ndarray, seqs: np.ndarray, context: np.ndarray, drafts: int
    ) -> np.ndarray:
        """The EAGLE3 head's work in a step of a speculative pool: it reads the step's prompt tokens once
        (building its KV), then drafts `drafts` tokens per decoding sequence, one pass each: the first
        over the verified positions (N + 1 a sequence), the others over one. A pass is one dense BF16
        layer with its attention over the context, the output head for one row a sequence, and the
        fixed cost of `draft_step_layers` layers. AIConfigurator charges each draft as a layer of the
        model itself, MoE included, which for gpt-oss is heavier than its EAGLE3 heads are."""
        if drafts == 0:
            return np.zeros(np.broadcast(prompt_tokens, seqs, context).shape)
        head, s, f = self.draft_head, self.shape, self.factors
        shards = self._attention_shards
        kv_token = s.kv_bytes_per_layer_token(self.kv_element_bytes)

        def dense(params: float, rows: np.ndarray) -> np.ndarray:
            weights = np.where(rows > 0, params * DENSE_BYTES / shards, 0.0)
            return self._roofline(2 * params * rows / shards, weights, "bf16")

        def layer(rows: np.ndarray, keys: np.ndarray, kv_bytes: np.ndarray) -> np.ndarray:
            attention = self._attention(keys, kv_bytes)
            return dense(head.layer_params, rows) + attention + self._collective_seconds(rows)

        verified = seqs * (drafts + 1)
        first = layer(
            prompt_tokens + verified,
            prompt_tokens * prompt_span + verified * context,
            (prompt_tokens + seqs * context) * kv_token,
        )
        later = (drafts - 1) * layer(seqs, seqs * context, seqs * context * kv_token)
        heads = drafts * dense(head.head_params, seqs)
        fixed = drafts * f.draft_step_layers * f.layer_overhead_us * 1e-6 * self.overhead_factor
        return first + np.where(seqs > 0, later + heads + fixed, 0.0)

    def _attention(self, keys: np.ndarray, kv_bytes: np.ndarray) -> np.ndarray:
        """One attention kernel over `keys` query-key pairs (all layers), reading or writing `kv_bytes` of KV.

        Its two matrix products run in BF16 whatever the KV cache stores: gpt-oss's checkpoint quantizes
        only its experts, so TensorRT-LLM computes attention in BF16 and an FP8 cache only halves the
        bytes (AIConfigurator infers its FMHA precision from the checkpoint the same way, and its
        measured FP8 context FMHA is no faster). And no faster than the exponential units take the
        softmax between them, one exponential per pair and head: at gpt-oss's 64-dimensional heads a
        pair is 256 FLOPs of the products, so on Blackwell (8,192 BF16 FLOPs per SM and clock against 16
        exponentials) the softmax, not the tensor cores, sets a long prompt's attention
        (FlashAttention-4's finding at 128 dimensions, doubled here)."""
        heads = self.shape.num_attention_heads / self._attention_shards
        products = self._roofline(
            4 * self.shape.head_dim * heads * keys,
            kv_bytes / self._kv_shards,
            "bf16",
            compute=self.efficiency.attention_compute,
        )
        return np.maximum(products, heads * keys / self.gpu.exp_rate)

    def _collective_seconds(self, tokens: np.ndarray) -> np.ndarray:
        """Two collectives per layer between the worker's GPUs, for the step's activations.

        Tensor-parallel attention all-reduces the hidden states after attention and after the
        MoE (ring: 2(tp-1)/tp of the bytes over each link). Attention-DP dispatches each token
        to its 4 experts' GPUs and combines the results (all-to-all).
        """
        pool, s, f = self.pool, self.shape, self.factors
        if pool.tp == 1:
            return np.zeros_like(tokens)
        link = self.gpu.nvlink_bandwidth * self.efficiency.link
        hidden_bytes = tokens * s.hidden_size * DENSE_BYTES
        if pool.attention_dp:
            moved = 2 * hidden_bytes * s.experts_per_token * (pool.tp - 1) / pool.tp
        else:
            moved = 2 * hidden_bytes * 2 * (pool.tp - 1) / pool.tp
        return moved / link + 2 * f.collective_latency_us * 1e-6 * self.overhead_factor

    def step_ms(self, **batch: ArrayLike) -> np.ndarray:
        """Time of one step in milliseconds (see `step_terms` for the arguments)."""
        return 1e3 * sum(self.step_terms(**batch).values())

    # ---- the three kinds of step ----------------------------------------------------
    def prefill_ms(self, new_tokens: ArrayLike, cached_tokens: ArrayLike = 0) -> np.ndarray:
        """A prefill step of one prompt: `new_tokens` after `cached_tokens` of context."""
        full, win = attention_spans(cached_tokens, new_tokens, self.shape.sliding_window)
        return self.step_ms(prefill_tokens=new_tokens, prefill_full_span=full, prefill_window_span=win, prefill_seqs=1)

    def prompt_ms(self, prompt_tokens: float, cached_tokens: float = 0) -> float:
        """Prefill of one whole prompt alone, in the pool's chunks of at most max_num_tokens; the
        first `cached_tokens` of it are found in the KV cache and not computed again."""
        new = max(prompt_tokens - cached_tokens, 1)
        chunks = -(-new // self.pool.max_num_tokens)
        full, win = attention_spans(cached_tokens, new, self.shape.sliding_window)
        return chunks * float(
            self.step_ms(
                prefill_tokens=new / chunks,
                prefill_full_span=full,
                prefill_window_span=win,
                prefill_seqs=1 / chunks,
            )
        )

    def decode_ms(self, batch: ArrayLike, context: ArrayLike) -> np.ndarray:
        """A decode step of `batch` sequences at mean context `context`, per attention rank."""
        return self.step_ms(decode_seqs=batch, decode_context=context)

    def mixed_ms(
        self, new_tokens: ArrayLike, cached_tokens: ArrayLike, batch: ArrayLike, context: ArrayLike
    ) -> np.ndarray:
        """An aggregated engine's step: a prefill chunk beside a decode batch, in one pass."""
        full, win = attention_spans(cached_tokens, new_tokens, self.shape.sliding_window)
        return self.step_ms(
            prefill_tokens=new_tokens,
            prefill_full_span=full,
            prefill_window_span=win,
            prefill_seqs=1,
            decode_seqs=batch,
            decode_context=context,
        )


HandoffLink = Literal["nvlink", "nic"]


def handoff_link(layout: Layout) -> HandoffLink:
    """Prefill and decode GPUs inside one NVLink domain hand KV over NVLink, else over the NIC."""
    return "nvlink" if layout.gpus <= layout.gpu.nvlink_domain else "nic"


def kv_handoff_bandwidth(layout: Layout, factors: Factors | None = None) -> float:
    """Bytes/s from a prefill worker to a decode worker.

    Each GPU holding a KV shard sends it over its own link, so as many links work in
    parallel as the pool with fewer shards has. Over NVLink a handoff reaches the
    generation's `kv_handoff` efficiency (NIXL's, measured on H200s), over a NIC `link`.
    """
    factors = factors or Factors()
    efficiency = factors.efficiencies(layout.gpu)
    prefill, decode = layout.pools["prefill"], layout.pools["decode"]
    senders = min(kv_shards(prefill, layout.shape), kv_shards(decode, layout.shape))
    if handoff_link(layout) == "nvlink":
        return senders * layout.gpu.nvlink_bandwidth * efficiency.kv_handoff
    return senders * layout.gpu.nic_bandwidth * efficiency.link


def kv_handoff_ms(layout: Layout, prompt_tokens: int, factors: Factors | None = None) -> float:
    """Time to move one prompt's KV from the prefill pool to the decode pool."""
    nbytes = CostModel.for_pool(layout, "prefill", factors).kv_cache.sequence_bytes(prompt_tokens)
    return 1e3 * nbytes / kv_handoff_bandwidth(layout, factors)
