"""Structured outputs beside the reasoning, as the real clients' parse helpers see them: chat's
`response_format`, the Responses API's `text.format` and the Messages API's `output_config.format`
with pydantic models, streaming and not, with a tool in the same request; the answer parses into
the model while the reasoning stays in its own field. Bad formats are 400s naming the field that
reach no worker. Against the served disaggregated mocker graph the gateway's modules share."""

from __future__ import annotations

import json
from typing import Literal

import anthropic
import httpx
import openai
import pytest
from pydantic import BaseModel

from tests.support.served import ServedGraph

MODEL = "openai/gpt-oss-20b"
ASK = "What is the weather in Paris? Answer as the Weather format asks."
CALL_ASK = "Use get_weather for Paris, then answer as the Weather format asks."
TOOL_OUTPUT = '{"sky": "clear", "celsius": 21}'


class Weather(BaseModel):
    city: str
    celsius: int
    sky: Literal["clear", "cloudy", "rain"]
    wind_kmh: float | None


class GetWeather(BaseModel):
    """Current weather for a city."""

    city: str


RESPONSES_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": openai.pydantic_function_tool(GetWeather)["function"]["parameters"],
    "strict": True,
}
MESSAGES_TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "input_schema": GetWeather.model_json_schema(),
}


@pytest.fixture(scope="module")
def client(fast_graph: ServedGraph) -> openai.OpenAI:
    return openai.OpenAI(base_url=fast_graph.endpoint, api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def claude(fast_graph: ServedGraph) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=fast_graph.endpoint.removesuffix("/v1"), api_key="unused", max_retries=0, timeout=60
    )


def free_text(reasoning: str) -> None:
    """The analysis channel was not constrained: words, not the answer's JSON."""
    assert reasoning.startswith("We ") and "{" not in reasoning


# ---------------------------------------------------------------- Chat Completions


def test_chat_parse_gives_the_model_with_the_reasoning_in_its_own_field(client: openai.OpenAI) -> None:
    completion = client.chat.completions.parse(
        model=MODEL, messages=[{"role": "user", "content": ASK}], response_format=Weather
    )
    message = completion.choices[0].message
    assert completion.choices[0].finish_reason == "stop" and isinstance(message.parsed, Weather)
    assert Weather.model_validate_json(message.content) == message.parsed
    free_text(message.model_extra["reasoning"])
    assert message.model_extra["reasoning_content"] == message.model_extra["reasoning"]


def test_chat_stream_helper_streams_the_reasoning_then_the_parsed_answer(client: openai.OpenAI) -> None:
    reasoning, content = [], []
    with client.chat.completions.stream(
        model=MODEL, messages=[{"role": "user", "content": ASK}], response_format=Weather
    ) as stream:
        for event in stream:
            if event.type == "chunk" and event.chunk.choices:
                reasoning.append((event.chunk.choices[0].delta.model_extra or {}).get("reasoning") or "")
            elif event.type == "content.delta":
                content.append(event.delta)
            elif event.type == "content.done":
                assert isinstance(event.parsed, Weather)
        final = stream.get_final_completion()
    assert isinstance(final.choices[0].message.parsed, Weather)
    assert "".join(content) == final.choices[0].message.content
    free_text("".join(reasoning))


def test_chat_json_object_answers_a_json_object_streamed_or_not(client: openai.OpenAI) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Describe Paris as JSON."}],
        "response_format": {"type": "json_object"},
    }
    message = client.chat.completions.create(**body).choices[0].message
    assert isinstance(json.loads(message.content), dict)
    free_text(message.model_extra["reasoning"])
    chunks = list(client.chat.completions.create(**body, stream=True))
    assert isinstance(json.loads("".join(c.choices[0].delta.content or "" for c in chunks if c.choices)), dict)


