"""`python -m dynamo_oss.engines.gptoss.worker`: the gptoss engine behind Dynamo's worker interface.

Dynamo's own Python backends run on `dynamo.common.backend`: its Rust `Worker` creates the runtime,
registers the model with the frontend (the card from `--model-folder`: the project's offline gpt-oss
tokenizer, config and harmony template, as the mocker worker registers), serves the generate endpoint,
publishes the engine's KV events and KV snapshot, drains and shuts down; the engine is the `LLMEngine`
it drives, this module's `GptOssLlmEngine`. Its `generate` follows the flow the frontend drives for
each role:
- aggregated: stream the tokens as the step loop samples them;
- prefill: one answer, the first token with its handoff descriptor (`disaggregated_params`), which the
  frontend hands to the decode worker it picks;
- decode: check the descriptor against the request (handoff.read_handoff), take blocks for it, pull the
  KV, then stream from the prefill's first token on, reporting the prefill's cache hits as the usage's.

The forward pass is the GPU model runner's (gpu_runner.py), and the KV's move from prefill to decode
its NIXL agent's (kv_transfer.py). On a host that cannot run them (no GPU, no torch, no triton_kernels,
and for a prefill or decode role no NIXL) this worker refuses to start, saying why, before it creates a
runtime or registers anything.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from dynamo._core import Context
from dynamo.common.backend import EngineConfig, GenerateChunk, GenerateRequest, LLMEngine, LlmRegistration, WorkerConfig
from dynamo.common.backend.publisher import KvEventSource, PushSource
from dynamo.common.backend.run import run
from dynamo.common.configuration.groups.runtime_args import DynamoRuntimeArgGroup, DynamoRuntimeConfig
from dynamo.common.constants import DisaggregationMode
from dynamo.common.utils.runtime import parse_endpoint
from dynamo.common.utils.token_ids import normalize_request_token_ids
from dynamo.llm import FpmDirectPublisher, ModelInput
from dynamo.llm.exceptions import Disconnected, EngineShutdown, InvalidArgument

from dynamo_oss.catalog.models import ModelShape
from dynamo_oss.engines import EngineArgsError
from dynamo_oss.engines.gptoss.block_manager import KvCacheManager
from dynamo_oss.engines.gptoss.capacity import KvCapacityError, plan_kv_blocks
from dynamo_oss.engines.gptoss.checkpoint import CheckpointError, open_checkpoint, read_config, shape_from_config
from dynamo_oss.engines.gptoss.config import GptOssArgs, read_engine_args
from dynamo_oss.engines.gptoss.engine import ENGINE
from dynamo_oss.engines.gptoss.engine_core import Emitted, EngineCore
from dynamo_oss.engines.gptoss.handoff import HandoffError, HandoffLedger, read_handoff
from dynamo_oss.engines.gptoss.kv_layout import kv_pools
from dynamo_oss.engines.gptoss.model_runner import RunnerSetup, RunnerUnavailable, open_runner
from dynamo_oss.engines.gptoss.request import RequestError, RequestLimits, read_request
from dynamo_oss.engines.gptoss.scheduler import Limits, Scheduler


class WorkerArgs(DynamoRuntimeConfig):
    """Dynamo's runtime options (namespace, endpoint, planes, parsers, template) and the engine's own."""

    component: str
    engine_args: str
    model_folder: str
    served_model_name: str
    checkpoint: str | None = None
    disaggregation_mode: DisaggregationMode = DisaggregationMode.AGGREGATED


def parse_worker_args(argv: list[str] | None = None) -> WorkerArgs:
    parser = argparse.ArgumentParser(
        prog="python -m dynamo_oss.engines.gptoss.worker",
        description="A gptoss engine worker behind Dynamo's worker interface (dynamo.common.backend).",
        allow_abbrev=False,
    )
    DynamoRuntimeArgGroup().add_arguments(parser)
    own = parser.add_argument_group("gptoss engine")
    own.add_argument("--engine-args", required=True, help="the engine arguments file (engines/gptoss/config.py)")
    own.add_argument(
        "--model-folder", required=True, help="tokenizer, config.json and chat template registered with the frontend"
    )
    own.add_argument("--served-model-name", required=True, help="the model name clients send")
    own.add_argument("--checkpoint", help="a local checkout of the weights; without one, random weights of the shape")
    roles = [DisaggregationMode.AGGREGATED, DisaggregationMode.PREFILL, DisaggregationMode.DECODE]
    own.add_argument("--disaggregation-mode", choices=[role.value for role in roles], default="agg", help="the role")
    config = WorkerArgs.from_cli_args(parser.parse_args(argv))
    config.disaggregation_mode = DisaggregationMode(config.disaggregation_mode)
    config.validate()
    if config.endpoint is None:
        parser.error("--endpoint is required: dyn://NAMESPACE.COMPONENT.ENDPOINT")
    config.namespace, config.component, config.endpoint = parse_endpoint(config.endpoint)
    return config


def model_shape(folder: Path) -> ModelShape:
    """The built-in gpt-oss model the model folder's config.json describes."""
    return shape_from_config(read_config(folder / "config.json"), str(folder / "config.json"))


