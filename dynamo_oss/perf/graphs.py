"""The boundary between deployments and the perf package's `Layout`, both ways.

A deployment (dynamo_oss.deployment) becomes a `Layout` through its pools' engine shapes,
which each engine read from its own configuration file. `graph_files` writes a `Layout`
back as a graph file and its TensorRT-LLM engine files, which `layout_from_file` reads
into the same layout. `simulated_timings` is what `dynamo serve --engine mocker` runs at.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dynamo_oss.catalog.models import BUILTIN_MODELS, PUBLISHED_DRAFT_HEADS
from dynamo_oss.catalog.names import PoolRole
from dynamo_oss.deployment.model import Deployment, build_deployment
from dynamo_oss.engines import EngineShape, SimulatedTiming, Speculation
from dynamo_oss.engines.trtllm import DEFAULT_TOKENS_PER_BLOCK, llm_args_document
from dynamo_oss.graph.errors import GraphError, Problem
from dynamo_oss.graph.loader import load_graph
from dynamo_oss.perf.kv_cache import gpt_oss_windows, window_problem
from dynamo_oss.perf.layout import Layout, PoolLayout, Precision
from dynamo_oss.perf.profiles import simulated_timing


def layout_from_deployment(deployment: Deployment) -> Layout:
    """The `Layout` a deployment describes; GraphError when the model cannot time it."""
    if deployment.model.builtin is None:
        raise GraphError(
            str(deployment.source),
            [
                Problem(
                    path="model",
                    message=f'"{deployment.model.served_name}" is not a built-in gpt-oss model: '
                    "the performance model has no shape for it",
                )
            ],
        )
    pools: dict[str, PoolLayout] = {}
    model = BUILTIN_MODELS[deployment.model.builtin]
    for pool in deployment.pools:
        shape = pool.shape
        windows = shape.max_attention_window
        if windows is not None and (problem := window_problem(model, windows)):
            raise GraphError(
                str(deployment.source),
                [
                    Problem(
                        path=f"pools.{pool.role}.engine_args", message=f"kv_cache_config.max_attention_window {problem}"
                    )
                ],
            )
        if shape.pipeline_parallel > 1:
            raise GraphError(
                str(deployment.source),
                [
                    Problem(
                        path=f"pools.{pool.role}.engine_args",
                        message=f"pipeline_parallel_size "
                        f"{shape.pipeline_parallel}: the performance model times tensor and expert parallelism only",
                    )
                ],
            )
        fields: dict[str, Any] = {
            "workers": pool.workers,
            "tp": shape.tensor_parallel,
            "attention_dp": shape.attention_dp,
            "windowed_kv": windows is not None and min(windows) < model.max_context,
            "draft_tokens": shape.speculative.draft_tokens if shape.speculative else 0,
        }
        if shape.expert_parallel not in (None, shape.tensor_parallel):
            fields["ep"] = shape.expert_parallel
        if shape.max_batch_size is not None:
            fields["max_batch"] = shape.max_batch_size
        if shape.max_num_tokens is not None:
            fields["max_num_tokens"] = shape.max_num_tokens
        if shape.kv_memory_bytes is not None:
            fields["kv_memory_bytes"] = shape.kv_memory_bytes
        try:
            pools[pool.role] = PoolLayout(**fields)
        except ValueError as err:
            raise GraphError(
                str(deployment.source),
                [Problem(path=f"pools.{pool.role}", message=f"the performance model cannot time this pool: {err}")],
            ) from None
    fp8 = any(pool.shape.kv_cache_dtype == "fp8" for pool in deployment.pools)
    return Layout(
        model=deployment.model.builtin,
        hardware=deployment.hardware,
        precision=Precision(kv_cache="fp8" if fp8 else "bf16"),
        pools=pools,
    )


def layout_from_file(path: str | Path) -> Layout:
    """The `Layout` of a graph file on disk (validated like `dynamo check`)."""
    return layout_from_deployment(build_deployment(load_graph(Path(path))))


def simulated_timings(deployment: Deployment, folder: Path, time_scale: float = 1.0) -> dict[PoolRole, SimulatedTiming]:
    """The modelled speed of each mocker pool of a built-in model, profiles to be written in `folder`,
    run `time_scale` times slower than modelled.

    Empty when no pool runs the mocker or the model has no known shape: the mocker then keeps
    its default timing.
    """
    mocked = [pool.role for pool in deployment.pools if pool.engine == "mocker"]
    if not mocked or deployment.model.builtin is None:
        return {}
    layout = layout_from_deployment(deployment)
    return {
        role: simulated_timing(layout, role, folder / f"{role}.npz").model_copy(update={"time_scale": time_scale})
        for role in mocked
    }


def _speculation(layout: Layout, pool: PoolLayout) -> Speculation | None:
    """The EAGLE3 speculation a planned pool runs: the model's published head, drafting the pool's tokens."""
    if not pool.draft_tokens:
        return None
    return Speculation(method="eagle3", draft_tokens=pool.draft_tokens, draft_model=PUBLISHED_DRAFT_HEADS[layout.model])


def graph_files(layout: Layout, name: str) -> dict[str, str]:
    """The graph file that runs `layout` and its engine-args files, as {relative path: YAML}."""
    files, pools = {}, {}
    for role, pool in layout.pools.items():
        engine_file = f"engines/{name}-{role}.yaml"
        shape = EngineShape(
            tensor_parallel=pool.tp,
            expert_parallel=pool.expert_parallel,
            attention_dp=pool.attention_dp,
            max_batch_size=pool.max_batch,
            max_num_tokens=pool.max_num_tokens,
            kv_cache_dtype="fp8" if layout.precision.kv_cache == "fp8" else "auto",
            kv_block_size=DEFAULT_TOKENS_PER_BLOCK,
            max_attention_window=gpt_oss_windows(layout.shape) if pool.windowed_kv else None,
            speculative=_speculation(layout, pool),
            kv_memory_bytes=pool.kv_memory_bytes,
        )
        files[engine_file] = yaml.safe_dump(llm_args_document(shape, role), sort_keys=False)
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
