"""Exact token counts before sending: POST /v1/responses/input_tokens (OpenAI's, through the `openai`
client) and POST /v1/messages/count_tokens (Anthropic's, through the `anthropic` client, which Claude
Code calls). Each count equals the prompt tokens the same request, served, reports in its usage, instructions,
tools, a tool call's round trip and a stored conversation included; a count reaches no worker, and
a bad one is refused as the API refuses it. Served through the session's keyed mocker graph."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.support.keyed import MESSAGES_WEATHER, MODEL, RESPONSES_WEATHER, anthropic_client, openai_client
from tests.support.graphs import KEYS
from tests.support.served import ServedGraph


@pytest.fixture
def served(keyed_graph: ServedGraph) -> ServedGraph:
    return keyed_graph


def test_responses_input_tokens_are_the_served_request_s_input_tokens(served: ServedGraph) -> None:
    alice = openai_client(served, "alice")
    first: dict[str, Any] = {
        "input": "Use get_weather for Paris.",
        "instructions": "Be brief.",
        "tools": [RESPONSES_WEATHER],
    }
    served_first = alice.responses.create(model=MODEL, **first)
    call = served_first.output[-1]
    assert call.type == "function_call"
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C"}
    whole = [
        {"role": "user", "content": first["input"]},
        *(item.model_dump(mode="json", exclude_none=True) for item in served_first.output),
        output,
    ]
    cases: list[dict[str, Any]] = [
        {"input": "Say hello."},
        first,
        {"input": whole, "instructions": "Be brief.", "tools": [RESPONSES_WEATHER], "reasoning": {"effort": "high"}},
        {"input": [output], "tools": [RESPONSES_WEATHER], "previous_response_id": served_first.id},
    ]
    before = served.frontend_requests()
    counts = [alice.responses.input_tokens.count(model=MODEL, **case) for case in cases]
    assert served.frontend_requests() == before  # counting reached no worker
    assert all(count.object == "response.input_tokens" for count in counts)
    for case, count in zip(cases, counts, strict=True):
        reply = alice.responses.create(model=MODEL, store=False, **case)
        assert count.input_tokens == reply.usage.input_tokens, case
    assert counts[1].input_tokens > counts[0].input_tokens  # instructions and tools are counted
    assert counts[1].input_tokens == served_first.usage.input_tokens


def test_messages_count_tokens_are_the_served_request_s_input_tokens(served: ServedGraph) -> None:
    claude = anthropic_client(served, "alice")
    cases: list[dict[str, Any]] = [
        {"messages": [{"role": "user", "content": "Say hello."}]},
        {
            "system": "Be brief.",
            "tools": [MESSAGES_WEATHER],
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        },
    ]
    before = served.frontend_requests()
    counts = [claude.messages.count_tokens(model=MODEL, **case).input_tokens for case in cases]
    beta = claude.beta.messages.count_tokens(model=MODEL, **cases[1]).input_tokens
    assert served.frontend_requests() == before
    assert beta == counts[1] > counts[0]
    for case, count in zip(cases, counts, strict=True):  # Anthropic's input_tokens leaves out cache reads
        usage = claude.messages.create(model=MODEL, max_tokens=64, **case).usage
        assert usage.input_tokens + (usage.cache_read_input_tokens or 0) == count, case


def test_bad_counts_are_refused_as_each_api_refuses_them_and_reach_no_worker(served: ServedGraph) -> None:
    alice = openai_client(served, "alice")
    claude = anthropic_client(served, "alice")
    before = served.frontend_requests()
    with pytest.raises(openai.NotFoundError) as missing:
        alice.responses.input_tokens.count(model="no-such-model", input="Hi.")
    assert missing.value.body["param"] == "model"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError) as unknown:
        alice.responses.input_tokens.count(model=MODEL, input="Hi.", previous_response_id=f"resp_{'0' * 32}")
    assert unknown.value.body["param"] == "previous_response_id"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as bad:
        alice.responses.input_tokens.count(model=MODEL, input=[{"type": "web_search_call", "id": "ws_1"}])
    assert bad.value.body["param"] == "input[0].type"  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError) as wrong:
        claude.messages.count_tokens(model=MODEL, messages=[{"role": "robot", "content": "Hi."}])  # type: ignore[misc]
    assert wrong.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    keyless = httpx.post(f"{served.endpoint}/responses/input_tokens", json={"model": MODEL, "input": "Hi."})
    assert keyless.status_code == 401
    auth = {"Authorization": f"Bearer {KEYS['alice']}"}
    assert httpx.get(f"{served.endpoint}/messages/count_tokens", headers=auth).status_code == 404
    assert served.frontend_requests() == before
