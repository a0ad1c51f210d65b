"""An agentic trace: coding-agent conversations whose prompt grows turn by turn, in Dynamo's replay format.

What it follows (the shape is stated in `shape()` and in README.md beside this file):
- Dynamo's gpt-oss-120b recipe benchmarks a trace "of about 64k input and 400 output tokens designed
  for 90% KV hits", replayed at fixed concurrency (ai-dynamo/dynamo recipes/gpt-oss-120b/README.md; the
  trace itself is not published).
- Coding agents (Codex CLI, Claude Code, the Agents SDK) send, every turn, the whole conversation so
  far: one long system prompt with the tool definitions (the same for every conversation of an agent),
  the task, then each earlier answer and tool result. A turn adds the last answer (a few hundred
  tokens: a tool call or a short reply) and the tool's output (a file read, a diff, a test log: a few
  thousand), and waits on the tool (seconds) before the next request.

Each conversation is one trajectory of Dynamo's `dynamo.agentic_mooncake` format (version 2, the one
its offline replay reads with `trace_format="agentic_mooncake"`): a request per turn, its prompt's KV
blocks named by `hash_ids` (the shared system prompt's blocks are the same ids in every conversation;
a turn's prompt starts with the whole blocks of the turn before it), and a dependency on the turn
before with the tool's time as its delay. The replay's KV router and prefix caches then find the hits
a live deployment would, and the KV hit rate is measured, not assumed.

    uv run python benchmarks/agentic/conversations.py    # writes trace.jsonl beside this file (ignored by git)
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

HERE = Path(__file__).parent
BLOCK = 32  # tokens per KV block: TensorRT-LLM's, and the mocker's when it stands in for it
CONTEXT = 131_072  # gpt-oss's context: a conversation ends before its prompt and answer would pass it
MODEL = "gpt-oss-120b"


@dataclass(frozen=True)
class Shape:
    """The generator's knobs: lognormal medians (with their spread) of what a turn adds."""

    conversations: int = 256
    system_tokens: int = 12_000  # an agent's system prompt and tool definitions, shared by its conversations
    task_tokens: int = 2_000  # the first user message: the task and the files it names
    answer_tokens: int = 400  # a turn's output: a tool call or a short answer
    answer_spread: float = 0.6
    tool_tokens: int = 5_000  # what the tool returns to the next turn
    tool_spread: float = 0.8
    tool_seconds: float = 3.0  # how long the tool runs before the next request
    tool_seconds_spread: float = 0.8
    longest_prompt: int = 120_000  # a conversation stops here (or at its own length, below)
    turns: int = 40  # most turns a conversation takes
    seed: int = 42

    def scaled(self, factor: float, conversations: int) -> Shape:
        """The same conversations in miniature, for a live run on a small machine: every token count and
        every tool's time `factor` times this one's (the system prompt in whole blocks, so it stays a shared
        prefix), the turn counts and the spreads kept. Prefill and decode work per turn shrink about as
        the tokens do, so tok/s/user, tok/s/GPU and the tool's share of a conversation stay about the same."""
        tokens = ("task_tokens", "answer_tokens", "tool_tokens", "longest_prompt")
        return replace(
            self,
            conversations=conversations,
            system_tokens=max(1, round(self.system_tokens * factor / BLOCK)) * BLOCK,
            tool_seconds=self.tool_seconds * factor,
            **{name: round(getattr(self, name) * factor) for name in tokens},
        )


LIVE_SCALE = 1 / 8  # a live run's share of the trace's tokens and tool times (live.py, the GPU study)
CONVERSATIONS_PER_LANE = 2  # a live run's trace holds this many a lane: each lane starts a second one


def live_shape(lanes: int) -> Shape:
    """The trace a live run of `lanes` conversations at once sends: LIVE_SCALE of it, CONVERSATIONS_PER_LANE a lane."""
    return Shape().scaled(LIVE_SCALE, conversations=CONVERSATIONS_PER_LANE * lanes)


def _lognormal(rng: random.Random, median: float, spread: float, low: int, high: int) -> int:
    return int(min(high, max(low, rng.lognormvariate(math.log(median), spread))))


