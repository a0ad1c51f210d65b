"""A long run of the README's graph: does anything leak, and does latency drift?

graphs/disagg.yaml on Dynamo's mocker (free ports; the sla planner on, as shipped) under steady mixed
load: closed-loop users each sending, in turn, streaming and whole chat completions and streaming and
whole Responses, a tenth of the streams dropped by the client after three events. Every SAMPLE_S the
script samples each process of the graph (the launcher and everything it started): resident memory,
open file descriptors, threads and TCP connections.

Writes results.json (samples and requests), results.md (growth per hour per process from a
least-squares line after the first WARMUP_S, failed requests, latency of the first window against the
last) and soak.png here. Run from the repository root (the minutes are the run's length):

    uv run python benchmarks/soak/run.py --minutes 35
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import psutil  # noqa: E402
import yaml  # noqa: E402

from dynamo_oss.bench.ports import shipped_on_free_ports  # noqa: E402
from dynamo_oss.bench.served import served_graph  # noqa: E402
from dynamo_oss.launch.state import RunState  # noqa: E402

HERE = Path(__file__).parent
REPO = HERE.parent.parent
USERS, TOKENS = 4, 64
SAMPLE_S, WARMUP_S, WINDOW_S = 15.0, 120.0, 300.0
DROP_SHARE = 0.1
KINDS = ("chat-stream", "chat", "responses-stream", "responses")


def request(client: httpx.Client, model: str, kind: str, drop: bool) -> dict:
    """One request; its kind, start, time to the first byte or event, duration and error (None: fine)."""
    api, stream = kind.removesuffix("-stream"), kind.endswith("-stream")
    words = "Tell me, at some length, how disaggregated serving splits prefill from decode."
    body = (
        {"model": model, "messages": [{"role": "user", "content": words}], "max_tokens": TOKENS}
        if api == "chat"
        else {"model": model, "input": words, "max_output_tokens": TOKENS}
    )
    path = "/v1/chat/completions" if api == "chat" else "/v1/responses"
    started, first, error = time.time(), None, None
    try:
        with client.stream("POST", path, json={**body, "stream": stream}) as response:
            events = 0
            for line in response.iter_lines():
                first = first or time.time()
                events += line.startswith("data:")
                if drop and events >= 3:
                    break  # the client goes away mid-stream
            if response.status_code != 200:
                error = f"HTTP {response.status_code}"
    except httpx.HTTPError as err:
        error = type(err).__name__
    return {
        "kind": kind,
        "dropped": drop,
        "started": started,
        "first_s": (first or time.time()) - started,
        "total_s": time.time() - started,
        "error": error,
    }


def users(base: str, model: str, until: float, outcomes: list[dict]) -> list[threading.Thread]:
    def user(index: int) -> None:
        rng = random.Random(index)
        with httpx.Client(base_url=base, timeout=120) as client:
            turn = index
            while time.time() < until:
                kind = KINDS[turn % len(KINDS)]
                outcomes.append(request(client, model, kind, kind.endswith("stream") and rng.random() < DROP_SHARE))
                turn += 1

    return [threading.Thread(target=user, args=(index,), daemon=True) for index in range(USERS)]


def sample(run_dir: Path, launcher: psutil.Process) -> list[dict]:
    """One row per process of the graph: its name, RSS, file descriptors, threads and connections."""
    names = {p.pid: p.name for p in RunState.read(run_dir).processes if p.pid}
    rows, now = [], time.time()
    for process in [launcher, *launcher.children(recursive=True)]:
        name = "launcher" if process.pid == launcher.pid else names.get(process.pid) or serving_process(process, names)
        if name is None:
            continue  # a helper of a process (its children are counted with nothing)
        try:
            with process.oneshot():
                rows.append(
                    {
                        "t": now,
                        "process": name,
                        "rss_mib": process.memory_info().rss / 2**20,
                        "fds": process.num_fds(),
                        "threads": process.num_threads(),
                        "connections": len(process.net_connections(kind="tcp")),
                    }
                )
        except psutil.NoSuchProcess:
            continue
    return rows


def serving_process(process: psutil.Process, names: dict[int, str]) -> str | None:
    """`gateway[I]` for the gateway's serving process I (its first process started it), else None."""
    try:
        if names.get(process.ppid()) != "gateway":
            return None
        command = process.cmdline()
    except psutil.NoSuchProcess:
        return None
    return f"gateway[{command[-1]}]" if "--process" in command else None


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares growth per hour of (seconds, value) points."""
    if len(points) < 3:
        return 0.0
    return statistics.linear_regression([t for t, _ in points], [v for _, v in points]).slope * 3600


def summarize(samples: list[dict], outcomes: list[dict], start: float, end: float) -> dict:
    growth = {}
    for name in sorted({row["process"] for row in samples}):
        rows = [row for row in samples if row["process"] == name and row["t"] - start >= WARMUP_S]
        growth[name] = (
            {
                metric: {
                    "first": round(rows[0][metric], 1),
                    "last": round(rows[-1][metric], 1),
                    "per_hour": round(slope_per_hour([(row["t"] - start, row[metric]) for row in rows]), 2),
                }
                for metric in ("rss_mib", "fds", "threads", "connections")
            }
            if rows
            else {}
        )
    kept = [o for o in outcomes if not o["dropped"]]
    windows = {
        "first": [o for o in kept if o["started"] - start < WINDOW_S],
        "last": [o for o in kept if end - o["started"] <= WINDOW_S],
    }

    def latency(rows: list[dict], key: str) -> dict:
        values = sorted(o[key] for o in rows if o["error"] is None)
        return (
            {"median_s": round(statistics.median(values), 3), "p90_s": round(values[int(0.9 * (len(values) - 1))], 3)}
            if values
            else {}
        )

    return {
        "minutes": round((end - start) / 60, 1),
        "requests": len(outcomes),
        "dropped_by_client": len(outcomes) - len(kept),
        "failed": [o for o in kept if o["error"]],
        "latency": {
            window: {"first_byte": latency(rows, "first_s"), "total": latency(rows, "total_s"), "requests": len(rows)}
            for window, rows in windows.items()
        },
        "growth": growth,
    }


def report(summary: dict, samples: list[dict], start: float) -> None:
    given = summary.get("endpoint")
    option = f" --endpoint {given}" if given else ""
    endpoint = f" (its endpoint {given.replace(',', ' gateway processes and ')} Dynamo frontends)" if given else ""
    lines = [
        "# Soak: the README's graph under steady mixed load",
        "",
        f"Command: `uv run python benchmarks/soak/run.py --minutes {summary['minutes']:.0f}{option}`. graphs/disagg.yaml "
        f"on Dynamo's mocker{endpoint}, {USERS} closed-loop users cycling through streaming and whole chat "
        "completions and "
        f"Responses ({TOKENS} output tokens), {DROP_SHARE:.0%} of streams dropped by the client after three events. "
        f"{summary['requests']} requests over {summary['minutes']} minutes ({summary['dropped_by_client']} dropped on "
        f"purpose); **{len(summary['failed'])} failed**.",
        "",
        f"Growth per hour is the slope of a least-squares line through the samples (every {SAMPLE_S:g} s) after the "
        f"first {WARMUP_S:g} s; first and last are the first and last of those samples.",
        "",
        "| process | RSS MiB first / last | RSS MiB per hour | fds first / last | fds per hour | threads first / last "
        "| threads per hour | TCP connections first / last |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, g in summary["growth"].items():
        if not g:
            continue
        lines.append(
            f"| {name} | {g['rss_mib']['first']} / {g['rss_mib']['last']} | {g['rss_mib']['per_hour']:+} | "
            f"{g['fds']['first']:.0f} / {g['fds']['last']:.0f} | {g['fds']['per_hour']:+} | "
            f"{g['threads']['first']:.0f} / {g['threads']['last']:.0f} | {g['threads']['per_hour']:+} | "
            f"{g['connections']['first']:.0f} / {g['connections']['last']:.0f} |"
        )
    first, last = summary["latency"]["first"], summary["latency"]["last"]
    lines += [
        "",
        f"Latency of requests that were not dropped, first {WINDOW_S / 60:.0f} minutes against the last (time to the "
        "first byte or event, and the whole request, in seconds):",
        "",
        "| window | requests | first byte median | first byte p90 | total median | total p90 |",
        "|---|---:|---:|---:|---:|---:|",
        *[
            f"| {window} | {w['requests']} | {w['first_byte'].get('median_s')} | {w['first_byte'].get('p90_s')} | "
            f"{w['total'].get('median_s')} | {w['total'].get('p90_s')} |"
            for window, w in (("first", first), ("last", last))
        ],
    ]
    (HERE / "results.md").write_text("\n".join(lines) + "\n")
    figure, (rss, fds) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for name in sorted({row["process"] for row in samples}):
        rows = [row for row in samples if row["process"] == name]
        minutes = [(row["t"] - start) / 60 for row in rows]
        rss.plot(minutes, [row["rss_mib"] for row in rows], label=name)
        fds.plot(minutes, [row["fds"] for row in rows], label=name)
    rss.set_ylabel("RSS, MiB")
    fds.set_ylabel("open file descriptors")
    fds.set_xlabel("minutes")
    rss.legend(fontsize=7, ncol=3)
    figure.suptitle("Soak of graphs/disagg.yaml on the mocker: every process of the graph")
    figure.savefig(HERE / "soak.png", dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=35.0, help="length of the run (default 35)")
    parser.add_argument(
        "--endpoint",
        metavar="PROCESSES,FRONTENDS",
        help="gateway processes and Dynamo frontends (default: the graph's sizing on this host)",
    )
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="soak-"))
    graph = yaml.safe_load((REPO / "graphs" / "disagg.yaml").read_text())
    if args.endpoint:
        processes, frontends = (int(count) for count in args.endpoint.split(","))
        graph["gateway"]["processes"], graph["frontend"]["replicas"] = processes, frontends
    graph = shipped_on_free_ports(REPO / "graphs" / "disagg.yaml", graph)
    (folder / "graph.yaml").write_text(yaml.safe_dump(graph, sort_keys=False))
    print(f"logs in {folder}", flush=True)
    samples: list[dict] = []
    outcomes: list[dict] = []
    with served_graph(folder / "graph.yaml", folder / "run", engine="mocker", time_scale=1.0) as state:
        launcher = psutil.Process(RunState.read(folder / "run").supervisor_pid)
        start = time.time()
        until = start + args.minutes * 60
        for thread in users(state.endpoint.removesuffix("/v1"), state.served_name, until, outcomes):
            thread.start()
        next_sample = start
        while time.time() < until:
            samples += sample(folder / "run", launcher)
            next_sample += SAMPLE_S
            time.sleep(max(0.0, next_sample - time.time()))  # the sampling clock, not a wait on the graph
            if len(samples) and int(time.time() - start) % 300 < SAMPLE_S:
                print(f"{(time.time() - start) / 60:.0f} min: {len(outcomes)} requests", flush=True)
        end = time.time()
    summary = summarize(samples, outcomes, start, end) | {"endpoint": args.endpoint}
    (HERE / "results.json").write_text(json.dumps({"summary": summary, "samples": samples}, indent=1) + "\n")
    report(summary, samples, start)
    print(f"wrote {HERE / 'results.md'}: {summary['requests']} requests, {len(summary['failed'])} failed", flush=True)


if __name__ == "__main__":
    main()
