"""Structured outputs beside the reasoning: the final channel is constrained, the analysis is not.

A request's format (chat's `response_format`, the Responses API's `text.format`, the Messages
API's `output_config.format`) becomes two things:
- the schema in the prompt, as harmony's `# Response Formats` section of the developer message,
  where gpt-oss was trained to read it (a JSON object format adds nothing: the messages say it);
- a guide for the engine, Dynamo's own `guided_grammar` field: a grammar of the whole completion
  that leaves the reasoning free and admits only JSON the schema accepts on the final channel
  (engines/harmony/grammar.py says how a TensorRT-LLM worker enforces it, and why not
  `guided_json`, which is what Dynamo's frontend would make of `response_format` itself).

A required or named tool choice guides the completion to a tool call instead (its own grammar:
harmony/completion.py), and a format shapes only an answer to the user, so it then guides
nothing: its schema is in the prompt all the same.
"""

from __future__ import annotations

import json


from dynamo_oss.engines.harmony.grammar import completion_grammar
from dynamo_oss.gateway.protocol.formats import (
    ChatJsonSchemaFormat,
    ChatResponseFormat,
    JsonSchema,
    ResponsesTextFormat,
    TextFormat,
)

ANY_OBJECT = {"type": "object"}


def json_schema(fmt: ChatResponseFormat | ResponsesTextFormat) -> JsonSchema | None:
    """The named schema of a format, if it has one."""
    if isinstance(fmt, ChatJsonSchemaFormat):
        return fmt.json_schema
    return fmt if isinstance(fmt, JsonSchema) else None


def prompt_section(fmt: ChatResponseFormat | ResponsesTextFormat | None) -> str:
    """harmony's `# Response Formats` section for a named schema; "" for any other format."""
    schema = json_schema(fmt) if fmt is not None else None
    if schema is None:
        return ""
    description = f"// {schema.description}\n" if schema.description else ""
    return f"# Response Formats\n\n## {schema.name}\n\n{description}{json.dumps(schema.schema_)}"


def guided_grammar(fmt: ChatResponseFormat | ResponsesTextFormat | None, recipients: list[str]) -> str | None:
    """The grammar that constrains the final channel to the format (None for plain text), letting
    the completion call one of `recipients` instead."""
    if fmt is None or isinstance(fmt, TextFormat):
        return None
    schema = json_schema(fmt)
    return completion_grammar(schema.schema_ if schema is not None else ANY_OBJECT, recipients)
