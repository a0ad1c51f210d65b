"""The grammars that guide a structured output and a forced tool choice, run by llguidance (the
guided-decoding backend the TensorRT-LLM engine files name) over gpt-oss's own tokenizer, token by
token as a worker would: the reasoning is free, the final channel takes only JSON the schema
accepts, a forced call goes only to an allowed tool with arguments its own schema accepts, and the
mocker's whole harmony completions pass them. No processes."""

from __future__ import annotations

import json
import os

import jsonschema

import pytest
from llguidance import LLMatcher, LLTokenizer
from openai.lib._pydantic import to_strict_json_schema
from pydantic import BaseModel

from dynamo_oss.assets import ENCODINGS_ENV, model_folder, tiktoken_encodings_dir
from dynamo_oss.catalog.models import GPT_OSS_20B

os.environ.setdefault(ENCODINGS_ENV, str(tiktoken_encodings_dir()))

from dynamo_oss.engines.harmony.answers import ASSISTANT_TURN, completion_for, encoding  # noqa: E402
from dynamo_oss.engines.harmony.grammar import (  # noqa: E402
    answer_schema,
    compile_problem,
    completion_grammar,
    forced_call_grammar,
    forced_calls,
)


class Weather(BaseModel):
    city: str
    celsius: int
    windy: bool


SCHEMA = to_strict_json_schema(Weather)
ANSWER = '{"city": "Paris", "celsius": 21, "windy": false}'
REASONING = "<|channel|>analysis<|message|>They want {JSON}; the final channel holds it.<|end|><|start|>assistant"
PROMPT = [200006, 1428, 200008, 12194, 200007, *ASSISTANT_TURN]  # <|start|>user<|message|>Hi<|end|><|start|>assistant


@pytest.fixture(scope="module")
def tokenizer() -> LLTokenizer:
    """gpt-oss's tokenizer as llguidance reads it (TensorRT-LLM hands it the same tokenizer.json)."""
    return LLTokenizer((model_folder(GPT_OSS_20B) / "tokenizer.json").read_text())


def accepted(tokenizer: LLTokenizer, grammar: str, text: str) -> bool:
    """Whether a worker guided by `grammar` could have generated `text`, every token of it, to the end."""
    matcher = LLMatcher(tokenizer, LLMatcher.grammar_from_lark(grammar))
    tokens = encoding().encode(text, allowed_special="all")
    return matcher.try_consume_tokens(tokens) == len(tokens) and matcher.is_accepting() and not matcher.is_error()


def test_the_grammar_compiles_with_gpt_oss_s_tokenizer(tokenizer: LLTokenizer) -> None:
    grammar = completion_grammar(SCHEMA, ["functions.get_weather", "files.read_file"])
    assert LLMatcher.validate_grammar_with_warnings(LLMatcher.grammar_from_lark(grammar), tokenizer) == (False, [])


def test_the_reasoning_is_free_and_the_final_channel_takes_only_the_schema_s_json(tokenizer: LLTokenizer) -> None:
    grammar = completion_grammar(SCHEMA, [])
    final = "<|channel|>final<|message|>"
    assert accepted(tokenizer, grammar, f"{REASONING}{final}{ANSWER}<|return|>")
    assert accepted(tokenizer, grammar, f"{final}{ANSWER}<|return|>")  # no reasoning at all
    assert not accepted(tokenizer, grammar, f"{REASONING}{final}Here is the weather: {ANSWER}<|return|>")
    assert not accepted(tokenizer, grammar, f'{REASONING}{final}{{"city": "Paris", "celsius": "warm", "windy": false}}')
    assert not accepted(tokenizer, grammar, f'{REASONING}{final}{{"city": "Paris"}}<|return|>')  # required fields
    no_tools = f"{REASONING}<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{{}}<|call|>"
    assert not accepted(tokenizer, grammar, no_tools)


