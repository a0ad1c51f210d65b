"""The tools a request offers, as far as a worker can see them, and arguments valid for them.

A worker gets the prompt's token ids, not the OpenAI request. Tool names come from the
`namespace functions { ... }` block the gpt-oss chat template renders into the developer
message. For tool_choice "required" Dynamo's preprocessor also sends every tool's JSON
schema as `guided_decoding.json` (an array of {name, parameters}); for a named tool_choice
it sends that tool's parameter schema. With tool_choice "auto" only the prompt's
TypeScript rendering is there, so arguments come from its top-level fields.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any, Literal

ToolChoice = Literal["none", "auto", "required", "named"]

_NAMESPACE_BLOCK = re.compile(r"namespace functions \{\n(.*?)\n\} // namespace functions", re.S)
_TOOL = re.compile(r"^type ([A-Za-z0-9_.\-]+) = \((.*?)\) => any;$", re.S | re.M)
_FIELD = re.compile(r"^([A-Za-z0-9_]+)(\??): (.+?),$")
_WORDS = ["alpha", "blue", "city", "delta", "green", "harbor", "river", "summit", "valley", "north"]


@dataclass
class Tool:
    name: str
    schema: dict[str, Any] | None = None  # JSON schema of the arguments, when Dynamo sent one
    fields: dict[str, tuple[str, bool]] = field(default_factory=dict)  # prompt: name -> (TS type, required)


@dataclass
class ToolRequest:
    tools: list[Tool]
    choice: ToolChoice


def tool_request(prompt_text: str, guided_decoding: dict[str, Any] | None) -> ToolRequest | None:
    """The tools in the prompt and how the request asked for them; None without tools."""
    prompt_tools = _prompt_tools(prompt_text)
    schema = (guided_decoding or {}).get("json")
    if isinstance(schema, dict) and schema.get("type") == "array":
        tools = [
            Tool(name=option["properties"]["name"]["enum"][0], schema=option["properties"].get("parameters", {}))
            for option in schema.get("items", {}).get("anyOf", [])
        ]
        return ToolRequest(tools=tools, choice="required") if tools else None
    if not prompt_tools:
        return None
    if isinstance(schema, dict):
        # A named tool_choice: Dynamo sends that tool's parameter schema but not its name.
        named = _tool_matching(prompt_tools, schema)
        return ToolRequest(tools=[Tool(name=named.name, schema=schema)], choice="named")
    return ToolRequest(tools=prompt_tools, choice="auto")


def arguments_for(tool: Tool, rng: random.Random) -> Any:
    """Arguments for a call: an instance of the tool's JSON schema, else of its prompt fields."""
    if tool.schema is not None:
        return instance_of(tool.schema, rng)
    return {name: _ts_value(ts_type, rng) for name, (ts_type, required) in tool.fields.items() if required}


def instance_of(schema: dict[str, Any], rng: random.Random, depth: int = 0) -> Any:
    """A small value valid against a JSON schema: required properties, first enum value, bounds kept."""
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return instance_of(schema[key][0], rng, depth)
    if schema.get("allOf"):
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            merged.update(part)
        return instance_of(merged, rng, depth)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        properties = schema.get("properties", {})
        required = schema.get("required", [])
        if depth > 4:
            return {}
        return {name: instance_of(properties.get(name, {}), rng, depth + 1) for name in required}
    if kind == "array":
        count = max(schema.get("minItems", 1), 0)
        count = min(count, schema.get("maxItems", count))
        return [instance_of(schema.get("items", {}), rng, depth + 1) for _ in range(count)]
    if kind == "integer":
        return int(_in_bounds(schema, rng.randint(1, 10)))
    if kind == "number":
        return float(_in_bounds(schema, rng.randint(1, 10)))
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    word = rng.choice(_WORDS)
    minimum, maximum = schema.get("minLength", 0), schema.get("maxLength")
    word = word.ljust(minimum, "x")
    return word[:maximum] if maximum is not None else word


def _in_bounds(schema: dict[str, Any], value: float) -> float:
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    high = schema.get("maximum", schema.get("exclusiveMaximum"))
    if low is not None and value <= low:
        value = low + 1 if "exclusiveMinimum" in schema and "minimum" not in schema else low
    if high is not None and value >= high:
        value = high - 1 if "exclusiveMaximum" in schema and "maximum" not in schema else high
    return value


def _prompt_tools(prompt_text: str) -> list[Tool]:
    blocks = _NAMESPACE_BLOCK.findall(prompt_text)
    if not blocks:
        return []
    return [Tool(name=name, fields=_top_level_fields(params)) for name, params in _TOOL.findall(blocks[-1])]


def _top_level_fields(params: str) -> dict[str, tuple[str, bool]]:
    """`_: {\\nname?: type,\\n...}` -> {name: (type, required)}; nested objects count as one field."""
    fields: dict[str, tuple[str, bool]] = {}
    depth = 0
    for line in params.splitlines():
        stripped = line.strip()
        if depth == 1 and (match := _FIELD.match(stripped)):
            fields[match.group(1)] = (match.group(3), match.group(2) != "?")
        elif depth == 1 and stripped.endswith("{") and ":" in stripped:
            name = stripped.split(":")[0]
            fields[name.rstrip("?")] = ("{}", not name.endswith("?"))
        depth += stripped.count("{") - stripped.count("}")
    return fields


def _tool_matching(tools: list[Tool], schema: dict[str, Any]) -> Tool:
    """The prompt's tool whose field names are the schema's properties (the first tool if none is)."""
    wanted = set(schema.get("properties", {}))
    return next((tool for tool in tools if set(tool.fields) == wanted), tools[0])


def _ts_value(ts_type: str, rng: random.Random) -> Any:
    """A value for a TypeScript type as the gpt-oss template writes JSON schema types."""
    first = ts_type.split(" | ")[0].strip()
    if first.startswith('"') and first.endswith('"'):
        return first[1:-1]
    if first.endswith("[]"):
        return []
    if first in ("number", "integer"):
        return rng.randint(1, 10)
    if first == "boolean":
        return True
    if first.startswith("{"):
        return {}
    return rng.choice(_WORDS)
