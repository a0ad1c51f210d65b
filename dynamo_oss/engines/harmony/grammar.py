"""The grammar that constrains a gpt-oss completion to a structured output: the analysis channel
free, the final channel's content JSON that the request's schema accepts.

Why a grammar of the whole completion rather than the schema alone: a guided-decoding backend
applies its guide from the first generated token, and gpt-oss's first tokens are
`<|channel|>analysis<|message|>`, its reasoning. A JSON-only guide forbids them (the reasoning is
lost and the harmony parsers find no channel), which is what Dynamo 1.6's frontend asks for when it
passes `response_format` on as `guided_decoding.json` (Dynamo 2220, 7831). TensorRT-LLM 1.3.0rc29,
the version ai-dynamo 1.6 pins, runs a guide as given; its PR 15741, still open, would move JSON,
regex and grammar guides behind `<|channel|>final<|message|>` inside `LLM.generate` (a grammar like
this one would then be moved too, and this module should send the schema alone instead). Its
guided decoding has no notion of harmony's channels; a structural tag could say the same as this
grammar, but neither of Dynamo 1.6's endpoints accepts one (`response_format.type` is text,
json_object or json_schema; /v1/completions refuses a `structural_tag`).

So the gateway sends this grammar as Dynamo's own `guided_grammar` field. Dynamo's TensorRT-LLM
worker turns it into `GuidedDecodingParams(grammar=...)`, and TensorRT-LLM compiles it with the
backend the engine file names: `guided_decoding_backend: llguidance` (engines/trtllm.py), whose
grammars are Lark (`LLMatcher.grammar_from_lark`). Lark as llguidance reads it names gpt-oss's
special tokens (`<|channel|>`) as tokens, not text, and embeds a JSON Schema as `%json {...}`,
compiled by the same JSON compiler `compile_problem` runs, so what the gateway accepts is what the
worker compiles.

The grammar lets the model think (analysis messages, and commentary preambles when tools are
offered) and then either answer on the final channel in JSON, ending `<|return|>`, or, when tools
are offered, call one of them (`to=functions.NAME`, channel first, as Dynamo's parsers read it),
ending `<|call|>`: a structured output shapes the answer to the user, never a tool call.

A required or named tool choice is a grammar of the same kind (`forced_call_grammar`), for the same
reason: the guide Dynamo makes of it, the tool's argument schema as `guided_decoding.json`, would
forbid the reasoning and the `<|channel|>commentary to=functions.NAME` header before the arguments,
so Dynamo's harmony parser would find no call. The forced grammar leaves the reasoning free and then
admits only a call to an allowed tool, each tool with arguments its own schema accepts.
"""

from __future__ import annotations

import json
import re
from typing import Any

from llguidance import LLMatcher

ANSWER_RULE = "json_answer: %json "  # the final channel's content; the mocker reads the schema back from it
REASONING = '<|channel|> "analysis" <|message|> TEXT <|end|>'
PREAMBLE = '<|channel|> "commentary" <|message|> TEXT <|end|>'  # what gpt-oss may say before a call
CALL_HEADER = '<|channel|> "commentary to=" {} (" " <|constrain|> "json")? <|message|>'  # {}: the recipient
# One allowed call of a forced choice, as `forced_call_grammar` writes it: the mocker reads back the
# recipient (a JSON string) and the schema its arguments follow.
FORCED_CALL = re.compile(
    r"^forced_call_\d+: "
    + re.escape(CALL_HEADER).replace(re.escape("{}"), r'("(?:[^"\\]|\\.)*")')
    + r" %json (.*) <\|call\|>$"
)


def completion_grammar(schema: dict[str, Any], recipients: list[str]) -> str:
    """The Lark grammar of a completion whose final answer `schema` accepts; `recipients` are the
    tools it may call instead (`functions.get_weather`), none for an answer only."""
    answers = ["final"]
    rules = [
        'final: <|channel|> "final" <|message|> json_answer <|return|>',
        ANSWER_RULE + json.dumps(schema),
    ]
    if recipients:
        answers.append("call")
        rules += [
            "call: " + CALL_HEADER.format("RECIPIENT") + " TEXT <|call|>",
            "RECIPIENT: " + " | ".join(json.dumps(recipient) for recipient in recipients),
        ]
    return _whole_completion(answers, bool(recipients), rules)


def forced_call_grammar(tools: dict[str, dict[str, Any]]) -> str:
    """The Lark grammar of a completion that must end in a call to one of `tools` (harmony
    recipient -> its argument schema), the arguments valid against that tool's own schema: a
    required tool choice (every tool) or a named one (that tool alone)."""
    calls = [f"forced_call_{index}" for index in range(len(tools))]
    rules = [
        f"{call}: {CALL_HEADER.format(json.dumps(recipient))} %json {json.dumps(schema)} <|call|>"
        for call, (recipient, schema) in zip(calls, tools.items(), strict=True)
    ]
    return _whole_completion(calls, True, rules)


def _whole_completion(ends: list[str], preambles: bool, rules: list[str]) -> str:
    """Any number of reasoning messages (and preambles, where a call may follow), each closed and the
    next assistant message begun, then one of the `ends` rules."""
    before = [REASONING, PREAMBLE] if preambles else [REASONING]
    return "\n".join(
        [
            'start: (before <|start|> "assistant")* (' + " | ".join(ends) + ")",
            "before: " + "\n      | ".join(before),
            *rules,
            r"TEXT: /(.|\n)*/",
        ]
    )


def compile_problem(schema: dict[str, Any]) -> str | None:
    """Why llguidance cannot compile `schema` into a guide, if it cannot (a look-ahead in a pattern,
    an unknown format, a keyword it does not implement such as `not`)."""
    failed, messages = LLMatcher.validate_grammar_with_warnings(LLMatcher.grammar_from_json_schema(schema))
    return messages[0] if failed else None


def answer_schema(guided_decoding: dict[str, Any] | None) -> dict[str, Any] | None:
    """The schema a request's final answer must follow, when its guide is a `completion_grammar`."""
    grammar = (guided_decoding or {}).get("grammar")
    if not isinstance(grammar, str):
        return None
    line = next((line for line in grammar.splitlines() if line.startswith(ANSWER_RULE)), None)
    return json.loads(line.removeprefix(ANSWER_RULE)) if line is not None else None


def forced_calls(guided_decoding: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The calls a request's guide allows, recipient -> argument schema, when it is a
    `forced_call_grammar` (none otherwise)."""
    grammar = (guided_decoding or {}).get("grammar")
    if not isinstance(grammar, str):
        return {}
    calls = (FORCED_CALL.match(line) for line in grammar.splitlines())
    return {json.loads(call[1]): json.loads(call[2]) for call in calls if call}
