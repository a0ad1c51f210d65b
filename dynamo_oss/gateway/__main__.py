"""`python -m dynamo_oss.gateway --port P --upstream URL [--model-folder DIR | --model NAME] [--reasoning-key-file F]`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import secrets
import signal
from pathlib import Path

import uvloop

from dynamo_oss.assets import model_folder
from dynamo_oss.catalog.models import BUILTIN_MODELS
from dynamo_oss.gateway.app import Gateway, serve
from dynamo_oss.gateway.prompt import PromptCounter
from dynamo_oss.gateway.responses.sealed_reasoning import KEY_BYTES, ReasoningSeal

DRAIN_TIMEOUT_S = 30.0  # how long streams in flight may take to finish after SIGTERM


async def run(args: argparse.Namespace) -> None:
    counter = PromptCounter(args.model_folder) if args.model_folder else None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    gateway = Gateway(args.upstream, counter, reasoning_seal(args.reasoning_key_file), args.max_in_flight)
    await serve(gateway, args.host, args.port, DRAIN_TIMEOUT_S, stop)


def reasoning_seal(key_file: Path | None) -> ReasoningSeal:
    if key_file is not None:
        return ReasoningSeal.from_file(key_file)
    logging.getLogger("dynamo_oss.gateway").warning(
        "no --reasoning-key-file: encrypted reasoning is sealed with a key of this process only, so another "
        "gateway, or this one after a restart, cannot open it"
    )
    return ReasoningSeal(secrets.token_bytes(KEY_BYTES))


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
        help="the graph's key for encrypted reasoning (Responses' reasoning.encrypted_content): 32 bytes, or "
        "their base64; every gateway of a graph reads the same file",
    )
    parser.add_argument(
        "--max-in-flight",
        type=int,
        help="generation requests admitted at once; past it, 503 with Retry-After (default: no limit)",
    )
    args = parser.parse_args()
    if args.model:
        args.model_folder = model_folder(BUILTIN_MODELS[args.model])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # libuv's event loop: less CPU per streamed chunk than asyncio's own.
    uvloop.run(run(args))


if __name__ == "__main__":
    main()
