"""`dynamo bench`: real aiperf against a graph it serves on the mocker, results folders, comparisons,
errors, and Ctrl-C leaving nothing behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dynamo_oss.bench import aiperf
from dynamo_oss.bench.report import comparison
from dynamo_oss.bench.results import RunResult, Sweep, SweepParameters
from dynamo_oss.perf.metrics import RequestRecord, ServingPoint, serving_point
from tests.support.commands import DYNAMO, REPO, dynamo
from tests.support.graphs import write_graph
from tests.support.ports import free_ports
from tests.support.waiting import alive, wait_for

ISL, OSL = 300, 24


def bench_argv(graph: Path, out: Path, concurrency: str, requests: int) -> list[str]:
    return [
        *DYNAMO,
        "bench",
        str(graph),
        "--isl",
        str(ISL),
        "--osl",
        str(OSL),
        "--concurrency",
        concurrency,
        "--requests",
        str(requests),
        "--out",
        str(out),
    ]


def aiperf_records(artifacts: Path) -> list[RequestRecord]:
    """The measured requests of one run, from aiperf's per-request export."""
    records = []
    for line in (artifacts / "profile_export.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["metadata"]["benchmark_phase"] != "profiling":
            continue
        m = {name: value["value"] for name, value in row["metrics"].items()}
        records.append(
            RequestRecord(
                input_tokens=m["input_sequence_length"],
                output_tokens=m["usage_completion_tokens"],
                start_ms=row["metadata"]["request_start_ns"] / 1e6,
                ttft_ms=m["time_to_first_token"],
                e2e_ms=m["request_latency"],
            )
        )
    return records


@pytest.fixture(scope="module")
def sweep_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One sweep of a small mocker graph at two concurrencies."""
    folder = tmp_path_factory.mktemp("bench")
    graph = write_graph(folder)
    out = folder / "results"
    done = subprocess.run(bench_argv(graph, out, "1,4", 8), capture_output=True, text=True, timeout=400, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (out / "bench.out").write_text(done.stdout)
    return out


@pytest.mark.long
def test_a_sweep_stores_each_run_with_the_graph_and_parameters(sweep_folder: Path) -> None:
    sweep = Sweep.load(sweep_folder)
    assert [run.concurrency for run in sweep.runs] == [1, 4]
    assert sweep.parameters.gpus == 2  # the graph's two one-GPU workers
    assert (sweep_folder / "graph" / "graph.yaml").is_file()
    for run in sweep.runs:
        assert run.failed == 0 and run.point.requests == 8
        assert (sweep_folder / run.artifacts / "profile_export_aiperf.json").is_file()
        # aiperf's memory-mapped dataset stays with the run, not in the system temp folder for good
        assert list((sweep_folder / run.artifacts).glob("aiperf_mmap_*"))
        assert run.point.tok_s_gpu == pytest.approx(run.point.output_tok_s / 2)
        assert 0 < run.point.ttft_p50_ms <= run.point.ttft_p99_ms
    assert (sweep_folder / "pareto.png").stat().st_size > 10_000
    assert "| 4 | 8 | 0 |" in (sweep_folder / "sweep.md").read_text()
    output = (sweep_folder / "bench.out").read_text()
    assert "run 1/2: concurrency 1" in output and "run 2/2: concurrency 4" in output


def test_lengths_are_exact_and_figures_follow_the_simulations_definitions(sweep_folder: Path) -> None:
    """Every request returns exactly OSL tokens, and the tok/s/user aiperf reports is the one
    perf.metrics computes from the same requests (the definition simulate uses)."""
    sweep = Sweep.load(sweep_folder)
    run = sweep.runs[-1]
    records = aiperf_records(sweep_folder / run.artifacts)
    assert len(records) == 8 and {r.output_tokens for r in records} == {OSL}
    recomputed = serving_point(records, concurrency=run.concurrency, gpus=2)
    assert run.point.tok_s_user == pytest.approx(recomputed.tok_s_user, rel=0.01)
    assert run.point.ttft_p50_ms == pytest.approx(recomputed.ttft_p50_ms, rel=0.01)


def test_the_served_graph_is_stopped_after_the_sweep(sweep_folder: Path) -> None:
    state = json.loads((sweep_folder / "serve" / "state.json").read_text())
    assert state["stopped"]
    assert not alive(state["supervisor_pid"])


def point(tok_s_gpu: float, tok_s_user: float) -> ServingPoint:
    return ServingPoint(
        concurrency=1,
        requests=10,
        gpus=8,
        tok_s_user=tok_s_user,
        tok_s_user_tpot=tok_s_user,
        tok_s_user_e2e=tok_s_user,
        tok_s_gpu=tok_s_gpu,
        total_tok_s_gpu=tok_s_gpu,
        output_tok_s=8 * tok_s_gpu,
        ttft_mean_ms=1,
        ttft_p50_ms=1,
        ttft_p99_ms=1,
        itl_p50_ms=1,
        itl_p99_ms=1,
    )


def sweep_of(label: str, points: list[ServingPoint]) -> Sweep:
    parameters = SweepParameters(isl=100, osl=10, concurrencies=[1], model="m", tokenizer="t", gpus=8)
    runs = [
        RunResult(concurrency=1, point=p, failed=0, request_rate=1, host_cpu_busy=0.5, artifacts="x") for p in points
    ]
    return Sweep(label=label, target=label, endpoint="http://x", parameters=parameters, runs=runs)


def test_compare_gives_the_interactivity_ratio_at_equal_tok_s_gpu(tmp_path: Path) -> None:
    agg = sweep_of("agg", [point(10, 100), point(100, 40), point(400, 10)])
    disagg = sweep_of("disagg", [point(10, 300), point(100, 120), point(400, 30)])
    assert "3.00x" in comparison(agg, disagg)
    for sweep in (agg, disagg):
        sweep.save(tmp_path / sweep.label)
    png = tmp_path / "both.png"
    code, out, err = dynamo("bench", "compare", str(tmp_path / "agg"), str(tmp_path / "disagg"), "--out", str(png))
    assert code == 0 and "highest 3.00x" in out, err
    assert png.stat().st_size > 10_000


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bench", "http://127.0.0.1:9/v1", "--isl", "10", "--osl", "10", "--concurrency", "1"], "--gpus is required"),
        (
            ["bench", "http://127.0.0.1:{port}/v1", "--isl", "10", "--osl", "10", "--concurrency", "1", "--gpus", "1"],
            "no OpenAI endpoint answers",
        ),
        (["bench", "graphs/disagg.yaml", "--osl", "10"], "--isl and --concurrency required"),
        (["bench", "graphs/missing.yaml", "--isl", "10", "--osl", "10", "--concurrency", "1"], "no such graph file"),
        (["bench", "compare", "only-one"], "compare takes two results folders"),
        (["bench", "compare", "graphs", "tests"], "not found; give a results folder"),
    ],
)
def test_bad_invocations_are_user_errors(argv: list[str], message: str) -> None:
    """Refused before anything starts, so run in this process (a subprocess is a CPU-second of imports)."""
    argv = [a.replace("{port}", str(free_ports(1)[0])) for a in argv]
    code, _, err = dynamo(*argv)
    assert code == 2 and message in err, err


def descendants(pid: int) -> set[int]:
    """Every live process under `pid`, from /proc's parent links."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, stack = set(), [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.add(child)
            stack.append(child)
    return found


@pytest.mark.graph
def test_ctrl_c_mid_sweep_leaves_no_process_behind(tmp_path: Path) -> None:
    graph = write_graph(tmp_path)
    out = tmp_path / "results"
    bench = subprocess.Popen(
        bench_argv(graph, out, "2", 2000), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    started: set[int] = set()
    try:
        # The graph is served and aiperf started: the sweep's first run has its console log.
        wait_for(lambda: (out / "runs" / "c2" / aiperf.LOG).exists(), 240, "the sweep to start aiperf")
        started = descendants(bench.pid)
        assert len(started) > 5  # dynamo serve's processes and aiperf's
        bench.send_signal(signal.SIGINT)
        assert bench.wait(120) == 130
    finally:
        if bench.poll() is None:  # the test failed: stop everything by force
            for pid in [bench.pid, *descendants(bench.pid)]:
                os.kill(pid, signal.SIGKILL)
        bench.wait()
    wait_for(lambda: not any(alive(pid) for pid in started), 30, "every process the sweep started to exit")
    assert b"bench interrupted" in bench.stdout.read()


SERVE_AND_WAIT = """
import sys, time
from pathlib import Path
from dynamo_oss.bench.served import served_graph
with served_graph(Path(sys.argv[1]), Path(sys.argv[2]), engine="mocker", time_scale=1.0):
    print("ready", flush=True)
    time.sleep(600)  # the benchmark's work; the test ends it with SIGTERM
"""


@pytest.mark.graph
def test_sigterm_to_a_benchmark_stops_its_served_graph(tmp_path: Path) -> None:
    """A `kill` or a CI timeout reaches a benchmark as SIGTERM: the graph it serves stops with it."""
    script = subprocess.Popen(
        [sys.executable, "-c", SERVE_AND_WAIT, str(write_graph(tmp_path)), str(tmp_path / "run")],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    started: set[int] = set()
    try:
        assert script.stdout is not None and script.stdout.readline().strip() == "ready"
        started = descendants(script.pid)
        assert len(started) > 3  # dynamo serve, etcd, NATS, the frontend, workers
        script.send_signal(signal.SIGTERM)
        script.wait(120)
        wait_for(lambda: not any(alive(pid) for pid in started), 60, "every process of the served graph to exit")
    finally:  # on failure, nothing the test started may outlive it
        for pid in [script.pid, *started, *descendants(script.pid)]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        script.wait()