@pytest.mark.parametrize("streamed", [False, True], ids=["parse", "stream"])
def test_chat_with_a_tool_calls_it_then_answers_its_output_in_the_format(client: openai.OpenAI, streamed: bool) -> None:
    def ask(messages: list[dict]) -> openai.types.chat.ParsedChatCompletionMessage:
        body = {
            "model": MODEL,
            "messages": messages,
            "response_format": Weather,
            "tools": [openai.pydantic_function_tool(GetWeather, name="get_weather")],
            "tool_choice": "auto",
        }
        if not streamed:
            return client.chat.completions.parse(**body).choices[0].message
        with client.chat.completions.stream(**body) as stream:
            return stream.get_final_completion().choices[0].message

    question = {"role": "user", "content": CALL_ASK}
    called = ask([question])
    call = called.tool_calls[0]
    assert called.parsed is None and isinstance(call.function.parsed_arguments, GetWeather)
    free_text(called.model_extra["reasoning"])
    turn = {
        "role": "assistant",
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
        ],
    }
    answered = ask([question, turn, {"role": "tool", "tool_call_id": call.id, "content": TOOL_OUTPUT}])
    assert isinstance(answered.parsed, Weather) and not answered.tool_calls
    free_text(answered.model_extra["reasoning"])


# ---------------------------------------------------------------- Responses


def test_responses_parse_gives_the_model_with_a_reasoning_item_before_it(client: openai.OpenAI) -> None:
    response = client.responses.parse(model=MODEL, input=ASK, text_format=Weather)
    reasoning, message = response.output
    assert response.status == "completed" and isinstance(response.output_parsed, Weather)
    assert Weather.model_validate_json(response.output_text) == response.output_parsed
    assert reasoning.type == "reasoning" and message.type == "message"
    free_text(reasoning.content[0].text)
    assert response.text.format.type == "json_schema" and response.text.format.name == "Weather"


def test_responses_stream_helper_streams_reasoning_events_then_the_parsed_answer(client: openai.OpenAI) -> None:
    with client.responses.stream(model=MODEL, input=ASK, text_format=Weather) as stream:
        events = list(stream)
        final = stream.get_final_response()
    reasoning = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = next(e for e in events if e.type == "response.output_text.done")
    assert isinstance(final.output_parsed, Weather) and isinstance(done.parsed, Weather)
    assert text == final.output_text
    free_text(reasoning)


def test_responses_json_object_answers_a_json_object(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model=MODEL, input="Describe Paris as JSON.", text={"format": {"type": "json_object"}}
    )
    assert isinstance(json.loads(response.output_text), dict) and response.text.format.type == "json_object"


@pytest.mark.parametrize("streamed", [False, True], ids=["parse", "stream"])
def test_responses_with_a_tool_calls_it_then_answers_its_output_in_the_format(
    client: openai.OpenAI, streamed: bool
) -> None:
    def ask(request_input: list[dict]) -> openai.types.responses.ParsedResponse:
        body = {"model": MODEL, "input": request_input, "text_format": Weather, "tools": [RESPONSES_TOOL]}
        if not streamed:
            return client.responses.parse(**body)
        with client.responses.stream(**body) as stream:
            return stream.get_final_response()

    question = {"role": "user", "content": CALL_ASK}
    called = ask([question])
    call = called.output[-1]
    assert call.type == "function_call" and call.parsed_arguments["city"] and called.output_parsed is None
    output = {"type": "function_call_output", "call_id": call.call_id, "output": TOOL_OUTPUT}
    turn = {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments}
    answered = ask([question, turn, output])
    assert isinstance(answered.output_parsed, Weather) and answered.output[-1].type == "message"
    free_text(answered.output[0].content[0].text)


# ---------------------------------------------------------------- Messages


def test_messages_parse_gives_the_model_after_a_thinking_block(claude: anthropic.Anthropic) -> None:
    message = claude.messages.parse(
        model=MODEL, max_tokens=1024, messages=[{"role": "user", "content": ASK}], output_format=Weather
    )
    thinking, text = message.content
    assert message.stop_reason == "end_turn" and isinstance(message.parsed_output, Weather)
    assert thinking.type == "thinking" and text.type == "text"
    assert Weather.model_validate_json(text.text) == message.parsed_output
    free_text(thinking.thinking)


