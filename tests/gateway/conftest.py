"""Fixtures the gateway's tests share, and gpt-oss's encoding for the tests that render in this process."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import yaml

from dynamo_oss.assets import ENCODINGS_ENV, tiktoken_encodings_dir
from tests.support.graphs import write_graph, write_keyed_graph
from tests.support.hostile_answers import write_trace
from tests.support.ports import free_port_run
from tests.support.served import FAST_MOCKER, SLOW_MOCKER, ServedGraph, serving

# openai-harmony reads o200k_harmony from here (as `dynamo serve` sets it for every process), never the network.
os.environ.setdefault(ENCODINGS_ENV, str(tiktoken_encodings_dir()))


@pytest.fixture(scope="session")
def fast_graph(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedGraph]:
    """The small mocker graph, stepping 20x faster than modelled, shared by the modules that judge
    answers' shape and send nothing that changes the graph (the Responses API, the clients, the
    protocol and hostile requests): one start for all of them, on the one worker their group runs
    on (tests/conftest.py). Its mocker also replays tests.support.hostile_answers."""
    folder = tmp_path_factory.mktemp("fast")
    answers = ("--mocker-responses", str(write_trace(folder / "answers.jsonl")))
    with serving(write_graph(folder), folder / "run", *FAST_MOCKER, *answers) as graph:
        yield graph


@pytest.fixture(scope="session")
def keyed_graph(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedGraph]:
    """The small mocker graph with API keys (tests.support.graphs.KEYS) and the gateway's usage metrics
    on a free port, shared by the modules that call it as tenants (the Messages API, usage per key)."""
    folder = tmp_path_factory.mktemp("keyed")
    with serving(write_keyed_graph(folder), folder / "run", *FAST_MOCKER) as graph:
        yield graph


@pytest.fixture(scope="session")
def slowed_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedGraph]:
    """The small mocker graph with two decode workers, stepping 20x slower than modelled so streams
    stay in flight for seconds, its gateway uncapped: shared by the test that holds a hundred and
    more streams open at once and the one that kills a decode worker mid-stream."""
    folder = tmp_path_factory.mktemp("slowed-pair")
    path = write_graph(folder)
    graph = yaml.safe_load(path.read_text())
    graph["hardware"]["gpus"] = 3
    graph["pools"]["decode"].update(workers=2, system_port=free_port_run(2))  # worker i: system_port + i
    path.write_text(yaml.safe_dump(graph))
    with serving(path, folder / "run", *SLOW_MOCKER) as served:
        yield served
