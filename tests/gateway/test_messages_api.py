"""Anthropic's Messages API as the pinned `anthropic` SDK sees it, and per-tenant cache isolation
through every API's usage, against the gateway tests' disaggregated mocker graph with API keys (the
keys the Messages API is called with are the tenants the cache is salted by; alice and carol are one
tenant, bob, dave and erin one each, unused until the isolation test)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter

from dynamo_oss.gateway.chat.conversation import conversation
from dynamo_oss.gateway.config import GatewayConfig
from dynamo_oss.gateway.graph_key import GraphKey
from dynamo_oss.gateway.harmony.rendering import RenderCache, render
from dynamo_oss.gateway.protocol.chat import ChatRequest
from dynamo_oss.gateway.tenancy import Tenants
from tests.support.graphs import KEYS
from tests.support.keyed import MESSAGES_WEATHER, base_url
from tests.support.npm_clients import npm_client, run_in_own_group
from tests.support.served import ServedGraph

MODEL = "openai/gpt-oss-20b"
EVENT = TypeAdapter(RawMessageStreamEvent)
CLAUDE_CODE = Path(__file__).resolve().parent / "clients" / "claude-code"  # its package.json and lock file
CLIENT_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def client(keyed_graph: ServedGraph) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=base_url(keyed_graph), api_key=KEYS["alice"], max_retries=0, timeout=60)


def lossless(model: object, raw: dict) -> None:
    """Every field the endpoint wrote is one the SDK's typed model knows, with its value."""
    assert model.model_dump(mode="json", exclude_unset=True) == raw  # type: ignore[attr-defined]


def post(keyed_graph: ServedGraph, body: dict, key: str = KEYS["alice"]) -> httpx.Response:
    """A Messages request as Claude Code sends its key: `x-api-key`."""
    return httpx.post(f"{keyed_graph.endpoint}/messages", json=body, headers={"x-api-key": key}, timeout=60)


def test_a_message_has_thinking_then_text_and_parses_into_the_sdk_s_model_without_loss(
    keyed_graph: ServedGraph, client: anthropic.Anthropic
) -> None:
    reply = post(
        keyed_graph, {"model": MODEL, "max_tokens": 400, "messages": [{"role": "user", "content": "Say hello."}]}
    )
    assert reply.status_code == 200, reply.text
    raw = reply.json()
    lossless(Message.model_validate(raw), raw)
    message = client.messages.create(
        model=MODEL, max_tokens=400, system="Be brief.", messages=[{"role": "user", "content": "Say hello."}]
    )
    thinking, text = message.content
    assert thinking.type == "thinking" and thinking.thinking and thinking.signature
    assert text.type == "text" and text.text and message.stop_reason == "end_turn"
    assert message.id.startswith("msg_") and message.role == "assistant" and message.model == MODEL
    usage = message.usage
    assert usage.input_tokens > 0 and usage.output_tokens > usage.output_tokens_details.thinking_tokens > 0