def test_messages_stream_helper_streams_thinking_then_the_parsed_answer(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(
        model=MODEL, max_tokens=1024, messages=[{"role": "user", "content": ASK}], output_format=Weather
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    thinking = "".join(
        e.delta.thinking for e in events if e.type == "content_block_delta" and e.delta.type == "thinking_delta"
    )
    assert isinstance(final.parsed_output, Weather)
    free_text(thinking)


def test_messages_with_a_tool_uses_it_then_answers_its_result_in_the_format(claude: anthropic.Anthropic) -> None:
    question = {"role": "user", "content": CALL_ASK}
    body = {"model": MODEL, "max_tokens": 1024, "tools": [MESSAGES_TOOL], "output_format": Weather}
    called = claude.messages.parse(**body, messages=[question])
    use = called.content[-1]
    assert called.stop_reason == "tool_use" and use.type == "tool_use" and use.input["city"]
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": TOOL_OUTPUT}]}
    turn = {"role": "assistant", "content": [block.model_dump(exclude_unset=True) for block in called.content]}
    answered = claude.messages.parse(**body, messages=[question, turn, result])
    assert answered.stop_reason == "end_turn" and isinstance(answered.parsed_output, Weather)


# ---------------------------------------------------------------- bad formats

LOOKAHEAD = {"type": "object", "properties": {"code": {"type": "string", "pattern": "(?=A)[A-Z]+"}}}


@pytest.mark.parametrize(
    ("path", "body", "param", "says"),
    [
        (
            "chat/completions",
            {"response_format": {"type": "json_schema", "json_schema": {"name": "W", "schema": {"type": "banana"}}}},
            "response_format.json_schema.schema",
            "not a valid JSON Schema",
        ),
        (
            "chat/completions",
            {"response_format": {"type": "json_schema", "json_schema": {"name": "W", "schema": LOOKAHEAD}}},
            "response_format.json_schema.schema",
            "look-around",
        ),
        ("chat/completions", {"response_format": {"type": "yaml"}}, "response_format.type", "'yaml'"),
        ("chat/completions", {"response_format": {"type": "json_schema"}}, "response_format.json_schema", "required"),
        (
            "responses",
            {"text": {"format": {"type": "json_schema", "name": "W", "schema": {"type": "banana"}}}},
            "text.format.schema",
            "not a valid JSON Schema",
        ),
        (
            "responses",
            {"text": {"format": {"type": "json_schema", "name": "W", "schema": LOOKAHEAD}}},
            "text.format.schema",
            "look-around",
        ),
        ("responses", {"text": {"format": {"type": "yaml"}}}, "text.format.type", "'yaml'"),
    ],
    ids=[
        "chat-invalid",
        "chat-uncompilable",
        "chat-unknown-type",
        "chat-no-schema",
        "responses-invalid",
        "responses-uncompilable",
        "responses-unknown-type",
    ],
)
def test_a_format_the_backend_cannot_take_is_a_400_naming_it_that_reaches_no_worker(
    fast_graph: ServedGraph, path: str, body: dict, param: str, says: str
) -> None:
    question = {"messages": [{"role": "user", "content": ASK}]} if path.startswith("chat") else {"input": ASK}
    before = fast_graph.frontend_requests()
    reply = httpx.post(f"{fast_graph.endpoint}/{path}", json={"model": MODEL, **question, **body}, timeout=30)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == param and says in error["message"] and error["type"] == "invalid_request_error"
    assert fast_graph.frontend_requests() == before


def test_a_messages_format_the_backend_cannot_take_is_anthropic_s_400_naming_it(
    fast_graph: ServedGraph, claude: anthropic.Anthropic
) -> None:
    before = fast_graph.frontend_requests()
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(
            model=MODEL,
            max_tokens=64,
            messages=[{"role": "user", "content": ASK}],
            output_config={"format": {"type": "json_schema", "schema": LOOKAHEAD}},
        )
    assert refused.value.body["error"]["message"].startswith("output_config.format.schema: ")
    assert "look-around" in refused.value.body["error"]["message"]
    assert fast_graph.frontend_requests() == before
