"""What must hold of one answer in the matrix, judged on its shape, never on its wording.

Each property gives None when it held, a reason when it did not, or NOT_ASKED when the cell does not
ask it (JSON is judged only where a schema was asked and the answer is not a tool call; a tool call
only where tools may be used).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Final

import jsonschema

from dynamo_oss.conformance.cases import no_harmony_leak
from dynamo_oss.conformance.matrix.cells import NAMED_TOOL, REPORT, TOOLS, Cell
from dynamo_oss.conformance.matrix.exchange import Answer

NOT_ASKED: Final = "not asked"
Judgement = str | None  # None: held; NOT_ASKED; else why it failed
SCHEMAS = {tool["name"]: tool["parameters"] for tool in TOOLS}
# How each API says an answer ended in a tool call (a Response says it by its items alone); chat
# may end a named choice's call with "stop", as OpenAI's own endpoint does.
TOOL_FINISH = {"chat": {"tool_calls"}, "messages": {"tool_use"}}
NAMED_CHAT_FINISH = {"tool_calls", "stop"}


def api_shape(cell: Cell, answer: Answer) -> Judgement:
    return "; ".join(answer.shape) or None


def tool_call(cell: Cell, answer: Answer) -> Judgement:
    calls = answer.outcome.tool_calls
    if cell.tool_choice == "none":
        return f"a tool was called although tool_choice is none: {calls[0][0]}" if calls else None
    if not calls:
        return None if cell.tool_choice == "auto" else f"no tool call although tool_choice is {cell.tool_choice}"
    for name, arguments in calls:
        if cell.tool_choice == "named" and name != NAMED_TOOL["name"]:
            return f"the call names {name!r}, not the named tool {NAMED_TOOL['name']!r}"
        if name not in SCHEMAS:
            return f"the call names {name!r}, which was not offered"
        if problem := _schema_problem(arguments, SCHEMAS[name]):
            return f"{name} arguments: {problem}"
    finishes = NAMED_CHAT_FINISH if (cell.api, cell.tool_choice) == ("chat", "named") else TOOL_FINISH.get(cell.api)
    if finishes and answer.outcome.finish_reason not in finishes:
        return f"the answer calls a tool but ends with {answer.outcome.finish_reason!r}"
    return None


def no_leak(cell: Cell, answer: Answer) -> Judgement:
    return no_harmony_leak(answer.outcome)


def json_valid(cell: Cell, answer: Answer) -> Judgement:
    if cell.output != "json_schema" or answer.outcome.tool_calls:
        return NOT_ASKED
    return _schema_problem(answer.outcome.content, REPORT)


def reasoning_placed(cell: Cell, answer: Answer) -> Judgement:
    """The chain of thought in the API's own place (chat's `reasoning`, a reasoning item, a thinking
    block), and none of it in the answer's text."""
    outcome = answer.outcome
    if not outcome.reasoning.strip():
        return "no reasoning returned"
    if cell.api == "chat" and not outcome.reasoning_field.strip():
        return "no 'reasoning' property on the message or its deltas"
    if outcome.content and outcome.reasoning.strip() in outcome.content:
        return "the reasoning is repeated in the answer's text"
    return None


def _schema_problem(text: str, schema: dict) -> str | None:
    try:
        jsonschema.validate(json.loads(text), schema)
    except json.JSONDecodeError:
        return f"not JSON: {text[:60]!r}"
    except jsonschema.ValidationError as err:
        return f"does not match the schema: {err.message[:100]}"
    return None


PROPERTIES: dict[str, Callable[[Cell, Answer], Judgement]] = {
    "API shape": api_shape,
    "tool call": tool_call,
    "no harmony leak": no_leak,
    "JSON valid": json_valid,
    "reasoning placed": reasoning_placed,
}
