"""Engines a pool can run: one small interface, one module per engine (trtllm, mocker), or a package
for an engine of the project's own (gptoss).

A new engine is one module here, dynamo_oss/engines/NAME.py (or a package NAME/) with an `ENGINE`
object, and its name in dynamo_oss.catalog.names. Each engine reads its own configuration file once into an `EngineShape`, the one typed
description the rest of the tree uses (parallelism, batch and token limits, KV cache), and
owns everything else about its workers: command line, environment, ready timeout. The graph
names an engine per pool; `dynamo serve --engine mocker` swaps every pool's engine for
Dynamo's mocker and keeps the shape the pool's own engine read.
"""

from __future__ import annotations

import os

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from dynamo_oss.catalog.names import EngineName, PoolRole

DEFAULT_MAX_BATCH_SIZE = 2048  # TensorRT-LLM's max_batch_size when a configuration does not set it


class EngineArgsError(ValueError):
    """An engine configuration file the engine cannot use; the message says what and where."""


MAX_DRAFT_TOKENS = 5  # the most Dynamo's mocker simulates (--aic-nextn 1..5), and so what a graph may run


class Speculation(BaseModel):
    """Speculative decoding as a worker runs it: a draft head proposes tokens the model verifies in one step."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: Literal["eagle3"] = Field(description="the drafting method; EAGLE3 is the one gpt-oss has heads for")
    draft_tokens: int = Field(ge=1, le=MAX_DRAFT_TOKENS, description="tokens drafted per step and verified at once")
    draft_model: str = Field(min_length=1, description="the draft head: a Hugging Face name or a local folder")

    @property
    def local_draft(self) -> bool:
        """The draft head is a folder of this host, which a cluster's workers cannot read."""
        return self.draft_model.startswith(("/", "~"))


