"""An endpoint of two gateway processes on one port in front of two Dynamo frontends, on the mocker:
every API through the one port with both processes and both frontends taking a share, a Responses
conversation carried from one process to the other (stored, and stateless with sealed reasoning),
usage totals that equal the requests sent, and SIGKILL of a frontend and of a gateway process under
load with nothing lost to a client that retries what the SDKs retry (503s, connections reset), and a background
response whose gateway process was SIGKILLed ended failed by the other."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import psutil
import pytest
import yaml
from prometheus_client.mmap_dict import MmapedDict

from dynamo_oss.gateway.responses.background import HEARTBEAT_S
from dynamo_oss.gateway.responses.nats_plane import LAPSE_S
from tests.support.graphs import ENDLESS, KEYS, write_keyed_graph
from tests.support.ports import free_port_run
from tests.support.served import FAST_MOCKER, ServedGraph, serving
from tests.support.waiting import wait_for

MODEL = "openai/gpt-oss-20b"
ASK = [{"role": "user", "content": "Say hello."}]
ENDLESS_FIELDS = {"max_output_tokens": ENDLESS["max_output_tokens"], **ENDLESS["extra_body"]}  # as JSON sends them


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedGraph]:
    folder = tmp_path_factory.mktemp("two-by-two")
    path = write_keyed_graph(folder)
    graph = yaml.safe_load(path.read_text())
    graph["gateway"]["processes"] = 2
    graph["frontend"].update(replicas=2, dynamo_port=free_port_run(2))
    path.write_text(yaml.safe_dump(graph))
    with serving(path, folder / "run", *FAST_MOCKER) as served:
        yield served


def gateway_processes(served: ServedGraph) -> list[int]:
    """The serving processes the endpoint's first process started, by pid."""
    return sorted(child.pid for child in psutil.Process(served.pid_of("gateway")).children())


def answered(served: ServedGraph, key: str | None = None) -> dict[int, float]:
    """Generation requests each serving process has answered (its own prometheus-client file), by pid;
    `key` counts only that key's."""
    counts = {}
    for file in (served.run_dir / "gateway" / "metrics").glob("counter_*.db"):
        total = 0.0
        for sample, value, _, _ in MmapedDict.read_all_values_from_file(str(file)):
            _, name, labels, _ = json.loads(sample)
            if name == "dynamo_oss_gateway_requests_total" and labels["api"] != "other":
                total += value if key is None or labels["key"] == key else 0
        counts[int(file.stem.removeprefix("counter_"))] = total
    return counts


def served_by(served: ServedGraph, request: Callable[[], object]) -> tuple[int, object]:
    """Which serving process answered `request`, sent on a connection of its own, and its answer."""
    before = answered(served)
    answer = request()

    def counted() -> list[int]:  # a process counts a request once its answer has gone out, not before
        return [pid for pid, count in answered(served).items() if count > before.get(pid, 0.0)]

    wait_for(counted, 10, "the answering process to count the request")
    (pid,) = counted()
    return pid, answer


def fresh(name: str, served: ServedGraph) -> openai.OpenAI:
    """A client whose one request opens its own connection, so the kernel picks the process anew."""
    return openai.OpenAI(
        base_url=served.endpoint,
        api_key=KEYS[name],
        max_retries=0,
        timeout=60,
        http_client=httpx.Client(limits=httpx.Limits(max_keepalive_connections=0)),
    )


def frontend_requests(served: ServedGraph) -> dict[str, float]:
    """Requests each Dynamo frontend counted, by process name."""
    counts = {}
    for process in served.state()["processes"]:
        if process["kind"] == "frontend":
            metrics = httpx.get(f"http://127.0.0.1:{process['ports'][0]}/metrics", timeout=10).text
            counts[process["name"]] = sum(
                float(line.rsplit(" ", 1)[1])
                for line in metrics.splitlines()
                if line.startswith("dynamo_frontend_requests_total")
            )
    return counts


