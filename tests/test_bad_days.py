"""Bad days through the gateway, against real processes: the frontend killed mid-stream, no worker
registered for a while, and far more requests than the graph admits. What a client sees must be a
well-formed answer: a stream that ends with an error event, or a 503 with Retry-After, never a 404,
a corrupt stream or a request that hangs."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path

import httpx
import yaml
from conftest import ServedGraph, serving, wait_for, write_graph

MODEL = "openai/gpt-oss-20b"
SLOW = ("--mocker-time-scale", "20")  # streams last seconds, so a fault lands in the middle of them


def graph_with(folder: Path, **changes: dict) -> Path:
    """The small mocker graph of conftest, with sections updated key by key."""
    path = write_graph(folder)
    graph = yaml.safe_load(path.read_text())
    for section, update in changes.items():
        graph[section].update(update)
    path.write_text(yaml.safe_dump(graph))
    return path


def chat(tokens: int, stream: bool) -> dict:
    request = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me about disaggregation."}],
               "max_tokens": tokens, "stream": stream, "ignore_eos": True, "min_tokens": tokens}  # fmt: skip
    return request | ({"stream_options": {"include_usage": True}} if stream else {})


def events(lines: list[str]) -> list[dict | str]:
    """The data of each server-sent event: parsed JSON, or the text ([DONE])."""
    data = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
    return [text if text == "[DONE]" else json.loads(text) for text in data]


def assert_retryable(reply: httpx.Response) -> None:
    assert reply.status_code == 503, (reply.status_code, reply.headers, reply.text)
    assert int(reply.headers.get("retry-after", 0)) >= 1, (reply.status_code, reply.text)
    error = reply.json()["error"]
    assert error["type"] == "server_error" and error["message"]


def test_frontend_killed_mid_stream_ends_each_stream_with_an_error_event_then_503s_until_it_is_back(
    tmp_path: Path,
) -> None:
    with serving(write_graph(tmp_path), tmp_path / "run", *SLOW) as served:
        with httpx.Client(base_url=served.endpoint, timeout=60) as client:
            streams = [client.stream("POST", "/chat/completions", json=chat(400, stream=True)) for _ in range(3)]
            replies = [stream.__enter__() for stream in streams]
            readers = [reply.iter_lines() for reply in replies]
            for reply, lines in zip(replies, readers, strict=True):
                assert reply.status_code == 200
                wait_for(lambda lines=lines: next(lines).startswith("data: {"), 30, "the stream's first token")
            os.kill(served.pid_of("frontend"), signal.SIGKILL)
            killed_at = time.monotonic()
            for stream, lines in zip(streams, readers, strict=True):
                rest = events(list(lines))  # a corrupt chunked stream would raise here
                stream.__exit__(None, None, None)
                assert rest and isinstance(rest[-1], dict), rest[-3:]
                assert rest[-1]["error"]["code"] == "frontend_unavailable"
            statuses = recover(served, client)
        assert statuses[-1] == 200 and set(statuses[:-1]) <= {503}, statuses
        print(f"frontend back {time.monotonic() - killed_at:.1f} s after SIGKILL; {len(statuses) - 1} requests got 503")
        serves_again = re.compile(r"frontend\s+\| \[dynamo-oss\] serves again")
        wait_for(lambda: serves_again.search(served.output.read_text()), 30, "the launcher to say the frontend serves")


def recover(served: ServedGraph, client: httpx.Client) -> list[int]:
    """Ask until the graph answers 200; every refusal on the way must be retryable."""
    statuses: list[int] = []

    def answered() -> bool:
        reply = client.post("/chat/completions", json=chat(4, stream=False))
        statuses.append(reply.status_code)
        if reply.status_code != 200:
            assert_retryable(reply)
        return reply.status_code == 200

    wait_for(answered, 90, "the graph to answer again")
    return statuses


def test_while_no_worker_is_registered_the_gateway_answers_503_never_404(tmp_path: Path) -> None:
    graph = write_graph(tmp_path)
    spec = yaml.safe_load(graph.read_text())
    port = spec["pools"]["decode"]["system_port"]
    spec["pools"] = {"agg": {"workers": 1, "engine": "mocker", "system_port": port}}
    graph.write_text(yaml.safe_dump(spec))
    with serving(graph, tmp_path / "run") as served:
        with httpx.Client(base_url=served.endpoint, timeout=60) as client:
            os.kill(served.pid_of("agg-0"), signal.SIGKILL)
            statuses = recover(served, client)
        assert 404 not in statuses and statuses[-1] == 200


def test_past_max_in_flight_requests_are_refused_with_retry_after_and_the_admitted_finish(tmp_path: Path) -> None:
    graph = graph_with(tmp_path, frontend={"max_in_flight": 4})
    with serving(graph, tmp_path / "run", *SLOW) as served:
        outcomes: list[tuple[int, dict | None, str | None]] = []
        lock = threading.Lock()

        def one() -> None:
            with httpx.Client(base_url=served.endpoint, timeout=120) as client:
                with client.stream("POST", "/chat/completions", json=chat(100, stream=True)) as reply:
                    lines = list(reply.iter_lines())
                    body = json.loads("".join(lines)) if reply.status_code != 200 else None
                    done = [e for e in events(lines) if isinstance(e, dict) and e.get("usage")]
                    with lock:
                        outcomes.append((reply.status_code, body, reply.headers.get("retry-after")))
                        if done:
                            outcomes[-1] = (200, done[-1]["usage"], None)

        threads = [threading.Thread(target=one) for _ in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=180)
        assert not any(thread.is_alive() for thread in threads), "a request hung"
    admitted = [body for status, body, _ in outcomes if status == 200]
    refused = [(body, retry) for status, body, retry in outcomes if status == 503]
    assert len(admitted) + len(refused) == 16, outcomes
    assert 4 <= len(admitted) < 16 and refused
    assert all(usage["completion_tokens"] == 100 for usage in admitted)
    for body, retry in refused:
        assert body["error"]["code"] == "overloaded" and int(retry) >= 1
