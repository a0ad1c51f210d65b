"""The boundary between graph files and the perf package's `Layout`, both ways.

A validated graph (dynamo_oss.graph.loader) becomes a `Layout` by reading TensorRT-LLM's own
keys in each pool's engine arguments: tensor_parallel_size, moe_expert_parallel_size,
enable_attention_dp, max_batch_size (per attention rank), max_num_tokens and
kv_cache_config.dtype. `graph_files` writes a `Layout` back as a graph file and its engine
files, which the graph loader accepts and `layout_from_graph` reads into the same layout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dynamo_oss.graph.loader import Graph, load_graph
from dynamo_oss.perf.layout import Layout, PoolLayout, Precision


def layout_from_graph(graph: Graph) -> Layout:
    """The `Layout` a validated graph describes (its model must be a built-in gpt-oss)."""
    spec = graph.spec
    if spec.model.builtin is None:
        raise ValueError(f'model "{spec.model.name}" is not a built-in gpt-oss model: the performance model has no shape')
    pools, kv_dtype = {}, "auto"
    for role, pool_spec in spec.pools.items():
        engine_args_file = graph.engine_args_file(pool_spec)
        args = yaml.safe_load(engine_args_file.read_text()) if engine_args_file else {}
        pool: dict[str, Any] = {
            "workers": pool_spec.workers,
            "tp": int(args.get("tensor_parallel_size", pool_spec.gpus_per_worker)),
            "attention_dp": bool(args.get("enable_attention_dp", False)),
        }
        for field, key in (
            ("ep", "moe_expert_parallel_size"),
            ("max_batch", "max_batch_size"),
            ("max_num_tokens", "max_num_tokens"),
        ):
            if key in args:
                pool[field] = int(args[key])
        if pool.get("ep") == pool["tp"]:
            del pool["ep"]  # the default: experts spread over every GPU of the worker
        pools[role] = PoolLayout(**pool)
        kv_dtype = (args.get("kv_cache_config") or {}).get("dtype", kv_dtype)
    return Layout(
        model=spec.model.builtin,
        hardware=spec.hardware.gpu,
        precision=Precision(kv_cache="fp8" if kv_dtype == "fp8" else "bf16"),
        pools=pools,
    )


def layout_from_file(path: str | Path) -> Layout:
    """The `Layout` of a graph file on disk (validated like `dynamo check`)."""
    return layout_from_graph(load_graph(Path(path)))


def engine_args_document(layout: Layout, role: str) -> dict[str, Any]:
    """TensorRT-LLM engine arguments (extra_llm_api_options) for one pool of `layout`."""
    pool = layout.pools[role]
    args: dict[str, Any] = {
        "backend": "pytorch",
        "tensor_parallel_size": pool.tp,
        "moe_expert_parallel_size": pool.expert_parallel,
        "enable_attention_dp": pool.attention_dp,
        "max_batch_size": pool.max_batch,
        "max_num_tokens": pool.max_num_tokens,
        "kv_cache_config": {
            "free_gpu_memory_fraction": 0.9,
            "dtype": "fp8" if layout.precision.kv_cache == "fp8" else "auto",
        },
    }
    if role != "decode":
        args["enable_chunked_prefill"] = True
    if role == "prefill":
        args["disable_overlap_scheduler"] = True  # prefill hands each request off after one step
    return args


def graph_files(layout: Layout, name: str) -> dict[str, str]:
    """The graph file that runs `layout` and its engine-args files, as {relative path: YAML}.

    `load_graph` reads them back into the same layout.
    """
    files, pools = {}, {}
    for role, pool in layout.pools.items():
        engine_file = f"engines/{name}-{role}.yaml"
        files[engine_file] = yaml.safe_dump(engine_args_document(layout, role), sort_keys=False)
        pools[role] = {
            "workers": pool.workers,
            "gpus_per_worker": pool.tp,
            "engine": "trtllm",
            "engine_args": engine_file,
        }
    graph = {
        "name": name,
        "model": layout.model,
        "hardware": {"gpu": layout.hardware, "gpus": layout.gpus},
        "pools": pools,
    }
    return {f"{name}.yaml": yaml.safe_dump(graph, sort_keys=False), **files}
