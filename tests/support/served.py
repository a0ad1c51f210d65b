"""`dynamo serve GRAPH --engine mocker` as a subprocess (started and stopped as dynamo_oss.bench.served does
for every benchmark), and what it reports about itself."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from dynamo_oss.assets import ENCODINGS_ENV
from dynamo_oss.bench.served import start_serving as bench_start_serving
from dynamo_oss.bench.served import stop_serving

from tests.support.waiting import wait_for

# `dynamo serve` arguments for tests that judge answers' shape, not speed: mocker steps 20x faster than modelled.
FAST_MOCKER = ("--mocker-time-scale", "0.05")
# And for tests that need streams in flight for seconds (a fault or a count lands in the middle of them): 20x slower.
SLOW_MOCKER = ("--mocker-time-scale", "20")


@dataclass
class ServedGraph:
    """A `dynamo serve` process and what it reports about itself."""

    process: subprocess.Popen
    graph: Path
    run_dir: Path
    output: Path

    def state(self) -> dict:
        path = self.run_dir / "state.json"
        return json.loads(path.read_text()) if path.exists() else {}

    @property
    def endpoint(self) -> str:
        return self.state()["endpoint"]

    @property
    def etcd_endpoint(self) -> str:
        etcd = next(p for p in self.state()["processes"] if p["name"] == "etcd")
        return f"http://127.0.0.1:{etcd['ports'][0]}"

    def pid_of(self, name: str) -> int:
        return next(p["pid"] for p in self.state()["processes"] if p["name"] == name)

    def frontend_requests(self) -> float:
        """Requests Dynamo's frontends have counted: unchanged across a request no worker should see."""
        total = 0.0
        for process in self.state()["processes"]:
            if process["kind"] == "frontend":
                metrics = httpx.get(f"http://127.0.0.1:{process['ports'][0]}/metrics", timeout=10).text
                total += sum(
                    float(line.rsplit(" ", 1)[1])
                    for line in metrics.splitlines()
                    if line.startswith("dynamo_frontend_requests_total")
                )
        return total

    def frontend_gauges(self) -> dict[str, float]:
        """Dynamo's (first) frontend's requests in flight and output tokens so far."""
        process = next(p for p in self.state()["processes"] if p["kind"] == "frontend")
        metrics = httpx.get(f"http://127.0.0.1:{process['ports'][0]}/metrics", timeout=10).text
        wanted = ("dynamo_frontend_inflight_requests", "dynamo_frontend_output_tokens_total")
        found = {
            line.split("{")[0]: float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith(wanted)
        }
        return {name: found.get(name, 0.0) for name in wanted}  # none yet before the frontend's first request

    def log_of(self, name: str) -> str:
        return (self.run_dir / "logs" / f"{name}.log").read_text()

    def stop(self, timeout_s: float = 90) -> int:
        return stop_serving(self.process, timeout_s)


def served_env() -> dict[str, str]:
    """The test's environment for `dynamo serve`, less what serve must give its processes itself: unit
    tests set the o200k ranks' folder in this process, and a graph inheriting it hid a gateway that
    was not given it."""
    return {**{k: v for k, v in os.environ.items() if k != ENCODINGS_ENV}, "PYTHONUNBUFFERED": "1"}


def start_serving(graph: Path, run_dir: Path, *extra: str) -> ServedGraph:
    """`dynamo serve GRAPH --engine mocker` started (dynamo_oss.bench.served), not yet waited for."""
    output = run_dir.parent / f"{run_dir.name}.out"
    process = bench_start_serving(graph, run_dir, ["--engine", "mocker", *extra], output, served_env())
    return ServedGraph(process=process, graph=graph, run_dir=run_dir, output=output)


@contextmanager
def serving(graph: Path, run_dir: Path, *extra: str) -> Iterator[ServedGraph]:
    """`dynamo serve GRAPH --engine mocker` for the with-block: ready when it starts, stopped when it ends."""
    served = start_serving(graph, run_dir, *extra)
    try:
        wait_ready(served)
        yield served
    finally:
        served.stop()


def wait_ready(served: ServedGraph, timeout_s: float = 120) -> None:
    def ready() -> bool:
        if served.process.poll() is not None:
            pytest.fail(f"dynamo serve exited with {served.process.returncode}:\n{served.output.read_text()[-4000:]}")
        return served.state().get("ready", False)

    wait_for(ready, timeout_s, "the graph to be served")
