"""AIConfigurator's single-point estimates, run inside an environment that has it (`dynamo calibrate --aic PYTHON`).

Reads a JSON list of queries (dynamo_oss.perf.aic.AicQuery) on stdin and writes a JSON list of estimates on
stdout, one per query: AIConfigurator's TTFT, TPOT, tok/s/user and tok/s/GPU, or the error it raised. It
imports nothing of this project, so it runs in a scratch environment with only `aiconfigurator` installed.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
from importlib.metadata import version


def estimate(query: dict) -> dict:
    from aiconfigurator.cli.api import cli_estimate

    arguments = {name: value for name, value in query.items() if name != "key" and value is not None}
    arguments.setdefault("mode", "agg")
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # it prints a summary per estimate
            result = cli_estimate(**arguments)
    except Exception as error:  # an unsupported shape or missing data: recorded, not fatal
        return {"key": query["key"], "error": f"{type(error).__name__}: {error}"}
    breakdown = None
    if arguments["mode"] in ("static_ctx", "static_gen"):
        phase = "context" if arguments["mode"] == "static_ctx" else "generation"
        breakdown = dict(getattr(result.summary, f"get_{phase}_latency_dict")())
    return {
        "key": query["key"],
        "backend_version": result.backend_version,
        "ttft_ms": result.ttft,
        "tpot_ms": result.tpot,
        "tok_s_user": result.tokens_per_second_per_user,
        "tok_s_gpu": result.tokens_per_second_per_gpu,
        "concurrency": result.concurrency,
        "kv_cache_warning": result.kv_cache_warning,
        "breakdown": breakdown,
    }


def main() -> None:
    logging.disable(logging.WARNING)
    queries = json.load(sys.stdin)
    out = {"aiconfigurator": version("aiconfigurator"), "estimates": [estimate(query) for query in queries]}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
