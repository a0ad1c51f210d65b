"""The agentic study served live: the trace's conversations sent by aiperf through the gateway to Dynamo's
frontend, its KV router and mocker workers, disaggregated against aggregated at equal GPUs, with and without
EAGLE3 drafts, with and without Dynamo's session affinity; each run set beside Dynamo's offline replay of
the very requests it sent.

What runs: for each case, `dynamo serve --engine mocker` of the study's B200 layout (run.py's LAYOUTS: agg
8 x TP1 and disagg 2P6D, with and without 3 drafts a step), `router: kv`, with `frontend.session_affinity_s`
or without, real etcd, NATS, gateway and Dynamo frontend on loopback ports free at the time. aiperf 0.13
replays the trace's conversations (aiperf's mooncake_trace multi-turn rows: `aiperf.trace_command`), LANES
of them in flight, naming each conversation's session in X-Dynamo-Session-ID, the header Dynamo's affinity
keys on. Then Dynamo's offline replay (perf/replay.py `replay_served_trace`) runs the same requests (the
token counts the server reported, in the same conversations and order, with the same tool waits) at the
speeds the served mocker ran at, behind the same KV router, with the same KV caches.

Scaled down to fit this 2-core machine, and said so wherever a figure is shown: the trace is
conversations.py's Shape at LIVE_SCALE of its tokens and tool times (`Shape.scaled`), each worker's KV memory
LIVE_SCALE of what the model gives it (`kv_cache_config.max_gpu_total_bytes`), so that as many conversations fit
in the caches as at full scale; the mocker runs `time_scale(lanes)` times slower than modelled and the tool waits
are sent that much longer, and every figure is given back in modelled time (latencies divided by it,
throughputs multiplied).

    uv run python benchmarks/agentic/live.py            # live.md, live.json and live.png here (about 25 minutes)
    uv run python benchmarks/agentic/live.py --report   # the tables and the plot again from live.json
    uv run python benchmarks/agentic/live.py --cases "agg 8xTP1" --lanes 16   # a subset while developing
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run as a script from anywhere

import yaml  # noqa: E402

from benchmarks.agentic.conversations import (  # noqa: E402
    BLOCK,
    LIVE_SCALE,
    conversations,
    header,
    live_shape,
    shape,
    words_for,
)
from benchmarks.agentic.run import DRAFTS, LAYOUTS, drafting  # noqa: E402
from dynamo_oss.bench import aiperf  # noqa: E402
from dynamo_oss.bench.host_load import CpuSampler  # noqa: E402
from dynamo_oss.bench.ports import on_free_ports  # noqa: E402
from dynamo_oss.bench.served import served_graph, sweep_fields  # noqa: E402
from dynamo_oss.deployment.model import build_deployment  # noqa: E402
from dynamo_oss.graph.loader import load_graph  # noqa: E402
from dynamo_oss.launch.state import RunState  # noqa: E402
from dynamo_oss.perf.costs import CostModel  # noqa: E402
from dynamo_oss.perf.graphs import graph_files  # noqa: E402
from dynamo_oss.perf.layout import Layout  # noqa: E402
from dynamo_oss.perf.metrics import DEFINITIONS, RequestRecord, ServingPoint, serving_point  # noqa: E402
from dynamo_oss.perf.replay import TracePoint, replay_served_trace  # noqa: E402

HERE = Path(__file__).resolve().parent
COMMAND = "uv run python benchmarks/agentic/live.py"
LANES = (32,)  # conversations in flight
# The mocker's steps, and the tool waits, this many times the modelled ones at 32 conversations in flight, and
# proportionally more above, so that requests reach this 2-core machine at the same pace at every load.
BASE_TIME_SCALE, BASE_LANES = 5.0, 32
AFFINITY_S = 600  # frontend.session_affinity_s when on: a conversation idles far less between turns
CASES = ("agg 8xTP1", "disagg 2P6D")  # the study's B200 layouts (run.py), 8 GPUs each
WARM_UP = 8  # short requests at once before each run, so no measured one pays a first connection


def time_scale(lanes: int) -> float:
    return BASE_TIME_SCALE * max(1.0, lanes / BASE_LANES)


def scaled_layout(layout: Layout) -> Layout:
    """The layout with each pool's KV memory LIVE_SCALE of what the model gives it, so the scaled trace's
    conversations fill it as the full trace's fill the full caches."""
    pools = {
        role: pool.model_copy(
            update={"kv_memory_bytes": int(LIVE_SCALE * CostModel.for_pool(layout, role).kv_budget_bytes())}
        )
        for role, pool in layout.pools.items()
    }
    return layout.model_copy(update={"pools": pools})


