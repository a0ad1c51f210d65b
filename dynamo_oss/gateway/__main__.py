"""`python -m dynamo_oss.gateway --config FILE`: the endpoint, as its GatewayConfig (config.py) says: the
first process (processes.py), which starts the serving ones (`--process I`)."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

import uvloop
from pydantic import ValidationError

from dynamo_oss.assets import ENCODINGS_ENV, model_folder, tiktoken_encodings_dir
from dynamo_oss.catalog.models import BUILTIN_MODELS
from dynamo_oss.gateway.config import GatewayConfig


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
    if args.process is None:  # the first process: the HTTP shell is its serving processes' to load
        from dynamo_oss.gateway.processes import run_endpoint

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        uvloop.run(run_endpoint(config, args.config))
        return
    from dynamo_oss.gateway.serving import run

    log_format = f"%(asctime)s %(levelname)s %(name)s[{args.process}]: %(message)s"
    logging.basicConfig(level=logging.INFO, format=log_format)
    # libuv's event loop: less CPU per streamed chunk than asyncio's own.
    uvloop.run(run(config, folder, args.process))


if __name__ == "__main__":
    main()