def conversations(shape: Shape = Shape()) -> Iterator[list[dict]]:
    """Each conversation's requests, in turn order, as rows of the trace."""
    rng = random.Random(shape.seed)
    next_id = iter(range(1, 1 << 62))
    system = [next(next_id) for _ in range(shape.system_tokens // BLOCK)]
    for index in range(shape.conversations):
        name = f"conversation-{index:03d}"
        prompt = shape.system_tokens + _lognormal(rng, shape.task_tokens, 0.5, 200, 8_000)
        blocks = system + [next(next_id) for _ in range(math.ceil(prompt / BLOCK) - len(system))]
        turns, before, wait_ms = [], None, 0
        for turn in range(rng.randint(shape.turns // 4, shape.turns)):
            answer = _lognormal(rng, shape.answer_tokens, shape.answer_spread, 32, 2_000)
            if prompt + answer > min(shape.longest_prompt, CONTEXT):
                break
            row = {
                "request_id": f"{name}-turn-{turn:02d}",
                "play_id": name,
                "session_id": name,
                "model": MODEL,
                "input_length": prompt,
                "output_length": answer,
                "hash_ids": blocks[: math.ceil(prompt / BLOCK)],
                "not_before_ms": 0,
                "dependencies": []
                if before is None
                else [{"request_id": before, "trigger": "completion", "delay_ms": wait_ms, "relation": "sequence"}],
            }
            turns.append(row)
            before = row["request_id"]
            wait_ms = round(1000 * rng.lognormvariate(math.log(shape.tool_seconds), shape.tool_seconds_spread))
            # The next prompt: this one's whole blocks, then this answer and the tool's output.
            kept = prompt // BLOCK
            prompt += answer + _lognormal(rng, shape.tool_tokens, shape.tool_spread, 100, 30_000)
            blocks = blocks[:kept] + [next(next_id) for _ in range(math.ceil(prompt / BLOCK) - kept)]
        yield turns


# The trace as text: a prompt made of the words of its KV blocks, so that turns share their prefixes.

# One-token words of o200k (each with its leading space, checked in tests/benchmarks/test_agentic_live.py):
# a block of BLOCK of them is BLOCK tokens, so the trace's blocks are the prompts' KV blocks.
WORDS = (
    "cache layer decode worker router token block latency batch queue prompt answer graph metric replica "
    "memory bandwidth kernel tensor pipeline expert shard request stream budget target file test diff patch "
    "build error warning line function class module import return value string number list table index "
    "search result output input agent tool call read write open close start stop update"
).split()


def block_text(block: int) -> str:
    """A KV block's worth of words, the same for the same block id in every conversation."""
    rng = random.Random(block)
    return "".join(" " + rng.choice(WORDS) for _ in range(BLOCK))


def words_for(blocks: list[int], tokens: int) -> str:
    """`tokens` one-token words from `blocks`' texts, in order."""
    text = "".join(block_text(block) for block in blocks[: math.ceil(tokens / BLOCK)])
    return "".join(" " + word for word in text.split()[:tokens])


def header() -> dict:
    return {
        "schema": "dynamo.agentic_mooncake",
        "version": 2,
        "block_size": BLOCK,
        "hash_id_scope": "local",
        "source": {"format": "dynamo-oss benchmarks/agentic/trace.py", "digest": f"seed-{Shape().seed}"},
    }


def write(path: Path, shape: Shape = Shape()) -> list[dict]:
    rows = [row for conversation in conversations(shape) for row in conversation]
    path.write_text("\n".join(json.dumps(row, separators=(",", ":")) for row in [header(), *rows]) + "\n")
    return rows


def shape(rows: list[dict]) -> dict[str, float]:
    """What the trace is like, measured on it: the figures README.md sets beside the published traces'."""
    inputs = [row["input_length"] for row in rows]
    by_conversation: dict[str, list[dict]] = {}
    for row in rows:
        by_conversation.setdefault(row["play_id"], []).append(row)
    reusable = []  # the share of each prompt the turn before it (or the shared system prompt) holds
    system_blocks = Shape().system_tokens // BLOCK
    for turns in by_conversation.values():
        for before, row in zip([None, *turns[:-1]], turns, strict=True):
            held = len(before["hash_ids"]) if before else system_blocks
            reusable.append(min(held * BLOCK, row["input_length"]) / row["input_length"])
    waits = [dep["delay_ms"] for row in rows for dep in row["dependencies"]]
    return {
        "conversations": len(by_conversation),
        "requests": len(rows),
        "turns_median": statistics.median(len(turns) for turns in by_conversation.values()),
        "input_median": statistics.median(inputs),
        "input_p10": sorted(inputs)[len(inputs) // 10],
        "input_p90": sorted(inputs)[9 * len(inputs) // 10],
        "output_median": statistics.median(row["output_length"] for row in rows),
        "reusable_prefix_mean": statistics.fmean(reusable),
        "tool_wait_median_s": statistics.median(waits) / 1000,
    }


if __name__ == "__main__":
    written = write(HERE / "trace.jsonl")
    print(json.dumps(shape(written), indent=2))