def test_a_stream_has_anthropic_s_events_in_order_and_the_stream_helper_accumulates_them(
    keyed_graph: ServedGraph, client: anthropic.Anthropic
) -> None:
    body = {"model": MODEL, "max_tokens": 400, "stream": True, "messages": [{"role": "user", "content": "Hi."}]}
    with httpx.stream(
        "POST", f"{keyed_graph.endpoint}/messages", json=body, headers={"x-api-key": KEYS["alice"]}, timeout=60
    ) as reply:
        assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
        lines = list(reply.iter_lines())
    names = [line[7:] for line in lines if line.startswith("event: ")]
    events = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
    assert names == [event["type"] for event in events]  # each event's name is its type, as the SDK reads it
    for raw in events:
        lossless(EVENT.validate_python(raw), raw)
    kinds = [event["type"] for event in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    for index in {event["index"] for event in events if "index" in event}:
        own = [event["type"] for event in events if event.get("index") == index]
        assert own[0] == "content_block_start" and own[-1] == "content_block_stop"
    thinking = [e["delta"]["type"] for e in events if e["type"] == "content_block_delta" and e["index"] == 0]
    assert thinking[0] == "thinking_delta" and thinking[-1] == "signature_delta"
    assert events[-2]["delta"]["stop_reason"] == "end_turn" and events[-2]["usage"]["output_tokens"] > 0

    with client.messages.stream(model=MODEL, max_tokens=400, messages=[{"role": "user", "content": "Hi."}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and text == final.content[-1].text and final.content[0].signature


def test_a_tool_loop_runs_with_its_thinking_handed_back_and_an_altered_one_is_refused(
    client: anthropic.Anthropic,
) -> None:
    ask = {"role": "user", "content": "Use get_weather for Paris."}
    with client.messages.stream(model=MODEL, max_tokens=400, messages=[ask], tools=[MESSAGES_WEATHER]) as stream:
        first = stream.get_final_message()
    thinking, call = first.content
    assert first.stop_reason == "tool_use" and thinking.type == "thinking"
    assert call.type == "tool_use" and call.name == "get_weather" and call.input["city"]
    assert call.id.startswith("toolu_")
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "Sunny, 21 C"}]}
    turn = [ask, {"role": "assistant", "content": first.content}, result]
    second = client.messages.create(model=MODEL, max_tokens=400, messages=turn, tools=[MESSAGES_WEATHER])
    assert second.stop_reason == "end_turn" and second.content[-1].type == "text" and second.content[-1].text
    altered = {"type": "thinking", "thinking": thinking.thinking + " (edited)", "signature": thinking.signature}
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(
            model=MODEL,
            max_tokens=400,
            tools=[MESSAGES_WEATHER],
            messages=[ask, {"role": "assistant", "content": [altered, call]}, result],
        )
    error = refused.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error" and error["message"].startswith("messages.1.content.0.signature")


def test_tool_choice_forces_a_named_tool_or_none(client: anthropic.Anthropic) -> None:
    ask = [{"role": "user", "content": "What should I wear today?"}]
    forced = client.messages.create(
        model=MODEL,
        max_tokens=400,
        messages=ask,
        tools=[MESSAGES_WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    assert forced.stop_reason == "tool_use" and forced.content[-1].name == "get_weather"
    assert isinstance(forced.content[-1].input["city"], str)
    refused = client.messages.create(
        model=MODEL,
        max_tokens=400,
        tools=[MESSAGES_WEATHER],
        tool_choice={"type": "none"},
        messages=[{"role": "user", "content": "Use get_weather for Paris."}],
    )
    assert refused.stop_reason == "end_turn" and all(block.type != "tool_use" for block in refused.content)


def test_a_stop_sequence_ends_the_answer_where_it_appears(
    keyed_graph: ServedGraph, client: anthropic.Anthropic
) -> None:
    ask = [{"role": "user", "content": "Tell me about the sea."}]
    whole = client.messages.create(model=MODEL, max_tokens=400, messages=ask).content[-1].text
    stop = whole.split()[2]  # the answer's third word: the mocker answers a prompt the same way each time
    cut = client.messages.create(model=MODEL, max_tokens=400, messages=ask, stop_sequences=[stop])
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop
    assert cut.content[-1].text == whole[: whole.index(stop)]


def frontend_requests(keyed_graph: ServedGraph) -> float:
    port = next(p for p in keyed_graph.state()["processes"] if p["name"] == "frontend")["ports"][0]
    metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("dynamo_frontend_requests_total")
    )


HI = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"messages": HI, "max_tokens": 10, "frequency_penalty": 1}, "frequency_penalty: Extra inputs"),
        ({"messages": HI}, "max_tokens: Field required"),
        (
            {
                "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "u"}}]}],
                "max_tokens": 10,
            },
            "messages.0.content.0.type: 'image'",
        ),
        (
            {
                "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x"}]}],
                "max_tokens": 10,
            },
            "messages.0.content.0.tool_use_id",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "texte", "text": "hi"}]}], "max_tokens": 10},
            "messages.0.content.0",
        ),
        ({"messages": [*HI, {"role": "assistant", "content": "Sure"}], "max_tokens": 10}, "messages.1: "),
        (
            {"messages": HI, "max_tokens": 10, "tools": [{**MESSAGES_WEATHER, "input_schema": {"type": "string"}}]},
            "tools.0.input_schema",
        ),
        (
            {
                "messages": HI,
                "max_tokens": 10,
                "tools": [MESSAGES_WEATHER],
                "tool_choice": {"type": "tool", "name": "nope"},
            },
            "tool_choice.name",
        ),
    ],
)
def test_a_request_anthropic_would_refuse_is_a_400_in_anthropic_s_shape_and_reaches_no_worker(
    keyed_graph: ServedGraph, body: dict, named: str
) -> None:
    before = frontend_requests(keyed_graph)
    reply = post(keyed_graph, {"model": MODEL, **body})
    assert reply.status_code == 400, reply.text
    error = reply.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert error["error"]["message"].startswith(named), error
    assert frontend_requests(keyed_graph) == before