def test_with_tools_a_completion_may_call_one_of_them_instead(tokenizer: LLTokenizer) -> None:
    grammar = completion_grammar(SCHEMA, ["functions.get_weather"])
    call = '<|channel|>commentary to={} <|constrain|>json<|message|>{{"city": "Paris"}}<|call|>'
    preamble = "<|channel|>commentary<|message|>Checking the weather.<|end|><|start|>assistant"
    assert accepted(tokenizer, grammar, REASONING + call.format("functions.get_weather"))
    assert accepted(tokenizer, grammar, REASONING + preamble + call.format("functions.get_weather"))
    assert accepted(tokenizer, grammar, f"{REASONING}<|channel|>final<|message|>{ANSWER}<|return|>")
    assert not accepted(tokenizer, grammar, REASONING + call.format("functions.rm_rf"))


@pytest.mark.parametrize("schema", [SCHEMA, {"type": "object"}], ids=["json_schema", "json_object"])
def test_the_mocker_s_completions_pass_the_grammar_it_is_sent(tokenizer: LLTokenizer, schema: dict) -> None:
    grammar = completion_grammar(schema, [])
    for seed in range(4):
        request = {
            "token_ids": PROMPT,
            "stop_conditions": {},
            "sampling_options": {"seed": seed, "guided_decoding": {"grammar": grammar}},
        }
        text = encoding().decode(completion_for(request).tokens)
        reasoning, final = text.split("<|end|><|start|>assistant<|channel|>final<|message|>")
        assert reasoning.startswith("<|channel|>analysis<|message|>We ") and accepted(tokenizer, grammar, text)
        assert isinstance(json.loads(final.removesuffix("<|return|>")), dict)


def test_the_mocker_reads_the_schema_back_from_the_grammar_only() -> None:
    assert answer_schema({"grammar": completion_grammar(SCHEMA, ["functions.f"])}) == SCHEMA
    assert answer_schema({"grammar": 'start: "a"'}) is None  # a client's own grammar: not a structured output
    assert answer_schema({"json": SCHEMA}) is None and answer_schema(None) is None


# gpt-oss calling a tool, as OpenAI's harmony guide shows its output (the cookbook's openai-harmony article).
GUIDE_CALL = (
    "<|channel|>analysis<|message|>Need to use function get_weather.<|end|><|start|>assistant"
    '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"location":"San Francisco"}<|call|>'
)
GET_WEATHER = {
    "type": "object",
    "properties": {"location": {"type": "string"}},
    "required": ["location"],
    "additionalProperties": False,
}
FORCED = {"functions.get_weather": GET_WEATHER, "files.read_file": SCHEMA}  # a namespaced tool beside a function


def test_the_forced_call_grammar_compiles_with_gpt_oss_s_tokenizer(tokenizer: LLTokenizer) -> None:
    grammar = forced_call_grammar(FORCED)
    assert LLMatcher.validate_grammar_with_warnings(LLMatcher.grammar_from_lark(grammar), tokenizer) == (False, [])


def test_a_forced_choice_takes_gpt_oss_s_own_call_to_an_allowed_tool(tokenizer: LLTokenizer) -> None:
    grammar = forced_call_grammar(FORCED)
    assert accepted(tokenizer, grammar, GUIDE_CALL)
    assert accepted(tokenizer, grammar, GUIDE_CALL.replace(" <|constrain|>json", ""))  # the constraint is optional
    read_file = f"{REASONING}<|channel|>commentary to=files.read_file <|constrain|>json<|message|>{ANSWER}<|call|>"
    assert accepted(tokenizer, grammar, read_file)
    assert accepted(tokenizer, forced_call_grammar({"functions.get_weather": GET_WEATHER}), GUIDE_CALL)  # named


