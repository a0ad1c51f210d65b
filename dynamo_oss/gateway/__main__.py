"""`python -m dynamo_oss.gateway --port P --upstream URL [--model-folder DIR]`."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import uvloop
from aiohttp import web

from dynamo_oss.gateway.app import Gateway
from dynamo_oss.gateway.prompt import PromptCounter


def main() -> None:
    parser = argparse.ArgumentParser(description="dynamo-oss request gateway in front of Dynamo's frontend")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="Dynamo frontend base URL, e.g. http://127.0.0.1:8001")
    parser.add_argument("--model-folder", type=Path, help="tokenizer and chat template, for context-length checks")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    counter = PromptCounter(args.model_folder) if args.model_folder else None
    # On SIGTERM aiohttp stops accepting, then gives requests in flight (streams) time to finish.
    # uvloop (libuv's event loop) spends less CPU per streamed chunk than asyncio's own loop.
    web.run_app(Gateway(args.upstream, counter).app(), host=args.host, port=args.port, loop=uvloop.new_event_loop(),
                shutdown_timeout=30, access_log=None, print=None)  # fmt: skip


if __name__ == "__main__":
    main()
