"""Multi-turn prefix reuse through stored responses: the share of later turns' prompt tokens served
from cache, with the KV router against round-robin, with the KV router in one Dynamo frontend
against two (sharing the sequences each routes, `--router-replica-sync`, and not), and with the KV
router keeping each conversation on its worker (session affinity: `frontend.session_affinity_s`, the
gateway naming each conversation's session in `x-dynamo-session-id`) against weighing each turn anew.

Why: a continuation (`previous_response_id`) is rendered so that the previous turn's prompt is its
prefix (and, from the third turn, the previous turn's output too); that pays only if the router
sends the turn to the worker whose KV cache holds the conversation. This measures it.

How: an aggregated gpt-oss-20b mocker graph of two workers on free ports behind one gateway
process, served once per configuration (CONFIGURATIONS: the router, the Dynamo frontends, whether
they sync), its steps TIME_SCALE of the modelled H200's (only which tokens are cached matters here,
not speed). For each of --seeds sets, one after another through the one served graph:
CONVERSATIONS conversations, CONCURRENCY at a time, each TURNS turns through the gateway's
Responses API, as an agent's loop grows its context: a short first message under the same instructions, then longer ones (as tool outputs are)
each continuing the previous response by `previous_response_id` (stored in the graph's NATS), the
instructions sent again as a client does. Every conversation's words are its own, so only the
shared instructions could be reused across conversations.

Definition: for the turns after the first, cached share = the sum of `usage.input_tokens_details.
cached_tokens` over the sum of `usage.input_tokens` (Dynamo's frontend reports the prompt tokens the
serving worker found in its KV cache, whole blocks). The "previous prompt" column is the share of
those turns' prompt tokens that is the previous turn's prompt, which the worker that served it
holds. The previous turn's output follows it in the prompt from the third turn on, but the mocker's
KV blocks for generated tokens are its own random tokens' (the harmony answer is swapped in as it is
emitted), so no output is found cached here; TensorRT-LLM's blocks are the real tokens'. First
turns are listed apart: they share only the instructions.

Writes results.json and results.md beside this file; a few minutes here:

    uv run python benchmarks/multiturn/run.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import httpx
import yaml

from dynamo_oss.bench.ports import on_free_ports
from dynamo_oss.bench.served import served_graph

HERE = Path(__file__).resolve().parent
COMMAND = "uv run python benchmarks/multiturn/run.py"
# name -> (router, Dynamo frontends, replica sync, session affinity's idle seconds or None)
CONFIGURATIONS = {
    "kv, one frontend": ("kv", 1, True, None),
    "kv, session affinity": ("kv", 1, True, 600),
    "kv, two synced frontends": ("kv", 2, True, None),
    "kv, two unsynced frontends": ("kv", 2, False, None),
    "round-robin": ("round-robin", 1, True, None),
}
WORKERS = 2
CONVERSATIONS = 16
TURNS = 6
CONCURRENCY = 4
FIRST_WORDS = 100  # the first turn's user message
LATER_WORDS = 150  # each later turn's: a tool's output, a file, a question with context
TIME_SCALE = 0.05  # mocker steps 20x faster than the modelled H200's
REQUEST_TIMEOUT_S = 120.0
INSTRUCTIONS = (
    "You are a careful assistant for a team that runs inference services. Answer in plain English, "
    "cite the numbers the user gives, and say when something is unknown."
)
WORDS = (
    "cache prefill decode worker router token block latency batch queue prompt answer graph metric "
    "replica memory bandwidth kernel tensor pipeline expert shard request stream budget target"
).split()


@dataclass
class Turn:
    seed: int
    conversation: int
    turn: int
    input_tokens: int
    cached_tokens: int
    output_tokens: int


@dataclass
class RouterResult:
    router: str  # the configuration's name
    turns: list[Turn] = field(default_factory=list)
    seconds: float = 0.0

    def share(self, later: bool) -> float:
        return _cached([t for t in self.turns if (t.turn > 1) == later])

    def share_of_turn(self, turn: int) -> float:
        return _cached([t for t in self.turns if t.turn == turn])

    def seed_shares(self) -> list[float]:
        """The later turns' cached share of each seed's conversations: how much a run's share varies."""
        return [_cached([t for t in self.turns if t.seed == seed and t.turn > 1]) for seed in self.seeds]

    @property
    def seeds(self) -> list[int]:
        return sorted({t.seed for t in self.turns})

    def previous_prompt_share(self) -> float:
        """The share of the later turns' prompt tokens that is the previous turn's prompt."""
        by_key = {(t.seed, t.conversation, t.turn): t for t in self.turns}
        later = [t for t in self.turns if t.turn > 1]
        reusable = sum(by_key[(t.seed, t.conversation, t.turn - 1)].input_tokens for t in later)
        return reusable / max(1, sum(t.input_tokens for t in later))