def test_keys_and_unknown_models_are_refused_as_anthropic_s_sdk_expects(
    keyed_graph: ServedGraph, client: anthropic.Anthropic
) -> None:
    wrong = anthropic.Anthropic(base_url=base_url(keyed_graph), api_key="sk-wrong", max_retries=0, timeout=30)
    with pytest.raises(anthropic.AuthenticationError) as unauthenticated:
        wrong.messages.create(model=MODEL, max_tokens=10, messages=HI)
    assert unauthenticated.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError) as unknown:
        client.messages.create(model="no-such-model", max_tokens=10, messages=HI)
    assert "no-such-model" in unknown.value.body["error"]["message"]  # type: ignore[index]
    chat = httpx.post(f"{keyed_graph.endpoint}/chat/completions", json={"model": MODEL, "messages": HI}, timeout=30)
    assert chat.status_code == 401 and chat.json()["error"]["code"] == "invalid_api_key"  # OpenAI's shape there


Cached = Callable[[ServedGraph, str, str], tuple[int, int]]  # (prompt tokens, of which cached) for a key
LONG = " ".join(f"ledger entry {i} reconciled" for i in range(300))  # about 1,500 prompt tokens


def cached_chat(keyed_graph: ServedGraph, key: str, prompt: str) -> tuple[int, int]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": 4}
    usage = httpx.post(
        f"{keyed_graph.endpoint}/chat/completions", json=body, timeout=60, headers={"Authorization": f"Bearer {key}"}
    ).json()["usage"]
    return usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]


def cached_responses(keyed_graph: ServedGraph, key: str, prompt: str) -> tuple[int, int]:
    client = openai.OpenAI(base_url=keyed_graph.endpoint, api_key=key, max_retries=0, timeout=60)
    usage = client.responses.create(model=MODEL, input=prompt, max_output_tokens=4).usage
    return usage.input_tokens, usage.input_tokens_details.cached_tokens