def test_a_forced_choice_refuses_other_tools_off_schema_arguments_and_an_answer(tokenizer: LLTokenizer) -> None:
    grammar = forced_call_grammar(FORCED)
    assert not accepted(tokenizer, grammar, GUIDE_CALL.replace("functions.get_weather", "functions.rm_rf"))
    assert not accepted(tokenizer, forced_call_grammar({"files.read_file": SCHEMA}), GUIDE_CALL)  # not the named one
    assert not accepted(tokenizer, grammar, GUIDE_CALL.replace('"location"', '"city"'))
    # Each tool's arguments follow its own schema, not another allowed tool's.
    assert not accepted(tokenizer, grammar, GUIDE_CALL.replace('{"location":"San Francisco"}', ANSWER))
    assert not accepted(tokenizer, grammar, GUIDE_CALL.replace("}<|call|>", "} and more<|call|>"))
    assert not accepted(tokenizer, grammar, GUIDE_CALL.removesuffix("<|call|>"))  # unfinished: no call yet
    assert not accepted(tokenizer, grammar, f"{REASONING}<|channel|>final<|message|>{ANSWER}<|return|>")
    recipient_first = REASONING + ' to=functions.get_weather<|channel|>commentary<|message|>{"location":"x"}<|call|>'
    assert not accepted(tokenizer, grammar, recipient_first)  # Dynamo 1.6's parser reads the channel first


def test_a_forced_choice_leaves_the_reasoning_free(tokenizer: LLTokenizer) -> None:
    grammar = forced_call_grammar(FORCED)
    thoughts = (
        '<|channel|>analysis<|message|>Maybe {"location": 3}? No: get_weather wants a string.\n\nOk.'
        "<|end|><|start|>assistant"
    )
    preamble = "<|channel|>commentary<|message|>Checking the weather first.<|end|><|start|>assistant"
    assert accepted(tokenizer, grammar, thoughts + REASONING + preamble + GUIDE_CALL.split("<|start|>assistant")[1])
    assert accepted(tokenizer, grammar, GUIDE_CALL.split("<|start|>assistant")[1])  # no reasoning at all


def test_the_mocker_calls_an_allowed_tool_with_arguments_its_schema_accepts(tokenizer: LLTokenizer) -> None:
    grammar = forced_call_grammar(FORCED)
    called = set()
    for seed in range(8):
        request = {
            "token_ids": PROMPT,
            "stop_conditions": {},
            "sampling_options": {"seed": seed, "guided_decoding": {"grammar": grammar}},
        }
        text = encoding().decode(completion_for(request).tokens)
        assert text.startswith("<|channel|>analysis<|message|>We ") and accepted(tokenizer, grammar, text)
        header, arguments = text.split("<|start|>assistant<|channel|>commentary to=")[1].split("<|message|>")
        recipient = header.split(" ")[0]
        jsonschema.validate(json.loads(arguments.removesuffix("<|call|>")), FORCED[recipient])
        called.add(recipient)
    assert called == set(FORCED)  # a required choice: any of the tools, not always the first


def test_the_mocker_reads_the_allowed_calls_back_from_a_forced_grammar_only() -> None:
    assert forced_calls({"grammar": forced_call_grammar(FORCED)}) == FORCED
    assert answer_schema({"grammar": forced_call_grammar(FORCED)}) is None
    assert forced_calls({"grammar": completion_grammar(SCHEMA, ["functions.get_weather"])}) == {}
    assert forced_calls({"json": GET_WEATHER}) == {} and forced_calls(None) == {}


@pytest.mark.parametrize(
    ("schema", "named"),
    [
        ({"type": "string", "pattern": "(?=a)b"}, "look-around"),
        ({"type": "object", "properties": {"x": {"not": {"type": "string"}}}}, "not"),
        ({"type": "string", "format": "colour"}, "colour"),
        ({"$ref": "#/$defs/Missing"}, "Missing"),
    ],
)
def test_what_the_backend_cannot_compile_is_named(schema: dict, named: str) -> None:
    problem = compile_problem(schema)
    assert problem is not None and named in problem
    assert compile_problem(SCHEMA) is None
