"""The real clients gpt-oss users run, against one served mocker graph: the Codex CLI (from npm,
pinned in tests/gateway/clients/) over the Responses API, and the OpenAI Agents SDK over the Responses
and Chat Completions APIs. Each calls the tool its prompt names, sends the tool's output back and
gets a final answer; the Agents SDK also sends the model's reasoning back with the tool's output,
as gpt-oss needs to go on from where it stopped.

The mocker calls the tool the last user message names ("Use get_weather to ..."), with made-up
arguments, and answers once the prompt ends with a tool's output.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from openai import AsyncOpenAI

from tests.support.npm_clients import npm_client, run_in_own_group
from tests.support.served import ServedGraph

# The Agents SDK is imported where it is used: it takes 3 CPU-seconds, which every xdist worker
# collecting this module would pay.
if TYPE_CHECKING:
    from agents import ReasoningItem, RunResult, RunResultStreaming

CLIENTS = Path(__file__).resolve().parent / "clients"  # package.json and package-lock.json: the npm clients
MODEL = "openai/gpt-oss-20b"
CLIENT_TIMEOUT_S = 120

# Codex 0.169.0 on a provider of our own: Responses only, and nothing that reaches for the internet.
CODEX_CONFIG = """\
model = "{model}"
model_provider = "dynamo"
check_for_update_on_startup = false
web_search = "disabled"

[model_providers.dynamo]
name = "Dynamo"
base_url = "{endpoint}"
wire_api = "responses"
env_key = "DYNAMO_API_KEY"

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"
trace_exporter = "none"
metrics_exporter = "none"

[features]
plugins = false
"""
# Codex's catalog knows only OpenAI's own models; for another it says so once, as an item of type
# "error", and goes on with fallback metadata. Any other error is one.
CODEX_METADATA_WARNING = re.compile(r"Model metadata for `[^`]+` not found\.")


@pytest.fixture(scope="module")
def codex() -> Path:
    """The codex binary of tests/gateway/clients/package-lock.json."""
    return npm_client(CLIENTS, "codex")


def test_codex_runs_the_named_command_and_answers_its_output(
    fast_graph: ServedGraph, codex: Path, tmp_path: Path
) -> None:
    """`codex exec` against the graph: the model calls exec_command, Codex runs it and sends its
    output back as a function_call_output, and the model's answer ends the turn."""
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / "config.toml").write_text(CODEX_CONFIG.format(model=MODEL, endpoint=fast_graph.endpoint))
    command = [
        str(codex),
        "exec",
        "--json",
        "--sandbox",
        "read-only",
        "--skip-git-repo-check",
        "Use exec_command to run: echo hello",
    ]
    env = {**os.environ, "CODEX_HOME": str(home), "DYNAMO_API_KEY": "dummy"}
    status, stdout, stderr = run_in_own_group(command, CLIENT_TIMEOUT_S, cwd=work, env=env)

    def report() -> str:
        return (
            f"codex exited with {status} (None: killed after {CLIENT_TIMEOUT_S} s)\n--- stdout:\n{stdout[-6000:]}\n"
            f"--- stderr:\n{stderr[-4000:]}\n--- gateway log:\n{fast_graph.log_of('gateway')[-4000:]}"
        )

    assert status == 0, report()
    try:
        events = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    except json.JSONDecodeError:
        pytest.fail(f"codex --json wrote a line that is not JSON\n{report()}")
    kinds = [event.get("type") for event in events]
    completed = [(index, event["item"]) for index, event in enumerate(events) if event.get("type") == "item.completed"]
    commands = [(index, item) for index, item in completed if item.get("type") == "command_execution"]
    answers = [
        (index, item)
        for index, item in completed
        if item.get("type") == "agent_message" and str(item.get("text", "")).strip()
    ]
    failures = [event for event in events if event.get("type") in ("turn.failed", "error")]
    failures += [
        item
        for _, item in completed
        if item.get("type") == "error" and not CODEX_METADATA_WARNING.match(item.get("message", ""))
    ]

    assert not failures, f"codex reported errors: {failures}\n{report()}"
    assert commands, f"the model's exec_command call was not executed\n{report()}"
    assert all(item.get("exit_code") is not None for _, item in commands), report()  # it ran (to any exit status)
    assert answers, f"no agent_message with text\n{report()}"
    assert answers[-1][0] > commands[0][0], f"the answer came before the command's output was sent\n{report()}"
    assert kinds[-1] == "turn.completed", report()


@dataclass
class AgentRun:
    result: RunResult | RunResultStreaming
    tool_calls: list[str]  # the city of each get_weather call
    requests: list[dict[str, Any]]  # the body of each model request, in order
    streamed_events: list[str] = field(default_factory=list)  # the raw response events' types, streamed


