"""The mocker's JSON Schema instances: valid against the schemas clients send for structured outputs
and tool parameters, as pydantic, the openai client's strict mode and the anthropic SDK write them.
Pure functions, no processes."""

from __future__ import annotations

import random
from enum import Enum
from typing import Literal

import jsonschema
import pytest
from anthropic.lib._parse._transform import transform_schema
from openai.lib._pydantic import to_strict_json_schema
from pydantic import BaseModel, Field

from dynamo_oss.engines.harmony.instances import instance_of


class Unit(str, Enum):
    celsius = "celsius"
    fahrenheit = "fahrenheit"


class Place(BaseModel):
    city: str = Field(min_length=3, max_length=12)
    country: str | None = None


class Forecast(BaseModel):
    place: Place  # a $ref into $defs
    unit: Unit  # an enum, by $ref
    days: list[int] = Field(min_length=2, max_length=3)
    high: float = Field(ge=-40, le=50)
    rain: bool
    kind: Literal["forecast"]  # a const
    note: str | None  # anyOf with null
    issued: str = Field(json_schema_extra={"format": "date-time"})


class Node(BaseModel):
    """A tree of itself: the instance must end."""

    name: str
    children: list[Node] = []
    parent: Node | None = None


PYDANTIC_MODELS = [Place, Forecast, Node]
SCHEMAS = [  # tool parameters and response formats as clients write them by hand
    {"type": "object", "properties": {"city": {"type": "string", "minLength": 12}}, "required": ["city"]},
    {
        "type": "object",
        "properties": {"n": {"type": "integer", "exclusiveMinimum": 10, "maximum": 11}},
        "required": ["n"],
    },
    {
        "type": "object",
        "properties": {"tags": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 2}},
        "required": ["tags"],
    },
    {
        "type": "object",
        "properties": {
            "where": {
                "anyOf": [
                    {"type": "object", "properties": {"lat": {"type": "number"}}, "required": ["lat"]},
                    {"type": "string"},
                ]
            }
        },
        "required": ["where"],
    },
    {"allOf": [{"type": "object", "properties": {"a": {"const": 3}}, "required": ["a"]}]},
    {"type": "object", "properties": {"x": {"type": ["null", "boolean"]}}, "required": ["x"]},
    {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 7, "minimum": 1}}, "required": ["n"]},
    {"type": "object", "properties": {"v": {"oneOf": [{"type": "null"}, {"type": "number", "minimum": 2.5}]}}},
    {"type": "object"},  # response_format json_object
    {"type": "array", "items": {"type": "string"}},  # a top-level array
]


def valid(schema: dict, seeds: range = range(5)) -> None:
    for seed in seeds:
        jsonschema.validate(instance_of(schema, random.Random(seed)), schema)


@pytest.mark.parametrize("schema", SCHEMAS, ids=range(len(SCHEMAS)))
def test_instances_are_valid_against_hand_written_schemas(schema: dict) -> None:
    valid(schema)


@pytest.mark.parametrize("model", PYDANTIC_MODELS, ids=lambda m: m.__name__)
def test_instances_of_pydantic_schemas_validate_back_into_the_model(model: type[BaseModel]) -> None:
    for seed in range(5):
        schema = model.model_json_schema()
        jsonschema.validate(instance_of(schema, random.Random(seed)), schema)
        model.model_validate(instance_of(schema, random.Random(seed)))


@pytest.mark.parametrize("model", PYDANTIC_MODELS, ids=lambda m: m.__name__)
def test_instances_of_the_schemas_the_sdks_send_are_valid(model: type[BaseModel]) -> None:
    valid(to_strict_json_schema(model))  # client.chat.completions.parse(response_format=Model), responses.parse
    valid(transform_schema(model))  # anthropic's client.messages.parse(output_format=Model)


def test_required_properties_are_written_in_the_schema_s_order() -> None:
    """Backends write an object's properties in the order the schema lists them (llguidance does),
    whatever the order of `required`; optional ones are left out."""
    schema = to_strict_json_schema(Forecast)
    assert list(instance_of({**schema, "required": schema["required"][::-1]}, random.Random(1))) == list(
        schema["properties"]
    )
    assert list(instance_of(Place.model_json_schema(), random.Random(1))) == ["city"]


def test_refs_resolve_against_the_schema_they_came_in() -> None:
    schema = {
        "type": "object",
        "$defs": {"Place": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
        "properties": {"p": {"$ref": "#/$defs/Place"}, "q": {"$ref": "#/$defs/Missing"}},  # q: optional, left out
        "required": ["p"],
    }
    value = instance_of(schema, random.Random(1))
    jsonschema.validate(value, schema)
    assert value["p"]["city"] and "q" not in value


def test_a_recursive_schema_ends_and_the_same_seed_gives_the_same_value() -> None:
    schema = to_strict_json_schema(Node)  # every field required: children and parent recurse
    assert instance_of(schema, random.Random(4)) == instance_of(schema, random.Random(4))
    depth, node = 0, instance_of(schema, random.Random(4))
    while node["children"]:
        depth, node = depth + 1, node["children"][0]
    assert 0 < depth < 10