def cached_messages(keyed_graph: ServedGraph, key: str, prompt: str) -> tuple[int, int]:
    usage = post(
        keyed_graph, {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": prompt}]}, key
    ).json()["usage"]
    return usage["input_tokens"] + usage["cache_read_input_tokens"], usage["cache_read_input_tokens"]


@pytest.mark.parametrize(
    ("api", "other"), [(cached_chat, "bob"), (cached_responses, "dave"), (cached_messages, "erin")]
)
def test_a_tenant_reuses_its_own_cached_prefix_and_never_another_s(
    keyed_graph: ServedGraph, api: Cached, other: str
) -> None:
    """The same long prompt: most of it cached on a tenant's second request, none of it for a
    tenant that has sent nothing yet, and as much for another key of the first tenant."""
    prompt = f"{api.__name__}: {LONG}"
    api(keyed_graph, KEYS["alice"], prompt)
    tokens, cached = api(keyed_graph, KEYS["alice"], prompt)
    assert cached >= 0.9 * tokens, (tokens, cached)
    assert api(keyed_graph, KEYS[other], prompt)[1] == 0
    assert api(keyed_graph, KEYS["carol"], prompt)[1] >= 0.9 * tokens


def test_whoever_reaches_dynamo_s_frontend_directly_cannot_aim_at_a_tenant_s_cache(keyed_graph: ServedGraph) -> None:
    """alice's prompt, as the gateway renders it, sent to Dynamo's frontend past the gateway: under her
    name as the salt (what the salt used to be) or none it finds nothing cached; only the salt the
    graph's key derives finds it, which proves the ids are hers."""
    prompt = f"direct: {LONG}"
    cached_chat(keyed_graph, KEYS["alice"], prompt)
    request = ChatRequest(model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=4)
    ids = render(conversation(request), RenderCache()).token_ids
    frontend = next(p for p in keyed_graph.state()["processes"] if p["name"] == "frontend")["ports"][0]
    config = GatewayConfig.read(keyed_graph.run_dir / "gateway.json")
    assert config.reasoning_key_file is not None
    graph_key = GraphKey.from_file(config.reasoning_key_file)

    def cached(salt: bytes | None) -> int:
        headers = {"x-tenant-id": salt.decode()} if salt is not None else {}
        reply = httpx.post(
            f"http://127.0.0.1:{frontend}/v1/completions",
            headers=headers,
            timeout=60,
            json={"model": MODEL, "prompt": ids, "max_tokens": 4},
        )
        return reply.json()["usage"]["prompt_tokens_details"]["cached_tokens"]

    assert cached(b"alice") == 0 and cached(None) == 0
    assert cached(Tenants(graph_key, isolated=True).salt("alice")) >= 0.9 * len(ids)


@pytest.fixture(scope="module")
def claude() -> Path:
    """Claude Code's binary, pinned in tests/gateway/clients/claude-code/package-lock.json."""
    return npm_client(CLAUDE_CODE, "claude")


def test_claude_code_runs_the_named_tool_and_answers_its_result(
    keyed_graph: ServedGraph, claude: Path, tmp_path: Path
) -> None:
    """`claude -p` against the graph, offline: the model calls Glob, Claude Code runs it and sends its
    tool_result back with the turn's (signed, text-omitted) thinking, and the answer ends the turn;
    the gateway refuses none of its requests (beta fields and all)."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = {
        **os.environ,
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": base_url(keyed_graph),
        "ANTHROPIC_API_KEY": KEYS["alice"],
        "ANTHROPIC_MODEL": MODEL,
        "ANTHROPIC_SMALL_FAST_MODEL": MODEL,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": MODEL,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
    }
    command = [
        str(claude),
        "-p",
        "Use Glob to find python files.",
        "--allowedTools",
        "Glob",
        "--output-format",
        "stream-json",
        "--verbose",
    ]
    logged = len(keyed_graph.log_of("gateway"))
    status, stdout, stderr = run_in_own_group(command, CLIENT_TIMEOUT_S, cwd=work, env=env)
    gateway_log = keyed_graph.log_of("gateway")[logged:]  # what the gateway logged during Claude Code's run
    report = f"claude exited with {status}\n--- stdout:\n{stdout[-4000:]}\n--- stderr:\n{stderr[-3000:]}"
    assert status == 0, report
    events = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    blocks = [
        (event["type"], block)
        for event in events
        if event.get("type") in ("assistant", "user")
        for block in event["message"]["content"]
        if isinstance(block, dict)
    ]
    calls = [block for kind, block in blocks if kind == "assistant" and block["type"] == "tool_use"]
    results = [block for kind, block in blocks if kind == "user" and block["type"] == "tool_result"]
    assert calls and calls[0]["name"] == "Glob" and results and results[0]["tool_use_id"] == calls[0]["id"], report
    assert blocks[-1][0] == "assistant" and blocks[-1][1]["type"] == "text", report
    assert events[-1]["type"] == "result" and events[-1]["subtype"] == "success" and not events[-1]["is_error"]
    assert "refused POST /v1/messages" not in gateway_log, gateway_log[-3000:]
