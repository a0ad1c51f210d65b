"""The Responses route's pieces without a graph: harmony text read back, the prompt rendered,
reasoning sealed, errors naming the field, and chat's reasoning rewrite."""

from __future__ import annotations

import datetime
import os

import pytest
from pydantic import ValidationError

from tests.support.harmony import render_request
from dynamo_oss.assets import ENCODINGS_ENV, tiktoken_encodings_dir
from dynamo_oss.gateway.chat import ReasoningStream
from dynamo_oss.gateway.errors import ApiError, from_validation
from dynamo_oss.gateway.protocol.responses import ResponsesRequest
from dynamo_oss.gateway.harmony.rendering import encoding
from dynamo_oss.gateway.harmony.parsing import HarmonyText
from dynamo_oss.gateway.harmony.sealing import ReasoningSeal, UnopenableReasoning
from dynamo_oss.gateway.usage import Usage

os.environ.setdefault(ENCODINGS_ENV, str(tiktoken_encodings_dir()))
SEAL = ReasoningSeal(b"k" * 32)
TODAY = datetime.date(2026, 11, 25)
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = {"type": "function", "name": "get_weather", "parameters": CITY}
COMPLETION = (
    "<|channel|>analysis<|message|>Need weather <|x a<b<|end|><|start|>assistant<|channel|>commentary "
    'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
)


def merged(events: list) -> list:
    out: list = []
    for kind, value in events:
        if kind == "text" and out and out[-1][0] == "text":
            out[-1] = ("text", out[-1][1] + value)
        else:
            out.append((kind, value))
    return out


@pytest.mark.parametrize("piece", [1, 2, 3, 5, 11, len(COMPLETION)])
def test_harmony_text_reads_the_same_messages_however_the_text_is_cut(piece: int) -> None:
    parser = HarmonyText()
    events = [e for i in range(0, len(COMPLETION), piece) for e in parser.feed(COMPLETION[i : i + piece])]
    events = merged(events + parser.finish())
    assert [kind for kind, _ in events] == ["begin", "text", "end", "begin", "text", "end"]
    assert events[0][1].channel == "analysis" and events[1][1] == "Need weather <|x a<b"
    call = events[3][1]
    assert (call.channel, call.recipient, call.content_type) == ("commentary", "functions.get_weather", "json")
    assert events[4][1] == '{"city": "Paris"}' and events[5][1] == "<|call|>"


def test_harmony_text_takes_the_recipient_before_the_channel_and_closes_an_unended_message() -> None:
    parser = HarmonyText()
    events = merged(parser.feed(" to=ns.read<|channel|>commentary json<|message|>{}") + parser.finish())
    assert events[0][1].recipient == "ns.read" and events[0][1].content_type == "json"
    assert events[1:] == [("text", "{}"), ("end", "")]


def request(**fields) -> ResponsesRequest:
    return ResponsesRequest.model_validate({"model": "m", **fields})


def prompt_text(**fields) -> str:
    return encoding().decode(render_request(request(**fields), SEAL, TODAY).token_ids)


def test_tools_become_harmony_namespaces_and_hosted_tools_are_not_offered() -> None:
    tools = [WEATHER, {"type": "web_search"}, {"type": "mcp", "server_label": "x"},
             {"type": "namespace", "name": "files", "description": "File tools", "tools": [
                 {"type": "function", "name": "read", "parameters": {"type": "object", "properties": {}}},
                 {"type": "custom", "name": "apply_patch", "description": "Edit files."}]}]  # fmt: skip
    prompt = render_request(request(input="hi", tools=tools), SEAL, TODAY)
    text = encoding().decode(prompt.token_ids)
    assert "namespace functions {" in text and "type get_weather = (_: {" in text
    assert "namespace files {" in text and "type read = (_: {" in text and "input: string," in text
    assert "web_search" not in text and "mcp" not in text
    assert {r: (t.kind, t.name, t.namespace) for r, t in prompt.tools.items()} == {
        "functions.get_weather": ("function", "get_weather", None),
        "files.read": ("function", "read", "files"),
        "files.apply_patch": ("custom", "apply_patch", "files"),
    }
    assert text.endswith("<|start|>assistant")


def test_instructions_and_leading_developer_messages_are_the_developer_instructions() -> None:
    text = prompt_text(instructions="Be brief.", input=[
        {"role": "developer", "content": [{"type": "input_text", "text": "Use tools."}]},
        {"role": "user", "content": "hi"}, {"role": "system", "content": "Later rule."}])  # fmt: skip
    assert "<|start|>developer<|message|># Instructions\n\nBe brief.\n\nUse tools.<|end|>" in text
    assert text.index("<|start|>user") < text.index("Later rule.")


CALL = [{"role": "user", "content": "weather?"},
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "CHAIN-OF-THOUGHT"}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"}]  # fmt: skip


def test_reasoning_is_kept_while_the_assistant_is_between_tool_calls_and_dropped_after_a_final_answer() -> None:
    between = prompt_text(input=CALL, tools=[WEATHER])
    assert "<|channel|>analysis<|message|>CHAIN-OF-THOUGHT<|end|>" in between
    assert "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>sunny<|end|>" in between
    answered = [*CALL, {"role": "assistant", "content": [{"type": "output_text", "text": "It is sunny."}]},
                {"role": "user", "content": "thanks"}]  # fmt: skip
    assert "CHAIN-OF-THOUGHT" not in prompt_text(input=answered, tools=[WEATHER])


