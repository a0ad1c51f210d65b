"""The Vercel AI SDK (npm `ai` with `@ai-sdk/openai` and `@ai-sdk/anthropic`, pinned in
tests/gateway/clients/ai-sdk) running its tool loop against the shared mocker graph, as a new user
writes it: over the Responses API with `store` on (the SDK then sends the first step's items back as
`item_reference`s) and off, over Chat Completions and over Anthropic's Messages API, streaming and not."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import openai

from dynamo_oss.gateway.ids import response_of
from tests.support.npm_clients import npm_packages, run_in_own_group
from tests.support.served import ServedGraph

CLIENT = Path(__file__).resolve().parent / "clients" / "ai-sdk"  # package.json, its lock and tool_loop.mjs
MODEL = "openai/gpt-oss-20b"
CASES = {"responses-store", "responses-stateless", "chat", "messages"}


def test_the_ai_sdk_s_tool_loops_call_the_tool_and_answer_on_every_api(fast_graph: ServedGraph, tmp_path: Path) -> None:
    node = shutil.which("node")
    assert node is not None, "node is not on PATH: install Node.js, which npm comes with"
    script = tmp_path / "tool_loop.mjs"  # beside the installed packages, where node's imports find them
    shutil.copy(CLIENT / script.name, script)
    (tmp_path / "node_modules").symlink_to(npm_packages(CLIENT) / "node_modules")
    code, out, err = run_in_own_group([node, str(script), fast_graph.endpoint, "unused", MODEL], timeout_s=300)
    assert code == 0, err[-3000:]
    outcomes = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert {(each["case"], each["streaming"]) for each in outcomes} == {(c, s) for c in CASES for s in (False, True)}
    for outcome in outcomes:
        assert "error" not in outcome, outcome
        first, *_, last = outcome["steps"]
        assert first["calls"] == ["get_weather"] and first["results"][0].startswith("Sunny, 21 C in "), outcome
        assert last["finishReason"] == "stop" and last["calls"] == [] and outcome["text"], outcome
    stored = [each for each in outcomes if each["case"] == "responses-store"]
    client = openai.OpenAI(base_url=fast_graph.endpoint, api_key="unused", max_retries=0, timeout=60)
    for outcome in stored:  # the SDK sent the first step's reasoning back by reference
        first_id, last_id = outcome["steps"][0]["responseId"], outcome["steps"][-1]["responseId"]
        inputs = client.responses.input_items.list(last_id, order="asc").data
        assert "reasoning" in [item.type for item in inputs if response_of(item.id) == first_id], inputs