def case_layout(name: str, speculative: bool) -> Layout:
    plain = LAYOUTS["b200"][name]
    return scaled_layout(drafting(plain) if speculative else plain)


# ---- the trace, as aiperf sends it ------------------------------------------------------------------


def aiperf_sessions(rows: list[dict], time_scale: float) -> list[dict]:
    """The trace as aiperf's multi-turn mooncake rows. aiperf sends each turn after the conversation so far
    (its earlier turns and the answers the server gave), so a turn's row holds only what the tool added:
    the first turn's whole prompt (the shared system prompt's blocks, then the task), later ones the
    tool's output, after the trace's tool wait (in the slowed time). Each text starts with its first word's
    space, so that every word is one token wherever the chat template puts it."""
    out: list[dict] = []
    before: dict | None = None
    for row in rows:
        first = before is None or before["play_id"] != row["play_id"]
        if first:
            text = words_for(row["hash_ids"], row["input_length"])
            delay = None
        else:
            assert before is not None
            added = row["input_length"] - before["input_length"] - before["output_length"]
            text = words_for(row["hash_ids"][before["input_length"] // BLOCK :], added)
            delay = row["dependencies"][0]["delay_ms"] * time_scale
        session = {"session_id": row["play_id"], "text_input": text, "output_length": row["output_length"]}
        out.append(session if delay is None else {**session, "delay": delay})
        before = row
    return out


def replay_rows(records: list[aiperf.TracedRequest], rows: list[dict]) -> list[dict]:
    """The requests a live run sent, as Dynamo's agentic replay trace: each with the prompt and output
    lengths the server counted, its prompt starting with the whole blocks of the turn before's (as the
    live prompt starts with the one before it), every first turn with the same blocks for what all first
    prompts share (the chat header and the system prompt: as many blocks as the most any live first turn
    found cached), and the trace's tool waits (modelled time)."""
    names = {(row["play_id"], turn): row["request_id"] for turns in _by_conversation(rows) for turn, row in turns}
    waits = {row["request_id"]: row["dependencies"][0]["delay_ms"] for row in rows if row["dependencies"]}
    shared = max((r.cached_tokens or 0) for r in records if r.turn == 0) // BLOCK
    next_id = iter(range(shared + 1, 1 << 62))
    out = []
    for conversation in dict.fromkeys(r.conversation for r in records):
        turns = sorted((r for r in records if r.conversation == conversation), key=lambda r: r.turn)
        blocks = list(range(1, shared + 1))
        for before, record in zip([None, *turns[:-1]], turns, strict=True):
            assert record.input_tokens is not None and record.output_tokens is not None
            if before is not None:
                assert before.input_tokens is not None
                blocks = blocks[: before.input_tokens // BLOCK]
            blocks = blocks + [next(next_id) for _ in range(math.ceil(record.input_tokens / BLOCK) - len(blocks))]
            name = names[(conversation, record.turn)]
            follows = [] if before is None else [names[(conversation, before.turn)]]
            out.append(
                {
                    "request_id": name,
                    "play_id": conversation,
                    "session_id": conversation,
                    "model": rows[0]["model"],
                    "input_length": record.input_tokens,
                    "output_length": record.output_tokens,
                    "hash_ids": blocks,
                    "not_before_ms": 0,
                    "dependencies": [
                        {"request_id": f, "trigger": "completion", "delay_ms": waits[name], "relation": "sequence"}
                        for f in follows
                    ],
                }
            )
    return out


def _by_conversation(rows: list[dict]) -> list[list[tuple[int, dict]]]:
    """Each conversation's rows with their turn numbers (aiperf's turn_index), in trace order."""
    grouped: dict[str, list[dict]] = {}
    for row in rows:
        grouped.setdefault(row["play_id"], []).append(row)
    return [list(enumerate(turns)) for turns in grouped.values()]


def write_jsonl(path: Path, rows: list[dict], header: dict | None = None) -> Path:
    lines = [json.dumps(row, separators=(",", ":")) for row in ([header] if header else []) + rows]
    path.write_text("\n".join(lines) + "\n")
    return path


# ---- serving -------------------------------------------------------------------------------------


def graph_file(layout: Layout, name: str, affinity: bool, folder: Path) -> Path:
    """The study layout's graph (`dynamo plan`'s graph_files, its engine files beside it) served on the
    mocker behind the KV router, with the gateway in front and, if `affinity`, session affinity."""
    slug = name.lower().replace(" ", "-").replace("/", "-")
    for relative, text in graph_files(layout, slug).items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(text)
    graph = yaml.safe_load((folder / f"{slug}.yaml").read_text())
    graph["frontend"] = {"router": "kv", **({"session_affinity_s": AFFINITY_S} if affinity else {})}
    graph["gateway"] = {"processes": 1}
    for pool in graph["pools"].values():
        pool["engine"] = "mocker"
    path = folder / f"{slug}-served.yaml"
    path.write_text(yaml.safe_dump(on_free_ports(graph), sort_keys=False))
    return path


def warm_up(state: RunState) -> None:
    """WARM_UP short requests at once before any measured one: every worker's first connection is made."""
    body = json.dumps(
        {"model": state.served_name, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}
    ).encode()
    request = urllib.request.Request(f"{state.endpoint}/chat/completions", body, {"Content-Type": "application/json"})
    threads = [
        threading.Thread(target=lambda: urllib.request.urlopen(request, timeout=120).read()) for _ in range(WARM_UP)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def modelled(records: list[aiperf.TracedRequest], lanes: int, gpus: int, slowed: float) -> ServingPoint:
    """The live run's figures in modelled time (the mocker ran `slowed` times slower), computed as aiperf
    computes them (perf/metrics.py)."""
    return serving_point(
        [
            RequestRecord(
                input_tokens=r.input_tokens or 0,
                output_tokens=r.output_tokens or 1,
                start_ms=r.start_ms / slowed,
                ttft_ms=(r.ttft_ms or 0.0) / slowed,
                e2e_ms=(r.e2e_ms or 0.0) / slowed,
            )
            for r in records
        ],
        concurrency=lanes,
        gpus=gpus,
    )


def run_case(name: str, speculative: bool, affinity: bool, lanes: int, work: Path) -> dict[str, Any]:
    label = f"{name}{' EAGLE3x3' if speculative else ''}, affinity {'on' if affinity else 'off'}, {lanes} lanes"
    folder = work / label.replace(" ", "_").replace(",", "").replace("/", "-")
    folder.mkdir(parents=True)
    sessions, slowed = live_shape(lanes), time_scale(lanes)
    rows = [row for turns in conversations(sessions) for row in turns]
    trace = write_jsonl(folder / "aiperf-trace.jsonl", aiperf_sessions(rows, slowed))
    layout = case_layout(name, speculative)
    graph = graph_file(layout, name, affinity, folder)
    deployment = build_deployment(load_graph(graph), engine_override="mocker")
    artifacts = folder / "aiperf"
    print(f"[live] {label}: serving, then {len(rows)} requests of {sessions.conversations} conversations", flush=True)
    with CpuSampler() as cpu:
        with served_graph(graph, folder / "run", engine="mocker", time_scale=slowed) as state:
            warm_up(state)
            argv = aiperf.trace_command(
                state.endpoint.removesuffix("/v1"),
                model=state.served_name,
                tokenizer=str(sweep_fields(deployment)["tokenizer"]),
                trace=trace,
                lanes=lanes,
                sessions=sessions.conversations,
                artifacts=artifacts,
            )
            started = time.time()
            aiperf.run(argv, artifacts, aiperf.environment(artifacts, dynamo_sessions=True))
            ended = time.time()
    records = aiperf.request_records(artifacts)
    served = [r for r in records if r.error is None and r.output_tokens and r.input_tokens]
    live = modelled(served, lanes, layout.gpus, slowed)
    cached = sum(r.cached_tokens or 0 for r in served) / max(1, sum(r.input_tokens or 0 for r in served))
    replay_trace = write_jsonl(folder / "replay-trace.jsonl", replay_rows(served, rows), header())
    replayed = replay_served_trace(deployment, replay_trace, lanes)
    export = json.loads((artifacts / aiperf.EXPORT).read_text())
    result = {
        "case": name,
        "speculative": speculative,
        "affinity": affinity,
        "lanes": lanes,
        "time_scale": slowed,
        "trace": shape(rows),
        "requests": len(rows),
        "failed": len(rows) - len(served),
        "live": TracePoint(lanes=lanes, serving=live, kv_hit_rate=cached).model_dump(),
        "replay": replayed.model_dump(),
        "aiperf_tok_s_user_modelled": export["output_token_throughput_per_user"]["avg"] * slowed,
        "seconds": ended - started,
        "cores_busy": (cpu.busy_between(started, ended) or 0.0) * (os.cpu_count() or 1),
    }
    p, r = live, replayed.serving
    print(
        f"[live] {label}: live {p.tok_s_user:.0f} tok/s/user, {p.tok_s_gpu:.0f} tok/s/GPU, TTFT p50 "
        f"{p.ttft_p50_ms:.0f} ms, KV hits {cached:.0%} | replay {r.tok_s_user:.0f}, {r.tok_s_gpu:.0f}, "
        f"{r.ttft_p50_ms:.0f} ms, {replayed.kv_hit_rate:.0%} | {result['failed']} failed, "
        f"{result['seconds']:.0f} s, {result['cores_busy']:.2f} cores busy",
        flush=True,
    )
    return result


# ---- the report ------------------------------------------------------------------------------------


def study_point(name: str, speculative: bool, lanes: int) -> dict | None:
    """The full-scale offline study's figures for the same layout and lanes (results.json), if it has them."""
    saved = json.loads((HERE / "results.json").read_text())
    return next(
        (
            row
            for row in saved["rows"]
            if (row["hardware"], row["layout"], row["speculative"], row["router"], row["lanes"])
            == ("b200", name, speculative, "kv", lanes)
        ),
        None,
    )


def _three(live: float, replay: float, study: float | None, form: str = "{:,.0f}") -> str:
    return " / ".join(form.format(v) if v is not None else "-" for v in (live, replay, study))


def _affinity(row: dict) -> str:
    return "on" if row["affinity"] else "off"


def markdown(results: list[dict], meta: dict) -> str:
    lines = [
        "# Agentic study, served live on the mocker: results",
        "",
        f"`{meta['command']}` ({meta['date']}, {meta['host']}, {meta['cores']} cores shared with other work), "
        f"{meta['seconds'] / 60:.0f} minutes.",
        "",
        f"Scaled down (README.md says why and how): the trace is `Shape().scaled({meta['scale']:g}, 2 x "
        f"conversations in flight)`, each worker's KV memory {meta['scale']:g} of the model's "
        "(`kv_cache_config.max_gpu_total_bytes`); the mocker ran `time scale` times slower than the modelled "
        "B200s and the tool waits were sent as much longer. Every figure below is in modelled time.",
        "",
        "Definitions: " + "; ".join(f"{k}: {DEFINITIONS[k]}" for k in ("tok_s_user", "tok_s_gpu")) + ". Live KV "
        "hits: the sum of usage.prompt_tokens_details.cached_tokens over the sum of prompt_tokens of every "
        "request (what the serving worker, or for a disaggregated graph the prefill worker, found in its cache); "
        "replay KV hits: the replay's prefix_cache_reused_ratio, the same ratio in its own caches. Live: aiperf's "
        "per-request records (the server's token counts) in modelled time; aiperf's own "
        "output_token_throughput_per_user times the time scale is in live.json beside each. Replay: Dynamo's "
        "offline replay of the requests the live run sent (their token counts, conversations, order and tool "
        "waits) at the same mocker speeds, KV caches and router. Study: results.md's row for the same layout "
        "and conversations in flight (the full-scale trace, its typical-turn profiles, agentic acceptance).",
        "",
        "| layout | EAGLE3 | session affinity | conversations | time scale | tok/s/user live / replay / study | "
        "tok/s/GPU live / replay / study | TTFT p50 ms live / replay / study | KV hits live / replay / study | "
        "failed | cores busy |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results:
        live, replay = row["live"], row["replay"]
        study = study_point(row["case"], row["speculative"], row["lanes"])
        s = study["serving"] if study else {}
        pick = {key: (live["serving"][key], replay["serving"][key], s.get(key)) for key in live["serving"]}
        hits = (live["kv_hit_rate"], replay["kv_hit_rate"], study["kv_hit_rate"] if study else None)
        lines.append(
            f"| {row['case']} | {DRAFTS if row['speculative'] else '-'} | {_affinity(row)} | {row['lanes']} | "
            f"{row['time_scale']:g} | {_three(*pick['tok_s_user'])} | {_three(*pick['tok_s_gpu'])} | "
            f"{_three(*pick['ttft_p50_ms'])} | {_three(*hits, form='{:.0%}')} | {row['failed']} | "
            f"{row['cores_busy']:.1f} |"
        )
    lines += [
        "",
        "## Disaggregated over aggregated, live and in the replay",
        "",
        "| EAGLE3 | session affinity | conversations | tok/s/user live / replay | tok/s/GPU live / replay | "
        "KV hits agg / disagg, live |",
        "|---|---|---:|---:|---:|---:|",
    ]
    index = {(r["case"], r["speculative"], r["affinity"], r["lanes"]): r for r in results}
    for (case, speculative, affinity, lanes), disagg in index.items():
        agg = index.get((CASES[0], speculative, affinity, lanes))
        if case != CASES[1] or agg is None:
            continue
        ratios = {
            key: " / ".join(
                f"{disagg[run]['serving'][key] / agg[run]['serving'][key]:.2f}x" for run in ("live", "replay")
            )
            for key in ("tok_s_user", "tok_s_gpu")
        }
        lines.append(
            f"| {DRAFTS if speculative else '-'} | {'on' if affinity else 'off'} | {lanes} | {ratios['tok_s_user']} | "
            f"{ratios['tok_s_gpu']} | {agg['live']['kv_hit_rate']:.0%} / {disagg['live']['kv_hit_rate']:.0%} |"
        )
    return "\n".join(lines) + "\n"


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.5))
    labels = []
    for index, row in enumerate(results):
        label = (
            f"{row['case']}{' +EAGLE3x3' if row['speculative'] else ''}, affinity "
            f"{'on' if row['affinity'] else 'off'}, {row['lanes']} conv."
        )
        labels.append(label)
        color = f"C{index % 10}"
        live, replay = row["live"]["serving"], row["replay"]["serving"]
        left.plot([live["tok_s_gpu"]], [live["tok_s_user"]], "o", color=color, label=f"{label}: live")
        left.plot([replay["tok_s_gpu"]], [replay["tok_s_user"]], "o", color=color, fillstyle="none")
        left.plot(
            [live["tok_s_gpu"], replay["tok_s_gpu"]], [live["tok_s_user"], replay["tok_s_user"]], ":", color=color
        )
    left.set(
        xlabel="output tok/s/GPU over all 8 GPUs (modelled time)",
        ylabel="tok/s/user (aiperf's definition, modelled time)",
        title="gpt-oss-120b, 8 x B200 (mocker), scaled agentic trace: live (filled) vs replay (hollow)",
    )
    left.grid(True, alpha=0.3)
    left.legend(fontsize=7)
    positions = range(len(results))
    right.barh([p + 0.2 for p in positions], [r["live"]["kv_hit_rate"] for r in results], 0.4, label="live")
    right.barh([p - 0.2 for p in positions], [r["replay"]["kv_hit_rate"] for r in results], 0.4, label="replay")
    right.set_yticks(list(positions), labels, fontsize=7)
    right.set(xlabel="KV hits: cached prompt tokens / prompt tokens", xlim=(0, 1), title="KV hit rate")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _key(row: dict) -> tuple:
    return (row["lanes"], row["speculative"], row["affinity"], CASES.index(row["case"]))


def _meta(seconds: float) -> dict:
    return {
        "command": COMMAND,
        "date": f"{datetime.now(timezone.utc):%Y-%m-%d}",
        "host": platform.node() or "this machine",
        "cores": os.cpu_count(),
        "scale": LIVE_SCALE,
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", action="store_true", help="the tables and plot again from live.json")
    parser.add_argument("--cases", default=",".join(CASES), help=f"layouts, comma-separated (of {', '.join(CASES)})")
    parser.add_argument("--lanes", default=",".join(map(str, LANES)), help="conversations in flight, comma-separated")
    parser.add_argument("--speculative", default="off,on", help="EAGLE3 drafts: off, on or both")
    parser.add_argument("--affinity", default="off,on", help="session affinity: off, on or both")
    parser.add_argument("--work", type=Path, help="keep the graphs, logs and aiperf exports here (default: discarded)")
    args = parser.parse_args()
    saved = json.loads((HERE / "live.json").read_text()) if (HERE / "live.json").exists() else None
    if args.report:
        if saved is None:
            parser.error("--report: there is no live.json here yet; run the study first")
        results, meta = saved["results"], saved["meta"]
    else:
        cases = [case.strip() for case in args.cases.split(",")]
        unknown = sorted(set(cases) - set(CASES))
        if unknown:
            parser.error(f"--cases: unknown layout(s) {unknown}; the live study runs {list(CASES)}")
        started, before = time.monotonic(), (saved or {}).get("meta", {}).get("seconds", 0.0)
        results = saved["results"] if saved else []
        with tempfile.TemporaryDirectory(prefix="agentic-live-") as scratch:
            work = args.work or Path(scratch)
            for lanes in (int(v) for v in args.lanes.split(",")):
                for speculative in (v.strip() == "on" for v in args.speculative.split(",")):
                    for affinity in (v.strip() == "on" for v in args.affinity.split(",")):
                        for case in cases:
                            row = run_case(case, speculative, affinity, lanes, work)
                            # Each case is kept as it ends, beside the cases of earlier runs (a run of a few
                            # cases, or one stopped half-way, adds to the rest; a case run again replaces its row).
                            results = sorted([r for r in results if _key(r) != _key(row)] + [row], key=_key)
                            meta = _meta(before + time.monotonic() - started)
                            (HERE / "live.json").write_text(
                                json.dumps({"meta": meta, "results": results}, indent=1) + "\n"
                            )
    (HERE / "live.md").write_text(markdown(results, meta))
    plot(results, HERE / "live.png")
    print(f"wrote live.md, live.json and live.png ({meta['seconds']:.0f} s in all)")


if __name__ == "__main__":
    main()