def test_sealed_reasoning_opens_here_and_nowhere_else() -> None:
    token = SEAL.seal("secret thought")
    assert SEAL.open(token) == "secret thought" and "secret" not in token
    sealed = [{**CALL[1], "content": None, "encrypted_content": token}, *CALL[2:]]
    assert "secret thought" in prompt_text(input=[CALL[0], *sealed], tools=[WEATHER])
    with pytest.raises(UnopenableReasoning):
        ReasoningSeal(b"o" * 32).open(token)
    altered = token[:-6] + ("AAAAAA" if not token.endswith("AAAAAA") else "BBBBBB")
    with pytest.raises(ApiError) as refused:
        render_request(request(input=[CALL[0], {**sealed[0], "encrypted_content": altered}]), SEAL, TODAY)
    assert refused.value.status == 400 and refused.value.param == "input[1].encrypted_content"


def test_a_key_file_is_made_once_and_read_back(tmp_path) -> None:
    key = tmp_path / "keys" / "graph.key"
    first = ReasoningSeal.from_file(key)
    assert key.stat().st_mode & 0o777 == 0o600
    assert ReasoningSeal.from_file(key).open(first.seal("x")) == "x"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": [{"type": "banana"}]}, "input[0].type"),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
        ({"input": "hi", "tools": [{"type": "function"}]}, "tools[0].name"),
        ({"input": "hi", "tools": [{"type": "namespace", "name": "n"}]}, "tools[0].tools"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ],
)
def test_malformed_requests_name_the_field(body: dict, param: str) -> None:
    raw = {"model": "m", **body}
    with pytest.raises(ValidationError) as err:
        ResponsesRequest.model_validate(raw)
    refusal = from_validation(err.value, raw)
    assert (refusal.status, refusal.param) == (400, param), refusal.message
    assert param in refusal.message


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"input": [{"type": "function_call_output", "call_id": "nope", "output": "x"}]}, "input[0].call_id"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0].type",
        ),
        ({"input": "hi", "tools": [{**WEATHER, "parameters": {"type": "array"}}]}, "tools[0].parameters"),
        ({"input": "hi", "tools": [WEATHER, WEATHER]}, "tools[1].name"),
    ],
)
def test_requests_that_cannot_be_rendered_are_refused_by_field(fields: dict, param: str) -> None:
    with pytest.raises(ApiError) as refused:
        render_request(request(**fields), SEAL, TODAY)
    assert (refused.value.status, refused.value.param) == (400, param)


def chunk(delta: str) -> bytes:
    return b'data: {"id":"c","choices":[{"index":0,"delta":' + delta.encode() + b',"finish_reason":null}]}\n\n'


def test_chat_streams_write_reasoning_beside_reasoning_content_and_leave_other_chunks_alone() -> None:
    stream = ReasoningStream(exclude=False)
    body = chunk('{"reasoning_content":"We \\"think\\""}') + chunk('{"content":"Hi"}')
    out = stream.feed(body[:30]) + stream.feed(body[30:]) + stream.end()
    assert out == chunk('{"reasoning":"We \\"think\\"","reasoning_content":"We \\"think\\""}') + chunk(
        '{"content":"Hi"}'
    )


def test_chat_streams_read_a_byte_at_a_time_are_rewritten_whole_and_leave_out_the_usage_not_asked_for() -> None:
    usage = b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,' \
            b'"prompt_tokens_details":{"cached_tokens":8},"completion_tokens_details":{"reasoning_tokens":1}}}\n\n'  # fmt: skip
    body = chunk('{"reasoning_content":"We"}') + chunk('{"content":"Hi"}') + usage + b"data: [DONE]\n\n"
    stream = ReasoningStream(exclude=False, hide_usage=True)
    out = b"".join(stream.feed(body[at : at + 1]) for at in range(len(body))) + stream.end()
    assert out == chunk('{"reasoning":"We","reasoning_content":"We"}') + chunk('{"content":"Hi"}') + b"data: [DONE]\n\n"
    assert stream.billed == Usage(input=9, cached=8, output=2, reasoning=1)


def test_chat_streams_drop_reasoning_when_excluded() -> None:
    out = ReasoningStream(exclude=True).feed(chunk('{"reasoning_content":"We"}') + chunk('{"content":"Hi"}'))
    assert b"reasoning" not in out.replace(b": reasoning left out", b"") and chunk('{"content":"Hi"}') in out


PATH = {"type": "object", "properties": {"path": {"type": "string"}}}
READ = {"type": "function", "name": "read", "parameters": PATH}
NAMESPACED = {"type": "namespace", "name": "files", "description": "File tools", "tools": [READ]}
FINAL_ANSWER = {"role": "assistant", "content": [{"type": "output_text", "text": "It is sunny."}]}


@pytest.mark.parametrize(
    "fields",
    [
        {"input": "hi"},
        {"input": "hi", "instructions": "Be brief.", "reasoning": {"effort": "high"}},
        {"input": CALL, "tools": [WEATHER]},
        {"input": [*CALL, FINAL_ANSWER, {"role": "user", "content": "and tomorrow?"}], "tools": [WEATHER]},
        {
            "input": [*CALL, FINAL_ANSWER, {"role": "user", "content": "again"}, *CALL[1:]],
            "tools": [WEATHER, NAMESPACED],
        },
        {
            "input": [{"role": "user", "content": "hi"}, {"role": "developer", "content": "Later."}],
            "tools": [NAMESPACED],
        },
    ],
)
def test_the_prompt_rendered_piece_by_piece_is_harmony_s_rendering_of_the_whole(
    fields: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dynamo_oss.gateway.harmony import rendering

    captured: list = []
    kept = rendering._kept
    monkeypatch.setattr(rendering, "_kept", lambda messages: captured.append(messages) or kept(messages))
    prompt = render_request(request(**fields), SEAL, TODAY)
    assert prompt.token_ids == rendering.render_whole(captured[0])
