"""The answers the mocker gives: harmony that Dynamo's parsers split, at the lengths requests ask for,
with tool arguments valid against the tool's JSON Schema. Pure functions, no processes."""

from __future__ import annotations

import os
import random

import jsonschema
import pytest

from dynamo_oss.assets import ENCODINGS_ENV, tiktoken_encodings_dir
from dynamo_oss.assets.cache import CACHE_ENV

os.environ.setdefault(ENCODINGS_ENV, str(tiktoken_encodings_dir()))

from dynamo_oss.engines.harmony.answers import ASSISTANT_TURN, completion_for, encoding  # noqa: E402
from dynamo_oss.engines.harmony.token_table import token_table  # noqa: E402
from dynamo_oss.engines.mocker_worker import _replays  # noqa: E402

CHAT_PROMPT = [
    200006,
    1428,
    200008,
    12194,
    200007,
    *ASSISTANT_TURN,
]  # <|start|>user<|message|>Hi<|end|><|start|>assistant


def request(**stop: object) -> dict:
    return {"token_ids": CHAT_PROMPT, "stop_conditions": stop, "sampling_options": {}}


def test_a_chat_answer_is_reasoning_then_a_final_message() -> None:
    text = encoding().decode(completion_for(request()).tokens)
    assert text.startswith("<|channel|>analysis<|message|>We ")
    assert "<|end|><|start|>assistant<|channel|>final<|message|>Here " in text
    assert text.endswith("<|return|>")


def test_the_token_table_holds_what_harmony_encodes_and_is_built_once(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    calls: list[str] = []

    def special(text: str) -> list[int]:
        calls.append(text)
        return encoding().encode(text, allowed_special="all")

    def plain(text: str) -> list[int]:
        return encoding().encode(text, disallowed_special=())

    texts, words = ("<|channel|>analysis<|message|>", "Here"), ("answer", "disaggregation")
    table = token_table(texts, words, special, plain)
    assert table.texts == {text: tuple(special(text)) for text in texts}
    assert table.single_token_words(["disaggregation", "answer"]) == (plain(" answer")[0],)  # one token, not two
    calls.clear()
    assert token_table(texts, words, special, plain).texts == table.texts and calls == []  # read, not encoded


def test_the_same_request_gets_the_same_answer() -> None:
    assert completion_for(request()).tokens == completion_for(request()).tokens


@pytest.mark.parametrize("length", [1, 7, 60, 2000])
def test_ignore_eos_gives_exactly_max_tokens(length: int) -> None:
    assert len(completion_for(request(ignore_eos=True, max_tokens=length)).tokens) == length


def test_max_tokens_below_the_answer_cuts_it() -> None:
    completion = completion_for(request(max_tokens=5))
    assert len(completion.tokens) == 5 and not completion.finished


def test_min_tokens_stretches_the_reasoning_and_keeps_the_answer_whole() -> None:
    completion = completion_for(request(min_tokens=400, max_tokens=1000))
    assert len(completion.tokens) == 400 and completion.finished


def test_no_max_tokens_is_bounded_by_the_context() -> None:
    assert len(completion_for(request(ignore_eos=True), context_length=len(CHAT_PROMPT) + 3).tokens) == 3


def test_a_raw_prompt_gets_plain_text() -> None:
    text = encoding().decode(completion_for({"token_ids": [12194, 11], "stop_conditions": {}}).tokens)
    assert "<|channel|>" not in text and text.endswith("<|endoftext|>")


def test_only_requests_for_a_loaded_recording_pass_through_to_replay() -> None:
    keys = frozenset({"final-answer"})
    assert _replays({"annotations": ["output_replay_id:final-answer"]}, keys)
    assert not _replays({"annotations": ["output_replay_id:unknown"]}, keys)  # would get random ids
    assert not _replays({"annotations": []}, keys)


def test_answer_lengths_follow_the_configured_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DYNAMO_OSS_MOCKER_REASONING_TOKENS", "200-200")
    monkeypatch.setenv("DYNAMO_OSS_MOCKER_ANSWER_TOKENS", "300-300")
    text = encoding().decode(completion_for(request()).tokens)
    reasoning, answer = text.split("<|end|><|start|>assistant<|channel|>final<|message|>")
    assert len(encoding().encode(reasoning, allowed_special="all")) == 3 + 1 + 200  # header, "We", the words
    assert len(encoding().encode(answer, allowed_special="all")) == 1 + 300 + 2  # "Here", the words, ".", return


def test_a_malformed_range_says_what_was_expected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DYNAMO_OSS_MOCKER_ANSWER_TOKENS", "many")
    with pytest.raises(ValueError, match='DYNAMO_OSS_MOCKER_ANSWER_TOKENS: got "many"; expected LOW-HIGH'):
        completion_for(request())


async def _chunks(*token_ids: list[int]):
    for ids in token_ids:
        yield {"token_ids": ids}
    yield {"token_ids": [], "finish_reason": "stop"}


@pytest.mark.parametrize(
    ("max_tokens", "expected"),
    [
        (None, [[1, 2], [3], [], "stop"]),
        (3, [[1, 2], [3], [], "stop"]),
        (2, [[1, 2], [], "length"]),
        (1, [[1], "length"]),
    ],
)
def test_a_replayed_recording_is_cut_at_max_tokens(max_tokens: int | None, expected: list) -> None:
    import asyncio

    from dynamo_oss.engines.mocker_worker import _within_max_tokens

    async def collect() -> list:
        request = {"token_ids": [9, 9], "stop_conditions": {"max_tokens": max_tokens}}
        out = []
        async for chunk in _within_max_tokens(_chunks([1, 2], [3]), request):
            out.append(chunk["token_ids"])
            if chunk.get("finish_reason"):
                out.append(chunk["finish_reason"])
        return out

    assert asyncio.run(collect()) == expected


NESTED_TOOL = {
    "type": "function",
    "function": {
        "name": "plan_trip",
        "parameters": {
            "type": "object",
            "properties": {
                "loc": {
                    "type": "object",
                    "description": "where",
                    "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                    "required": ["city"],
                },
                "days": {"type": "array", "items": {"type": "integer"}, "minItems": 1},
                "mode": {"type": "string", "enum": ["car", "train"]},
            },
            "required": ["loc", "days"],
        },
    },
}


def test_auto_tool_calls_fill_nested_objects_and_arrays_from_the_prompt() -> None:
    import jinja2

    from dynamo_oss.assets import chat_template
    from dynamo_oss.engines.harmony.tool_args import arguments_for, tool_request

    env = jinja2.Environment()
    env.globals["strftime_now"] = lambda fmt: "2026-11-23"
    prompt = env.from_string(chat_template()).render(
        messages=[{"role": "user", "content": "plan"}], tools=[NESTED_TOOL], add_generation_prompt=True
    )
    request = tool_request(prompt, None)
    assert request is not None and request.choice == "auto" and [t.name for t in request.tools] == ["plan_trip"]
    arguments = arguments_for(request.tools[0], random.Random(3))
    jsonschema.validate(arguments, NESTED_TOOL["function"]["parameters"])
    assert arguments["loc"]["city"] and arguments["days"]
