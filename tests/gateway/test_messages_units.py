"""The Messages route's pieces without a graph: the conversation it renders (the Responses
rendering's), the Message and events it writes back as the `anthropic` SDK types them, stop
sequences, signed thinking, errors in Anthropic's shape; and the keys' tenants and cache salt."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter, ValidationError

from dynamo_oss.gateway.app import Gateway
from dynamo_oss.gateway.auth import ApiKeys, KeysUnusable
from dynamo_oss.gateway.harmony.completion import CompletionAnswer
from dynamo_oss.gateway.errors import ApiError, openai_error
from dynamo_oss.gateway.messages.conversation import conversation
from dynamo_oss.gateway.messages.errors import from_openai, invalid_request
from dynamo_oss.gateway.messages.stream import MessageBuilder
from dynamo_oss.gateway.protocol.messages import MessagesRequest
from dynamo_oss.gateway.protocol.responses import ResponsesRequest
from dynamo_oss.gateway.harmony.rendering import Prompt
from dynamo_oss.gateway.graph_key import GraphKey
from dynamo_oss.gateway.tenancy import Tenants
from tests.support.harmony import completion_chunks, harmony_ids, render_request, sealed_with
from tests.support.graphs import gateway_config_of

SEAL = sealed_with(b"m")
TODAY = datetime.date(2026, 11, 25)
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
EVENT = TypeAdapter(RawMessageStreamEvent)
ANSWER = "<|channel|>analysis<|message|>Think <b>.<|end|><|start|>assistant<|channel|>final<|message|>Hello, world.<|return|>"
CALL = (
    "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions."
    'get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
)


def messages_request(**fields: object) -> MessagesRequest:
    return MessagesRequest.model_validate({"model": "m", "max_tokens": 100, **fields})


def test_a_conversation_renders_as_the_same_conversation_sent_to_the_responses_api() -> None:
    """System, a tool loop with signed thinking handed back, a tool's error: the Responses rendering, unchanged."""
    signature = SEAL.seal("I should call it.")
    request = messages_request(
        system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use metric units."}],
        tools=[{"name": "get_weather", "input_schema": CITY}, {"type": "web_search_20250305", "name": "web_search"}],
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "I should call it.", "signature": signature},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "is_error": True,
                        "content": [{"type": "text", "text": "timeout"}],
                    },
                    {"type": "text", "text": "Try again."},
                ],
            },
        ],
    )
    mapped = conversation(request, SEAL).request
    same = ResponsesRequest.model_validate(
        {
            "model": "m",
            "instructions": "Be brief.\n\nUse metric units.",
            "reasoning": {"effort": "medium"},
            "max_output_tokens": 100,
            "tools": [{"type": "function", "name": "get_weather", "parameters": CITY}],
            "input": [
                {"role": "user", "content": "Weather in Paris?"},
                {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "I should call it."}]},
                {
                    "type": "function_call",
                    "call_id": "toolu_1",
                    "name": "get_weather",
                    "arguments": '{"city": "Paris"}',
                },
                {"type": "function_call_output", "call_id": "toolu_1", "output": "Error: timeout"},
                {"role": "user", "content": "Try again."},
            ],
        }
    )
    assert render_request(mapped, SEAL, TODAY).token_ids == render_request(same, SEAL, TODAY).token_ids
    assert list(render_request(mapped, SEAL, TODAY).tools) == [
        "functions.get_weather"
    ]  # Anthropic's own tools: not offered


