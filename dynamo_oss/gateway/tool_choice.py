"""A required or named tool choice on chat, enforced as a grammar of the whole completion: the
reasoning free, then a call to an allowed tool with arguments that tool's schema accepts
(engines/harmony/grammar.py says why a JSON-only guide cannot do it; the Responses and Messages
APIs send the same grammar with their completions, harmony/completion.py).

Left to itself, Dynamo 1.6's frontend turns a forced `tool_choice` into `guided_decoding.json` (the
named tool's argument schema, or an array of {name, parameters} for `required`), and it refuses any
`guided_*` field sent beside a forced choice ("Invalid request"). So the gateway sends such a
request on as `tool_choice: "auto"` with the forced-call grammar as `guided_grammar`. Nothing else
that the choice means to Dynamo is lost: the chat template does not read `tool_choice`; with
`auto`, Dynamo's harmony parser still returns the call as `tool_calls` with `finish_reason:
"tool_calls"`; and what its forced path adds on the way back (dropping calls to a tool other than
the named one) cannot happen under the grammar. A call cut short by `max_tokens` ends `"length"`,
where Dynamo's forced path gives no finish_reason at all.

A request this cannot guide is left as the client sent it, for Dynamo to refuse as before: a
forced choice beside the client's own `guided_*` field, `required` with no tools, a malformed choice.
"""

from __future__ import annotations

from typing import Any

from dynamo_oss.engines.harmony.grammar import forced_call_grammar
from dynamo_oss.gateway.errors import ApiError

FUNCTIONS = "functions"  # the harmony namespace chat's function tools are rendered in
NO_PARAMETERS = {"type": "object", "properties": {}}  # a function declared without parameters
GUIDED_FIELDS = ("guided_json", "guided_regex", "guided_grammar", "guided_choice")  # Dynamo's own guides


def forced(choice: object) -> bool:
    """Whether a chat `tool_choice` makes the completion call a tool: `required`, or a named function."""
    return choice == "required" or (isinstance(choice, dict) and choice.get("type") == "function")


def chat_functions(request: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The request's function tools as harmony addresses them (`functions.get_weather`) -> their
    argument schemas."""
    functions = [tool.get("function") for tool in request.get("tools") or [] if isinstance(tool, dict)]
    named = [function for function in functions if isinstance(function, dict) and isinstance(function.get("name"), str)]
    return {f"{FUNCTIONS}.{function['name']}": function.get("parameters") or NO_PARAMETERS for function in named}


def force_chat_call(request: dict[str, Any]) -> bool:
    """A forced `tool_choice` taken out of a chat request (validated: its tools are functions) and
    put back as `auto` and the forced-call grammar; whether the request changed. A named tool the
    request does not offer is an ApiError naming the field."""
    choice = request.get("tool_choice")
    if not forced(choice) or any(request.get(field) not in (None, []) for field in GUIDED_FIELDS):
        return False
    tools = chat_functions(request)
    if isinstance(choice, dict):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str):
            return False  # Dynamo's own 400 names what is wrong with the choice's shape
        if f"{FUNCTIONS}.{name}" not in tools:
            raise ApiError(400, f"Invalid 'tool_choice.function.name': no function named '{name}' is offered in "
                           "'tools'.", param="tool_choice.function.name")  # fmt: skip
        tools = {f"{FUNCTIONS}.{name}": tools[f"{FUNCTIONS}.{name}"]}
    if not tools:
        return False
    request["tool_choice"] = "auto"
    request["guided_grammar"] = forced_call_grammar(tools)
    return True
