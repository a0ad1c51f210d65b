"""A small value valid against a JSON Schema: what the mocker writes where gpt-oss would write JSON.

Why: a structured-output request is answered in the final channel with JSON the request's schema
accepts, and a tool call with arguments its parameters accept, so a client's parse helpers run on
the simulated engine as on a real one. The subset is what the structured-output backends compile
(and OpenAI's strict mode allows): objects with their required properties, in the order the schema
lists them (the order backends write them in), arrays, `enum`, `const`, strings (a few `format`s),
numbers, integers, booleans, null, `anyOf`/`oneOf`/`allOf`, and `$ref` into `$defs` as pydantic
emits them. A string's `pattern` is not honoured.
"""

from __future__ import annotations

import random
from typing import Any

WORDS = ["alpha", "blue", "city", "delta", "green", "harbor", "river", "summit", "valley", "north"]
MAX_DEPTH = 6  # a recursive schema (a tree of itself) stops growing here: no array item or union past it
LAST_DEPTH = 3 * MAX_DEPTH  # a schema that cannot end (a required property of its own type) is cut here
FORMATTED = {
    "date-time": "2026-01-02T03:04:05Z",
    "date": "2026-01-02",
    "time": "03:04:05Z",
    "duration": "P1D",
    "email": "river@example.com",
    "hostname": "example.com",
    "ipv4": "10.0.0.1",
    "ipv6": "::1",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "uri": "https://example.com/",
}


def instance_of(schema: dict[str, Any], rng: random.Random) -> Any:
    """A value `schema` accepts; `$ref`s resolve against `schema` itself (its `$defs`)."""
    return _value(schema, rng, schema, 0)


def _value(schema: dict[str, Any], rng: random.Random, root: dict[str, Any], depth: int) -> Any:
    if depth > LAST_DEPTH:
        return None
    if isinstance(schema.get("$ref"), str):
        return _value(_resolved(schema["$ref"], root), rng, root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return rng.choice(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if schema.get(key):  # the first choice that can end: a recursive one may not, past the depth
            options = schema[key] if depth < MAX_DEPTH else [o for o in schema[key] if _ends(o)] or schema[key]
            return _value(options[0], rng, root, depth)
    if schema.get("allOf"):
        merged = {key: value for part in schema["allOf"] for key, value in part.items()}
        return _value({**schema, **merged, "allOf": []}, rng, root, depth)
    kind = _kind(schema)
    if kind == "object":
        properties = schema.get("properties", {})
        order = {name: position for position, name in enumerate(properties)}
        required = sorted(schema.get("required", []), key=lambda name: order.get(name, len(order)))
        return {name: _value(properties.get(name, {}), rng, root, depth + 1) for name in required}
    if kind == "array":
        low = schema.get("minItems", 0 if depth >= MAX_DEPTH else 1)
        count = min(max(low, 0), schema.get("maxItems", low))
        return [_value(schema.get("items", {}), rng, root, depth + 1) for _ in range(count)]
    if kind in ("integer", "number"):
        number = _within(schema, rng.randint(1, 10))
        return int(number) if kind == "integer" else float(number)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    return _string(schema, rng)


def _kind(schema: dict[str, Any]) -> str:
    """The type to write: the schema's (the first not null, of several), else what its keys imply."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if isinstance(kind, str):
        return kind
    return "object" if "properties" in schema else "array" if "items" in schema else "string"


def _ends(schema: dict[str, Any]) -> bool:
    """A choice whose value needs no further `$ref` (null, a string, ...): it ends a recursion."""
    return "$ref" not in schema and _kind(schema) not in ("object", "array")


def _resolved(ref: str, root: dict[str, Any]) -> dict[str, Any]:
    """A local JSON pointer (`#/$defs/Place`) within the root schema; anything else is any value."""
    node: Any = root
    for part in ref.removeprefix("#/").split("/") if ref.startswith("#/") else [None]:
        node = node.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(node, dict) and part else None
    return node if isinstance(node, dict) else {}


def _within(schema: dict[str, Any], value: float) -> float:
    """`value` moved inside the schema's bounds, exclusive ones by one, and onto its `multipleOf`."""
    if "multipleOf" in schema:
        value = schema["multipleOf"] * max(1, round(value / schema["multipleOf"]))
    if "minimum" in schema:
        value = max(value, schema["minimum"])
    if "exclusiveMinimum" in schema:
        value = max(value, schema["exclusiveMinimum"] + 1)
    if "maximum" in schema:
        value = min(value, schema["maximum"])
    if "exclusiveMaximum" in schema:
        value = min(value, schema["exclusiveMaximum"] - 1)
    return value


def _string(schema: dict[str, Any], rng: random.Random) -> str:
    word = FORMATTED.get(schema.get("format", ""), rng.choice(WORDS))
    word = word.ljust(schema.get("minLength", 0), "x")
    return word[: schema["maxLength"]] if "maxLength" in schema else word
