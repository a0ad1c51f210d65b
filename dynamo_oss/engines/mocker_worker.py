"""`python -m dynamo_oss.engines.mocker_worker <dynamo.mocker arguments>`: Dynamo's mocker, speaking harmony.

Why: the stock mocker emits random token ids, so Dynamo's gpt_oss parser finds no harmony
channel and every answer is empty; and it refuses a request without max_tokens. A replay trace
cannot fix either (it ignores max_tokens and ignore_eos lengths, is keyed only by a per-request
annotation and is fixed at start), so the ids are swapped in the stream instead.

Dynamo's mocker engine is Rust: `run_input` serves it on an endpoint and no generated token
passes through Python. So this module runs the unchanged engine on a core endpoint in a
namespace no frontend watches (`mocker-core-<namespace>`), and serves the public endpoint
itself with a handler that forwards each request there and swaps the token ids in the
stream for the request's harmony completion (`harmony.answers.completion_for`). Both endpoints
live in one DistributedRuntime, so they share the worker's instance id; the public model
card names the core endpoint as its `kv_state_endpoint`, so the KV router reads the
engine's KV events for this worker as before. The engine still decides every step's
timing and every KV block; the handler only chooses the ids and, since a model stops at
`<|return|>`, asks the engine for as many tokens as the completion has (this also serves
requests without max_tokens, which the engine rejects).

A request's cache salt (`nvext.cache_salt`, or the `x-tenant-id` the gateway sets per tenant)
reaches the worker, but the stock mocker keys its KV blocks by token ids alone, where
TensorRT-LLM keys them by ids and salt: so the handler shifts the prompt's ids the engine sees
by an offset the salt decides (`_salted`), and the mocker's prefix cache, and the `cached_tokens`
it reports, isolate tenants as a real worker's do. A decode worker reports the cache hits its
prefill worker found, not its own (`_as_prefilled`), as Dynamo's TensorRT-LLM worker does.

Requests that carry `output_replay_id:KEY` for a KEY of the loaded --response-replay-trace-path
pass through untouched: the engine replays that recorded stream (the conformance suite's).
The frontend takes its reasoning and tool-call parsers from the model card, which the stock
mocker leaves empty; this card names gpt-oss's, as a TensorRT-LLM worker's flags do.

Everything else (arguments, timing profiles, --num-workers, signals) is dynamo.mocker's
own `main`, with three of its names replaced.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import dynamo.mocker.main as mocker_main
from dynamo.llm import ModelInput, ModelRuntimeConfig, ModelType, WorkerType, register_model

from dynamo_oss.catalog.models import GPT_OSS_120B, REASONING_PARSER, TOOL_CALL_PARSER
from dynamo_oss.engines.cache_salt import cache_salt
from dynamo_oss.engines.harmony.answers import Completion, completion_for
from dynamo_oss.engines.mocker import CORE_NAMESPACE_PREFIX

ENGINE_START_TIMEOUT_S = 120.0
REPLAY_ANNOTATION = "output_replay_id:"  # the engine replays a recorded response: leave it alone

log = logging.getLogger(__name__)

_stock_build_runtime_config = mocker_main.build_runtime_config
_stock_entrypoint_args = mocker_main.EntrypointArgs
_stock_run_input = mocker_main.run_input


@dataclass
class _PendingWorker:
    """What mocker_main builds for one worker before `run_input`, kept for the public card."""

    runtime_config: ModelRuntimeConfig | None = None
    block_size: int | None = None
    entrypoint: dict[str, Any] | None = None


_pending = _PendingWorker()


def core_endpoint(public: str) -> str:
    """`dyn://ns.backend.generate` -> `mocker-core-ns.backend.generate`."""
    namespace, component, endpoint = public.removeprefix("dyn://").split(".")
    return f"{CORE_NAMESPACE_PREFIX}{namespace}.{component}.{endpoint}"


def build_runtime_config(engine_args: Mapping[str, Any]) -> tuple[int, ModelRuntimeConfig]:
    block_size, runtime_config = _stock_build_runtime_config(engine_args)
    runtime_config.reasoning_parser = REASONING_PARSER
    runtime_config.tool_call_parser = TOOL_CALL_PARSER
    _pending.block_size, _pending.runtime_config = block_size, runtime_config
    return block_size, runtime_config


def entrypoint_args(**kwargs: Any) -> Any:
    """The engine's arguments with its endpoint moved to the core namespace."""
    _pending.entrypoint = dict(kwargs)
    return _stock_entrypoint_args(**{**kwargs, "endpoint_id": "dyn://" + core_endpoint(kwargs["endpoint_id"])})


