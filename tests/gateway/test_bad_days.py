"""Bad days through the gateway, against real processes: the frontend killed mid-stream, no worker
registered for a while, and far more requests than the graph admits. What a client sees must be a
well-formed answer: a stream that ends with an error event, or a 503 with Retry-After, never a 404,
a corrupt stream or a request that hangs."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from dynamo_oss.launch.probes import worker_streams
from tests.support.graphs import write_graph
from tests.support.served import SLOW_MOCKER, ServedGraph, serving
from tests.support.waiting import wait_for

pytestmark = pytest.mark.graph  # every test here serves a graph

MODEL = "openai/gpt-oss-20b"
LONG = 120  # tokens: a stream on a slowed decode worker outlasts the wait for it to be busy and the kill
# The shared graph's gateway admits this many requests at once: above the streams any other test here
# holds (four, and recover's one), below the sixteen the cap's own test sends.
MAX_IN_FLIGHT = 5
# Words of prompt (a token each): a prefill on the slowed worker lasts seconds, so the wait for the
# prefill worker to be busy sees it, whatever else takes the machine's cores at that moment
PREFILL_WORDS = 4000


def graph_with(folder: Path, **changes: dict) -> Path:
    """The small mocker graph of conftest, with sections updated key by key."""
    path = write_graph(folder)
    graph = yaml.safe_load(path.read_text())
    for section, update in changes.items():
        graph.setdefault(section, {}).update(update)
    path.write_text(yaml.safe_dump(graph))
    return path


def chat(tokens: int, stream: bool) -> dict:
    request = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Tell me about disaggregation."}],
        "max_tokens": tokens,
        "stream": stream,
        "ignore_eos": True,
        "min_tokens": tokens,
    }
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


@pytest.fixture(scope="module")
def slowed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedGraph]:
    """The small graph, slowed so that a fault lands mid-stream, its gateway capped at MAX_IN_FLIGHT,
    shared by the tests that each kill one of its processes: each kills a different one (the
    launcher's backoff starts afresh for it) and ends when the graph answers again, so the next finds
    it whole (`served` checks)."""
    folder = tmp_path_factory.mktemp("slowed")
    with serving(graph_with(folder, gateway={"max_in_flight": MAX_IN_FLIGHT}), folder / "run", *SLOW_MOCKER) as served:
        yield served


@pytest.fixture
def served(slowed: ServedGraph) -> ServedGraph:
    """The shared slowed graph, every process of it running and the graph answering."""

    def every_process_serving() -> bool:
        state = slowed.state()
        return all(p["pid"] for p in state["processes"]) and all(p["live"] == p["target"] for p in state["pools"])

    wait_for(every_process_serving, 90, "every process of the graph to run and every worker to serve")
    with httpx.Client(base_url=slowed.endpoint, timeout=60) as client:
        recover(slowed, client)
    return slowed


def test_frontend_killed_mid_stream_ends_each_stream_with_an_error_event_then_503s_until_it_is_back(
    served: ServedGraph, record_property: Callable[[str, object], None]
) -> None:
    with (
        httpx.Client(base_url=served.endpoint, timeout=60) as client,
        httpx.Client(base_url=served.endpoint, timeout=60) as other,
    ):
        # An answer not streamed, in flight beside the streams: none of it has gone out when the frontend dies.
        whole: list[httpx.Response] = []
        asking = threading.Thread(target=lambda: whole.append(other.post("/chat/completions", json=chat(400, False))))
        asking.start()
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
        asking.join(60)
        assert_retryable(whole[0])  # a JSON 503, not an error event without its status line
        statuses = recover(served, client)
    assert statuses[-1] == 200 and set(statuses[:-1]) <= {503}, statuses
    record_property("seconds_from_frontend_sigkill_to_a_served_request", round(time.monotonic() - killed_at, 1))
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


def test_past_max_in_flight_requests_are_refused_with_retry_after_and_the_admitted_finish(
    served: ServedGraph,
) -> None:
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
    assert MAX_IN_FLIGHT <= len(admitted) < 16 and refused
    assert all(usage["completion_tokens"] == 100 for usage in admitted)
    for body, retry in refused:
        assert body["error"]["code"] == "overloaded" and int(retry) >= 1


class Streams:
    """`count` streaming chats of `tokens` tokens each, from threads, with what each client saw; with
    `prompt_words`, a prompt that long."""

    def __init__(self, served: ServedGraph, count: int, tokens: int, prompt_words: int = 0) -> None:
        self.tokens, self.padding, self.outcomes = tokens, " hello" * prompt_words, {}
        self.threads = [threading.Thread(target=self._one, args=(served, i)) for i in range(count)]
        for thread in self.threads:
            thread.start()

    def _one(self, served: ServedGraph, index: int) -> None:
        request = chat(self.tokens, stream=True)
        request["messages"][0]["content"] += f" ({index}){self.padding}"
        with httpx.Client(base_url=served.endpoint, timeout=120) as client:
            with client.stream("POST", "/chat/completions", json=request) as reply:
                data = [e for e in events(list(reply.iter_lines())) if isinstance(e, dict)]
        usage = next((e["usage"] for e in reversed(data) if e.get("usage")), None)
        error = next((e["error"] for e in data if "error" in e), None)
        self.outcomes[index] = (reply.status_code, usage["completion_tokens"] if usage else None, error)

    def finish(self) -> dict[int, tuple[int, int | None, dict | None]]:
        for thread in self.threads:
            thread.join(timeout=240)
        assert not any(thread.is_alive() for thread in self.threads), "a stream hung"
        return self.outcomes


def streams_on(served: ServedGraph, worker: str) -> float:
    """Requests in flight on a worker, from its own /metrics."""
    port = next(p["ports"][0] for p in served.state()["processes"] if p["name"] == worker)
    found = asyncio.run(worker_streams("127.0.0.1", port, served.state()["graph"]))
    return sum((found or {}).values())


def kill_when_busy(served: ServedGraph, worker: str) -> None:
    wait_for(lambda: streams_on(served, worker) > 0, 60, f"streams on {worker}")
    os.kill(served.pid_of(worker), signal.SIGKILL)


def test_a_decode_worker_killed_mid_stream_loses_nothing_when_a_second_one_serves(slowed_pair: ServedGraph) -> None:
    served = slowed_pair
    streams = Streams(served, 8, LONG)
    kill_when_busy(served, "decode-0")
    outcomes = streams.finish()
    serves_again = re.compile(r"decode-0\s+\| \[dynamo-oss\] serves again")
    wait_for(lambda: serves_again.search(served.output.read_text()), 60, "the launcher to say decode-0 serves")
    # Every stream, those that lived on the killed worker included, carried on elsewhere to its full length.
    assert all(outcome == (200, LONG, None) for outcome in outcomes.values()), outcomes


def test_a_lone_decode_worker_killed_mid_stream_ends_its_streams_with_a_retryable_error_then_503s_never_404(
    served: ServedGraph,
) -> None:
    streams = Streams(served, 4, LONG)
    kill_when_busy(served, "decode-0")
    outcomes = streams.finish()
    # Until the restarted worker registers, no worker serves the model: a 503, never a 404 (recover checks each).
    statuses = recover(served, httpx.Client(base_url=served.endpoint, timeout=60))
    # Streams on the worker end with Dynamo's retryable error event; those not yet on it get a 503.
    for status, tokens, error in outcomes.values():
        assert (status, tokens, error) == (200, LONG, None) or status == 503 or error["code"] == 503, outcomes
    assert any(error for _, _, error in outcomes.values())
    assert 404 not in statuses and statuses[-1] == 200


def test_a_prefill_worker_killed_under_load_costs_only_retryable_errors(
    served: ServedGraph, record_property: Callable[[str, object], None]
) -> None:
    streams = Streams(served, 4, 100, prompt_words=PREFILL_WORDS)
    kill_when_busy(served, "prefill-0")
    killed_at = time.monotonic()
    with httpx.Client(base_url=served.endpoint, timeout=60) as client:
        statuses = recover(served, client)
    recovery_s = time.monotonic() - killed_at
    outcomes = streams.finish()
    for status, tokens, error in outcomes.values():
        assert (status, tokens, error) == (200, 100, None) or status == 503 or (error and error["code"] == 503)
    assert set(statuses[:-1]) <= {503}
    record_property("seconds_from_prefill_sigkill_to_a_served_request", round(recovery_s, 1))


def test_etcd_and_nats_killed_under_load_fail_no_request(
    served: ServedGraph, record_property: Callable[[str, object], None]
) -> None:
    failures: list[str] = []
    served_count = [0]
    stop = threading.Event()

    def steady_load() -> None:
        with httpx.Client(base_url=served.endpoint, timeout=60) as client:
            while not stop.is_set():
                reply = client.post("/chat/completions", json=chat(8, stream=False))
                if reply.status_code == 200:
                    served_count[0] += 1
                else:
                    failures.append(reply.text)

    load = threading.Thread(target=steady_load)
    load.start()
    try:
        for name in ("etcd", "nats"):
            old = served.pid_of(name)
            before = served_count[0]
            os.kill(old, signal.SIGKILL)
            wait_for(lambda name=name, old=old: served.pid_of(name) != old, 30, f"{name} to be restarted")
            again = re.compile(rf"{name}\s+\| \[dynamo-oss\] serves again, ([\d.]+) s")
            back = wait_for(lambda again=again: again.search(served.output.read_text()), 30, f"{name} to serve")
            wait_for(lambda before=before: served_count[0] > before + 5, 60, f"requests served after {name}")
            record_property(f"seconds_from_{name}_restart_to_serving", float(back.group(1)))
    finally:
        stop.set()
        load.join(timeout=60)
    assert failures == []
