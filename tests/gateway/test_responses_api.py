"""The Responses API and chat's reasoning, as the `openai` client and a raw SSE reader see them,
against a served disaggregated mocker graph."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tests.support.keyed import MODEL
from tests.support.keyed import RESPONSES_WEATHER as WEATHER
from tests.support.served import ServedGraph

FILES = {
    "type": "namespace",
    "name": "files",
    "description": "File tools",
    "tools": [
        {
            "type": "function",
            "name": "read_file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
        {"type": "custom", "name": "apply_patch", "description": "Edit files with a patch."},
    ],
}
HOSTED = [
    {"type": "web_search"},
    {"type": "file_search", "vector_store_ids": ["vs_1"]},
    {"type": "code_interpreter", "container": {"type": "auto"}},
    {"type": "image_generation"},
    {"type": "computer_use_preview", "display_width": 1024, "display_height": 768, "environment": "linux"},
    {"type": "local_shell"},
    {"type": "mcp", "server_label": "docs", "server_url": "https://example.invalid"},
]
EVENT = TypeAdapter(ResponseStreamEvent)


@pytest.fixture(scope="module")
def client(fast_graph: ServedGraph) -> openai.OpenAI:
    return openai.OpenAI(base_url=fast_graph.endpoint, api_key="unused", max_retries=0, timeout=60)


def lossless(model: object, raw: dict) -> None:
    """Every field the endpoint wrote is one the openai client's typed model knows, with its value."""
    assert model.model_dump(mode="json", by_alias=True, exclude_unset=True) == raw  # type: ignore[attr-defined]


def stream_events(fast_graph: ServedGraph, body: dict) -> list[dict]:
    with httpx.stream("POST", f"{fast_graph.endpoint}/responses", json={**body, "stream": True}, timeout=60) as reply:
        assert reply.status_code == 200, reply.read()
        assert reply.headers["content-type"].startswith("text/event-stream")
        data = [line[6:] for line in reply.iter_lines() if line.startswith("data: ")]
    return [json.loads(line) for line in data]


def test_a_response_parses_into_the_typed_model_without_loss(fast_graph: ServedGraph, client: openai.OpenAI) -> None:
    raw = httpx.post(
        f"{fast_graph.endpoint}/responses", json={"model": MODEL, "input": "Say hello."}, timeout=60
    ).json()
    lossless(Response.model_validate(raw), raw)
    response = client.responses.create(model=MODEL, input="Say hello.", reasoning={"effort": "low"})
    assert response.status == "completed" and response.id.startswith("resp_")
    reasoning, message = response.output
    assert reasoning.type == "reasoning" and reasoning.content[0].type == "reasoning_text" and reasoning.content[0].text
    assert message.type == "message" and message.status == "completed" and response.output_text
    usage = response.usage
    assert usage.output_tokens_details.reasoning_tokens > 0 and usage.input_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens


def test_a_stream_has_openai_s_events_in_order_each_typed_without_loss(fast_graph: ServedGraph) -> None:
    events = stream_events(fast_graph, {"model": MODEL, "input": "Use get_weather for Paris.", "tools": [WEATHER]})
    for raw in events:
        lossless(EVENT.validate_python(raw), raw)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    reasoning_events = ["response.output_item.added", "response.content_part.added", "response.reasoning_text.delta"]
    assert kinds[2:5] == reasoning_events
    assert kinds.index("response.reasoning_text.done") < kinds.index("response.content_part.done")
    assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds
    final = events[-1]["response"]
    call = final["output"][-1]
    assert call["type"] == "function_call" and call["name"] == "get_weather" and call["status"] == "completed"
    assert json.loads(call["arguments"])["city"] and call["id"].startswith("fc_") and call["call_id"]
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    assert deltas == final["output"][0]["content"][0]["text"]
    assert all(item["id"] and item.get("status", "completed") == "completed" for item in final["output"])


def test_namespaced_and_custom_tools_come_back_under_the_client_s_names(client: openai.OpenAI) -> None:
    read = client.responses.create(model=MODEL, input="Use read_file on README.md.", tools=[WEATHER, FILES])
    call = read.output[-1]
    assert (call.type, call.name, call.namespace) == ("function_call", "read_file", "files")
    assert json.loads(call.arguments)["path"]
    patch = client.responses.create(model=MODEL, input="Use apply_patch to fix the typo.", tools=[FILES])
    custom = patch.output[-1]
    assert (custom.type, custom.name, custom.namespace) == ("custom_tool_call", "apply_patch", "files")
    assert isinstance(custom.input, str) and custom.input and custom.call_id


def test_hosted_tools_never_fail_a_request(client: openai.OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="Use get_weather for Oslo.", tools=[*HOSTED, WEATHER])
    assert response.status == "completed" and response.output[-1].name == "get_weather"
    assert [tool.type for tool in response.tools] == [tool["type"] for tool in [*HOSTED, WEATHER]]


