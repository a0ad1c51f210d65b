"""aiperf replaying a multi-turn trace (dynamo_oss.bench.aiperf.trace_command) through a mocker graph's
gateway: each conversation once, its turns in order after the tool's wait, the conversation so far sent
in front of each turn, so that the prefill worker finds the turn before cached."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dynamo_oss.bench import aiperf
from dynamo_oss.bench.served import sweep_fields
from dynamo_oss.deployment.model import build_deployment
from dynamo_oss.graph.loader import load_graph
from tests.support.graphs import write_graph
from tests.support.served import FAST_MOCKER, serving

WORDS = "cache prefill decode worker router token block latency".split()
DELAY_MS = 300.0


def rows() -> list[dict]:
    out = []
    for conversation in range(3):
        for turn in range(3):
            text = " ".join(WORDS[(conversation + turn + i) % len(WORDS)] for i in range(200 if turn == 0 else 60))
            row = {"session_id": f"c{conversation}", "text_input": f"{conversation} {turn} {text}", "output_length": 8}
            out.append(row if turn == 0 else {**row, "delay": DELAY_MS})
    return out


@pytest.mark.graph
def test_aiperf_sends_each_conversation_once_its_turns_in_order_and_finds_them_cached(tmp_path: Path) -> None:
    graph = write_graph(tmp_path)
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows()))
    deployment = build_deployment(load_graph(graph), engine_override="mocker")
    with serving(graph, tmp_path / "run", *FAST_MOCKER) as served:
        artifacts = tmp_path / "aiperf"
        argv = aiperf.trace_command(
            served.endpoint.removesuffix("/v1"),
            model=deployment.model.served_name,
            tokenizer=str(sweep_fields(deployment)["tokenizer"]),
            trace=trace,
            lanes=2,
            sessions=3,
            artifacts=artifacts,
        )
        assert aiperf.run(argv, artifacts, aiperf.environment(artifacts, dynamo_sessions=True)) == 0
    records = aiperf.request_records(artifacts)
    assert sorted((r.conversation, r.turn) for r in records) == [(f"c{c}", t) for c in range(3) for t in range(3)]
    assert all(r.error is None and r.output_tokens == 8 for r in records)
    for conversation in ("c0", "c1", "c2"):
        turns = sorted((r for r in records if r.conversation == conversation), key=lambda r: r.turn)
        for before, turn in zip(turns, turns[1:], strict=False):
            assert turn.start_ms >= before.start_ms + (before.e2e_ms or 0) + DELAY_MS - 5  # after the tool's wait
            assert (turn.input_tokens or 0) > (before.input_tokens or 0) + 60  # the conversation so far, then more
            assert (turn.cached_tokens or 0) >= (before.input_tokens or 0) // 32 * 32  # the turn before, cached
