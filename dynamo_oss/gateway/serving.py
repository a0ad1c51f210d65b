"""One serving process of the endpoint: the gateway's HTTP shell on the endpoint's port, its keys, the
graph's key, the response store and the ledger it shares with the other processes, until SIGTERM;
then it drains. The endpoint's first process (processes.py) starts each one."""

from __future__ import annotations

import asyncio
import logging
import secrets
import signal
from pathlib import Path

from dynamo_oss.gateway.app import Gateway, serve
from dynamo_oss.gateway.auth import ApiKeys, KeysUnusable
from dynamo_oss.gateway.batches.api import BatchApi
from dynamo_oss.gateway.batches.nats_batches import NatsBatchStore
from dynamo_oss.gateway.config import GatewayConfig
from dynamo_oss.gateway.files.nats_files import NatsFileStore
from dynamo_oss.gateway.graph_key import KEY_BYTES, GraphKey, KeyFileUnusable
from dynamo_oss.gateway.ledger import Ledger
from dynamo_oss.gateway.limits import Limits
from dynamo_oss.gateway.processes import DRAIN_TIMEOUT_S
from dynamo_oss.gateway.prompt import PromptCounter
from dynamo_oss.gateway.nats_connection import GraphNats, prefixed
from dynamo_oss.gateway.responses.background import BackgroundResponses
from dynamo_oss.gateway.responses.nats_plane import NatsEventLog, NatsRunners
from dynamo_oss.gateway.responses.nats_store import NatsResponseStore
from dynamo_oss.graph.schema import GatewayResponsesSection


async def run(config: GatewayConfig, folder: Path | None, process: int) -> None:
    """Serving process `process` of the endpoint, until SIGTERM or SIGINT; then it drains."""
    counter = PromptCounter(folder) if folder else None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    nats = GraphNats(config.nats) if config.nats is not None else None
    if nats is not None:
        nats.start()
    store = response_store(config, nats)
    background = None
    if store is not None and config.responses is not None:
        assert nats is not None
        background = background_responses(store, nats, config.responses.settings)
    keys = api_keys(config)
    ledger = Ledger(keys.names if keys else [], config.processes, process, config.ledger_file)
    tracing = None
    if config.tracing is not None:  # OpenTelemetry and gRPC load only where the graph traces
        from dynamo_oss.gateway.tracing import Tracing

        tracing = Tracing.of(config.tracing, config.state_dir)
    gateway = Gateway(
        config.upstreams,
        counter,
        graph_key(config.reasoning_key_file, config.make_reasoning_key),
        config.max_in_flight,
        keys,
        Limits.of(config.limits),
        store,
        cache_isolation=config.cache_isolation == "tenant",
        limits_per_key=config.limits_per_key,
        ledger=ledger,
        background=background,
        batch_api=batch_api(config, nats),
        tracing=tracing,
        coalesce_s=config.streaming.coalesce_ms / 1000,
    )
    if gateway.batches is not None:
        gateway.batches.start()
    try:
        await serve(gateway, config.host, config.port, DRAIN_TIMEOUT_S, stop)
    finally:
        ledger.close()
        if nats is not None:
            await nats.close()
        if tracing is not None:
            tracing.close()


def response_store(config: GatewayConfig, nats: GraphNats | None) -> NatsResponseStore | None:
    """The graph's store of responses, when the graph keeps them."""
    if config.responses is None:
        return None
    assert config.nats is not None and nats is not None  # GatewayConfig requires it with responses
    try:
        bucket = prefixed(config.nats, config.responses.bucket)
        settings = config.responses.settings
        return NatsResponseStore(bucket, settings.retention_s, settings.max_mib * 2**20, nats)
    except ValueError as error:
        raise SystemExit(f"gateway: response store: {error}") from None


def batch_api(config: GatewayConfig, nats: GraphNats | None) -> BatchApi | None:
    """The graph's Batch API, when it serves one: its files and batches in the graph's NATS."""
    if config.batches is None:
        return None
    assert config.nats is not None and nats is not None  # GatewayConfig requires it with batches
    settings = config.batches.settings
    try:
        files_bucket = prefixed(config.nats, config.batches.files_bucket)
        batches_bucket = prefixed(config.nats, config.batches.batches_bucket)
        files = NatsFileStore(files_bucket, settings.retention_s, settings.max_mib * 2**20, nats)
        batches = NatsBatchStore(batches_bucket, settings.retention_s, settings.max_mib * 2**20, nats)
    except ValueError as error:
        raise SystemExit(f"gateway: batches: {error}") from None
    return BatchApi(files, batches, settings, config.batches.targets)


def background_responses(
    store: NatsResponseStore, nats: GraphNats, settings: GatewayResponsesSection
) -> BackgroundResponses:
    """What runs this process's background responses, on the store's NATS: their events kept as long and as
    much as the responses themselves."""
    max_bytes = settings.max_mib * 2**20
    events = NatsEventLog(nats, store.bucket, settings.retention_s, max_bytes)
    return BackgroundResponses(store, events, NatsRunners(nats, store.bucket), settings.max_background_per_key)


def api_keys(config: GatewayConfig) -> ApiKeys | None:
    """The keys the graph names; the gateway does not start on keys it cannot read."""
    try:
        return ApiKeys.configured(config.keys_file, config.keys_env)
    except KeysUnusable as error:
        raise SystemExit(f"gateway: API keys: {error}") from None


def graph_key(key_file: Path | None, make: bool) -> GraphKey:
    """The graph's key (graph_key.py): the file every gateway of the graph reads (made first where `make`
    says so), or, without one, a key of this process only. The gateway does not start on a key file it
    cannot use."""
    if key_file is not None:
        try:
            return GraphKey.from_file(key_file, make)
        except (OSError, KeyFileUnusable) as error:
            raise SystemExit(f"gateway: graph key: {error}") from None
    logging.getLogger("dynamo_oss.gateway").warning(
        "no reasoning_key_file: encrypted reasoning is sealed with a key of this process only, so another "
        "gateway, or this one after a restart, cannot open it"
    )
    return GraphKey(secrets.token_bytes(KEY_BYTES))
