"""The suite's cases of more than one request: what a client does with a response it already has.

A case of cases.py is one request and checks of its answer. These send a request, then act on what
came back, as clients do: the Vercel AI SDK sends an earlier response's items back as
`item_reference`s (with `store` on, OpenAI's default), Claude Code counts a prompt's tokens before it
sends it, and a long reasoning run is left to run in the background and polled. The references and
counts compare two ways of sending the same prompt, by the prompt tokens the endpoint reports, so
they hold for a real model: the answers' wording never matters.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import openai

from dynamo_oss.conformance.cases import RESPONSES_WEATHER

Run = Callable[[openai.OpenAI, str], list[str]]  # the failures of one run against a client and model
ASK = "Say hello in one short sentence."
AGAIN = {"role": "user", "content": "Now say goodbye."}
MAX_TOKENS = 64


@dataclass(frozen=True)
class Sequence:
    name: str
    why: str  # the failure seen in the wild that this case catches
    run: Run


def item_references(client: openai.OpenAI, model: str) -> list[str]:
    """A stored response's output items sent back by id render as the items sent whole, and the answer
    they hold is in the prompt (a server that drops earlier output would render both alike)."""
    first = client.responses.create(model=model, input=ASK, max_output_tokens=MAX_TOKENS)
    ask = {"role": "user", "content": ASK}
    whole = [ask, *(item.model_dump(mode="json", exclude_none=True) for item in first.output), AGAIN]
    referenced = [ask, *({"type": "item_reference", "id": item.id} for item in first.output), AGAIN]
    sent_whole = client.responses.create(model=model, input=whole, store=False, max_output_tokens=MAX_TOKENS)
    try:
        by_reference = client.responses.create(model=model, input=referenced, max_output_tokens=MAX_TOKENS)
    except openai.APIStatusError as error:
        return [f"item_reference refused: {error.status_code} {error.message}"]
    without = client.responses.create(model=model, input=[ask, AGAIN], store=False, max_output_tokens=MAX_TOKENS)
    if by_reference.usage is None or sent_whole.usage is None or without.usage is None:
        return ["no usage returned"]
    if by_reference.usage.input_tokens != sent_whole.usage.input_tokens:
        return [
            f"the items referenced rendered {by_reference.usage.input_tokens} prompt tokens, sent whole "
            f"{sent_whole.usage.input_tokens}"
        ]
    if sent_whole.usage.input_tokens <= without.usage.input_tokens:
        return [f"the earlier answer is not in the prompt: {without.usage.input_tokens} tokens with it or without"]
    return []


def responses_input_tokens(client: openai.OpenAI, model: str) -> list[str]:
    """POST /v1/responses/input_tokens counts what the same request, served, reports as its input."""
    request: dict[str, Any] = {
        "input": "What is the weather in Paris right now? Use the get_weather tool.",
        "instructions": "Answer briefly.",
        "tools": [RESPONSES_WEATHER],
    }
    try:
        counted = client.responses.input_tokens.count(model=model, **request).input_tokens
    except openai.APIStatusError as error:
        return [f"/v1/responses/input_tokens: {error.status_code} {error.message}"]
    served = client.responses.create(model=model, store=False, max_output_tokens=MAX_TOKENS, **request)
    if served.usage is None:
        return ["no usage returned"]
    if counted != served.usage.input_tokens:
        return [f"counted {counted} input tokens; the same request, served, used {served.usage.input_tokens}"]
    return []


def messages_count_tokens(client: openai.OpenAI, model: str) -> list[str]:
    """POST /v1/messages/count_tokens counts what the same Messages request, served, reports as its
    prompt (`input_tokens` and `cache_read_input_tokens` together, as Anthropic splits them)."""
    request: dict[str, Any] = {
        "model": model,
        "system": "Answer briefly.",
        "messages": [{"role": "user", "content": ASK}],
    }
    base = str(client.base_url).rstrip("/")
    headers = {"x-api-key": client.api_key, "anthropic-version": "2023-06-01"}
    with httpx.Client(headers=headers, timeout=client.timeout) as http:
        counted = http.post(f"{base}/messages/count_tokens", json=request)
        if counted.status_code != 200:
            return [f"/v1/messages/count_tokens: {counted.status_code} {counted.text[:200]}"]
        served = http.post(f"{base}/messages", json={**request, "max_tokens": MAX_TOKENS})
    if served.status_code != 200:
        return [f"/v1/messages: {served.status_code} {served.text[:200]}"]
    usage = served.json().get("usage") or {}
    prompt = (usage.get("input_tokens") or 0) + (usage.get("cache_read_input_tokens") or 0)
    if counted.json().get("input_tokens") != prompt:
        return [f"counted {counted.json().get('input_tokens')} input tokens; the same request, served, used {prompt}"]
    return []


BACKGROUND_DEADLINE_S = 120.0  # a short answer run in the background ends well within this
ENDED = ("completed", "incomplete", "failed", "cancelled")


def background_response(client: openai.OpenAI, model: str) -> list[str]:
    """`background: true` is answered at once, queued or in progress, and the response, polled, ends
    `completed` with its output; a cancel after its end leaves it as it was (OpenAI's documented rules)."""
    created = client.responses.create(model=model, input=ASK, background=True, max_output_tokens=MAX_TOKENS)
    if created.status not in ("queued", "in_progress"):
        return [f"background: true answered {created.status!r}, not queued: the request was held to its end"]
    deadline = time.monotonic() + BACKGROUND_DEADLINE_S
    polled = created
    while polled.status not in ENDED:
        if time.monotonic() > deadline:
            return [f"still {polled.status!r} after {BACKGROUND_DEADLINE_S:g} s of polling"]
        time.sleep(0.2)
        polled = client.responses.retrieve(created.id)
    failures = []
    if polled.status not in ("completed", "incomplete") or not polled.output:
        failures.append(f"ended {polled.status!r} with {len(polled.output)} output items")
    cancelled = client.responses.cancel(created.id)
    if cancelled.status != polled.status:
        failures.append(f"a cancel after its end turned {polled.status!r} into {cancelled.status!r}")
    return failures


SEQUENCES: list[Sequence] = [
    Sequence(
        "responses-item-reference",
        "item_reference input items refused (the Vercel AI SDK's tool loops fail on their second step)",
        item_references,
    ),
    Sequence(
        "responses-input-tokens",
        "no exact POST /v1/responses/input_tokens, or a count that differs from the prompt served",
        responses_input_tokens,
    ),
    Sequence(
        "responses-background",
        "background: true refused or held to its end, so long reasoning stays tied to one connection",
        background_response,
    ),
    Sequence(
        "messages-count-tokens",
        "no exact POST /v1/messages/count_tokens (Claude Code counts its context with it)",
        messages_count_tokens,
    ),
]
