"""`python -m dynamo_oss.planner --config FILE`: Dynamo's planner, on any host the project runs on.

Dynamo 1.6's planner imports aisimulate_core at start-up. Where the real package is missing (it
cannot be installed offline, see standins/), the stand-in is put on the path first; the image
NVIDIA builds has the real one, and then nothing changes. Everything else is Dynamo's own
`python -m dynamo.planner`.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

STANDINS = Path(__file__).parent / "standins"


def main() -> None:
    if importlib.util.find_spec("aisimulate_core") is None:
        sys.path.insert(0, str(STANDINS))
    from dynamo.planner.__main__ import main as dynamo_planner

    dynamo_planner()


if __name__ == "__main__":
    main()