def test_every_api_is_served_through_the_one_port_and_each_process_and_frontend_takes_a_share(
    endpoint: ServedGraph,
) -> None:
    for _ in range(6):
        chat = fresh("alice", endpoint).chat.completions.create(model=MODEL, messages=ASK, max_tokens=8)
        assert chat.choices[0].finish_reason == "length" and chat.usage.completion_tokens == 8
        completion = fresh("alice", endpoint).completions.create(model=MODEL, prompt="Hello", max_tokens=8)
        assert completion.usage is not None and completion.usage.completion_tokens > 0
        response = fresh("alice", endpoint).responses.create(model=MODEL, input="Say hello.", max_output_tokens=16)
        assert response.status in ("completed", "incomplete")
        messages = anthropic.Anthropic(base_url=endpoint.endpoint.removesuffix("/v1"), api_key=KEYS["alice"])
        message = messages.messages.create(model=MODEL, max_tokens=16, messages=ASK)  # type: ignore[arg-type]
        assert message.usage.output_tokens > 0
    processes = gateway_processes(endpoint)
    assert len(processes) == 2
    shares = answered(endpoint)
    assert all(shares.get(pid, 0) > 0 for pid in processes), shares
    frontends = frontend_requests(endpoint)
    assert sorted(frontends) == ["frontend-0", "frontend-1"] and all(frontends.values()), frontends


def on_the_other_process(served: ServedGraph, first: int, request: Callable[[], object]) -> object:
    """`request`'s answer from the serving process that is not `first`: sent on fresh connections until
    the kernel hands one to the other process (each has even odds)."""
    for _ in range(40):
        pid, answer = served_by(served, request)
        if pid != first:
            return answer
    pytest.fail("40 fresh connections all reached one process")


def test_a_responses_conversation_started_on_one_process_continues_on_the_other(endpoint: ServedGraph) -> None:
    first, started = served_by(
        endpoint, lambda: fresh("carol", endpoint).responses.create(model=MODEL, input="Remember the word heron.")
    )
    stored = on_the_other_process(
        endpoint,
        first,
        lambda: fresh("carol", endpoint).responses.create(
            model=MODEL, input="Which word?", previous_response_id=started.id
        ),
    )
    assert stored.previous_response_id == started.id and stored.status == "completed"
    assert stored.usage.input_tokens > started.usage.input_tokens  # it carried the first turn

    # Stateless: nothing stored, the reasoning sealed by one process and opened by the other.
    first, sealed = served_by(
        endpoint,
        lambda: fresh("carol", endpoint).responses.create(
            model=MODEL, input="Think, then say hi.", store=False, include=["reasoning.encrypted_content"]
        ),
    )
    carried = [item.model_dump(exclude_none=True) for item in sealed.output]
    assert any(item["type"] == "reasoning" and item.get("encrypted_content") for item in carried), carried
    opened = on_the_other_process(
        endpoint,
        first,
        lambda: fresh("carol", endpoint).responses.create(
            model=MODEL,
            store=False,
            input=[{"role": "user", "content": "Think, then say hi."}, *carried, {"role": "user", "content": "Again."}],
        ),
    )
    assert opened.status == "completed" and opened.usage.input_tokens > sealed.usage.input_tokens


def test_each_key_s_usage_over_both_processes_adds_up_to_the_requests_it_sent(endpoint: ServedGraph) -> None:
    sent, output = 12, 0
    for _ in range(sent):
        chat = fresh("bob", endpoint).chat.completions.create(model=MODEL, messages=ASK, max_tokens=8)
        output += chat.usage.completion_tokens
    by_process = answered(endpoint, "bob")
    assert sum(1 for count in by_process.values() if count) == 2, by_process  # both took a share
    graph = yaml.safe_load(endpoint.graph.read_text())
    metrics = httpx.get(f"http://127.0.0.1:{graph['observability']['gateway_port']}/metrics", timeout=10).text
    scraped = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines() if line[0] != "#"}
    assert scraped['dynamo_oss_gateway_requests_total{api="chat",key="bob",status="200"}'] == sent
    assert scraped['dynamo_oss_gateway_tokens_total{key="bob",kind="output"}'] == output


