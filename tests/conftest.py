"""Fixtures that run real graphs: `dynamo serve` as a subprocess, real etcd, NATS and Dynamo."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

REPO = Path(__file__).resolve().parent.parent
# CI's environment sets PYTHONDONTWRITEBYTECODE, so each of the hundreds of Python processes the suite
# starts (eight a graph) would compile every module it imports afresh, most of a graph's start-up CPU:
# let the suite cache bytecode, as a developer's machine does.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
# `dynamo serve` arguments for tests that judge answers' shape, not speed: mocker steps 20x faster than modelled.
FAST_MOCKER = ("--mocker-time-scale", "0.05")
DYNAMO = [sys.executable, "-m", "dynamo_oss.cli"]


# The fixtures that serve a graph (or start Dynamo's frontend): a test using one, directly or through
# another fixture, carries the `graph` marker; a test that serves one itself is marked where it is.
GRAPH_FIXTURES = {"disagg", "autoscaled", "sla_scaled", "served", "stock_mocker_endpoint", "two_decoders",
                  "own_graph", "sweep_folder", "frontend_prompts"}  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if GRAPH_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.graph)


def wait_for(condition: Callable[[], object], timeout_s: float, what: str) -> object:
    """Poll `condition` until it returns something truthy; fail the test at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.2)


