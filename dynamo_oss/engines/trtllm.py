"""TensorRT-LLM workers (`python -m dynamo.trtllm`), for hosts with NVIDIA GPUs and TensorRT-LLM.

The pool's engine_args file is TensorRT-LLM's own LLM API configuration (what
`--extra-engine-args` takes). This module is the one place that reads its keys.

Structured outputs need TensorRT-LLM's guided decoding, which is off unless the file names a
backend: the gateway guides a completion with an llguidance (Lark) grammar (harmony/grammar.py),
so a file that names one must name llguidance, and the files this project writes do.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dynamo_oss.catalog.models import REASONING_PARSER, TOOL_CALL_PARSER
from dynamo_oss.catalog.names import PoolRole
from dynamo_oss.engines import (
    MAX_DRAFT_TOKENS,
    EngineArgsError,
    EngineShape,
    PlannedFile,
    Speculation,
    WorkerContext,
    flags,
)
from dynamo_oss.engines.args_file import read_args_file
from dynamo_oss.engines.host_gpus import gpu_shortfall

DEFAULT_TOKENS_PER_BLOCK = 32  # TensorRT-LLM's KV block, in tokens, when kv_cache_config does not say
GUIDED_DECODING_BACKEND = "llguidance"  # the grammars the gateway sends are llguidance's Lark
READY_TIMEOUT_S = 1800.0  # loading 61 GB of weights, building CUDA graphs and warming up


class _KvCacheKeys(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    dtype: Literal["auto", "fp8", "bf16"] = "auto"
    tokens_per_block: int = Field(DEFAULT_TOKENS_PER_BLOCK, ge=1)
    max_attention_window: list[Annotated[int, Field(ge=1)]] | None = Field(None, min_length=1)
    max_gpu_total_bytes: int = Field(0, ge=0)  # 0: TensorRT-LLM's default, the memory fraction alone


class _SpeculativeKeys(BaseModel):
    """TensorRT-LLM's speculative_config, as far as the shape needs it (Eagle3DecodingConfig's names)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    decoding_type: str
    max_draft_len: int | None = None
    speculative_model: str | None = None
    speculative_model_dir: str | None = None  # the older name TensorRT-LLM still accepts


class _LlmArgsKeys(BaseModel):
    """The keys of TensorRT-LLM's LLM API arguments the shape needs; the rest go to the engine untouched."""

    model_config = ConfigDict(extra="ignore", strict=True)

    tensor_parallel_size: int = Field(1, ge=1)
    pipeline_parallel_size: int = Field(1, ge=1)
    moe_expert_parallel_size: int | None = Field(None, ge=1)
    enable_attention_dp: bool = False
    max_batch_size: int | None = Field(None, ge=1)
    max_num_tokens: int | None = Field(None, ge=1)
    max_seq_len: int | None = Field(None, ge=1)
    kv_cache_config: _KvCacheKeys = _KvCacheKeys()
    speculative_config: _SpeculativeKeys | None = None
    # xgrammar would read the gateway's Lark grammars as EBNF and fail every structured request.
    guided_decoding_backend: Literal["llguidance"] | None = None


def read_llm_args(path: Path) -> EngineShape:
    """The shape of a TensorRT-LLM engine configuration file; EngineArgsError names the key."""
    keys = read_args_file(path, _LlmArgsKeys, "TensorRT-LLM engine arguments")
    speculative = _speculation(keys.speculative_config, path.name) if keys.speculative_config else None
    return EngineShape(
        tensor_parallel=keys.tensor_parallel_size,
        pipeline_parallel=keys.pipeline_parallel_size,
        expert_parallel=keys.moe_expert_parallel_size,
        attention_dp=keys.enable_attention_dp,
        max_batch_size=keys.max_batch_size,
        max_num_tokens=keys.max_num_tokens,
        max_seq_len=keys.max_seq_len,
        kv_cache_dtype=keys.kv_cache_config.dtype,
        kv_block_size=keys.kv_cache_config.tokens_per_block,
        max_attention_window=tuple(windows) if (windows := keys.kv_cache_config.max_attention_window) else None,
        speculative=speculative,
        kv_memory_bytes=keys.kv_cache_config.max_gpu_total_bytes or None,
    )


