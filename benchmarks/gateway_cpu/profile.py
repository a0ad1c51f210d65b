"""Where the gateway's CPU goes per streamed chat token at saturation: in the kernel, in the event loop, in
the Python interpreter and in each compiled module, for chat through today's gateway, chat passed through
by the gateway of the day issue 40 was filed, and today's chat with its reads coalesced.

Why: run.py finds chat costing today's gateway 1.6-1.8x what that pass-through did at saturation, and
1.04-1.17x once today's reads are coalesced to about the pass-through's bunching. This splits each path's
CPU per token by where `perf` samples it, beside its read and write syscalls per token, so which part of
the gap comes from how often the gateway reads and writes and which from what it computes is measured,
not inferred.

How: run.py's graph, gateways and load (one aggregated gpt-oss-20b mocker worker at run.TIME_SCALE of
its modelled step time, run.CONCURRENCY streams of run.TOKENS tokens). After a warm-up of each path,
ROUNDS rounds run each path in turn: `perf record` samples the gateway process that serves it at
FREQUENCY Hz over one run of REQUESTS streams, `perf report --sort dso` gives each module's share of the
samples, and that share of the run's CPU per token is the module's. Read and write syscalls are the
process's /proc/PID/io counts over the run. Needs Linux's perf (Debian: `apt-get install linux-perf`) and
root, or kernel.perf_event_paranoid at 1 or below. Writes profile.json and profile.md beside this file (or STEM.* with --stem); about 4 minutes here:

    uv run python benchmarks/gateway_cpu/profile.py
"""

from __future__ import annotations

import argparse
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as gateway_cpu  # noqa: E402 - run.py beside this file: its graph, gateways, load and report

import psutil  # noqa: E402

from dynamo_oss.launch.state import RunState  # noqa: E402

COMMAND = "uv run python benchmarks/gateway_cpu/profile.py"
PATHS = (gateway_cpu.PASSTHROUGH, "chat", gateway_cpu.COALESCED)
REQUESTS = 160  # per profiled run: 40,960 tokens
WARMUP_REQUESTS = 48
ROUNDS = 5
FREQUENCY = 499  # samples a second: few enough that perf itself costs the host little
PERF_READY_S = 30.0
# Where a sample's module puts it, by the module's file name; the first pattern that matches wins.
PARTS = (
    ("kernel", r"^\[kernel"),
    ("Python interpreter", r"libpython"),
    ("event loop (uvloop)", r"/uvloop/"),
    ("libc", r"/libc\.so"),
    ("HTTP parser (httptools)", r"/httptools/"),
    ("JSON decoder (msgspec)", r"/msgspec/"),
    ("JSON encoder (orjson)", r"/orjson/"),
    ("harmony (openai-harmony)", r"/openai_harmony/"),
    ("models (pydantic-core)", r"/pydantic_core/"),
)
OTHER = "other"