def free_ports(count: int) -> list[int]:
    """Distinct ports free right now, below 32768 (Dynamo's limit for worker system ports, and
    below the kernel's ephemeral range, so no outgoing connection takes one meanwhile)."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port_run(1)
        if port not in ports:
            ports.append(port)
    return ports


def free_port_run(count: int) -> int:
    """The first of `count` consecutive ports free right now (a pool's workers take system_port + i)."""
    candidate = random.randrange(10_000, 30_000)
    while True:
        candidate += 1
        if all(_bindable(port) for port in range(candidate, candidate + count)):
            return candidate


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def dynamo(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the `dynamo` command in this process: (exit status, stdout, stderr)."""
    from dynamo_oss.cli import main

    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_dynamo(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*DYNAMO, *args], capture_output=True, text=True, timeout=timeout_s, cwd=REPO)


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

    def log_of(self, name: str) -> str:
        return (self.run_dir / "logs" / f"{name}.log").read_text()

    def stop(self, timeout_s: float = 90) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait()


def start_serving(graph: Path, run_dir: Path, *extra: str) -> ServedGraph:
    output = run_dir.parent / f"{run_dir.name}.out"
    with output.open("w") as sink:
        process = subprocess.Popen(
            [*DYNAMO, "serve", str(graph), "--engine", "mocker", "--run-dir", str(run_dir), *extra],
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
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


def exact_stream(content: str, tokens: int) -> dict:
    """A streaming chat request to a gpt-oss-20b graph that generates exactly `tokens` tokens,
    counted in the usage of its last chunk."""
    return {
        "model": "openai/gpt-oss-20b",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "extra_body": {"ignore_eos": True, "min_tokens": tokens},
    }


def observed(prometheus_port: int, launcher_port: int) -> dict:
    """A graph's observability section: an embedded Prometheus scraping every second, the launcher's
    metrics, and the gateway's on a free port."""
    return {"prometheus": {"mode": "embedded", "port": prometheus_port, "scrape_interval_s": 1},
            "launcher_port": launcher_port, "gateway_port": free_ports(1)[0]}  # fmt: skip


def wait_ready(served: ServedGraph, timeout_s: float = 120) -> None:
    def ready() -> bool:
        if served.process.poll() is not None:
            pytest.fail(f"dynamo serve exited with {served.process.returncode}:\n{served.output.read_text()[-4000:]}")
        return served.state().get("ready", False)

    wait_for(ready, timeout_s, "the graph to be served")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has exited; only its parent has not reaped it yet.
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "State:\tZ" not in status.read_text()


def write_graph(folder: Path, **sections: object) -> Path:
    """A small disaggregated mocker graph on free ports, with `sections` replacing top-level keys."""
    etcd_client, etcd_peer, nats, nats_monitoring, frontend, dynamo, prefill, decode = free_ports(8)
    graph = {
        "name": "test-graph",
        "model": "gpt-oss-20b",
        "hardware": {"gpu": "h200", "gpus": 2},
        "infrastructure": {
            "etcd": {"mode": "embedded", "client_port": etcd_client, "peer_port": etcd_peer},
            "nats": {"mode": "embedded", "port": nats, "monitoring_port": nats_monitoring},
        },
        "frontend": {"port": frontend, "dynamo_port": dynamo},
        "pools": {
            "prefill": {"workers": 1, "engine": "mocker", "system_port": prefill},
            "decode": {"workers": 1, "engine": "mocker", "system_port": decode},
        },
    }
    graph.update(sections)
    path = folder / "graph.yaml"
    path.write_text(yaml.safe_dump(graph))
    return path


# The sla mode on prompts long enough that prefill queues, the mocker 10x slower than modelled: at
# SLA_LOW requests/s the model predicts one worker of each pool keeps TTFT p90 <= 1.5 s and ITL <=
# 40 ms (in the slowed time), at SLA_HIGH it takes two of each (tests/test_planner_sizing.py).
SLA_PROMPT_WORDS, SLA_TOKENS, SLA_LOW, SLA_HIGH, SLA_SLOW = 3000, 100, 0.2, 2.5, 10.0


def write_sla_graph(folder: Path) -> Path:
    """write_graph's graph with both pools autoscaled 1-2 by the sla planner, on free ports."""
    path = write_graph(folder)
    graph = yaml.safe_load(path.read_text())
    prometheus, launcher, metrics = free_ports(3)
    graph["hardware"]["gpus"] = 4
    graph["pools"] = {role: {"autoscale": {"min": 1, "max": 2}, "engine": "mocker", "system_port": free_port_run(2)}
                      for role in ("prefill", "decode")}  # fmt: skip
    graph["planner"] = {"ttft_ms": 1500, "itl_ms": 40, "interval_s": 2, "scale_down_after_s": 20,
                        "metrics_port": metrics}  # mode sla: the default, with 20% headroom  # fmt: skip
    graph["observability"] = observed(prometheus, launcher)
    path.write_text(yaml.safe_dump(graph))
    return path


def shipped_graph_on_free_ports(name: str, folder: Path) -> Path:
    """A copy of graphs/NAME in `folder` with every port it would listen on moved to a free one,
    so a test serves the shipped graph without taking 8000, 2379 or 4222 from anyone."""
    source = REPO / "graphs" / name
    graph = yaml.safe_load(source.read_text())
    etcd_client, etcd_peer, nats, monitoring, frontend, dynamo, prometheus, launcher, planner = free_ports(9)
    graph["infrastructure"] = {
        "etcd": {"mode": "embedded", "client_port": etcd_client, "peer_port": etcd_peer},
        "nats": {"mode": "embedded", "port": nats, "monitoring_port": monitoring},
    }
    if "observability" in graph:
        graph["observability"] = observed(prometheus, launcher)
    graph["frontend"].update(port=frontend, dynamo_port=dynamo)
    if "planner" in graph:
        graph["planner"]["metrics_port"] = planner
    for pool in graph["pools"].values():
        pool["system_port"] = free_port_run(pool.get("workers") or pool["autoscale"]["max"])  # worker i: port + i
        pool["engine_args"] = str((source.parent / pool["engine_args"]).resolve())
    path = folder / name
    path.write_text(yaml.safe_dump(graph))
    return path


@pytest.fixture
def dynamo_planner_config(monkeypatch: pytest.MonkeyPatch) -> type:
    """Dynamo's PlannerConfig, imported as its process imports it: with aisimulate_core's stand-in
    on the path where the real one is missing (dynamo_oss/planner/__main__.py)."""
    from dynamo_oss.planner.__main__ import STANDINS

    monkeypatch.syspath_prepend(str(STANDINS))
    from dynamo.planner.config.planner_config import PlannerConfig

    return PlannerConfig


@pytest.fixture
def graph_folder(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture(scope="module")
def disagg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedGraph]:
    """graphs/disagg.yaml served on the mocker (on free ports), shared by a module's tests, stopped at its end."""
    folder = tmp_path_factory.mktemp("disagg")
    with serving(shipped_graph_on_free_ports("disagg.yaml", folder), folder / "run") as served:
        yield served


class BaseLlmArgs(BaseModel):
    """The fields dynamo.trtllm.backend_args reads defaults from."""

    max_batch_size: int = 2048
    max_num_tokens: int = 8192
    max_seq_len: int | None = None
    max_beam_width: int = 1


@pytest.fixture(scope="module")
def trtllm_parse_args():  # noqa: ANN201 - Dynamo's parse_args
    """Dynamo 1.6's own TensorRT-LLM argument parser (dynamo/trtllm/args.py).

    It imports `tensorrt_llm.llmapi.llm_args` at module level only to read four defaults of
    BaseLlmArgs for its --help; TensorRT-LLM cannot be installed here, so a stand-in provides those
    four fields, at TensorRT-LLM's defaults."""
    llm_args = types.ModuleType("tensorrt_llm.llmapi.llm_args")
    llm_args.BaseLlmArgs = BaseLlmArgs
    llmapi = types.ModuleType("tensorrt_llm.llmapi")  # no BuildConfig: TensorRT-LLM >= 1.3.0rc21
    llmapi.llm_args = llm_args
    package = types.ModuleType("tensorrt_llm")
    package.llmapi = llmapi
    stand_ins = {"tensorrt_llm": package, "tensorrt_llm.llmapi": llmapi, "tensorrt_llm.llmapi.llm_args": llm_args}
    with pytest.MonkeyPatch.context() as patch:
        for name, module in stand_ins.items():
            patch.setitem(sys.modules, name, module)
        from dynamo.trtllm.args import parse_args

        yield parse_args