EAGLE3_DECODING_TYPES = ("Eagle3", "Eagle")  # Eagle runs as Eagle3 on TensorRT-LLM's PyTorch backend
HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _speculation(keys: _SpeculativeKeys, file: str) -> Speculation:
    """The speculation a speculative_config asks for; EngineArgsError names the key that cannot run."""
    where = f"{file}: speculative_config"
    if keys.decoding_type not in EAGLE3_DECODING_TYPES:
        raise EngineArgsError(
            f"{where}.decoding_type: {keys.decoding_type} is not supported; dynamo-oss runs EAGLE3 "
            "(decoding_type: Eagle3), the method gpt-oss has draft heads for"
        )
    drafts = keys.max_draft_len
    if drafts is None or not 1 <= drafts <= MAX_DRAFT_TOKENS:
        raise EngineArgsError(
            f"{where}.max_draft_len: must be 1 to {MAX_DRAFT_TOKENS} draft tokens a step (got {drafts!r}); "
            f"Dynamo's mocker and the performance model run at most {MAX_DRAFT_TOKENS}"
        )
    model = keys.speculative_model or keys.speculative_model_dir
    if model is None:
        raise EngineArgsError(
            f"{where}.speculative_model: missing; name the EAGLE3 draft head, a Hugging Face name such as "
            "nvidia/gpt-oss-120b-Eagle3-v3 or a local folder"
        )
    speculation = Speculation(method="eagle3", draft_tokens=drafts, draft_model=model)
    problem = _draft_model_problem(speculation)
    if problem:
        raise EngineArgsError(f"{where}.speculative_model: {problem}")
    return speculation


def _draft_model_problem(speculation: Speculation) -> str | None:
    """Why a worker could not load the draft head: a local folder must hold a checkpoint, and anything
    else must be a Hugging Face name, which TensorRT-LLM downloads (on a cluster, into the model cache)."""
    model = speculation.draft_model
    if speculation.local_draft:
        folder = Path(model).expanduser()
        if not folder.is_dir():
            return f"folder not found: {folder}"
        if not (folder / "config.json").is_file():
            return f"{folder} has no config.json: expected a Hugging Face checkout of the draft head"
        return None
    if HUB_NAME.match(model) and not model.startswith("."):
        return None
    return f"{model!r} is neither a Hugging Face name (ORG/NAME) nor an absolute folder"


def llm_args_document(shape: EngineShape, role: PoolRole) -> dict[str, Any]:
    """TensorRT-LLM engine arguments for a worker of `shape` in `role`, as a graph's engine file holds them."""
    args: dict[str, Any] = {
        "tensor_parallel_size": shape.tensor_parallel,
        "moe_expert_parallel_size": shape.expert_parallel or shape.tensor_parallel,
        "enable_attention_dp": shape.attention_dp,
        "max_batch_size": shape.max_batch_size,
        "max_num_tokens": shape.max_num_tokens,
        "kv_cache_config": {
            "free_gpu_memory_fraction": 0.9,
            "dtype": shape.kv_cache_dtype,
            **({"max_attention_window": list(shape.max_attention_window)} if shape.max_attention_window else {}),
            **({"max_gpu_total_bytes": shape.kv_memory_bytes} if shape.kv_memory_bytes else {}),
        },
        "guided_decoding_backend": GUIDED_DECODING_BACKEND,
    }
    if shape.speculative is not None:
        args["speculative_config"] = {
            "decoding_type": "Eagle3",
            "max_draft_len": shape.speculative.draft_tokens,
            "speculative_model": shape.speculative.draft_model,
        }
    if role != "decode":
        args["enable_chunked_prefill"] = True
    if role == "prefill":
        args["disable_overlap_scheduler"] = True  # prefill hands each request off after one step
    return args


