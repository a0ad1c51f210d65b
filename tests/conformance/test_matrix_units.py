"""The matrix's judgements on answers built by hand: each property fails where it must, and the
wire checks catch broken framing that the official clients would silently accept."""

from __future__ import annotations

import json

from dynamo_oss.conformance.matrix.cells import NAMED_TOOL, Cell, every_cell
from dynamo_oss.conformance.matrix.exchange import Answer, _chat_stream, _message_stream, _response_stream
from dynamo_oss.conformance.matrix.properties import NOT_ASKED, json_valid, reasoning_placed, tool_call
from dynamo_oss.conformance.outcome import Outcome

REPORT_JSON = json.dumps({"city": "Paris", "conditions": "sunny", "temperature_c": 21, "advice": ["a hat"]})


def cell(**changes: object) -> Cell:
    fields = {"api": "chat", "stream": False, "tool_choice": "auto", "output": "text", "effort": "low"}
    return Cell(**{**fields, **changes})


def answer(**outcome: object) -> Answer:
    return Answer(outcome=Outcome(**outcome))


def test_every_combination_is_asked_once() -> None:
    cells = every_cell()
    assert len(cells) == len(set(cells)) == 3 * 2 * 4 * 2 * 3


def test_tool_choice_is_judged_by_what_it_allows() -> None:
    weather = ("get_weather", '{"city": "Paris"}')
    assert "tool_choice is none" in tool_call(cell(tool_choice="none"), answer(tool_calls=[weather]))
    assert "no tool call" in tool_call(cell(tool_choice="required"), answer(content="Sunny."))
    assert tool_call(cell(tool_choice="auto"), answer(content="Sunny.")) is None
    assert "not the named tool" in tool_call(cell(tool_choice="named"), answer(tool_calls=[weather]))
    named = (NAMED_TOOL["name"], '{"city": "Paris"}')
    assert tool_call(cell(tool_choice="named"), answer(tool_calls=[named], finish_reason="stop")) is None
    assert "ends with 'stop'" in tool_call(
        cell(tool_choice="required"), answer(tool_calls=[weather], finish_reason="stop")
    )
    assert "does not match" in tool_call(
        cell(tool_choice="required", api="responses"), answer(tool_calls=[("get_weather", '{"town": "Paris"}')])
    )
    assert "not JSON" in tool_call(
        cell(tool_choice="required", api="responses"), answer(tool_calls=[("get_weather", "city=Paris")])
    )


def test_json_is_judged_only_where_a_schema_was_asked_and_text_came() -> None:
    schema = cell(output="json_schema")
    assert json_valid(schema, answer(content=REPORT_JSON)) is None
    assert "does not match" in json_valid(schema, answer(content=json.dumps({"city": "Paris"})))
    assert "not JSON" in json_valid(schema, answer(content="It is sunny."))
    assert json_valid(cell(), answer(content="It is sunny.")) == NOT_ASKED
    assert json_valid(schema, answer(tool_calls=[("get_weather", "{}")])) == NOT_ASKED


def test_reasoning_must_be_in_its_own_place() -> None:
    assert reasoning_placed(cell(), answer(reasoning="think", reasoning_field="think", content="Hi")) is None
    assert "no 'reasoning' property" in reasoning_placed(cell(), answer(reasoning="think", content="Hi"))
    assert "repeated" in reasoning_placed(cell(api="messages"), answer(reasoning="think", content="think. Hi"))
    assert "no reasoning" in reasoning_placed(cell(api="responses"), answer(content="Hi"))


def chunk(delta: dict, finish: str | None = None) -> str:
    return json.dumps(
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


def test_a_chat_stream_must_end_with_done_and_finish_once() -> None:
    whole = [(None, chunk({"content": "Hi"})), (None, chunk({}, "stop")), (None, "[DONE]")]
    assert _chat_stream(whole).shape == []
    assert _chat_stream(whole).outcome.content == "Hi"
    broken = _chat_stream(whole[:2])
    assert broken.shape == ["the stream does not end with data: [DONE]"]
    assert _chat_stream([whole[0], (None, "[DONE]")]).shape == ["0 chunks carry a finish_reason, expected 1"]
    mistyped = _chat_stream([(None, chunk({"content": "Hi"}, "done")), whole[2]])
    assert any("finish_reason" in problem for problem in mistyped.shape)


def test_a_responses_stream_numbers_its_events_from_zero_without_gaps() -> None:
    response = {
        "id": "r",
        "object": "response",
        "created_at": 1,
        "model": "m",
        "output": [],
        "tools": [],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "status": "in_progress",
    }

    def event(kind: str, number: int) -> tuple[str, str]:
        return kind, json.dumps({"type": kind, "sequence_number": number, "response": response})

    good = [event("response.created", 0), event("response.in_progress", 1), event("response.completed", 2)]
    assert _response_stream(good).shape == []
    assert _response_stream([good[0], good[2]]).shape == ["sequence_number does not rise by one from 0"]
    assert "ends with ['response.in_progress']" in _response_stream(good[:2]).shape[0]


def message_events(*middle: dict) -> list[tuple[str, str]]:
    start = {
        "type": "message_start",
        "message": {
            "id": "m",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 5, "output_tokens": 0},
        },
    }
    end = [
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 9},
        },
        {"type": "message_stop"},
    ]
    return [(e["type"], json.dumps(e)) for e in (start, *middle, *end)]


def test_a_messages_stream_folds_into_the_message_it_describes() -> None:
    blocks = (
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "I call it."}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "t", "name": "get_weather", "input": {}},
        },
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"city": '}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '"Paris"}'}},
        {"type": "content_block_stop", "index": 1},
    )
    folded = _message_stream(message_events(*blocks))
    assert folded.shape == []
    assert folded.outcome.reasoning == "I call it."
    assert folded.outcome.tool_calls == [("get_weather", '{"city": "Paris"}')]
    assert folded.outcome.finish_reason == "tool_use"
    unopened = _message_stream(message_events(blocks[2]))
    assert unopened.shape == ["content_block_stop for index 0, which is not open"]
    unclosed = _message_stream(message_events(*blocks[:2]))
    assert unclosed.shape == ["content blocks [0] were never stopped"]
    assert "ends with ['message_delta']" in _message_stream(message_events()[:-1]).shape[0]


def test_an_event_that_is_not_json_is_a_shape_problem_not_a_crash() -> None:
    done = _response_stream([("response.created", "[DONE]")])
    assert done.shape[0] == "event response.created: not JSON: '[DONE]'"
    unknown = _message_stream([("message_begin", json.dumps({"type": "message_begin"}))])
    assert unknown.shape[0] == "event message_begin: no event of type 'message_begin' in the client's types"