class GptOssLlmEngine(LLMEngine):
    def __init__(self, args: WorkerArgs, engine_args: GptOssArgs, shape: ModelShape) -> None:
        self.args, self.engine_args, self.shape = args, engine_args, shape
        self.mode = args.disaggregation_mode
        self.max_seq_len = engine_args.max_seq_len or shape.max_context
        self.pools = kv_pools(shape, engine_args.kv_cache_config.tokens_per_block)
        self.core: EngineCore | None = None
        self.runner: Any = None
        self.worker_id: int | None = None
        self.fpm: FpmDirectPublisher | None = None

    @classmethod
    async def from_args(cls, argv: list[str] | None = None) -> tuple[GptOssLlmEngine, WorkerConfig]:
        args = parse_worker_args(argv)
        try:
            engine_args = read_engine_args(Path(args.engine_args))
            shape = model_shape(Path(args.model_folder))
        except (EngineArgsError, CheckpointError) as err:
            raise SystemExit(f"gptoss worker: {err}") from None
        reason = ENGINE.unavailable_reason(1, frozenset([args.disaggregation_mode.value]))
        if reason:  # before a runtime exists: nothing registers, nothing half-starts
            raise SystemExit(f"gptoss worker: cannot run on this host: {reason}")
        worker_config = WorkerConfig.from_runtime_config(
            args,
            model_name=args.model_folder,
            served_model_name=args.served_model_name,
            model_input=ModelInput.Tokens,
            enable_kv_routing=True,
        )
        return cls(args, engine_args, shape), worker_config

    async def start(self, worker_id: int) -> EngineConfig:
        self.worker_id = worker_id
        try:
            checkpoint = open_checkpoint(Path(self.args.checkpoint), self.shape) if self.args.checkpoint else None
            hands_over = self.mode != DisaggregationMode.AGGREGATED
            self.runner = open_runner(RunnerSetup(self.shape, self.engine_args, self.pools, checkpoint, hands_over))
            blocks = plan_kv_blocks(
                self.shape, self.pools, self.engine_args, self.runner.free_kv_bytes(), self.max_seq_len
            )
        except (CheckpointError, RunnerUnavailable, KvCapacityError) as err:
            raise EngineShutdown(f"gptoss worker: {err}") from None
        self.runner.allocate_kv(blocks)
        kv = KvCacheManager(self.pools, blocks, reuse=self.engine_args.kv_cache_config.enable_block_reuse)
        prefill = self.mode == DisaggregationMode.PREFILL
        limits = Limits(self.engine_args.max_batch_size, self.engine_args.max_num_tokens)
        ledger = HandoffLedger(self.engine_args.handoff_config.hold_timeout_s) if prefill else None
        self.core = EngineCore(Scheduler(limits, kv, keep_finished_kv=prefill), self.runner, self.shape, ledger)
        self.core.start()
        return EngineConfig(
            model=self.args.served_model_name,
            served_model_name=self.args.served_model_name,
            llm=LlmRegistration(
                context_length=self.max_seq_len,
                kv_cache_block_size=self.engine_args.kv_cache_config.tokens_per_block,
                total_kv_blocks=blocks["full"],
                max_num_seqs=self.engine_args.max_batch_size,
                max_num_batched_tokens=self.engine_args.max_num_tokens,
            ),
        )

    async def on_endpoint_ready(self, endpoint: Any) -> None:
        self.fpm = FpmDirectPublisher(endpoint, str(self.worker_id), 1)
        if self.core is not None:
            self.core.publishers.forward_pass = lambda fields: self.fpm.publish(**fields)  # type: ignore[union-attr]

    async def kv_event_sources(self) -> list[KvEventSource]:
        if not self.engine_args.kv_cache_config.enable_block_reuse:
            return []  # nothing kept for reuse: nothing for the router's prefix tree

        def ready(publisher: Any) -> None:
            if self.core is not None:
                self.core.publishers.kv_events = publisher.publish_batch

        return [PushSource(on_ready=ready, dp_rank=0)]

    def component_metrics_dp_ranks(self) -> list[int]:
        return [0]

    def attach_snapshot_publisher(self, publisher: Any) -> None:
        if self.core is not None:
            self.core.publishers.snapshot = lambda snapshot: publisher.publish(0, snapshot)

    async def generate(self, request: GenerateRequest, context: Context) -> AsyncGenerator[GenerateChunk, None]:
        assert self.core is not None, "generate follows start"
        normalize_request_token_ids(request)
        prefill_result = request.get("prefill_result")
        if self.mode == DisaggregationMode.PREFILL:  # the first token only: the decode worker does the rest
            stop = {**(request.get("stop_conditions") or {}), "max_tokens": 1, "min_tokens": 0}
            request = {**request, "stop_conditions": stop}
        limits = RequestLimits(self.shape.vocab_size, self.max_seq_len)
        try:
            seq = read_request(request, context.id() or uuid.uuid4().hex, limits)
            handoff, spans = None, None
            if self.mode == DisaggregationMode.DECODE:
                if not isinstance(prefill_result, dict):
                    raise RequestError("prefill_result: a decode worker needs the prefill worker's handoff")
                handoff, spans = read_handoff(prefill_result.get("disaggregated_params"), seq, self.pools, self.shape)
        except (RequestError, HandoffError) as err:
            raise InvalidArgument(str(err)) from None
        if handoff is not None:
            finished = seq.append(handoff.first_token)
            if finished is not None:  # the prefill's first token ends the answer: no KV needed
                chunk: GenerateChunk = {"token_ids": [handoff.first_token], "index": 0, "finish_reason": finished}
                chunk["completion_usage"] = usage(seq.prompt_len, 1, handoff.cached_tokens)
                yield chunk
                return
        stream: asyncio.Queue[Emitted] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        self.core.submit(seq, lambda emitted: loop.call_soon_threadsafe(stream.put_nowait, emitted), handoff, spans)
        cached = handoff.cached_tokens if handoff else None
        generated = 0
        while True:
            emitted = await stream.get()
            if emitted.error is not None:
                raise Disconnected(emitted.error)  # the frontend may migrate the request (--migration-limit)
            chunk = {"token_ids": [] if emitted.token is None else [emitted.token], "index": 0}
            generated += emitted.token is not None
            if emitted.handoff is not None:
                chunk["disaggregated_params"] = emitted.handoff.model_dump()
            if emitted.finish_reason is not None:
                chunk["finish_reason"] = emitted.finish_reason
                chunk["completion_usage"] = usage(
                    seq.prompt_len, generated, seq.num_cached if cached is None else cached
                )
                yield chunk
                return
            yield chunk

    async def abort(self, context: Context) -> None:
        if self.core is not None and context.id():
            self.core.abort(context.id())

    async def is_quiescent(self) -> bool | None:
        """A prefill worker drains until every handoff it holds has been read or has timed out."""
        return self.core.handoffs_pending == 0 if self.core is not None else True

    async def cleanup(self) -> None:
        core, self.core = self.core, None
        if core is not None:
            core.stop()
        runner, self.runner = self.runner, None
        if runner is not None:
            runner.close()
        fpm, self.fpm = self.fpm, None
        if fpm is not None:
            fpm.shutdown()


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    """A final chunk's usage, with the prompt's cache hits (the prefill worker's, on a decode worker)."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def main(argv: list[str] | None = None) -> None:
    run(GptOssLlmEngine, argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    main()
