"""The structured-output formats requests carry: chat's `response_format`, the Responses API's
`text.format` (and the Messages API's `output_config.format`, protocol/messages.py).

A JSON schema is checked where it arrives, so a schema the worker could not compile is a 400
naming the field, before anything reaches a worker: it must be a valid JSON Schema (the 2020-12
metaschema, as tool parameters are checked), and the guided-decoding backend must compile it
(llguidance, the backend the TensorRT-LLM engine files name: engines/harmony/grammar.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from jsonschema import Draft202012Validator, SchemaError
from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError

from dynamo_oss.engines.harmony.grammar import compile_problem

NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"  # OpenAI's rule for a format's name


def schema_problem(schema: dict[str, Any]) -> str | None:
    """What keeps `schema` from guiding a completion, if anything."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as err:
        return f"not a valid JSON Schema: {err.message}"
    problem = compile_problem(schema)
    return f"the guided-decoding backend cannot compile it: {problem}" if problem else None


def _compilable(schema: dict[str, Any]) -> dict[str, Any]:
    problem = schema_problem(schema)
    if problem is not None:
        raise PydanticCustomError("invalid_json_schema", problem)
    return schema


CompilableSchema = Annotated[dict[str, Any], AfterValidator(_compilable)]


class Lenient(BaseModel):
    """A part OpenAI may extend: unknown fields are kept and ignored."""

    model_config = ConfigDict(extra="allow")


class TextFormat(Lenient):
    type: Literal["text"]


class JsonObjectFormat(Lenient):
    """Any JSON object; gpt-oss is told nothing more, so the messages should say what to write."""

    type: Literal["json_object"]


class JsonSchema(Lenient):
    """A named JSON schema the answer must follow (`strict` or not, it is enforced either way)."""

    name: str = Field(pattern=NAME_PATTERN)
    description: str | None = None
    schema_: CompilableSchema = Field(default_factory=dict, alias="schema")
    strict: bool | None = None


class ChatJsonSchemaFormat(Lenient):
    type: Literal["json_schema"]
    json_schema: JsonSchema


class ResponsesJsonSchemaFormat(JsonSchema):
    type: Literal["json_schema"]


ChatResponseFormat = Annotated[TextFormat | JsonObjectFormat | ChatJsonSchemaFormat, Field(discriminator="type")]
ResponsesTextFormat = Annotated[TextFormat | JsonObjectFormat | ResponsesJsonSchemaFormat, Field(discriminator="type")]
