"""Harmony end to end: `dynamo conformance` against our disaggregated graph on the mocker, served
as the README serves it, passes every case; against Dynamo's stock mocker, which parses no
harmony, it fails and says why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dynamo_oss.assets import ENCODINGS_ENV, model_folder, tiktoken_encodings_dir
from dynamo_oss.catalog.models import GPT_OSS_120B
from dynamo_oss.conformance.cases import CASES
from dynamo_oss.conformance.matrix.cells import Cell, every_cell
from dynamo_oss.conformance.sequences import SEQUENCES
from tests.support.commands import run_dynamo
from tests.support.ports import free_ports
from tests.support.served import ServedGraph
from tests.support.waiting import wait_for

MODEL = "openai/gpt-oss-120b"


@pytest.fixture(scope="module")
def replay_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    trace = tmp_path_factory.mktemp("trace") / "conformance.jsonl"
    result = run_dynamo("conformance", "--write-mocker-responses", str(trace))
    assert result.returncode == 0, result.stdout + result.stderr
    return trace


def conformance(url: str) -> tuple[int, list[dict]]:
    result = run_dynamo("conformance", url, "--model", MODEL, "--json", timeout_s=300)
    return result.returncode, json.loads(result.stdout)


def test_replay_trace_holds_every_replayed_case(replay_trace: Path) -> None:
    rows = [json.loads(line) for line in replay_trace.read_text().splitlines()]
    assert {row["request_id"] for row in rows} == {case.name for case in CASES if case.replay}
    assert all(row["output_length"] == len(row["output_token_ids"]) for row in rows)
    # Every replayed completion ends as a model's would: <|return|> (200002) or <|call|> (200012).
    assert {row["output_token_ids"][-1] for row in rows} <= {200002, 200012}


def test_every_case_passes_against_the_disaggregated_mocker_graph(disagg: ServedGraph) -> None:
    code, results = conformance(disagg.endpoint.removesuffix("/v1"))  # the root, as aiperf takes it
    failed = {r["case"]: r["reasons"] for r in results if r["verdict"] != "pass"}
    assert failed == {}
    assert code == 0
    assert len(results) == len(CASES) + len(SEQUENCES)


def test_every_combination_of_the_matrix_holds_on_the_readme_graph(disagg: ServedGraph) -> None:
    result = run_dynamo(
        "conformance", disagg.endpoint, "--model", MODEL, "--matrix", "--repeat", "1", "--json", timeout_s=300
    )
    rows = json.loads(result.stdout)
    assert len(rows) == len(every_cell())
    failures = {
        Cell(**row["cell"]).label(): {
            name: tally["reasons"] for name, tally in row["tallies"].items() if tally["reasons"]
        }
        for row in rows
        if any(tally["held"] < tally["asked"] for tally in row["tallies"].values())
    }
    assert failures == {}
    assert result.returncode == 0
    # Every property was judged where it applies: JSON in each schema cell that answered in text.
    assert all(row["tallies"]["API shape"]["asked"] == 1 for row in rows)
    assert sum(row["tallies"]["JSON valid"]["asked"] for row in rows) > 0
    # Healthy traffic on every API, tools and schemas included (the suite's and the matrix's):
    # no process of the graph says WARN on the terminal.
    warned = [line for line in disagg.output.read_text().splitlines() if " WARN " in line or "[WRN]" in line]
    assert warned == [], warned


@pytest.fixture
def stock_mocker_endpoint(replay_trace: Path, tmp_path: Path) -> Iterator[str]:
    """Dynamo's frontend and its stock mocker, which registers no gpt-oss parsers: the harmony
    tokens it replays reach clients as text, as on a server with the parsers left out."""
    http_port, system_port = free_ports(2)
    folder = model_folder(GPT_OSS_120B)
    env = {
        **os.environ,
        "DYN_DISCOVERY_BACKEND": "file",
        "DYN_FILE_KV": str(tmp_path / "discovery"),
        ENCODINGS_ENV: str(tiktoken_encodings_dir()),
    }
    log = (tmp_path / "stock.log").open("w")
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "dynamo.frontend", "--http-host", "127.0.0.1", "--http-port", str(http_port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        ),
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dynamo.mocker",
                "--model-path",
                str(folder),
                "--model-name",
                MODEL,
                "--max-model-len",
                "131072",
                "--response-replay-trace-path",
                str(replay_trace),
            ],
            env={**env, "DYN_SYSTEM_PORT": str(system_port)},
            stdout=log,
            stderr=subprocess.STDOUT,
        ),
    ]
    url = f"http://127.0.0.1:{http_port}/v1"

    def served() -> bool:
        try:
            return MODEL in httpx.get(f"{url}/models", timeout=2).text
        except httpx.HTTPError:
            return False

    try:
        wait_for(served, 60, "the stock mocker to be served")
        yield url
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
        log.close()


def test_conformance_fails_a_server_that_leaks_harmony_tokens(stock_mocker_endpoint: str) -> None:
    code, results = conformance(stock_mocker_endpoint)
    assert code == 1
    by_case = {r["case"]: r for r in results}
    assert by_case["final-answer"]["verdict"] == "fail"
    assert any("leak into content" in reason for reason in by_case["final-answer"]["reasons"])
    assert by_case["tool-call"]["verdict"] == "fail"
    assert any("no tool call returned" in reason for reason in by_case["tool-call"]["reasons"])
    # Dynamo's frontend alone serves neither exact count.
    assert by_case["messages-count-tokens"]["verdict"] == by_case["responses-input-tokens"]["verdict"] == "fail"