@pytest.mark.parametrize(
    ("fields", "effort", "choice"),
    [
        ({}, "medium", "auto"),
        ({"thinking": {"type": "enabled", "budget_tokens": 2048}, "tool_choice": {"type": "any"}}, "low", "required"),
        ({"thinking": {"type": "enabled", "budget_tokens": 32000}, "tool_choice": {"type": "none"}}, "high", "none"),
        ({"output_config": {"effort": "max"}, "thinking": {"type": "disabled"}}, "xhigh", "auto"),
    ],
)
def test_thinking_and_effort_set_the_reasoning_effort_and_tool_choice_maps_onto_responses_own(
    fields: dict, effort: str, choice: str
) -> None:
    request = messages_request(
        messages=[{"role": "user", "content": "hi"}], tools=[{"name": "get_weather", "input_schema": CITY}], **fields
    )
    mapped = conversation(request, SEAL).request
    assert mapped.reasoning is not None and mapped.reasoning.effort == effort and mapped.tool_choice == choice
    named = messages_request(
        messages=[{"role": "user", "content": "hi"}],
        tool_choice={"type": "tool", "name": "f"},
        tools=[{"name": "f", "input_schema": CITY}],
    )
    assert conversation(named, SEAL).request.tool_choice.name == "f"  # type: ignore[union-attr]


def test_thinking_handed_back_opens_only_with_this_deployment_s_signature_unaltered() -> None:
    def handed_back(block: dict) -> MessagesRequest:
        return messages_request(
            messages=[
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [block, {"type": "text", "text": "ok"}]},
                {"role": "user", "content": "more"},
            ]
        )

    sealed = SEAL.seal("secret thought")
    for block in (
        {"type": "thinking", "thinking": "", "signature": sealed},
        {"type": "redacted_thinking", "data": sealed},
    ):
        reasoning = conversation(handed_back(block), SEAL).request.input[1]
        assert reasoning.content[0].text == "secret thought"  # type: ignore[union-attr]
    for block, field in (
        ({"type": "thinking", "thinking": "another thought", "signature": sealed}, "signature"),
        ({"type": "thinking", "thinking": "x", "signature": sealed_with(b"o").seal("x")}, "signature"),
        ({"type": "redacted_thinking", "data": sealed[:-4] + "AAAA"}, "data"),
    ):
        with pytest.raises(ApiError) as refused:
            conversation(handed_back(block), SEAL)
        assert refused.value.param == f"messages.1.content.0.{field}"


def built(text: str, pieces: int, streaming: bool, **fields: object) -> tuple[bytes, dict]:
    """What a Message answer writes for a completion's `text` streamed `pieces` tokens at a time."""
    request = messages_request(messages=[{"role": "user", "content": "hi"}], stream=streaming, **fields)
    talk = conversation(request, SEAL)
    prompt = Prompt(token_ids=[1, 2, 3], tools={}, function_schemas={})
    if talk.request.tools:
        prompt = render_request(talk.request, SEAL, TODAY)
    answer = CompletionAnswer(MessageBuilder(request, prompt, SEAL, talk.thinking, streaming), streaming)
    out = b""
    for chunk in completion_chunks(harmony_ids(text), pieces):
        out += answer.feed(chunk)
        if answer.done:
            break
    if not answer.done:
        usage = {"prompt_tokens": 3, "completion_tokens": 20, "prompt_tokens_details": {"cached_tokens": 2}}
        last = {"choices": [{"index": 0, "text": "", "finish_reason": "stop"}], "usage": usage}
        out += answer.feed(b"data: " + json.dumps(last).encode() + b"\n\ndata: [DONE]\n\n")
    out += answer.end()
    return out, answer.builder.final  # type: ignore[attr-defined,return-value]


def events(stream: bytes) -> list[dict]:
    raw = [json.loads(line[6:]) for line in stream.decode().splitlines() if line.startswith("data: ")]
    for event in raw:
        assert EVENT.validate_python(event).model_dump(mode="json", exclude_unset=True) == event
    return raw


