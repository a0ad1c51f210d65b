"""`python -m dynamo_oss.gateway --config FILE`: the endpoint, as its GatewayConfig (config.py) says: the
first process (processes.py), which starts the serving ones (`--process I`)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import signal
from pathlib import Path

import uvloop
from pydantic import ValidationError

from dynamo_oss.assets import ENCODINGS_ENV, model_folder, tiktoken_encodings_dir
from dynamo_oss.catalog.models import BUILTIN_MODELS
from dynamo_oss.gateway.app import Gateway, serve
from dynamo_oss.gateway.auth import ApiKeys, KeysUnusable
from dynamo_oss.gateway.config import GatewayConfig, ResponsesStoreConfig
from dynamo_oss.gateway.graph_key import KEY_BYTES, GraphKey, KeyFileUnusable
from dynamo_oss.gateway.ledger import Ledger
from dynamo_oss.gateway.limits import Limits
from dynamo_oss.gateway.processes import run_endpoint
from dynamo_oss.gateway.prompt import PromptCounter
from dynamo_oss.gateway.responses.nats_store import NatsResponseStore, NatsTls

DRAIN_TIMEOUT_S = 30.0  # how long streams in flight may take to finish after SIGTERM


async def run(config: GatewayConfig, folder: Path | None, process: int) -> None:
    """Serving process `process` of the endpoint, until SIGTERM or SIGINT; then it drains."""
    counter = PromptCounter(folder) if folder else None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    store = response_store(config.responses)
    if store is not None:
        store.start()
    keys = api_keys(config)
    ledger = Ledger(keys.names if keys else [], config.processes, process, config.ledger_file)
    gateway = Gateway(
        config.upstreams,
        counter,
        graph_key(config.reasoning_key_file),
        config.max_in_flight,
        keys,
        Limits.of(config.limits),
        store,
        cache_isolation=config.cache_isolation == "tenant",
        limits_per_key=config.limits_per_key,
        ledger=ledger,
    )
    try:
        await serve(gateway, config.host, config.port, DRAIN_TIMEOUT_S, stop)
    finally:
        ledger.close()


def response_store(config: ResponsesStoreConfig | None) -> NatsResponseStore | None:
    """The graph's store of responses, when the graph keeps them."""
    if config is None:
        return None
    bucket = config.bucket
    if config.bucket_prefix_env:
        bucket = f"{os.environ.get(config.bucket_prefix_env, '')}-{bucket}"
    tls = NatsTls(config.tls.ca, config.tls.cert, config.tls.key) if config.tls else None
    try:
        return NatsResponseStore(
            bucket,
            config.settings.retention_s,
            config.settings.max_mib * 2**20,
            config.nats_url,
            config.nats_url_file,
            tls,
        )
    except ValueError as error:
        raise SystemExit(f"gateway: response store: {error}") from None


def api_keys(config: GatewayConfig) -> ApiKeys | None:
    """The keys the graph names; the gateway does not start on keys it cannot read."""
    try:
        if config.keys_file:
            return ApiKeys.from_file(config.keys_file)
        return ApiKeys.from_env(config.keys_env) if config.keys_env else None
    except KeysUnusable as error:
        raise SystemExit(f"gateway: API keys: {error}") from None


def graph_key(key_file: Path | None) -> GraphKey:
    """The graph's key (graph_key.py): the file every gateway of the graph reads, or, without one, a key
    of this process only. The gateway does not start on a key file it cannot use."""
    if key_file is not None:
        try:
            return GraphKey.from_file(key_file)
        except (OSError, KeyFileUnusable) as error:
            raise SystemExit(f"gateway: graph key: {error}") from None
    logging.getLogger("dynamo_oss.gateway").warning(
        "no reasoning_key_file: encrypted reasoning is sealed with a key of this process only, so another "
        "gateway, or this one after a restart, cannot open it"
    )
    return GraphKey(secrets.token_bytes(KEY_BYTES))


def read_config(path: Path) -> GatewayConfig:
    try:
        return GatewayConfig.read(path)
    except OSError as error:
        raise SystemExit(f"gateway: {path}: {error.strerror}") from None
    except ValidationError as error:
        raise SystemExit(f"gateway: {path}: not a gateway configuration:\n{error}") from None


def main() -> None:
    parser = argparse.ArgumentParser(
        description="dynamo-oss request gateway in front of Dynamo's frontends. `dynamo serve` and "
        "`dynamo deploy` write its configuration from the graph (gateway.json in the run folder)."
    )
    parser.add_argument("--config", type=Path, required=True, help="the GatewayConfig JSON file (gateway/config.py)")
    parser.add_argument(
        "--process", type=int, metavar="I", help="serve as process I of the endpoint (the first process says which)"
    )
    args = parser.parse_args()
    config = read_config(args.config)
    # harmony's o200k ranks, which every rendering and parse reads: `dynamo serve` names the folder it
    # made them in; in a container nothing does, and they are made offline here, by the first process
    # (the serving ones find them made, and it passes the variable on).
    os.environ.setdefault(ENCODINGS_ENV, str(tiktoken_encodings_dir()))
    folder = model_folder(BUILTIN_MODELS[config.model]) if config.model else config.model_folder
    if args.process is None:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        uvloop.run(run_endpoint(config, args.config, DRAIN_TIMEOUT_S))
        return
    log_format = f"%(asctime)s %(levelname)s %(name)s[{args.process}]: %(message)s"
    logging.basicConfig(level=logging.INFO, format=log_format)
    # libuv's event loop: less CPU per streamed chunk than asyncio's own.
    uvloop.run(run(config, folder, args.process))


if __name__ == "__main__":
    main()
