"""Engines a pool can run: one small interface, one module per engine (trtllm, mocker).

The graph names an engine per pool; `dynamo serve --engine mocker` swaps every pool's
engine for Dynamo's mocker without touching the rest of the graph.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from pydantic import BaseModel

from dynamo_oss.graph.schema import EngineName, PoolRole
from dynamo_oss.perf.layout import Layout


class WorkerContext(BaseModel):
    """What an engine needs to know to start one worker of a pool."""

    role: PoolRole
    served_name: str
    builtin_model: str | None  # gpt-oss-20b / gpt-oss-120b when the graph names a built-in model
    model_path: str  # a local folder or a hub name
    model_folder: Path  # tokenizer, config and harmony chat template for the frontend
    engine_args_file: Path | None
    engine_args: dict
    endpoint: str  # dyn://namespace.component.generate
    gpus_per_worker: int
    response_trace: Path | None = None  # recorded responses the mocker replays (JSONL), by request annotation
    layout: Layout | None = None  # the graph as the performance model sees it (built-in models only)
    run_dir: Path  # where per-run files (mocker timing profiles) go


class Engine(Protocol):
    name: EngineName

    def unavailable_reason(self, gpus_needed: int) -> str | None:
        """Why this host cannot run the engine, or None when it can."""

    def worker_argv(self, ctx: WorkerContext) -> list[str]:
        """The worker's command line (after the Python interpreter)."""

    def worker_env(self, ctx: WorkerContext) -> dict[str, str]:
        """Environment the engine needs beyond the graph-wide variables."""


def engine_for(name: EngineName) -> Engine:
    from dynamo_oss.engines.mocker import MockerEngine
    from dynamo_oss.engines.trtllm import TrtllmEngine

    return {"trtllm": TrtllmEngine(), "mocker": MockerEngine()}[name]