@pytest.mark.parametrize("pieces", [1, 4, 1000])
def test_a_streamed_message_is_the_sdk_s_events_and_adds_up_to_the_message_not_streamed(pieces: int) -> None:
    stream, final = built(ANSWER, pieces, streaming=True)
    body, whole = built(ANSWER, pieces, streaming=False)
    assert Message.model_validate(json.loads(body)).model_dump(mode="json", exclude_unset=True) == json.loads(body)
    raw = events(stream)
    assert [e["type"] for e in raw[:2]] == ["message_start", "content_block_start"]
    thinking = "".join(e["delta"].get("thinking", "") for e in raw if e["type"] == "content_block_delta")
    text = "".join(e["delta"].get("text", "") for e in raw if e["type"] == "content_block_delta")
    assert thinking == "Think <b>." and text == "Hello, world." and whole["content"][1]["text"] == text
    deltas = [e["delta"] for e in raw if e["type"] == "content_block_delta"]
    signature = next(delta["signature"] for delta in deltas if delta["type"] == "signature_delta")
    assert SEAL.open(signature) == "Think <b>." and SEAL.open(whole["content"][0]["signature"]) == "Think <b>."
    assert raw[-2]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert raw[-2]["usage"]["input_tokens"] == 1 and raw[-2]["usage"]["cache_read_input_tokens"] == 2
    assert whole["stop_reason"] == "end_turn" and whole["usage"]["output_tokens"] == 20


def test_a_tool_call_is_a_tool_use_block_with_its_whole_input_and_stops_for_the_tool() -> None:
    tools = [{"name": "get_weather", "input_schema": CITY}]
    stream, final = built(CALL, 3, streaming=True, tools=tools)
    raw = events(stream)
    start = next(e for e in raw if e["type"] == "content_block_start" and e["content_block"]["type"] == "tool_use")
    inputs = [e["delta"]["partial_json"] for e in raw if e["type"] == "content_block_delta" and e["index"] == 1]
    assert start["content_block"]["name"] == "get_weather" and inputs == ['{"city": "Paris"}']
    assert final["stop_reason"] == "tool_use" and final["content"][1]["input"] == {"city": "Paris"}


@pytest.mark.parametrize("pieces", [1, 2, 5])
def test_a_stop_sequence_in_the_answer_ends_the_message_and_never_streams_past_it(pieces: int) -> None:
    stream, final = built(ANSWER, pieces, streaming=True, stop_sequences=["zzz", "o, w"])
    text = "".join(e["delta"].get("text", "") for e in events(stream) if e["type"] == "content_block_delta")
    assert text == "Hell" and final["content"][1]["text"] == "Hell"
    assert (final["stop_reason"], final["stop_sequence"]) == ("stop_sequence", "o, w")
    _, untouched = built(ANSWER, pieces, streaming=False, stop_sequences=["<b>"])  # thinking is not the answer
    assert untouched["stop_reason"] == "end_turn" and untouched["content"][1]["text"] == "Hello, world."


@pytest.mark.parametrize("pieces", [1, 1000])
def test_nothing_follows_the_stop_sequence_that_ends_a_message_however_the_read_is_bunched(pieces: int) -> None:
    """A read that carries the stop sequence and the start of a next message: the message ends at the stop."""
    more = ANSWER.replace("<|return|>", "<|end|><|start|>assistant<|channel|>final<|message|>More.<|return|>")
    stream, final = built(more, pieces, streaming=True, stop_sequences=["o, w"])
    kinds = [e["type"] for e in events(stream)]
    assert kinds[-1] == "message_stop" and kinds.count("message_stop") == 1
    assert [block.get("text") for block in final["content"][1:]] == ["Hell"]