def test_a_frontend_and_a_gateway_process_killed_under_load_lose_nothing_a_retrying_client_sees(
    endpoint: ServedGraph,
) -> None:
    """The SDKs retry a 503 and a connection reset (openai's max_retries): requests in flight on the
    killed gateway process come back that way, those on the killed frontend are sent to the other one.
    Both are started again and take their share again."""
    frontend = next(p for p in endpoint.state()["processes"] if p["name"] == "frontend-0")["pid"]
    victim = gateway_processes(endpoint)[0]
    stop, failures, answers = threading.Event(), [], []

    def load() -> None:
        client = openai.OpenAI(base_url=endpoint.endpoint, api_key=KEYS["dave"], max_retries=5, timeout=60)
        while not stop.is_set():
            try:
                answers.append(client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=32))
            except openai.OpenAIError as error:
                failures.append(error)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: len(answers) >= 8, 60, "load to be under way")
        os.kill(frontend, signal.SIGKILL)
        os.kill(victim, signal.SIGKILL)
        wait_for(
            lambda: victim not in gateway_processes(endpoint) and len(gateway_processes(endpoint)) == 2,
            60,
            "the gateway process to be started again",
        )
        wait_for(
            lambda: next(p for p in endpoint.state()["processes"] if p["name"] == "frontend-0")["pid"] != frontend,
            60,
            "frontend-0 to be started again",
        )
        seen = len(answers)
        wait_for(lambda: len(answers) >= seen + 8, 60, "load to go on after the restarts")
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=90)
    assert failures == []

    def restarted() -> float | None:
        try:
            return frontend_requests(endpoint)["frontend-0"]
        except httpx.HTTPError:
            return None

    wait_for(lambda: restarted() is not None, 60, "the restarted frontend to listen")
    before = restarted() or 0.0
    wait_for(lambda: _serve_a_few(endpoint) and (restarted() or 0.0) > before, 60, "the restarted frontend's share")
    assert all(answered(endpoint).get(pid, 0) > 0 for pid in gateway_processes(endpoint))


def _serve_a_few(served: ServedGraph) -> bool:
    for _ in range(4):
        fresh("dave", served).chat.completions.create(model=MODEL, messages=ASK, max_tokens=4)
    return True


def test_a_background_response_on_a_killed_gateway_process_ends_failed_within_the_lapse_and_resumes_elsewhere(
    endpoint: ServedGraph,
) -> None:
    """SIGKILL leaves the process no chance to write anything: its listing lapses (LAPSE_S after its last
    renewal, at most that after the death) and the first read after that, on another process, ends the
    response failed. Its stream, resumed there, ends with that failure."""

    def create() -> tuple[str, int]:
        with httpx.stream(
            "POST",
            f"{endpoint.endpoint}/responses",
            timeout=60,
            headers={"Authorization": f"Bearer {KEYS['erin']}"},
            json={"model": MODEL, "input": "Say hello.", "background": True, "stream": True, **ENDLESS_FIELDS},
        ) as reply:
            events = [json.loads(line[6:]) for _, line in zip(range(4), _data_lines(reply))]
        return events[0]["response"]["id"], events[-1]["sequence_number"]

    owner, (response_id, seen) = served_by(endpoint, create)
    os.kill(owner, signal.SIGKILL)
    killed = time.monotonic()

    def status() -> str | None:
        try:
            return fresh("erin", endpoint).responses.retrieve(response_id).status
        except openai.APIConnectionError:  # a connection the kernel gave the dying process
            return None

    wait_for(lambda: status() not in (None, "queued", "in_progress"), LAPSE_S + 10, "the response to end failed")
    assert time.monotonic() - killed < LAPSE_S + HEARTBEAT_S
    failed = fresh("erin", endpoint).responses.retrieve(response_id)
    assert failed.status == "failed" and failed.error is not None and failed.error.code == "server_error"
    rest = list(fresh("erin", endpoint).responses.retrieve(response_id, stream=True, starting_after=seen))
    assert rest[0].sequence_number == seen + 1 and [e.sequence_number for e in rest] == list(
        range(seen + 1, seen + 1 + len(rest))
    )
    assert rest[-1].type == "response.failed" and rest[-1].response == failed
    wait_for(lambda: len(gateway_processes(endpoint)) == 2, 60, "the killed gateway process to be started again")


def _data_lines(reply: httpx.Response) -> Iterator[str]:
    return (line for line in reply.iter_lines() if line.startswith("data: "))


def test_the_endpoint_s_processes_share_one_configuration_and_state_folder(endpoint: ServedGraph) -> None:
    config = json.loads((endpoint.run_dir / "gateway.json").read_text())
    assert config["processes"] == 2 and len(config["upstreams"]) == 2
    assert Path(config["state_dir"]) == endpoint.run_dir / "gateway"
    commands = [psutil.Process(pid).cmdline() for pid in gateway_processes(endpoint)]
    assert sorted(command[-1] for command in commands) == ["0", "1"]
    assert all(command[-4:-2] == ["--config", str(endpoint.run_dir / "gateway.json")] for command in commands)
