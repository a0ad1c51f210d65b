"""The gptoss engine's arguments file: what one worker batches, how its KV cache is laid out and sized,
and how long a prefill worker keeps KV it has handed over.

Keys carry TensorRT-LLM's names where the setting is the same one (max_batch_size, max_num_tokens,
max_seq_len, kv_cache_config.tokens_per_block, free_gpu_memory_fraction, enable_block_reuse), so an
operator reads both engines' files alike; unknown keys are errors. The graph's pool names the file
(`engine_args`), `dynamo check` reads it once into the pool's `EngineShape`, and the worker reads the
same file at start: one setting, one name, one default.

What is not here, and why: the model and its checkpoint are the graph's (`model`, `model.path`); the
attention window, layers and heads are the model's (its config.json); each worker runs on one GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dynamo_oss.engines import EngineShape
from dynamo_oss.engines.args_file import read_args_file

DEFAULT_TOKENS_PER_BLOCK = 32  # TensorRT-LLM's, so the router's, the handoff's and the cache's blocks agree
DEFAULT_CUDA_GRAPH_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class KvCacheConfig(_Strict):
    tokens_per_block: int = Field(
        DEFAULT_TOKENS_PER_BLOCK, ge=1, le=1024, description="tokens per KV block, in every pool"
    )
    dtype: Literal["bf16"] = Field(
        "bf16", description="KV elements; bf16 only: the forward step's attention kernels read bf16 KV"
    )
    free_gpu_memory_fraction: float = Field(
        0.9, gt=0, le=1, description="share of the memory left after weights and activations that the KV pools take"
    )
    max_tokens: int | None = Field(
        None,
        ge=1,
        description="context tokens the full-attention pool holds at most; unset, all the memory fraction "
        "gives. More than the GPU holds is refused at start, with the numbers",
    )
    enable_block_reuse: bool = Field(
        True,
        description="keep finished prompts' blocks for later requests with the same prefix (and publish KV events)",
    )


class CudaGraphConfig(_Strict):
    batch_sizes: list[int] = Field(
        list(DEFAULT_CUDA_GRAPH_BATCHES),
        min_length=1,
        description="decode batch sizes captured as CUDA graphs; a decode step pads to the next one",
    )

    @field_validator("batch_sizes")
    @classmethod
    def _ascending(cls, sizes: list[int]) -> list[int]:
        if any(size < 1 for size in sizes) or sizes != sorted(set(sizes)):
            raise ValueError(f"must be positive batch sizes in ascending order, each once; got {sizes}")
        return sizes


class HandoffConfig(_Strict):
    hold_timeout_s: float = Field(
        120.0,
        gt=0,
        le=3600,
        description="a prefill worker keeps a handed-over request's blocks this long for its decode worker to "
        "read, then frees them (a decode worker that never came)",
    )
    transfer_timeout_s: float = Field(
        10.0,
        gt=0,
        le=600,
        description="a decode worker's read of a request's KV from its prefill worker fails past this (a peer "
        "gone); the request then ends with an error Dynamo's frontend may migrate",
    )
    timing_log: str | None = Field(
        None,
        description="a file a decode worker appends one JSON line to for every handoff it reads (request, bytes, "
        "descriptors, milliseconds from posting the read to seeing it done): for measurements; unset, none",
    )


class GptOssArgs(_Strict):
    """One worker's engine arguments."""

    tensor_parallel_size: int = Field(1, description="GPUs per worker: 1 (the engine runs each worker on one GPU)")
    max_batch_size: int = Field(256, ge=1, le=4096, description="most sequences in one step")
    max_num_tokens: int = Field(
        8192, ge=1, description="token budget of one step: every decode's token plus the prefill chunks beside them"
    )
    max_seq_len: int | None = Field(None, ge=2, description="longest sequence, prompt and output; unset: the model's")
    kv_cache_config: KvCacheConfig = KvCacheConfig()
    cuda_graph_config: CudaGraphConfig = CudaGraphConfig()
    handoff_config: HandoffConfig = HandoffConfig()
    seed: int = Field(0, ge=0, description="seeds random weights (no checkpoint) and unseeded sampling")

    @field_validator("tensor_parallel_size")
    @classmethod
    def _one_gpu(cls, tensor_parallel: int) -> int:
        if tensor_parallel != 1:
            raise ValueError(f"the gptoss engine runs each worker on one GPU, so it must be 1; got {tensor_parallel}")
        return tensor_parallel

    @model_validator(mode="after")
    def _graphs_within_batch(self) -> GptOssArgs:
        largest = self.cuda_graph_config.batch_sizes[-1]
        if largest > self.max_batch_size:
            raise ValueError(
                f"cuda_graph_config.batch_sizes goes up to {largest}, past max_batch_size {self.max_batch_size}: "
                "no decode step is that large"
            )
        return self

    def shape(self) -> EngineShape:
        """The arguments as the rest of the tree sees a worker."""
        return EngineShape(
            tensor_parallel=self.tensor_parallel_size,
            max_batch_size=self.max_batch_size,
            max_num_tokens=self.max_num_tokens,
            max_seq_len=self.max_seq_len,
            kv_cache_dtype=self.kv_cache_config.dtype,
            kv_block_size=self.kv_cache_config.tokens_per_block,
        )


def read_engine_args(path: Path) -> GptOssArgs:
    """The file at `path`; EngineArgsError names the key that is wrong."""
    return read_args_file(path, GptOssArgs, "gptoss engine arguments")