@contextmanager
def sampled(pid: int, output: Path) -> Iterator[None]:
    """`perf record` of process `pid` into `output` while the block runs (user and kernel samples, no call
    graphs), stopped as Ctrl-C stops it, so the file is whole."""
    perf = subprocess.Popen(
        ["perf", "record", "-F", str(FREQUENCY), "-p", str(pid), "-o", str(output), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + PERF_READY_S
        while not (output.exists() and output.stat().st_size):  # perf writes its header as it starts sampling
            if perf.poll() is not None or time.monotonic() > deadline:
                perf.kill()
                sys.exit(f"perf record did not start: {perf.communicate()[1].decode(errors='replace')}")
            time.sleep(0.05)  # polling the file against the deadline above
        yield
    finally:
        perf.send_signal(signal.SIGINT)
        try:
            perf.wait(60)
        except subprocess.TimeoutExpired:
            perf.kill()


def module_shares(recording: Path) -> dict[str, float]:
    """Each part's share of the recording's samples (PARTS, then OTHER), from `perf report --sort dso`."""
    report = subprocess.run(
        ["perf", "report", "-i", str(recording), "--sort", "dso", "--stdio", "-v"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    shares = dict.fromkeys([name for name, _ in PARTS] + [OTHER], 0.0)
    for line in report.splitlines():
        found = re.match(r"\s*([\d.]+)%\s+(\S+)", line)
        if found:
            module = found.group(2)
            part = next((name for name, pattern in PARTS if re.search(pattern, module)), OTHER)
            shares[part] += float(found.group(1)) / 100
    if not shares["kernel"]:  # perf fell back to user samples only: the kernel's time would go to the modules
        sys.exit("perf recorded no kernel samples: run as root, or with kernel.perf_event_paranoid at 1 or below")
    return shares


def write_calls(process: psutil.Process) -> int:
    """The process's write syscalls so far (/proc/PID/io); run.measure() counts its reads."""
    return process.io_counters().write_count


def profile_run(
    path: str, state: RunState, pids: dict[str, int], beside: dict[str, gateway_cpu.Beside], folder: Path
) -> dict:
    """One run of REQUESTS streams of `path` with its gateway process sampled: run.measure()'s row, each
    part's us per token, and the process's write syscalls per token (the row has its reads)."""
    top = beside[path].pid if path in beside else pids["gateway"]
    (serving,) = gateway_cpu.serving(psutil.Process(top))  # one serving process on every path here
    recording = folder / f"{path}.perf"
    before = write_calls(serving)
    with sampled(serving.pid, recording):
        row = gateway_cpu.measure(path, state, pids, REQUESTS, beside)
    after = write_calls(serving)
    tokens = max(row["tokens"], 1)
    shares = module_shares(recording)
    recording.unlink()
    row["parts_us_per_token"] = {part: round(share * row["gateway_us_per_token"], 2) for part, share in shares.items()}
    row["writes_per_token"] = round((after - before) / tokens, 3)
    return row


def summarize(rows: list[dict]) -> dict:
    summary = {}
    for path in PATHS:
        runs = [row for row in rows if row["api"] == path]
        summary[path] = {
            "gateway_us_per_token": gateway_cpu.spread([r["gateway_us_per_token"] for r in runs]),
            "reads_per_token": gateway_cpu.spread([r["gateway_reads_per_token"] for r in runs]),
            "writes_per_token": gateway_cpu.spread([r["writes_per_token"] for r in runs]),
            "parts_us_per_token": {
                part: gateway_cpu.spread([r["parts_us_per_token"][part] for r in runs])
                for part in runs[0]["parts_us_per_token"]
            },
        }
    summary["failed_requests"] = sum(r["failed"] for r in rows)
    return summary


LABELS = {
    gateway_cpu.PASSTHROUGH: f"chat passed through ({gateway_cpu.BASELINE})",
    "chat": "chat (today)",
    gateway_cpu.COALESCED: f"chat coalesced ({gateway_cpu.COALESCE_MS:g} ms)",
}


def markdown(summary: dict, settings: dict) -> str:
    parts = list(summary["chat"]["parts_us_per_token"])
    spreads = {path: summary[path]["parts_us_per_token"] for path in PATHS}

    def row(name: str, values: dict[str, dict]) -> str:
        return f"| {name} | " + " | ".join(f"{values[path]['median']:.2f}" for path in PATHS) + " |"

    gap = {part: spreads["chat"][part]["median"] - spreads[gateway_cpu.PASSTHROUGH][part]["median"] for part in parts}
    total = {path: summary[path]["gateway_us_per_token"]["median"] for path in PATHS}
    total_gap = total["chat"] - total[gateway_cpu.PASSTHROUGH]
    largest = sorted(parts, key=lambda part: -gap[part])[:3]
    lines = [
        f"Command: `{settings['command']}`",
        "",
        "# Where the gateway's CPU goes per streamed chat token, at saturation",
        "",
        f"{settings['host_cpu']} ({settings['cores']} cores), Python {settings['python']}, {settings['date']}, "
        f"code {settings['code']}. run.py's saturated load (one aggregated gpt-oss-20b mocker worker at "
        f"{gateway_cpu.TIME_SCALE:g}x its modelled step time, {gateway_cpu.CONCURRENCY} streams of "
        f"{gateway_cpu.TOKENS} tokens); {REQUESTS} requests a run, {ROUNDS} rounds of each path in turn after "
        f"{WARMUP_REQUESTS} warm-up requests each. The gateway process serving each path sampled by `perf record` "
        f"at {FREQUENCY} Hz (user and kernel); a module's figure is its share of the samples times the run's CPU "
        "per token (user + system seconds over the output tokens). Medians of the rounds, in us a token.",
        "",
        "| | " + " | ".join(LABELS[path] for path in PATHS) + " |",
        "|---|" + "---:|" * len(PATHS),
        row("**gateway CPU, all of it**", {path: summary[path]["gateway_us_per_token"] for path in PATHS}),
        *(row(part, {path: spreads[path][part] for path in PATHS}) for part in parts),
        row("read syscalls a token", {path: summary[path]["reads_per_token"] for path in PATHS}),
        row("write syscalls a token", {path: summary[path]["writes_per_token"] for path in PATHS}),
        "",
        f"Chat over the pass-through, by part (medians' differences): {total_gap:.2f} us a token in all, the "
        "largest parts " + ", ".join(f"{part} {gap[part]:+.2f}" for part in largest) + ". The kernel's part is the "
        "gateway's socket reads and writes (on loopback, a write also carries the receiving side's TCP work), "
        "the event loop's its wakeups and callbacks; the interpreter runs the gateway's own code, the transform "
        f"included. Failed requests: {summary['failed_requests']}. Ranges (min-max over the rounds) are in "
        f"{settings['stem']}.json. The host is shared and its speed drifts: run.py's fixed Python loop took "
        f"{settings['loop_seconds_before']} s of CPU before and {settings['loop_seconds_after']} s after, so "
        "compare the paths by their ratios, not microseconds.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stem", type=gateway_cpu.stem_name, default="profile", help="write STEM.md and STEM.json")
    args = parser.parse_args()
    if shutil.which("perf") is None:
        sys.exit("this benchmark samples with Linux's perf: install it (Debian: apt-get install linux-perf)")
    started = time.monotonic()
    settings = {
        "command": COMMAND + ("" if args.stem == "profile" else f" --stem {args.stem}"),
        "stem": args.stem,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host_cpu": gateway_cpu.host_cpu(),
        "cores": gateway_cpu.CORES,
        "python": platform.python_version(),
        "code": gateway_cpu.code_version(),
        "requests_per_run": REQUESTS,
        "rounds": ROUNDS,
        "frequency_hz": FREQUENCY,
        "loop_seconds_before": gateway_cpu.loop_seconds(),
    }
    with gateway_cpu.served_beside(1, gateway_cpu.TIME_SCALE) as (state, pids, beside, folder):
        print("warm-up", flush=True)
        for path in PATHS:
            gateway_cpu.measure(path, state, pids, WARMUP_REQUESTS, beside)
        print("profiling", flush=True)
        rows = [profile_run(path, state, pids, beside, folder) for _ in range(ROUNDS) for path in PATHS]
    summary = summarize(rows)
    settings["loop_seconds_after"] = gateway_cpu.loop_seconds()
    settings["total_s"] = round(time.monotonic() - started)
    gateway_cpu.write_report(args.stem, settings, summary, rows, markdown(summary, settings))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: served_graph has stopped the graph by now
        sys.exit("interrupted; the graph is stopped")
