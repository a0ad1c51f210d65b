"""OpenAI chat requests rendered by openai-harmony, the reference every gpt-oss prompt must match.

The chat template (assets/chat_template.jinja) must produce these tokens; the conformance
suite compares servers' prompt token counts with them. The mapping of OpenAI messages to
harmony messages is documented in assets/template.py.
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any

from openai_harmony import (
    Author,
    Conversation,
    DeveloperContent,
    HarmonyEncoding,
    HarmonyEncodingName,
    Message,
    ReasoningEffort,
    Role,
    SystemContent,
    TextContent,
    ToolDescription,
    load_harmony_encoding,
)

from dynamo_oss.assets import ENCODINGS_ENV, tiktoken_encodings_dir

# Harmony knows three efforts; the OpenAI API's others are clamped to the nearest, as the template does.
EFFORTS = {
    "none": ReasoningEffort.LOW,
    "minimal": ReasoningEffort.LOW,
    "low": ReasoningEffort.LOW,
    "medium": ReasoningEffort.MEDIUM,
    "high": ReasoningEffort.HIGH,
    "xhigh": ReasoningEffort.HIGH,
    "max": ReasoningEffort.HIGH,
}


@cache
def harmony_encoding() -> HarmonyEncoding:
    """openai-harmony's gpt-oss encoding, loaded offline from the o200k ranks we ship."""
    os.environ.setdefault(ENCODINGS_ENV, str(tiktoken_encodings_dir()))
    return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)


def reference_prompt(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    reasoning_effort: str | None = None,
    date: str | None = None,
) -> list[int]:
    """The prompt tokens openai-harmony renders for an OpenAI chat request, up to `<|start|>assistant`."""
    system = SystemContent.new().with_reasoning_effort(EFFORTS[reasoning_effort or "medium"])
    if date:
        system = system.with_conversation_start_date(date)
    conversation = [Message.from_role_and_content(Role.SYSTEM, system)]

    developer = DeveloperContent.new()
    rest = messages
    if messages and messages[0]["role"] in ("system", "developer"):
        developer = developer.with_instructions(messages[0]["content"])
        rest = messages[1:]
    if tools:
        developer = developer.with_function_tools(
            [
                ToolDescription.new(
                    tool["function"]["name"],
                    tool["function"].get("description", ""),
                    tool["function"].get("parameters"),
                )
                for tool in tools
            ]
        )
    if developer.instructions is not None or developer.tools:
        conversation.append(Message.from_role_and_content(Role.DEVELOPER, developer))

    names = {call["id"]: call["function"]["name"] for m in messages for call in m.get("tool_calls") or []}
    for message in rest:
        conversation += _harmony_messages(message, names)
    rendered = harmony_encoding().render_conversation_for_completion(
        Conversation.from_messages(conversation), Role.ASSISTANT
    )
    return list(rendered)


def _harmony_messages(message: dict[str, Any], names: dict[str, str]) -> list[Message]:
    role, content = message["role"], message.get("content")
    if role in ("system", "developer"):
        return [Message.from_role_and_content(Role.DEVELOPER, DeveloperContent.new().with_instructions(content))]
    if role == "user":
        parts = [content] if isinstance(content, str) else [part["text"] for part in content]
        return [Message.from_role_and_contents(Role.USER, [TextContent(text=part) for part in parts])]
    if role == "tool":
        author = Author.new(Role.TOOL, "functions." + names[message["tool_call_id"]])
        return [Message.from_author_and_content(author, content).with_recipient("assistant").with_channel("commentary")]

    def said(text: str, channel: str) -> Message:
        return Message.from_role_and_content(Role.ASSISTANT, text).with_channel(channel)

    out = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")  # vLLM's name, or OpenRouter's
    if reasoning:
        out.append(said(reasoning, "analysis"))
    if message.get("tool_calls"):
        if content:
            out.append(said(content, "commentary"))  # a preamble beside the calls
        for call in message["tool_calls"]:
            out.append(
                said(call["function"]["arguments"], "commentary")
                .with_recipient("functions." + call["function"]["name"])
                .with_content_type("<|constrain|>json")
            )
    elif content:
        out.append(said(content, "final"))
    return out