def test_the_whole_tool_loop_runs_on_sealed_reasoning_handed_back(
    fast_graph: ServedGraph, client: openai.OpenAI
) -> None:
    """Codex's way: store false, reasoning.encrypted_content included, every item sent back."""
    ask = [{"role": "user", "content": [{"type": "input_text", "text": "Use get_weather for Paris."}]}]
    first = client.responses.create(
        model=MODEL, input=ask, tools=[WEATHER], store=False, include=["reasoning.encrypted_content"]
    )
    reasoning, call = first.output
    assert reasoning.encrypted_content and reasoning.content[0].text not in reasoning.encrypted_content
    sealed_only = {
        "type": "reasoning",
        "id": reasoning.id,
        "summary": [],
        "encrypted_content": reasoning.encrypted_content,
    }
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C"}
    handed_back = [*ask, sealed_only, call.model_dump(exclude_none=True), output]
    second = client.responses.create(model=MODEL, input=handed_back, tools=[WEATHER], store=False)
    assert second.output[-1].type == "message" and second.output_text
    altered = {**sealed_only, "encrypted_content": reasoning.encrypted_content[:-4] + "AAAA"}
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=MODEL, input=[*ask, altered, call.model_dump(exclude_none=True), output])
    assert refused.value.body["param"] == "input[1].encrypted_content"  # type: ignore[index]


def test_a_cut_answer_is_incomplete_and_says_why(client: openai.OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="Tell me a long story.", max_output_tokens=8)
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert response.output[-1].status == "incomplete" and response.usage.output_tokens == 8


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input[0].type"),
        ({"input": [{"type": "function_call_output", "call_id": "call_x", "output": "x"}]}, "input[0].call_id"),
        ({"input": "hi", "tools": [{"type": "function", "parameters": {}}]}, "tools[0].name"),
        (
            {"input": "hi", "tools": [{"type": "namespace", "name": "n", "tools": [{"type": "web_search"}]}]},
            "tools[0].tools[0].type",
        ),
        (
            {"input": "hi", "tools": [{**WEATHER, "parameters": {"type": "object", "properties": 3}}]},
            "tools[0].parameters",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0].type",
        ),
    ],
)
def test_bad_input_is_an_openai_400_naming_the_field_and_reaches_no_worker(
    fast_graph: ServedGraph, body: dict, param: str
) -> None:
    before = fast_graph.frontend_requests()
    reply = httpx.post(f"{fast_graph.endpoint}/responses", json={"model": MODEL, **body}, timeout=30)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error" and param in error["message"]
    assert fast_graph.frontend_requests() == before


CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 200}


def test_chat_returns_reasoning_beside_reasoning_content_unless_excluded(fast_graph: ServedGraph) -> None:
    message = httpx.post(f"{fast_graph.endpoint}/chat/completions", json=CHAT, timeout=60).json()["choices"][0][
        "message"
    ]
    assert message["reasoning"] and message["reasoning"] == message["reasoning_content"]
    with httpx.stream(
        "POST", f"{fast_graph.endpoint}/chat/completions", json={**CHAT, "stream": True}, timeout=60
    ) as reply:
        chunks = [json.loads(line[6:]) for line in reply.iter_lines() if line.startswith("data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    reasoning = [d for d in deltas if "reasoning_content" in d]
    assert reasoning and all(d["reasoning"] == d["reasoning_content"] for d in reasoning)
    excluded = {**CHAT, "reasoning": {"exclude": True}}
    message = httpx.post(f"{fast_graph.endpoint}/chat/completions", json=excluded, timeout=60).json()["choices"][0][
        "message"
    ]
    assert "reasoning" not in message and "reasoning_content" not in message and message["content"]
    with httpx.stream(
        "POST", f"{fast_graph.endpoint}/chat/completions", json={**excluded, "stream": True}, timeout=60
    ) as reply:
        text = "".join(reply.iter_text())
    assert "reasoning" not in text.replace(": reasoning left out", "") and '"content"' in text


def test_chat_takes_reasoning_sent_back_under_either_name(fast_graph: ServedGraph) -> None:
    def prompt_tokens(assistant: dict) -> int:
        messages = [
            {"role": "user", "content": "Use get_weather for Paris."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
                **assistant,
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
        ]
        body = {
            **CHAT,
            "messages": messages,
            "tools": [{"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}],
        }
        reply = httpx.post(f"{fast_graph.endpoint}/chat/completions", json=body, timeout=60)
        assert reply.status_code == 200, reply.text
        return reply.json()["usage"]["prompt_tokens"]

    without = prompt_tokens({})
    thought = "I should look up the weather in Paris with the tool before answering."
    assert prompt_tokens({"reasoning": thought}) > without
    assert prompt_tokens({"reasoning": thought}) == prompt_tokens({"reasoning_content": thought})
