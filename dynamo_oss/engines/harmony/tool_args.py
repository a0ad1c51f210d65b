"""The tools a request offers, as far as a worker can see them, and arguments valid for them.

A worker gets the prompt's token ids, not the OpenAI request. Tool names come from the
`namespace NAME { ... }` blocks rendered into the developer message (`functions` for plain
function tools; a Responses request's namespace groups under their own names). A required or
named tool choice reaches the worker as the gateway's forced-call grammar (harmony/grammar.py),
which names the tools it allows and each one's JSON schema: the mocker calls one of those, as a
worker guided by it must. With tool_choice "auto" only the prompt's TypeScript rendering is there,
so arguments come from its top-level fields.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from dynamo_oss.engines.harmony.grammar import forced_calls
from dynamo_oss.engines.harmony.instances import WORDS, instance_of

ToolChoice = Literal["auto", "forced"]  # forced: the guide admits only a call
TsFields = dict[str, tuple["str | TsFields", bool]]  # a TypeScript object type as the template renders it

_NAMESPACE_BLOCK = re.compile(r"namespace ([A-Za-z0-9_\-]+) \{\n(.*?)\n\} // namespace \1", re.DOTALL)
# The prompt's last message is a tool's output to the assistant: `<|start|>functions.f to=assistant...`.
_ANSWERED_TOOL = re.compile(
    r"<\|start\|>[^<]* to=assistant<\|channel\|>[^<]*<\|message\|>(?:(?!<\|start\|>).)*<\|end\|><\|start\|>assistant$",
    re.DOTALL,
)
_USER_MESSAGE = re.compile(r"<\|start\|>user<\|message\|>(.*?)<\|end\|>", re.DOTALL)
FUNCTIONS = "functions"
_TOOL = re.compile(r"^type ([A-Za-z0-9_.\-]+) = \((.*?)\) => any;$", re.DOTALL | re.MULTILINE)
_FIELD = re.compile(r"^([A-Za-z0-9_]+)(\??): (.+?),?$")


@dataclass
class Tool:
    name: str
    schema: dict[str, Any] | None = None  # JSON schema of the arguments, when the guide names one
    fields: TsFields = field(default_factory=dict)  # from the prompt: name -> (TS type or nested fields, required)
    namespace: str = FUNCTIONS

    @property
    def recipient(self) -> str:
        """Whom a call goes to in harmony: `functions.get_weather`, `multi_agent.spawn`."""
        return f"{self.namespace}.{self.name}"


@dataclass
class ToolRequest:
    tools: list[Tool]
    choice: ToolChoice
    answered: bool = False  # the prompt ends with a tool's output: a model answers it before calling again
    named_by_user: list[Tool] = field(default_factory=list)  # tools the last user message names: the ones to call


def tool_request(prompt_text: str, guided_decoding: dict[str, Any] | None) -> ToolRequest | None:
    """The tools in the prompt and how the request asked for them; None without tools."""
    forced = [_named(recipient, schema) for recipient, schema in forced_calls(guided_decoding).items()]
    if forced:
        return ToolRequest(tools=forced, choice="forced")
    prompt_tools = _prompt_tools(prompt_text)
    if not prompt_tools:
        return None
    users = _USER_MESSAGE.findall(prompt_text)
    named_by_user = [tool for tool in prompt_tools if users and re.search(rf"\b{re.escape(tool.name)}\b", users[-1])]
    answered = _ANSWERED_TOOL.search(prompt_text) is not None
    return ToolRequest(tools=prompt_tools, choice="auto", answered=answered, named_by_user=named_by_user)


def _named(recipient: str, schema: dict[str, Any]) -> Tool:
    """A tool a forced call may go to: `functions.get_weather`, or `namespace.tool` for a group's."""
    namespace, _, name = recipient.rpartition(".")
    return Tool(name=name, schema=schema, namespace=namespace)


def arguments_for(tool: Tool, rng: random.Random) -> Any:
    """Arguments for a call: an instance of the tool's JSON schema, else of its prompt fields."""
    if tool.schema is not None:
        return instance_of(tool.schema, rng)
    return _ts_object(tool.fields, rng)


def _prompt_tools(prompt_text: str) -> list[Tool]:
    tools = {}
    for namespace, block in _NAMESPACE_BLOCK.findall(prompt_text):
        for name, params in _TOOL.findall(block):
            tool = Tool(name=name, fields=_ts_fields(params.splitlines()[1:], 0)[0], namespace=namespace)
            tools[tool.recipient] = tool
    return list(tools.values())


def _ts_fields(lines: list[str], start: int) -> tuple[TsFields, int]:
    """The fields of one TypeScript object type from `start` to its closing brace, nested objects
    parsed in turn; comment lines (the template's descriptions) are skipped."""
    fields: TsFields = {}
    index = start
    while index < len(lines):
        line = lines[index].strip()
        index += 1
        if line.startswith("}"):
            break
        match = _FIELD.match(line)
        if not match:
            continue
        name, optional, ts_type = match.groups()
        ts_type = ts_type.split("//")[0].strip()  # `loc:     // where` puts a description before the type
        if not ts_type and index < len(lines) and lines[index].strip() == "{":
            ts_type, index = "{", index + 1  # ... and the object's brace on the next line
        if ts_type == "{":
            nested, index = _ts_fields(lines, index)
            fields[name] = (nested, optional != "?")
        else:
            fields[name] = (ts_type, optional != "?")
    return fields, index


def _ts_object(fields: TsFields, rng: random.Random) -> dict[str, Any]:
    return {name: _ts_value(ts_type, rng) for name, (ts_type, required) in fields.items() if required}


def _ts_value(ts_type: str | TsFields, rng: random.Random) -> Any:
    """A value of a TypeScript type as the gpt-oss template renders JSON Schema types: objects with
    their required fields, one element for an array (minItems is not rendered), a union's first member."""
    if isinstance(ts_type, dict):
        return _ts_object(ts_type, rng)
    first = ts_type.split(" | ")[0].strip()
    if first.startswith('"') and first.endswith('"'):
        return first[1:-1]
    if first.endswith("[]"):
        return [_ts_value(first[:-2], rng)]
    if first in ("number", "integer"):
        return rng.randint(1, 10)  # an integer is a valid JSON Schema number too
    if first == "boolean":
        return True
    if first == "null":
        return None
    return rng.choice(WORDS)
