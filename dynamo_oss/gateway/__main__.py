"""`python -m dynamo_oss.gateway --port P --upstream URL [--model-folder DIR | --model NAME] [--reasoning-key-file F]
[--keys-file F | --keys-env VAR] [--cache-isolation tenant|shared] [--metrics HOST:PORT] [limits]
[--responses-nats URL | --responses-nats-file F --responses-bucket B [--responses-retention-s S] [--responses-max-mib M]
[--responses-nats-tls CA CERT KEY]]`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import signal
from pathlib import Path

import uvloop

from dynamo_oss.assets import ENCODINGS_ENV, model_folder, tiktoken_encodings_dir
from dynamo_oss.catalog.models import BUILTIN_MODELS
from dynamo_oss.gateway.app import Gateway, serve
from dynamo_oss.gateway.auth import ApiKeys, KeysUnusable
from dynamo_oss.gateway.limits import Limits
from dynamo_oss.gateway.metrics_port import serve_metrics
from dynamo_oss.gateway.prompt import PromptCounter
from dynamo_oss.graph.schema import KeyLimitsSection
from dynamo_oss.gateway.responses.nats_store import NatsResponseStore, NatsTls
from dynamo_oss.gateway.graph_key import KEY_BYTES, GraphKey, KeyFileUnusable

DRAIN_TIMEOUT_S = 30.0  # how long streams in flight may take to finish after SIGTERM


async def run(args: argparse.Namespace) -> None:
    counter = PromptCounter(args.model_folder) if args.model_folder else None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    limits = Limits(
        header_timeout_s=args.header_timeout_s,
        body_timeout_s=args.body_timeout_s,
        keep_alive_timeout_s=args.keep_alive_timeout_s,
        write_timeout_s=args.write_timeout_s,
        max_connections=args.max_connections,
        max_body_bytes=args.max_body_mib * 2**20,
        max_buffered_bytes=args.max_buffered_mib * 2**20,
    )
    store = response_store(args)
    if store is not None:
        store.start()
    gateway = Gateway(
        args.upstream,
        counter,
        graph_key(args.reasoning_key_file),
        args.max_in_flight,
        api_keys(args),
        limits,
        store,
        cache_isolation=args.cache_isolation == "tenant",
        limits_per_key=args.limits_per_key,
    )
    metrics = None
    if args.metrics:
        host, _, port = args.metrics.rpartition(":")
        metrics = await serve_metrics(host, int(port), args.upstream.rstrip("/"))
    try:
        await serve(gateway, args.host, args.port, DRAIN_TIMEOUT_S, stop)
    finally:
        if metrics is not None:
            await metrics.cleanup()


def response_store(args: argparse.Namespace) -> NatsResponseStore | None:
    """The graph's store of responses, when the graph keeps them (a NATS to keep them in is named)."""
    if not args.responses_nats and not args.responses_nats_file:
        return None
    tls = NatsTls(*args.responses_nats_tls) if args.responses_nats_tls else None
    try:
        return NatsResponseStore(
            args.responses_bucket,
            args.responses_retention_s,
            args.responses_max_mib * 2**20,
            args.responses_nats,
            args.responses_nats_file,
            tls,
        )
    except ValueError as error:
        raise SystemExit(f"gateway: response store: {error}") from None


def api_keys(args: argparse.Namespace) -> ApiKeys | None:
    """The keys the graph names; the gateway does not start on keys it cannot read."""
    try:
        if args.keys_file:
            return ApiKeys.from_file(args.keys_file)
        return ApiKeys.from_env(args.keys_env) if args.keys_env else None
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
        "no --reasoning-key-file: encrypted reasoning is sealed with a key of this process only, so another "
        "gateway, or this one after a restart, cannot open it"
    )
    return GraphKey(secrets.token_bytes(KEY_BYTES))