def run_input(runtime: Any, public: str, engine_config: Any) -> Any:
    """What mocker_main awaits for one worker. It builds all workers before awaiting any,
    so this worker's card settings are taken now, not when the coroutine runs."""
    assert _pending.entrypoint is not None and _pending.runtime_config is not None, "mocker_main built no worker"
    worker = _PendingWorker(_pending.runtime_config, _pending.block_size, _pending.entrypoint)
    return _serve(runtime, public, engine_config, worker)


async def _start(runtime: Any, public: str, engine_config: Any, worker: _PendingWorker) -> Any:
    """Start the engine on the core endpoint, register the public card; returns what serves both."""
    entry, runtime_config, block_size = worker.entrypoint, worker.runtime_config, worker.block_size
    assert entry is not None and runtime_config is not None
    core = core_endpoint(public)
    engine = asyncio.ensure_future(_stock_run_input(runtime, "dyn://" + core, engine_config))

    client = await runtime.endpoint(core).client()
    endpoint = runtime.endpoint(public)
    instance_id = endpoint.connection_id()
    # Every worker of a pool serves its engine under the same core endpoint: wait for this one's own.
    deadline = time.monotonic() + ENGINE_START_TIMEOUT_S
    while instance_id not in client.instance_ids():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the mocker engine at {core} did not register within {ENGINE_START_TIMEOUT_S:.0f} s")
        await asyncio.sleep(0.1)  # polling the client's view of discovery, with the deadline above
    context_length = runtime_config.context_length or None

    replayable = _replay_keys(entry)

    async def generate(request: dict[str, Any], context: Any) -> AsyncIterator[dict[str, Any]]:
        if _replays(request, replayable):  # --response-replay-trace-path rows are already real tokens
            stream = await client.direct(_salted(request), instance_id, context=context)
            async for chunk in _as_prefilled(_within_max_tokens(stream, request), request):
                yield chunk
            return
        completion = completion_for(request, context_length)
        stream = await client.direct(_salted(_asking_for(request, completion)), instance_id, context=context)
        answer = _with_harmony_ids(
            stream, completion, prompt_tokens=len(request.get("token_ids") or []), ignore_eos=_ignores_eos(request)
        )
        async for chunk in _as_prefilled(answer, request):
            yield chunk

    runtime_config.kv_state_endpoint = core  # the engine's KV events and recovery state
    model_type, worker_type, needs = _registration(entry)
    await register_model(
        ModelInput.Tokens,
        model_type,
        endpoint,
        entry["model_path"],
        entry.get("model_name"),
        worker_type=worker_type,
        needs=needs,
        kv_cache_block_size=block_size,
        runtime_config=runtime_config,
        router_config=entry.get("router_config"),
    )
    log.info("harmony mocker: serving %s over the mocker engine at %s", public, core)
    return asyncio.gather(endpoint.serve_endpoint(generate), engine)


async def _serve(runtime: Any, public: str, engine_config: Any, worker: _PendingWorker) -> None:
    """Serve the engine and the harmony endpoint; a failure to start is logged, since
    mocker_main gathers its workers with return_exceptions=True and would hide it."""
    try:
        serving = await _start(runtime, public, engine_config, worker)
    except Exception:
        log.exception("harmony mocker: the worker for %s did not start", public)
        raise
    await serving


def _salted(request: dict[str, Any]) -> dict[str, Any]:
    """The request as the engine's prefix cache should see it: every prompt id shifted (modulo the
    vocabulary) by an offset its cache salt decides. A tenant's turns still share their prefix, two
    tenants' never do; the prompt's length, and so the engine's timing, are unchanged."""
    salt = cache_salt(request)
    if not salt:
        return request
    vocabulary = GPT_OSS_120B.vocab_size
    offset = int.from_bytes(hashlib.sha256(salt.encode()).digest()[:8], "big") % (vocabulary - 1) + 1
    return {**request, "token_ids": [(token + offset) % vocabulary for token in request.get("token_ids") or []]}


def _asking_for(request: dict[str, Any], completion: Completion) -> dict[str, Any]:
    """The request with the completion's length as its token budget (at least one token)."""
    stop = dict(request.get("stop_conditions") or {})
    stop["max_tokens"] = max(len(completion.tokens), 1)
    if stop.get("min_tokens"):
        stop["min_tokens"] = min(stop["min_tokens"], stop["max_tokens"])
    return {**request, "stop_conditions": stop}


