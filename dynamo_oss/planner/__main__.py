"""`python -m dynamo_oss.planner --config FILE [--metrics HOST:PORT] [--look FILE]`: Dynamo's planner,
on any host the project runs on.

Dynamo 1.6's planner imports aisimulate_core at start-up. Where the real package is missing (it
cannot be installed offline, see standins/), the stand-in is put on the path first; the image
NVIDIA builds has the real one, and then nothing changes. On one host the process also serves its
metrics on loopback (Dynamo's own metrics server binds every address) and the sla mode writes its
latest look to a file for the launcher's side. Everything else is Dynamo's `python -m dynamo.planner`.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

from dynamo_oss.planner.look import LOOK_FILE_ENV
from dynamo_oss.planner.metrics import serve_on

STANDINS = Path(__file__).parent / "standins"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="Dynamo's planner configuration: JSON, or a JSON/YAML file")
    parser.add_argument("--metrics", metavar="HOST:PORT", help="serve the planner's /metrics here")
    parser.add_argument("--look", type=Path, metavar="FILE", help="where the sla mode writes its latest look")
    args = parser.parse_args()
    if importlib.util.find_spec("aisimulate_core") is None:
        sys.path.insert(0, str(STANDINS))
    if args.metrics:
        serve_on(args.metrics)
    if args.look:
        os.environ[LOOK_FILE_ENV] = str(args.look)
    from dynamo.planner.__main__ import main as dynamo_planner

    sys.argv = [sys.argv[0], "--config", args.config]
    dynamo_planner()


if __name__ == "__main__":
    main()