class TrtllmEngine:
    name: Literal["trtllm"] = "trtllm"
    ready_timeout_s: float = READY_TIMEOUT_S
    planner_backend: str = "trtllm"

    def read_shape(self, engine_args: Path | None, gpus_per_worker: int) -> EngineShape:
        if engine_args is None:
            raise EngineArgsError("engine trtllm needs engine_args: a TensorRT-LLM engine configuration YAML")
        return read_llm_args(engine_args)

    def planner_namespace(self, namespace: str) -> str:
        return namespace  # its workers publish forward-pass metrics where they serve

    def unavailable_reason(self, gpus_needed: int, roles: frozenset[PoolRole]) -> str | None:
        reasons = [shortfall] if (shortfall := gpu_shortfall(gpus_needed)) else []
        if importlib.util.find_spec("tensorrt_llm") is None:
            reasons.append("TensorRT-LLM is not installed (import tensorrt_llm fails)")
        return "; ".join(reasons) or None

    def worker_argv(self, ctx: WorkerContext) -> list[str]:
        assert ctx.engine_args_file is not None, "read_shape refuses trtllm without engine_args"
        options = {
            "--model-path": ctx.model_path,
            "--served-model-name": ctx.served_name,
            "--extra-engine-args": str(ctx.engine_args_file),
            "--disaggregation-mode": ctx.role,
            "--endpoint": ctx.endpoint,
            # The frontend renders prompts with our harmony template, identical for every checkout.
            "--custom-jinja-template": str(ctx.model_folder / "chat_template.jinja"),
            "--dyn-reasoning-parser": REASONING_PARSER,
            "--dyn-tool-call-parser": TOOL_CALL_PARSER,
        }
        return ["-m", "dynamo.trtllm", *flags(options)]

    def worker_env(self, ctx: WorkerContext) -> dict[str, str]:
        # The environment of Dynamo's published gpt-oss-120b TensorRT-LLM recipes (recipes/gpt-oss-120b/trtllm).
        return {
            "TRTLLM_ENABLE_PDL": "1",  # programmatic dependent launch: kernels overlap their prologues
            "TRT_LLM_DISABLE_LOAD_WEIGHTS_IN_PARALLEL": "True",
            "NCCL_GRAPH_REGISTER": "0",  # no NCCL buffer registration inside CUDA graphs
            "OMPI_MCA_coll_ucc_enable": "0",  # Open MPI's UCC collectives off; TensorRT-LLM starts ranks with MPI
            # Over several nodes, the KV handoff's side channel (NIXL's agent metadata, or UCX's) must
            # listen on, and advertise, the address the graph gives the node, not whatever interface
            # the default route leaves: TensorRT-LLM takes that interface by name.
            **(
                {"TRTLLM_NIXL_INTERFACE": ctx.network_interface, "TRTLLM_UCX_INTERFACE": ctx.network_interface}
                if ctx.network_interface
                else {}
            ),
        }

    def worker_files(self, ctx: WorkerContext) -> list[PlannedFile]:
        return []

    def across_nodes(self, command: list[str], hosts: list[tuple[str, int]], env: list[str]) -> list[str] | None:
        # As Dynamo documents a multi-node TensorRT-LLM worker: every rank in one MPI world, each
        # wrapped by trtllm-llmapi-launch; rank 0, on the first node, is the one that registers.
        # Open MPI starts the other nodes' ranks over SSH, with the same GPU indices on each node.
        slots = ",".join(f"{address}:{gpus}" for address, gpus in hosts)
        ranks = {"-np": str(sum(gpus for _, gpus in hosts)), "-H": slots}
        pml = ["--mca", "pml", "ob1"]  # the operator's choice for multi-node TensorRT-LLM workers
        forwarded = [flag for name in env for flag in ("-x", name)]
        return ["mpirun", "--allow-run-as-root", *flags(ranks), *pml, *forwarded, "trtllm-llmapi-launch", *command]


ENGINE = TrtllmEngine()