def main() -> None:
    parser = argparse.ArgumentParser(description="dynamo-oss request gateway in front of Dynamo's frontend")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="Dynamo frontend base URL, e.g. http://127.0.0.1:8001")
    counted = parser.add_mutually_exclusive_group()
    counted.add_argument("--model-folder", type=Path, help="tokenizer and chat template, for context-length checks")
    counted.add_argument(
        "--model",
        choices=sorted(BUILTIN_MODELS),
        help="a built-in gpt-oss model: its tokenizer and template are made offline at start (in a container)",
    )
    parser.add_argument(
        "--reasoning-key-file",
        type=Path,
        help="the graph's key, which seals reasoning (Responses' reasoning.encrypted_content, Messages' "
        "signatures) and salts each tenant's cache: 32 bytes, or their base64, owner-only; made there if missing; "
        "every gateway of a graph reads the same file",
    )
    keys = parser.add_mutually_exclusive_group()
    keys.add_argument("--keys-file", type=Path, help="API keys it requires, a `NAME KEY [TENANT]` line each")
    keys.add_argument("--keys-env", metavar="VAR", help="the environment variable holding the one API key it requires")
    parser.add_argument(
        "--cache-isolation",
        choices=("tenant", "shared"),
        default="tenant",
        help="with keys: each key's tenant gets its own cache salt, so tenants never reuse each other's cached "
        "prefixes (tenant, the default), or all share one cache (shared)",
    )
    parser.add_argument(
        "--limits-per-key",
        type=KeyLimitsSection.model_validate_json,
        metavar="JSON",
        help="each key's share of the graph, as gateway.auth.limits_per_key says it "
        '(e.g. {"concurrent_requests": 8}); a key\'s line in the keys file may say its own',
    )
    parser.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        help="where to serve /metrics (requests and tokens per "
        "key) and /metrics/frontend (Dynamo's frontend's, which the endpoint does not serve)",
    )
    defaults = Limits()
    parser.add_argument("--header-timeout-s", type=float, default=defaults.header_timeout_s)
    parser.add_argument("--body-timeout-s", type=float, default=defaults.body_timeout_s)
    parser.add_argument("--keep-alive-timeout-s", type=float, default=defaults.keep_alive_timeout_s)
    parser.add_argument("--write-timeout-s", type=float, default=defaults.write_timeout_s)
    parser.add_argument("--max-connections", type=int, default=defaults.max_connections)
    parser.add_argument("--max-body-mib", type=int, default=defaults.max_body_bytes // 2**20)
    parser.add_argument("--max-buffered-mib", type=int, default=defaults.max_buffered_bytes // 2**20)
    parser.add_argument(
        "--max-in-flight",
        type=int,
        help="generation requests admitted at once; past it, 503 with Retry-After (default: no limit)",
    )
    store = parser.add_argument_group("stored responses (the Responses API's store and previous_response_id)")
    where = store.add_mutually_exclusive_group()
    where.add_argument("--responses-nats", metavar="URL", help="the graph's NATS, whose JetStream keeps them")
    where.add_argument(
        "--responses-nats-file",
        type=Path,
        metavar="FILE",
        help="a file holding that URL, read once it is written (another container writes it)",
    )
    store.add_argument("--responses-bucket", default="responses", help="the key-value bucket, one per graph")
    store.add_argument("--responses-retention-s", type=float, default=30 * 24 * 3600.0)
    store.add_argument("--responses-max-mib", type=int, default=1024)
    store.add_argument(
        "--responses-nats-tls",
        nargs=3,
        type=Path,
        metavar=("CA", "CERT", "KEY"),
        help="PEM files for a NATS that asks clients for a certificate",
    )
    args = parser.parse_args()
    # harmony's o200k ranks, which every rendering and parse reads: `dynamo serve` names the folder it
    # made them in; in a container nothing does, and they are made offline here.
    os.environ.setdefault(ENCODINGS_ENV, str(tiktoken_encodings_dir()))
    if args.model:
        args.model_folder = model_folder(BUILTIN_MODELS[args.model])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # libuv's event loop: less CPU per streamed chunk than asyncio's own.
    uvloop.run(run(args))


if __name__ == "__main__":
    main()
