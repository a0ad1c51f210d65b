"""What the performance model is asked about: a deployment's layout and a workload.

A `Layout` is the perf package's own plain description of a graph: the model, the GPU,
the engine, the precision and one pool (`agg`) or two (`prefill`, `decode`). Graph
deployments map onto it through `graphs.layout_from_deployment`.

Parallelism follows TensorRT-LLM's names: `tp` is the worker's GPU count
(tensor_parallel_size), `ep` the MoE expert-parallel degree (moe_expert_parallel_size,
the rest of `tp` splits each expert), and `attention_dp` runs attention data-parallel
with one batch per GPU (enable_attention_dp).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dynamo_oss.catalog.hardware import HARDWARE, Hardware, HardwareName
from dynamo_oss.catalog.models import BUILTIN_MODELS, BuiltinModelName, ModelShape
from dynamo_oss.engines import MAX_DRAFT_TOKENS
from dynamo_oss.perf.speculation import PROFILES, AcceptanceProfile

Role = Literal["agg", "prefill", "decode"]
Mode = Literal["agg", "disagg"]
Engine = Literal["trtllm", "vllm"]

# A prefill worker's step budget: Dynamo's gpt-oss TensorRT-LLM guide runs prefill with
# max_num_tokens 16-20k (ai-dynamo/dynamo docs/backends/trtllm/gpt-oss.md: prefill 20000, decode
# 16384); aggregated workers keep TensorRT-LLM's default of 8192.
PREFILL_MAX_NUM_TOKENS = 16384


class Precision(BaseModel):
    """Storage precision of the expert weights and of the KV cache.

    Attention, embedding and output-head weights stay BF16 as in the published checkpoint.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    experts: Literal["mxfp4", "fp8", "bf16"] = Field(
        "mxfp4", description="MoE expert weights; the checkpoint ships MXFP4 (4.25 bits per weight)"
    )
    kv_cache: Literal["bf16", "fp8"] = Field("bf16", description="KV cache elements")


class PoolLayout(BaseModel):
    """One pool of identical workers."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workers: int = Field(1, ge=1, description="identical workers in the pool")
    tp: int = Field(1, ge=1, le=72, description="GPUs per worker (tensor_parallel_size)")
    ep: int | None = Field(None, ge=1, description="MoE expert-parallel degree; None means tp")
    attention_dp: bool = Field(False, description="attention data-parallel: one batch per GPU")
    max_batch: int = Field(1024, ge=1, description="most sequences running per attention rank (max_batch_size)")
    max_num_tokens: int = Field(
        8192, ge=256, description="token budget of one step; longer prompts are prefilled in chunks"
    )
    draft_tokens: int = Field(
        0,
        ge=0,
        le=MAX_DRAFT_TOKENS,
        description="EAGLE3 tokens drafted and verified per step (speculative decoding); 0: none",
    )
    windowed_kv: bool = Field(
        True,
        description="the engine keeps gpt-oss's window layers' KV in a pool of their own, 128 tokens a "
        "sequence (kv_cache_config.max_attention_window); False: every layer keeps the whole sequence",
    )

    kv_memory_bytes: int | None = Field(
        None,
        ge=1,
        description="most bytes of KV cache on each GPU (kv_cache_config.max_gpu_total_bytes); None: the "
        "share of free memory TensorRT-LLM takes by default",
    )

    @model_validator(mode="after")
    def _ep_divides_tp(self) -> PoolLayout:
        if self.tp % self.expert_parallel:
            raise ValueError(f"Got ep={self.expert_parallel} for tp={self.tp}. ep must divide tp.")
        return self

    @property
    def expert_parallel(self) -> int:
        return self.tp if self.ep is None else self.ep

    @property
    def ranks(self) -> int:
        """Attention ranks per worker, each with its own batch and KV cache."""
        return self.tp if self.attention_dp else 1

    @property
    def gpus(self) -> int:
        return self.workers * self.tp

    def describe(self) -> str:
        ep = self.expert_parallel
        parts = [f"TP{self.tp}"] + ([f"EP{ep}"] if ep > 1 else []) + (["ADP"] if self.attention_dp else [])
        parts += [f"EAGLE3-{self.draft_tokens}"] if self.draft_tokens else []
        return f"{self.workers}x{'/'.join(parts)}"


class Layout(BaseModel):
    """A whole deployment: either one aggregated pool or a prefill and a decode pool."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: BuiltinModelName = "gpt-oss-120b"
    hardware: HardwareName = "b200"
    engine: Engine = Field("trtllm", description="the engine the workers would run")
    precision: Precision = Precision()
    pools: dict[Role, PoolLayout]

    @model_validator(mode="after")
    def _pools_make_a_mode(self) -> Layout:
        if set(self.pools) not in ({"agg"}, {"prefill", "decode"}):
            raise ValueError(f"Got pools {sorted(self.pools)}. They must be either agg, or prefill and decode.")
        return self

    @property
    def mode(self) -> Mode:
        return "agg" if "agg" in self.pools else "disagg"

    @property
    def gpus(self) -> int:
        return sum(pool.gpus for pool in self.pools.values())

    @property
    def shape(self) -> ModelShape:
        return BUILTIN_MODELS[self.model]

    @property
    def gpu(self) -> Hardware:
        return HARDWARE[self.hardware]

    def describe(self) -> str:
        if self.mode == "agg":
            return f"agg {self.pools['agg'].describe()}"
        return f"disagg P {self.pools['prefill'].describe()} + D {self.pools['decode'].describe()}"


class Workload(BaseModel):
    """Fixed-length synthetic requests, as aiperf and Dynamo's synthetic replay send them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    isl: int = Field(ge=1, description="input tokens per request")
    osl: int = Field(ge=1, description="output tokens per request")
    acceptance: Literal["chat", "agentic"] = Field(
        "chat", description="the traffic's acceptance profile: how many drafted tokens a speculative pool keeps"
    )

    @property
    def profile(self) -> AcceptanceProfile:
        return PROFILES[self.acceptance]