def _cached(turns: list[Turn]) -> float:
    return sum(t.cached_tokens for t in turns) / max(1, sum(t.input_tokens for t in turns))


def graph_file(folder: Path, name: str) -> Path:
    router, frontends, sync, affinity = CONFIGURATIONS[name]
    frontend: dict = {"router": router, "replicas": frontends, "replica_sync": sync}
    if affinity is not None:
        frontend["session_affinity_s"] = affinity
    graph = on_free_ports(
        {
            "name": "multiturn",
            "model": "gpt-oss-20b",
            "hardware": {"gpu": "h200", "gpus": WORKERS},
            "frontend": frontend,
            "gateway": {"processes": 1},
            "pools": {"agg": {"workers": WORKERS, "engine": "mocker"}},
        }
    )
    path = folder / f"graph-{CONFIGURATIONS_FILE_NAMES[name]}.yaml"
    path.write_text(yaml.safe_dump(graph))
    return path


CONFIGURATIONS_FILE_NAMES = {name: "-".join(name.replace(",", "").split()) for name in CONFIGURATIONS}


def words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(count)) + "."


async def conversation(client: httpx.AsyncClient, model: str, index: int, seed: int) -> list[Turn]:
    rng = random.Random(seed * 1000 + index)
    previous: str | None = None
    turns = []
    for turn in range(1, TURNS + 1):
        body = {
            "model": model,
            "instructions": INSTRUCTIONS,
            "reasoning": {"effort": "low"},
            "input": f"Conversation {index}, turn {turn}: " + words(rng, FIRST_WORDS if turn == 1 else LATER_WORDS),
        }
        if previous is not None:
            body["previous_response_id"] = previous
        reply = await client.post("/responses", json=body)
        reply.raise_for_status()
        response = reply.json()
        usage = response["usage"]
        turns.append(
            Turn(
                seed,
                index,
                turn,
                usage["input_tokens"],
                usage["input_tokens_details"]["cached_tokens"],
                usage["output_tokens"],
            )
        )
        previous = response["id"]
    return turns


async def run_conversations(endpoint: str, model: str, seed: int) -> list[Turn]:
    limit = asyncio.Semaphore(CONCURRENCY)
    async with httpx.AsyncClient(base_url=endpoint, timeout=REQUEST_TIMEOUT_S) as client:

        async def one(index: int) -> list[Turn]:
            async with limit:
                return await conversation(client, model, index, seed)

        done = await asyncio.gather(*(one(index) for index in range(CONVERSATIONS)))
    return [turn for turns in done for turn in turns]


def measure(name: str, folder: Path, seeds: int) -> RouterResult:
    """The configuration served once, SEEDS sets of conversations through it in turn."""
    graph = graph_file(folder, name)
    run_dir = folder / f"run-{CONFIGURATIONS_FILE_NAMES[name]}"
    with served_graph(graph, run_dir, engine="mocker", time_scale=TIME_SCALE) as state:
        started = time.monotonic()
        turns = [
            turn
            for seed in range(1, seeds + 1)
            for turn in asyncio.run(run_conversations(state.endpoint, state.served_name, seed))
        ]
        return RouterResult(name, turns, time.monotonic() - started)


