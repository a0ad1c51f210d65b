"""A required or named tool choice on chat, which the gateway sends Dynamo's frontend as a grammar of
the forced call beside the rendered prompt: the call comes back as `tool_calls` after the reasoning,
to the named tool even where the user's message names another, with arguments its schema accepts,
streamed or not and beside a `response_format`; a call cut by max_tokens ends "length" (Dynamo's
own forced path gives no finish_reason); a named tool not offered is a 400 naming it that reaches
no worker. Against the served mocker graph the gateway's modules share; the mocker calls what the
grammar allows, as a guided worker must."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest

from tests.support.served import ServedGraph

MODEL = "openai/gpt-oss-20b"
ASK = [{"role": "user", "content": "Use get_weather for Paris."}]  # the mocker's auto choice would call it
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TIME = {
    "type": "object",
    "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
    "required": ["zone"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": TIME}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
NAMED = {"type": "function", "function": {"name": "get_time"}}


@pytest.fixture(scope="module")
def client(fast_graph: ServedGraph) -> openai.OpenAI:
    return openai.OpenAI(base_url=fast_graph.endpoint, api_key="unused", max_retries=0, timeout=60)


def answer(client: openai.OpenAI, streamed: bool, **body: object) -> tuple[str, list[tuple[str, str]], str | None]:
    """(reasoning, [(tool name, arguments)], finish_reason) of one chat completion, streamed or not."""
    request = {"model": MODEL, "messages": ASK, "tools": TOOLS, **body}
    if not streamed:
        choice = client.chat.completions.create(**request).choices[0]
        calls = [(call.function.name, call.function.arguments) for call in choice.message.tool_calls or []]
        return choice.message.model_extra["reasoning"] or "", calls, choice.finish_reason
    chunks = [chunk for chunk in client.chat.completions.create(**request, stream=True) if chunk.choices]
    reasoning = "".join((chunk.choices[0].delta.model_extra or {}).get("reasoning") or "" for chunk in chunks)
    calls: dict[int, tuple[str, str]] = {}  # by index: the name first, then the arguments piece by piece
    for call in [call for chunk in chunks for call in chunk.choices[0].delta.tool_calls or []]:
        name, arguments = calls.get(call.index, ("", ""))
        calls[call.index] = (name + (call.function.name or ""), arguments + (call.function.arguments or ""))
    finishes = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices[0].finish_reason]
    assert len(finishes) == 1, finishes
    return reasoning, list(calls.values()), finishes[0]


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("choice", ["required", NAMED], ids=["required", "named"])
def test_a_forced_choice_calls_after_the_reasoning_with_arguments_its_schema_accepts(
    client: openai.OpenAI, choice: object, streamed: bool
) -> None:
    reasoning, calls, finish = answer(client, streamed, tool_choice=choice)
    assert reasoning.startswith("We ") and finish == "tool_calls"
    ((name, arguments),) = calls
    assert name == "get_time" if choice == NAMED else name in SCHEMAS
    jsonschema.validate(json.loads(arguments), SCHEMAS[name])


def test_a_named_choice_beside_a_format_calls_the_tool(client: openai.OpenAI) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "report", "schema": {"type": "object"}}}
    _, calls, finish = answer(client, False, tool_choice=NAMED, response_format=fmt)
    ((name, arguments),) = calls
    assert (name, finish) == ("get_time", "tool_calls")
    jsonschema.validate(json.loads(arguments), TIME)


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_a_forced_call_cut_by_max_tokens_ends_with_length(client: openai.OpenAI, streamed: bool) -> None:
    _, calls, finish = answer(client, streamed, tool_choice=NAMED, max_tokens=12)
    assert (calls, finish) == ([], "length")


def test_a_named_tool_not_offered_is_a_400_naming_it_that_reaches_no_worker(fast_graph: ServedGraph) -> None:
    before = fast_graph.frontend_requests()
    not_offered = {"type": "function", "function": {"name": "rm"}}
    body = {"model": MODEL, "messages": ASK, "tools": TOOLS, "tool_choice": not_offered}
    reply = httpx.post(f"{fast_graph.endpoint}/chat/completions", json=body, timeout=30)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == "tool_choice.function.name" and "'rm'" in error["message"]
    assert fast_graph.frontend_requests() == before