async def _as_prefilled(
    stream: AsyncIterator[dict[str, Any]], request: Mapping[str, Any]
) -> AsyncIterator[dict[str, Any]]:
    """A decode's stream with the prompt details its prefill worker reported, as Dynamo's TensorRT-LLM
    worker writes them (dynamo/trtllm/request_handlers/handler_base.py adopts the request's
    `prefill_result`): the frontend passes the decode worker's usage on as the answer's (Dynamo
    4239), and the prompt's cache hits happened on the prefill worker. The mocker engine counts its
    own hits instead, which are another worker's cache (a decode worker restarted since, or one of
    several) and so a wrong figure to bill."""
    details = (request.get("prefill_result") or {}).get("prompt_tokens_details")
    async for chunk in stream:
        if details is not None and chunk.get("completion_usage"):
            chunk = {**chunk, "completion_usage": {**chunk["completion_usage"], "prompt_tokens_details": details}}
        yield chunk


async def _with_harmony_ids(
    stream: AsyncIterator[Any], completion: Completion, *, prompt_tokens: int, ignore_eos: bool
) -> AsyncIterator[dict[str, Any]]:
    """Each engine chunk with its token ids replaced by the completion's next ids.

    A finished completion ends on the chunk that carries its `<|return|>` or `<|call|>`,
    with finish_reason "stop" and the usage, as an engine that stops there reports it: the
    frontend closes the stream at that token, so a later chunk would have nowhere to go.
    """
    position = 0
    tokens = completion.tokens
    filler = tokens[-1:] or [0]
    usage: dict[str, Any] = {}
    async for item in stream:
        chunk = item.data() if hasattr(item, "data") else item
        if chunk is None:
            continue
        usage = chunk.get("completion_usage") or usage
        ids = chunk.get("token_ids") or []
        if not ids:
            yield chunk
            continue
        replaced = tokens[position : position + len(ids)]
        position += len(ids)
        chunk = {**chunk, "token_ids": replaced + filler * (len(ids) - len(replaced))}
        if completion.finished and position >= len(tokens) and not ignore_eos:
            done = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": position,
                "total_tokens": prompt_tokens + position,
            }
            yield {**chunk, "finish_reason": "stop", "completion_usage": {**usage, **done}}
            return
        yield chunk


async def _within_max_tokens(stream: AsyncIterator[Any], request: Mapping[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """A replayed stream cut at the request's max_tokens, ending in `length` as a model's would: the
    engine replays a recording whole, whatever the request's budget."""
    budget = (request.get("stop_conditions") or {}).get("max_tokens")
    sent = 0
    async for item in stream:
        chunk = item.data() if hasattr(item, "data") else item
        if chunk is None:
            continue
        ids = chunk.get("token_ids") or []
        if budget is None or sent + len(ids) <= budget:
            sent += len(ids)
            yield chunk
            continue
        kept = ids[: budget - sent]
        prompt = len(request.get("token_ids") or [])
        usage = {
            **(chunk.get("completion_usage") or {}),
            "prompt_tokens": prompt,
            "completion_tokens": budget,
            "total_tokens": prompt + budget,
        }
        yield {**chunk, "token_ids": kept, "finish_reason": "length", "completion_usage": usage}
        return


def _replays(request: Mapping[str, Any], keys: frozenset[str]) -> bool:
    """The request asks for a recorded stream the engine holds (an unknown key would get random ids)."""
    annotations = [str(a) for a in request.get("annotations") or []]
    return any(a.startswith(REPLAY_ANNOTATION) and a.removeprefix(REPLAY_ANNOTATION) in keys for a in annotations)


def _replay_keys(entry: Mapping[str, Any]) -> frozenset[str]:
    """The request ids of the trace the engine loaded (--response-replay-trace-path), if any."""
    path = ((entry.get("mocker_engine_args") or {}).get("dynamo") or {}).get("response_replay_trace_path")
    return _trace_keys(str(path)) if path else frozenset()


@cache
def _trace_keys(path: str) -> frozenset[str]:
    rows = Path(path).read_text().splitlines()
    return frozenset(json.loads(row)["request_id"] for row in rows if row.strip())


def _ignores_eos(request: Mapping[str, Any]) -> bool:
    return bool((request.get("stop_conditions") or {}).get("ignore_eos"))


def _registration(entry: Mapping[str, Any]) -> tuple[Any, Any, list[list[Any]]]:
    """The card's model type, worker type and peers, as the mocker registers its own."""
    if entry.get("is_prefill"):
        return ModelType.Prefill, WorkerType.Prefill, [[WorkerType.Decode]]
    if entry.get("is_decode"):
        return ModelType.Chat | ModelType.Completions, WorkerType.Decode, [[WorkerType.Prefill]]
    return ModelType.Chat | ModelType.Completions, WorkerType.Aggregated, []


def main() -> None:
    mocker_main.build_runtime_config = build_runtime_config
    mocker_main.EntrypointArgs = entrypoint_args
    mocker_main.run_input = run_input
    mocker_main.main()


if __name__ == "__main__":
    main()