def test_thinking_can_be_omitted_or_turned_off() -> None:
    _, omitted = built(ANSWER, 4, streaming=False, thinking={"type": "adaptive", "display": "omitted"})
    assert omitted["content"][0]["thinking"] == "" and SEAL.open(omitted["content"][0]["signature"]) == "Think <b>."
    stream, off = built(ANSWER, 4, streaming=True, thinking={"type": "disabled"})
    assert [block["type"] for block in off["content"]] == ["text"]
    assert all(e.get("index", 0) == 0 for e in events(stream))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}], "top_n": 1},
            "top_n: Extra inputs",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": [{"type": "text"}]}], "max_tokens": 1},
            "messages.0.content.0.text: Field required",
        ),
        ({"model": "m", "max_tokens": 1, "messages": [{"role": "tool", "content": "x"}]}, "messages.0.role: Input"),
    ],
)
def test_a_typed_complaint_names_the_field_as_anthropic_does(body: dict, message: str) -> None:
    with pytest.raises(ValidationError) as err:
        MessagesRequest.model_validate(body)
    assert invalid_request(err.value, body).message.startswith(message)


def test_errors_on_anthropic_s_paths_are_written_in_its_shape() -> None:
    gateway = Gateway(["http://127.0.0.1:1"], None, GraphKey(b"m" * 32))
    for path in (b"/v1/messages", b"/v1/messages?beta=true", b"/v1/messages/count_tokens"):
        assert gateway.error_shape(path) is from_openai
    assert gateway.error_shape(b"/v1/chat/completions") is None and gateway.error_shape(b"/v1/messagesx") is None
    assert from_openai(429, openai_error(429, "slow down")) == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "slow down"},
    }
    assert from_openai(503, openai_error(503, "busy"))["error"]["type"] == "overloaded_error"


def test_a_key_is_shown_as_a_bearer_token_or_x_api_key_and_names_its_tenant(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("alice sk-a\nbob sk-b team-1\ncarol sk-c team-1\n")
    keys = ApiKeys.from_file(path)
    assert keys.name_of(b"/v1/messages", None, b"sk-b") == "bob"
    assert keys.name_of(b"/v1/messages", b"Bearer sk-a", None) == "alice"
    assert [keys.tenant_of(name) for name in ("alice", "bob", "carol")] == ["alice", "team-1", "team-1"]
    with pytest.raises(ApiError):
        keys.name_of(b"/v1/messages", None, b"sk-wrong")
    path.write_text("dave sk-d team/1\n")
    with pytest.raises(KeysUnusable, match="line 1: expected `NAME KEY` or `NAME KEY TENANT`"):
        ApiKeys.from_file(path)


def test_the_cache_salt_is_the_tenant_s_under_the_graph_s_key_and_a_client_s_own_only_divides_it() -> None:
    tenants = Tenants(GraphKey(b"g" * 32), isolated=True)
    team = tenants.caller("bob", "team-1")
    headers = [(b"content-type", b"application/json"), (b"X-Tenant-Id", b"someone-else")]
    salt = tenants.salt("team-1")
    assert tenants.salted(headers, team) == [
        (b"content-type", b"application/json"),
        (b"x-tenant-id", salt + b"/someone-else"),
    ]
    # No one who reaches Dynamo's frontend can name a tenant's salt: not its name, and another graph's key salts apart.
    assert salt not in (b"team-1", Tenants(GraphKey(b"h" * 32), isolated=True).salt("team-1"))
    assert len(salt) == 32 and tenants.salt("alice") != salt
    # Each tenant renders into a cache of its own; keys of one tenant share theirs; `shared` shares one.
    assert team.renders is tenants.caller("carol", "team-1").renders is not tenants.caller("alice", "alice").renders
    shared = Tenants(GraphKey(b"g" * 32), isolated=False)
    assert (
        shared.caller("a", "a").renders is shared.caller("b", "b").renders and shared.salted(headers, team) == headers
    )


@pytest.mark.parametrize("isolation", [None, "tenant", "shared"])
def test_the_graph_s_cache_isolation_reaches_the_gateway_s_configuration(tmp_path: Path, isolation: str | None) -> None:
    (tmp_path / "keys").write_text("alice sk-a\n")
    gateway = {"auth": {"keys_file": str(tmp_path / "keys")}} | ({"cache_isolation": isolation} if isolation else {})
    config = gateway_config_of(tmp_path, gateway)
    assert config.cache_isolation == (isolation or "tenant")