class EngineShape(BaseModel):
    """A worker's engine configuration as the rest of the tree sees it, in TensorRT-LLM's terms."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tensor_parallel: int = Field(1, ge=1, description="GPUs a layer's weights are split over (tensor_parallel_size)")
    pipeline_parallel: int = Field(1, ge=1, description="stages the layers are split into (pipeline_parallel_size)")
    expert_parallel: int | None = Field(
        None, ge=1, description="MoE expert-parallel degree (moe_expert_parallel_size); None: the engine's default"
    )
    attention_dp: bool = Field(False, description="attention data parallelism: each rank batches on its own")
    max_batch_size: int | None = Field(None, ge=1, description="most sequences per step, per attention rank")
    max_num_tokens: int | None = Field(None, ge=1, description="token budget of one step")
    max_seq_len: int | None = Field(None, ge=1, description="longest sequence (prompt plus output)")
    kv_cache_dtype: Literal["auto", "fp8", "bf16"] = Field("auto", description="KV cache elements")
    kv_block_size: int = Field(ge=1, description="tokens per KV cache block")
    max_attention_window: tuple[int, ...] | None = Field(
        None,
        description="each layer's attention window, repeating over the layers (kv_cache_config."
        "max_attention_window); None: every layer keeps the whole sequence in one KV pool",
    )
    speculative: Speculation | None = Field(None, description="speculative decoding; None: one token per step")
    kv_memory_bytes: int | None = Field(
        None,
        ge=1,
        description="most bytes of KV cache on each GPU (kv_cache_config.max_gpu_total_bytes); None: the "
        "free_gpu_memory_fraction of what the weights leave",
    )

    @property
    def gpus(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel

    @property
    def attention_ranks(self) -> int:
        """Schedulers per worker: one per GPU with attention DP, else one."""
        return self.tensor_parallel if self.attention_dp else 1

    @property
    def batched_sequences(self) -> int:
        """Sequences one worker batches at once, over its attention ranks."""
        return self.attention_ranks * (self.max_batch_size or DEFAULT_MAX_BATCH_SIZE)


class PlannedFile(BaseModel):
    """A file a command line names (a worker's profile, Prometheus's config), written by `dynamo serve` first."""

    path: Path
    purpose: str
    content: bytes = Field(exclude=True, repr=False)
    private: bool = False  # owner-only: it holds a secret (a URL's credentials)

    def write(self) -> Path:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.private:
            self.path.write_bytes(self.content)
            return self.path
        descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        os.fchmod(descriptor, 0o600)  # one written before, with other modes
        with os.fdopen(descriptor, "wb") as sink:
            sink.write(self.content)
        return self.path


class SimulatedTiming(BaseModel):
    """How fast and how big a simulated worker is, as the performance model (dynamo_oss.perf) says.

    Only a simulated engine (the mocker) uses it: a real engine's speed is the GPUs'.
    Capacities are per attention rank; the timing profile is a file the worker loads.
    """

    model_config = ConfigDict(frozen=True)

    profile: PlannedFile = Field(description="step-time tables (Dynamo's dynamo_profile .npz)")
    imitates: Literal["trtllm", "vllm"] = Field("trtllm", description="whose scheduler the simulated worker copies")
    attention_ranks: int = Field(ge=1, description="schedulers per worker, each with its own batch and KV")
    block_size: int = Field(ge=1, description="tokens per KV block")
    num_gpu_blocks: int = Field(ge=1, description="KV blocks per rank")
    max_num_seqs: int = Field(ge=1, description="most sequences per rank and step")
    max_num_batched_tokens: int = Field(ge=1, description="token budget of one step")
    kv_transfer_gbps: float | None = Field(None, description="prefill-to-decode KV handoff, decimal GB/s")
    kv_bytes_per_token: int | None = Field(None, description="KV bytes handed over per prompt token")
    accept_rates: tuple[float, ...] | None = Field(
        None,
        description="speculative decoding: one per draft token, the chance it is accepted when all before it "
        "were (the step times then include drafting and verifying); None: one token a step",
    )
    time_scale: float = Field(
        1.0,
        gt=0,
        description="live workers run this many times slower than modelled (steps and KV handoff alike), "
        "so a small machine keeps up; offline replay ignores it",
    )


class WorkerContext(BaseModel):
    """What an engine needs to know to start one worker of a pool."""

    role: PoolRole
    served_name: str
    model_path: str  # a local folder or a hub name
    model_folder: Path  # tokenizer, config and harmony chat template for the frontend
    max_context: int | None  # the model's context length, for the model card
    engine_args_file: Path | None
    shape: EngineShape
    endpoint: str  # dyn://namespace.component.generate
    response_trace: Path | None = None  # recorded responses the mocker replays (JSONL), by request annotation
    timing: SimulatedTiming | None = None  # for a simulated engine, from the performance model
    network_interface: str | None = None  # on a graph over several nodes: the NIC holding the node's address


class Engine(Protocol):
    name: EngineName
    ready_timeout_s: float  # how long a worker may take to register after it starts
    planner_backend: str  # the backend Dynamo's planner is configured with for its pools (it knows four)

    def planner_namespace(self, namespace: str) -> str:
        """Where Dynamo's planner finds the workers' forward-pass metrics and counts them."""

    def read_shape(self, engine_args: Path | None, gpus_per_worker: int) -> EngineShape:
        """Parse the pool's engine configuration once; raise EngineArgsError when it is unusable."""

    def unavailable_reason(self, gpus_needed: int, roles: frozenset[PoolRole]) -> str | None:
        """Why this host cannot run the engine's workers of `roles`, `gpus_needed` GPUs in all, or None when
        it can."""

    def worker_argv(self, ctx: WorkerContext) -> list[str]:
        """The worker's command line (after the Python interpreter)."""

    def worker_env(self, ctx: WorkerContext) -> dict[str, str]:
        """Environment the engine needs beyond the graph-wide variables."""

    def worker_files(self, ctx: WorkerContext) -> list[PlannedFile]:
        """Files the command line names that `dynamo serve` must write first."""

    def across_nodes(self, command: list[str], hosts: list[tuple[str, int]], env: list[str]) -> list[str] | None:
        """A worker's `command` (interpreter first) launched as one worker over several nodes, `hosts`
        being each node's address and GPUs, with the variables `env` passed to every rank; None when
        the engine cannot span nodes."""


def flags(options: Mapping[str, str]) -> list[str]:
    """A command line's `--flag value` pairs, in order."""
    return [part for flag, value in options.items() for part in (flag, value)]


def engine_for(name: EngineName) -> Engine:
    """The engine named in the catalog: module dynamo_oss.engines.NAME, whose ENGINE implements it."""
    return importlib.import_module(f"dynamo_oss.engines.{name}").ENGINE
