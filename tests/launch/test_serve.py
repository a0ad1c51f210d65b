"""`dynamo serve graphs/disagg.yaml --engine mocker`: real etcd, NATS, Dynamo frontend and mocker
workers, driven through the official openai client. Most tests share one served graph and
leave it as they found it; the test that kills a worker, then the supervisor, serves a graph of its own."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import jsonschema
import openai
import pytest

from tests.support.commands import run_dynamo
from tests.support.graphs import write_graph
from tests.support.served import ServedGraph, start_serving, wait_ready
from tests.support.waiting import alive, wait_for

NAMESPACE = "gpt-oss-120b-disagg"
MODEL = "openai/gpt-oss-120b"
ETCDCTL = str(Path(sys.prefix) / "bin" / "etcdctl")
HELLO_USER = [{"role": "user", "content": "Why disaggregate prefill and decode?"}]
FORECAST_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_forecast",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "minLength": 2},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city", "days"],
            },
        },
    },
]


def client(served: ServedGraph) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.endpoint, api_key="not-needed", max_retries=0, timeout=60)


def ask(served: ServedGraph, **extra: object):
    return client(served).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hello."}], max_tokens=16, **extra
    )


@pytest.fixture
def own_graph(tmp_path: Path):
    """A small disaggregated mocker graph served for one test alone."""
    served = start_serving(write_graph(tmp_path, name=NAMESPACE, model="gpt-oss-120b"), tmp_path / "run")
    try:
        wait_ready(served)
        yield served
    finally:
        served.stop()


def registered_instances(served: ServedGraph, component: str) -> list[str]:
    """Worker instance ids (hex) in the graph's embedded etcd, read with etcd's own client."""
    listing = subprocess.run(
        [
            ETCDCTL,
            "--endpoints",
            served.etcd_endpoint,
            "get",
            "--prefix",
            "--keys-only",
            f"v1/instances/{NAMESPACE}/{component}/generate/",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "ETCDCTL_API": "3"},
    )
    return [line.rsplit("/", 1)[1] for line in listing.stdout.split() if line]


def routed_workers(served: ServedGraph) -> list[tuple[int, int]]:
    """(prefill worker id, decode worker id) of each request, from the KV router's routing log lines
    (`phase=Prefill worker_id=...` and `phase=Decode worker_id=...`, keyed by request id)."""
    route = re.compile(r"route request completed .* request_id=([0-9a-f-]+) .*phase=(Prefill|Decode) worker_id=(\d+)")
    phases: dict[str, dict[str, int]] = {}
    for request_id, phase, worker in route.findall(served.log_of("frontend")):
        phases.setdefault(request_id, {})[phase] = int(worker)
    return [(p["Prefill"], p["Decode"]) for p in phases.values() if {"Prefill", "Decode"} <= p.keys()]


def test_model_is_listed(disagg: ServedGraph) -> None:
    assert [m.id for m in client(disagg).models.list()] == [MODEL]


def test_non_streaming_chat_completion(disagg: ServedGraph) -> None:
    response = ask(disagg)
    assert response.model == MODEL
    assert response.choices[0].finish_reason in ("stop", "length")
    assert response.usage.completion_tokens > 0
    assert response.usage.prompt_tokens > 0


def test_streaming_chat_completion(disagg: ServedGraph) -> None:
    stream = client(disagg).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Count to three."}],
        max_tokens=16,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes in (["length"], ["stop"])
    assert sum(1 for c in chunks if c.choices) > 1  # tokens arrived as a stream, not one blob
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def words(text: str | None) -> list[str]:
    """The alphabetic words of a text: a readable answer has many, random token ids have few."""
    return [w for w in (text or "").replace(".", " ").split() if w.isalpha() and w.isascii()]


def test_answer_has_reasoning_and_content_in_words(disagg: ServedGraph) -> None:
    reply = client(disagg).chat.completions.create(model=MODEL, messages=HELLO_USER, max_tokens=400)
    message = reply.choices[0].message
    assert reply.choices[0].finish_reason == "stop"
    assert len(words(message.content)) >= 10
    assert len(words(message.model_extra["reasoning_content"])) >= 10
    assert "<|" not in message.content


def test_streamed_answer_reaches_the_openai_client_as_text(disagg: ServedGraph) -> None:
    stream = client(disagg).chat.completions.create(model=MODEL, messages=HELLO_USER, stream=True)
    chunks = list(stream)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasoning = "".join(
        (c.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for c in chunks if c.choices
    )
    assert len(words(content)) >= 10 and len(words(reasoning)) >= 10
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]


def test_request_without_max_tokens_is_served(disagg: ServedGraph) -> None:
    reply = client(disagg).chat.completions.create(model=MODEL, messages=HELLO_USER)
    assert reply.choices[0].finish_reason == "stop" and words(reply.choices[0].message.content)


def test_max_tokens_cuts_the_answer_with_length(disagg: ServedGraph) -> None:
    reply = client(disagg).chat.completions.create(model=MODEL, messages=HELLO_USER, max_tokens=10)
    assert (reply.choices[0].finish_reason, reply.usage.completion_tokens) == ("length", 10)


@pytest.mark.parametrize("length", [5, 300])
def test_ignore_eos_gives_exactly_the_tokens_asked_for(disagg: ServedGraph, length: int) -> None:
    reply = client(disagg).chat.completions.create(
        model=MODEL, messages=HELLO_USER, max_tokens=length, extra_body={"ignore_eos": True, "min_tokens": length}
    )
    assert reply.usage.completion_tokens == length


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_forecast"}}])
def test_tool_choice_gets_a_call_whose_arguments_fit_the_schema(disagg: ServedGraph, choice: object) -> None:
    reply = client(disagg).chat.completions.create(
        model=MODEL, messages=HELLO_USER, tools=FORECAST_TOOLS, tool_choice=choice
    )
    assert reply.choices[0].finish_reason == "tool_calls"
    (call,) = reply.choices[0].message.tool_calls
    if isinstance(choice, dict):
        assert call.function.name == "get_forecast"
    schema = next(t["function"]["parameters"] for t in FORECAST_TOOLS if t["function"]["name"] == call.function.name)
    jsonschema.validate(json.loads(call.function.arguments), schema)


@pytest.mark.parametrize(
    ("max_tokens", "finish", "content"), [(256, "stop", "Hello! Nice to meet you."), (5, "length", None)]
)
def test_a_conformance_recording_replays_within_max_tokens(
    disagg: ServedGraph, max_tokens: int, finish: str, content: str | None
) -> None:
    reply = client(disagg).chat.completions.create(
        model=MODEL,
        messages=HELLO_USER,
        max_tokens=max_tokens,
        extra_body={"nvext": {"annotations": ["output_replay_id:final-answer"]}},
    )
    assert reply.choices[0].finish_reason == finish
    assert reply.choices[0].message.content == content
    if finish == "length":
        assert reply.usage.completion_tokens == max_tokens


def test_completions_and_responses_answer_in_words(disagg: ServedGraph) -> None:
    completion = client(disagg).completions.create(model=MODEL, prompt="Once upon a time", max_tokens=20)
    assert len(words(completion.choices[0].text)) >= 5
    response = client(disagg).responses.create(model=MODEL, input="Say hello.")
    assert response.status == "completed" and len(words(response.output_text)) >= 5


def test_workers_are_registered_in_the_embedded_etcd(disagg: ServedGraph) -> None:
    assert len(registered_instances(disagg, "prefill")) == 1
    assert len(registered_instances(disagg, "backend")) == 1


def test_prefill_runs_on_the_prefill_pool_and_decode_on_the_decode_pool(disagg: ServedGraph) -> None:
    ask(disagg)
    prefill_ids = {int(h, 16) for h in registered_instances(disagg, "prefill")}
    decode_ids = {int(h, 16) for h in registered_instances(disagg, "backend")}
    routes = wait_for(lambda: routed_workers(disagg), 10, "the frontend to log the request's workers")
    prefill, decode = routes[-1]
    assert prefill in prefill_ids
    assert decode in decode_ids
    assert prefill != decode


WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
HELLO = [{"role": "user", "content": "hi"}]
BAD_REQUESTS = {
    "unknown model": ("chat/completions", {"model": "no-such-model", "messages": HELLO}, 404, "model"),
    "unknown role": (
        "chat/completions",
        {"model": MODEL, "messages": [{"role": "wizard", "content": "hi"}]},
        400,
        "messages[0].role",
    ),
    "messages not a list": ("chat/completions", {"model": MODEL, "messages": "hi"}, 400, "messages"),
    "tool message without id": (
        "chat/completions",
        {"model": MODEL, "messages": [*HELLO, {"role": "tool", "content": "12"}]},
        400,
        "messages[1].tool_call_id",
    ),
    "tool schema not JSON Schema": (
        "chat/completions",
        {
            "model": MODEL,
            "messages": HELLO,
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "banana"}}}],
        },
        400,
        "tools[0].function.parameters",
    ),
    "tool schema not an object": (
        "chat/completions",
        {
            "model": MODEL,
            "messages": HELLO,
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}],
        },
        400,
        "tools[0].function.parameters",
    ),
    "prompt longer than the context": (
        "chat/completions",
        {"model": MODEL, "messages": [{"role": "user", "content": "hello " * 140_000}]},
        400,
        "messages",
    ),
    "max_tokens zero": ("chat/completions", {"model": MODEL, "messages": HELLO, "max_tokens": 0}, 400, "max_tokens"),
    "max_tokens past the context": (
        "chat/completions",
        {"model": MODEL, "messages": HELLO, "max_tokens": 200_000},
        400,
        "max_tokens",
    ),
    "max_tokens not a number": (
        "chat/completions",
        {"model": MODEL, "messages": HELLO, "max_tokens": "ten"},
        400,
        "max_tokens",
    ),
    "responses tool schema": (
        "responses",
        {
            "model": MODEL,
            "input": "hi",
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object", "required": "city"}}],
        },
        400,
        "tools[0].parameters",
    ),
    "completions max_tokens": ("completions", {"model": MODEL, "prompt": "hi", "max_tokens": -1}, 400, "max_tokens"),
}


@pytest.mark.parametrize("case", BAD_REQUESTS, ids=list(BAD_REQUESTS))
def test_bad_request_gets_an_openai_error_naming_the_field(disagg: ServedGraph, case: str) -> None:
    path, body, status, param = BAD_REQUESTS[case]
    response = httpx.post(f"{disagg.endpoint}/{path}", json=body, timeout=60)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param
    assert error["type"] == ("not_found_error" if status == 404 else "invalid_request_error")
    assert error["message"]


def test_errors_dynamo_raises_itself_come_back_in_openai_shape(disagg: ServedGraph) -> None:
    """A mistake the gateway leaves to Dynamo's frontend (here a raw completion's string temperature)."""
    response = httpx.post(f"{disagg.endpoint}/completions", json={"model": MODEL, "prompt": "hi", "temperature": "hot"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "hot" in error["message"]


def test_the_openai_client_raises_the_matching_errors(disagg: ServedGraph) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        client(disagg).chat.completions.create(model="no-such-model", messages=HELLO, max_tokens=4)
    assert missing.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as too_long:
        client(disagg).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hello " * 140_000}], max_tokens=4
        )
    assert too_long.value.code == "context_length_exceeded"
    assert "maximum context length is 131072 tokens" in too_long.value.message


def test_bad_requests_take_no_worker_down(disagg: ServedGraph) -> None:
    for path, body, _, _ in BAD_REQUESTS.values():
        httpx.post(f"{disagg.endpoint}/{path}", json=body, timeout=60)
    assert ask(disagg).usage.completion_tokens > 0
    assert [p["restarts"] for p in disagg.state()["processes"]] == [0] * len(disagg.state()["processes"])


def test_second_graph_on_the_same_ports_is_refused_before_starting(disagg: ServedGraph, tmp_path: Path) -> None:
    result = run_dynamo("serve", str(disagg.graph), "--engine", "mocker", "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 2
    frontend_port = next(p["ports"][0] for p in disagg.state()["processes"] if p["name"] == "gateway")
    assert f"frontend.port: 127.0.0.1:{frontend_port} is taken" in result.stderr
    assert "infrastructure.etcd.client_port" in result.stderr
    assert "observability.launcher_port" in result.stderr  # the launcher's own metrics port counts too
    assert not (tmp_path / "run" / "logs").exists()  # nothing was started


def test_serve_writes_the_files_its_plan_lists(disagg: ServedGraph) -> None:
    plan = json.loads(
        run_dynamo("check", str(disagg.graph), "--engine", "mocker", "--run-dir", str(disagg.run_dir), "--json").stdout
    )
    planned = {Path(file["path"]) for file in plan["files"]}
    assert {path.name for path in planned} == {
        "prefill.npz",
        "decode.npz",
        "conformance-responses.jsonl",
        "prometheus.yml",
        "prometheus-workers.json",
        "planner.json",
        "alert-rules.yml",
        "nats-url",
        "gateway.json",
    }
    assert all(path.is_file() for path in planned)
    assert (disagg.run_dir / "nats-url").stat().st_mode & 0o777 == 0o600  # it may hold a password


def test_status_reads_the_running_graph(disagg: ServedGraph) -> None:
    result = run_dynamo("status", str(disagg.run_dir), "--json")
    assert result.returncode == 0, result.stderr
    state = json.loads(result.stdout)
    assert state["ready"] and not state["stopped"]
    assert [(p["role"], p["target"], p["live"]) for p in state["pools"]] == [("prefill", 1, 1), ("decode", 1, 1)]
    text = run_dynamo("status", str(disagg.run_dir)).stdout
    assert f"graph {NAMESPACE}: ready" in text and "decode-0" in text
    assert "(autoscaled 1-4)" in text and "(autoscaled 1-6)" in text


def test_the_readmes_graph_runs_the_planner_in_sla_mode(disagg: ServedGraph) -> None:
    terminal = disagg.output.read_text()
    assert (
        "[dynamo-oss] planner: sla mode: sizes prefill 1-4 and decode 1-6 for TTFT p90 <= 2000 ms and ITL <= 20 ms"
        in terminal
    )
    assert {p["name"] for p in disagg.state()["processes"]} >= {"planner", "actuator"}

    def looked() -> str | None:
        text = run_dynamo("status", str(disagg.run_dir)).stdout
        return text if "planner's latest look (sla), at " in text else None

    wait_for(looked, 60, "the planner's first look in dynamo status")


def test_status_of_a_folder_that_ran_nothing(tmp_path: Path) -> None:
    result = run_dynamo("status", str(tmp_path))
    assert result.returncode == 2
    assert "state.json: not found" in result.stderr and "Traceback" not in result.stderr


def cached_share(served: ServedGraph, prompt: str) -> tuple[int, int]:
    """(prompt tokens, of which cached) in the usage of a chat completion of `prompt`."""
    usage = (
        client(served)
        .chat.completions.create(model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=4)
        .usage
    )
    assert usage is not None and usage.prompt_tokens_details is not None
    return usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens or 0


def test_a_killed_decode_worker_restarts_and_bills_the_prefill_cache_a_killed_supervisor_takes_all_with_it(
    own_graph: ServedGraph,
) -> None:
    """The restarted decode worker's prefix cache is empty while the prefill worker's still holds a
    prompt sent before the kill: that prompt, sent again, is billed as cached (the prefill worker's
    hits, which is where a prompt's cache is used), where the decode worker's own count would be none
    of it (Dynamo 4239: the frontend reports the decode worker's usage). Then the supervisor itself is
    killed, and every process of the graph exits with it."""
    long_prompt = " ".join(f"ledger entry {i} reconciled" for i in range(300))
    cached_share(own_graph, long_prompt)
    old_pid = own_graph.pid_of("decode-0")
    old_instances = set(registered_instances(own_graph, "backend"))
    os.kill(old_pid, signal.SIGKILL)

    def restarted() -> bool:
        pid = own_graph.pid_of("decode-0")
        return pid is not None and pid != old_pid

    wait_for(restarted, 30, "the supervisor to restart decode-0")
    assert "decode-0  | [dynamo-oss] exited with signal SIGKILL; restarting" in own_graph.output.read_text()
    new_instances = wait_for(
        lambda: set(registered_instances(own_graph, "backend")) - old_instances, 60, "the new decode worker to register"
    )
    new_decode_ids = {int(h, 16) for h in new_instances}

    def served_by_new_worker() -> bool:
        try:
            ask(own_graph)
        except openai.APIError:
            return False  # the frontend may still hold the dead worker until its lease lapses
        routes = routed_workers(own_graph)  # the frontend may log a route just after it answers
        return bool(routes) and routes[-1][1] in new_decode_ids

    wait_for(served_by_new_worker, 60, "a completion decoded by the restarted worker")
    serves_again = re.compile(r"decode-0\s+\| \[dynamo-oss\] serves again, [\d.]+ s after its restart")
    wait_for(lambda: serves_again.search(own_graph.output.read_text()), 30, "the launcher to say decode-0 serves again")

    decoded_before = len(routed_workers(own_graph))
    tokens, cached = cached_share(own_graph, long_prompt)
    routes = wait_for(lambda: routed_workers(own_graph)[decoded_before:], 10, "the frontend to log the route")
    assert routes[-1][1] in new_decode_ids  # decoded by the worker that never saw the prompt
    assert cached >= 0.9 * tokens, (tokens, cached)

    pids = [p["pid"] for p in own_graph.state()["processes"]]
    assert len(pids) == 6 and all(pids)
    os.kill(own_graph.process.pid, signal.SIGKILL)
    own_graph.process.wait(30)
    wait_for(lambda: not any(alive(pid) for pid in pids), 30, "every child of the killed supervisor to exit")


def test_routine_log_lines_stay_out_of_the_terminal(disagg: ServedGraph) -> None:
    ask(disagg)
    terminal = disagg.output.read_text()
    assert "[INF]" not in terminal and "Adding worker" not in terminal  # NATS's banner, Dynamo's start-up WARNs
    assert " INFO " not in terminal
    assert "[INF]" in disagg.log_of("nats") and " INFO " in disagg.log_of("frontend")  # every line is in the logs
