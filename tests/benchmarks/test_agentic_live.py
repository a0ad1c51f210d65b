"""The live agentic study's pieces that need no graph: the scaled trace, the prompts aiperf sends for it
(one token a word, so its blocks are the prompts' KV blocks) and the replay twin built from what a live
run sent."""

from __future__ import annotations

import math

import pytest
from tokenizers import Tokenizer

from benchmarks.agentic import live
from benchmarks.agentic.conversations import (
    LIVE_SCALE,
    BLOCK,
    WORDS,
    Shape,
    block_text,
    conversations,
    shape,
    words_for,
)
from dynamo_oss.assets.tokenizer import tokenizer_file
from dynamo_oss.bench.aiperf import TracedRequest
from dynamo_oss.catalog.models import GPT_OSS_120B
from dynamo_oss.perf.costs import CostModel

SMALL = Shape().scaled(LIVE_SCALE, conversations=6)
ROWS = [row for turns in conversations(SMALL) for row in turns]
HEADER = 90  # tokens a chat template puts before a first prompt's text and after it


@pytest.fixture(scope="module")
def o200k() -> Tokenizer:
    return Tokenizer.from_file(str(tokenizer_file(GPT_OSS_120B.vocab_size)))


def tokens(tokenizer: Tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


def test_a_block_of_words_is_a_block_of_gpt_oss_tokens(o200k: Tokenizer) -> None:
    assert [word for word in WORDS if tokens(o200k, " " + word) != 1] == []
    assert tokens(o200k, block_text(7)) == BLOCK
    assert block_text(7) == block_text(7) != block_text(8)
    assert tokens(o200k, words_for([3, 4, 5], 70)) == 70


def test_the_scaled_trace_keeps_the_study_s_shape_at_an_eighth_of_its_tokens() -> None:
    full = shape([row for turns in conversations(Shape(conversations=64)) for row in turns])
    small = shape([row for turns in conversations(Shape().scaled(1 / 8, conversations=64)) for row in turns])
    assert small["input_median"] == pytest.approx(full["input_median"] / 8, rel=0.1)
    assert small["output_median"] == pytest.approx(full["output_median"] / 8, rel=0.1)
    assert small["tool_wait_median_s"] == pytest.approx(full["tool_wait_median_s"] / 8, rel=0.1)
    assert small["turns_median"] == pytest.approx(full["turns_median"], abs=2)
    assert small["reusable_prefix_mean"] == pytest.approx(full["reusable_prefix_mean"], abs=0.02)
    assert SMALL.system_tokens % BLOCK == 0  # whole blocks: the shared prefix stays shared


def test_aiperf_is_sent_what_each_turn_adds_after_the_tool_s_wait(o200k: Tokenizer) -> None:
    sessions = live.aiperf_sessions(ROWS, time_scale=5.0)
    assert len(sessions) == len(ROWS)
    firsts = []
    for before, row, sent in zip([None, *ROWS[:-1]], ROWS, sessions, strict=True):
        assert sent["session_id"] == row["play_id"] and sent["output_length"] == row["output_length"]
        if before is None or before["play_id"] != row["play_id"]:
            assert "delay" not in sent and tokens(o200k, sent["text_input"]) == row["input_length"]
            firsts.append(sent["text_input"])
            continue
        # aiperf sends the conversation so far (and the answer given) in front: the row holds the tool's output
        added = row["input_length"] - before["input_length"] - before["output_length"]
        assert tokens(o200k, sent["text_input"]) == added
        assert sent["delay"] == 5.0 * row["dependencies"][0]["delay_ms"]
    system_words = SMALL.system_tokens
    assert len({" ".join(text.split()[:system_words]) for text in firsts}) == 1  # one agent's system prompt
    assert len({" ".join(text.split()[: system_words + BLOCK]) for text in firsts}) == len(firsts)


def served(rows: list[dict]) -> list[TracedRequest]:
    """What a live run of `rows` reports: the chat header on every prompt, the first turns after the first
    finding the header and the system prompt cached."""
    records, turn, shared = [], {}, HEADER + SMALL.system_tokens
    for index, row in enumerate(rows):
        turn[row["play_id"]] = turn.get(row["play_id"], -1) + 1
        first = turn[row["play_id"]] == 0
        records.append(
            TracedRequest(
                conversation=row["play_id"],
                turn=turn[row["play_id"]],
                start_ms=float(index),
                ttft_ms=1.0,
                e2e_ms=2.0,
                input_tokens=row["input_length"] + HEADER,
                cached_tokens=(shared // BLOCK * BLOCK if index else 0) if first else 0,
                output_tokens=row["output_length"],
            )
        )
    return records


def test_the_replay_twin_sends_the_live_requests_with_the_live_prefixes() -> None:
    records = served(ROWS)
    twin = live.replay_rows(records, ROWS)
    assert [row["request_id"] for row in twin] == [row["request_id"] for row in ROWS]
    shared = (HEADER + SMALL.system_tokens) // BLOCK
    by_id = {row["request_id"]: row for row in twin}
    firsts = []
    for record, row, trace in zip(records, twin, ROWS, strict=True):
        assert row["input_length"] == record.input_tokens and row["output_length"] == record.output_tokens
        assert len(row["hash_ids"]) == math.ceil(row["input_length"] / BLOCK)
        assert row["hash_ids"][:shared] == twin[0]["hash_ids"][:shared]  # every prompt starts with the shared blocks
        if not trace["dependencies"]:
            assert row["dependencies"] == []
            firsts.append(row["hash_ids"][shared])
            continue
        (dependency,) = row["dependencies"]
        before = by_id[dependency["request_id"]]
        kept = before["input_length"] // BLOCK
        assert row["hash_ids"][:kept] == before["hash_ids"][:kept]
        assert dependency["delay_ms"] == trace["dependencies"][0]["delay_ms"]  # modelled time, not the slowed
    assert len(set(firsts)) == len(firsts) == SMALL.conversations  # past the shared blocks, each its own


def test_the_scaled_layout_holds_the_scaled_conversations() -> None:
    for name in live.CASES:
        for speculative in (False, True):
            layout = live.case_layout(name, speculative)
            full = live.LAYOUTS["b200"][name]
            for role in layout.pools:
                scaled, whole = (CostModel.for_pool(lay, role).kv_capacity_tokens() for lay in (layout, full))
                assert scaled == pytest.approx(LIVE_SCALE * whole, rel=0.01)
            assert all(pool.draft_tokens == (live.DRAFTS if speculative else 0) for pool in layout.pools.values())


def test_the_mocker_is_slowed_in_step_with_the_load() -> None:
    assert live.time_scale(live.BASE_LANES) == live.BASE_TIME_SCALE
    assert live.time_scale(4 * live.BASE_LANES) == 4 * live.BASE_TIME_SCALE
    assert live.time_scale(8) == live.BASE_TIME_SCALE  # never faster than the base