async def run_agent(endpoint: str, api: str, streamed: bool) -> AgentRun:
    """One Agents SDK run that asks for get_weather, the SDK's model requests recorded on the way out."""
    from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, function_tool
    from agents import set_tracing_disabled

    set_tracing_disabled(True)
    tool_calls: list[str] = []
    requests: list[dict[str, Any]] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        tool_calls.append(city)
        return f"Sunny and 21 C in {city}."

    async def record(request: httpx.Request) -> None:
        if request.url.path.endswith(("/responses", "/chat/completions")):
            requests.append(json.loads(request.content))

    async with httpx.AsyncClient(event_hooks={"request": [record]}, timeout=CLIENT_TIMEOUT_S) as http:
        client = AsyncOpenAI(base_url=endpoint, api_key="dummy", max_retries=0, http_client=http)
        if api == "responses":
            model = OpenAIResponsesModel(model=MODEL, openai_client=client)
        else:  # gpt-oss wants its reasoning back with a tool's output; the SDK sends it when asked to
            model = OpenAIChatCompletionsModel(
                model=MODEL, openai_client=client, should_replay_reasoning_content=lambda context: True
            )
        agent = Agent(
            name="weather", instructions="Answer questions about the weather.", model=model, tools=[get_weather]
        )
        prompt = "Use get_weather to find the weather in Paris."
        if not streamed:
            result = await asyncio.wait_for(Runner.run(agent, prompt), CLIENT_TIMEOUT_S)
            return AgentRun(result, tool_calls, requests)
        streaming = Runner.run_streamed(agent, prompt)
        events: list[str] = []

        async def consume() -> None:
            async for event in streaming.stream_events():
                if event.type == "raw_response_event":
                    events.append(event.data.type)

        try:
            await asyncio.wait_for(consume(), CLIENT_TIMEOUT_S)
        finally:
            streaming.cancel()  # a no-op once the run is complete
        return AgentRun(streaming, tool_calls, requests, events)


def reasoning_text(item: ReasoningItem) -> str:
    """The reasoning an item carries: its reasoning_text content (Responses, and Chat Completions
    streamed), else its summary (the SDK's item made from a chat completion's reasoning_content)."""
    raw = item.raw_item
    parts = [part.text for part in raw.content or [] if part.type == "reasoning_text"]
    return "".join(parts) or "".join(part.text for part in raw.summary)


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
@pytest.mark.parametrize("api", ["responses", "chat_completions"])
def test_agents_sdk_calls_the_tool_and_sends_the_reasoning_back(
    fast_graph: ServedGraph, api: str, streamed: bool
) -> None:
    from agents import ReasoningItem, RunResultStreaming, ToolCallItem

    run = asyncio.run(run_agent(fast_graph.endpoint, api, streamed))
    result = run.result
    items = result.new_items
    context = f"items: {[type(item).__name__ for item in items]}\nrequests: {json.dumps(run.requests)[-4000:]}"

    assert run.tool_calls and all(city.strip() for city in run.tool_calls), context
    assert isinstance(result.final_output, str) and result.final_output.strip(), context
    reasoning = [item for item in items if isinstance(item, ReasoningItem)]
    calls = [index for index, item in enumerate(items) if isinstance(item, ToolCallItem)]
    assert reasoning and calls and items.index(reasoning[0]) < calls[0], f"no reasoning before the tool call\n{context}"
    thought = reasoning_text(reasoning[0])
    assert thought.strip(), context
    if api == "responses":  # the endpoint's own item: reasoning_text content, as gpt-oss's reasoning is raw
        assert [part.type for part in reasoning[0].raw_item.content or []] == ["reasoning_text"], context

    # The second model request carries the first answer's reasoning back with the tool's output.
    assert len(run.requests) >= 2, context
    second = run.requests[1]
    if api == "responses":
        sent = [
            [part.get("text") for part in entry.get("content") or [] if part.get("type") == "reasoning_text"]
            for entry in second["input"]
            if entry.get("type") == "reasoning"
        ]
        assert [thought] in sent, f"the second request's input has no reasoning item with the reasoning\n{context}"
    else:
        sent = [
            message.get("reasoning_content") or message.get("reasoning")
            for message in second["messages"]
            if message.get("role") == "assistant" and message.get("tool_calls")
        ]
        assert thought in sent, f"the second request's assistant message lacks the reasoning\n{context}"

    if streamed:
        assert isinstance(result, RunResultStreaming) and result.is_complete, context
        deltas = [
            kind for kind in run.streamed_events if kind.startswith("response.reasoning") and kind.endswith(".delta")
        ]
        # At least one: a read of several of its tokens is one delta, so a short reasoning may come in one.
        assert deltas, f"the reasoning was not streamed as deltas: {sorted(set(run.streamed_events))}"