def report(results: list[RouterResult]) -> str:
    lines = [
        "# Multi-turn prefix reuse: KV router against round-robin, one Dynamo frontend against two, session affinity",
        "",
        f"Command: `{COMMAND}` ({datetime.now(timezone.utc):%Y-%m-%d}, {platform.node() or 'this machine'}).",
        "",
        f"{len(results[0].seeds)} sets (seeds) of {CONVERSATIONS} conversations of {TURNS} turns ({CONCURRENCY} at a "
        "time) through the Responses API, one set after another through each configuration served once, each "
        f"later turn continuing the previous by `previous_response_id`; an aggregated mocker graph of {WORKERS} "
        "gpt-oss-20b workers behind one gateway process, which opens its connections to the Dynamo frontends in "
        "turn. Cached share: cached_tokens / input_tokens from each response's usage, summed over "
        "the turns. Previous prompt: the share of the later turns' prompt tokens that is the previous turn's prompt "
        "(the mocker's KV blocks for generated tokens never match, so that is the most found cached here).",
        "",
        "| configuration | later turns: cached share | each seed's | later turns: previous prompt | first turns: "
        "cached share | turns | seconds |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for result in results:
        seeds = ", ".join(f"{share:.1%}" for share in result.seed_shares())
        lines.append(
            f"| {result.router} | {result.share(later=True):.1%} | {seeds} | {result.previous_prompt_share():.1%} | "
            f"{result.share(later=False):.1%} | {len(result.turns)} | {result.seconds:.0f} |"
        )
    lines += [
        "",
        "Cached share by turn (the first turns find only the shared instructions):",
        "",
        "| configuration | " + " | ".join(f"turn {turn}" for turn in range(1, TURNS + 1)) + " |",
        "|---|" + "---:|" * TURNS,
    ]
    for result in results:
        shares = " | ".join(f"{result.share_of_turn(turn):.0%}" for turn in range(1, TURNS + 1))
        lines.append(f"| {result.router} | {shares} |")
    lines.append("")
    return "\n".join(lines)


def from_json(path: Path) -> list[RouterResult]:
    """The results a run wrote, read back (to write results.md again without serving)."""
    return [
        RouterResult(r["router"], [Turn(**t) for t in r["turns"]], r["seconds"])
        for r in json.loads(path.read_text())["routers"]
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="sets of conversations per configuration")
    parser.add_argument("--report-only", action="store_true", help="write results.md from results.json again")
    args = parser.parse_args()
    if args.report_only:
        (HERE / "results.md").write_text(report(from_json(HERE / "results.json")))
        return
    with tempfile.TemporaryDirectory(prefix="multiturn-") as folder:
        results = [measure(name, Path(folder), args.seeds) for name in CONFIGURATIONS]
    (HERE / "results.json").write_text(
        json.dumps(
            {
                "command": COMMAND,
                "seeds": args.seeds,
                "workers": WORKERS,
                "conversations": CONVERSATIONS,
                "turns": TURNS,
                "concurrency": CONCURRENCY,
                "time_scale": TIME_SCALE,
                "configurations": {
                    name: {
                        "router": router,
                        "frontends": frontends,
                        "replica_sync": sync,
                        "session_affinity_s": affinity,
                    }
                    for name, (router, frontends, sync, affinity) in CONFIGURATIONS.items()
                },
                "routers": [
                    {
                        "router": r.router,
                        "later_cached_share": r.share(later=True),
                        "later_previous_prompt_share": r.previous_prompt_share(),
                        "first_cached_share": r.share(later=False),
                        "seconds": r.seconds,
                        "turns": [asdict(t) for t in r.turns],
                    }
                    for r in results
                ],
            },
            indent=1,
        )
        + "\n"
    )
    (HERE / "results.md").write_text(report(results))
    print(report(results))


if __name__ == "__main__":
    main()
