"""The suite's fixtures and hooks. What tests share that is not a fixture is in tests/support."""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from tests.support.graphs import AUTOSCALE_SLOW, shipped_graph_on_free_ports, write_autoscaled_graph
from tests.support.served import ServedGraph, serving

# CI's environment sets PYTHONDONTWRITEBYTECODE, so each of the hundreds of Python processes the suite
# starts (eight a graph) would compile every module it imports afresh, most of a graph's start-up CPU:
# let the suite cache bytecode, as a developer's machine does.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# The fixtures that serve a graph (or start Dynamo's frontend): a test using one, directly or through
# another fixture, carries the `graph` marker; a test that serves one itself is marked where it is.
GRAPH_FIXTURES = {
    "disagg",
    "fast_graph",
    "autoscaled",
    "sla_scaled",
    "stock_mocker_endpoint",
    "two_decoders",
    "own_graph",
    "sweep_folder",
    "frontend_prompts",
    "keyed_graph",
    "slowed_pair",
}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        graphs = GRAPH_FIXTURES & set(getattr(item, "fixturenames", ()))
        if graphs:
            item.add_marker(pytest.mark.graph)
        group = _shared_fixture_group(item)
        if group:
            # One worker runs the tests that share a fixture, so their graph or model folder is made
            # once; every other test goes to whichever worker is free (`--dist loadgroup`).
            item.add_marker(pytest.mark.xdist_group(group))
    # The longest tests first, then those that serve graphs (seconds each), the quick ones last: xdist
    # hands out work in this order, and quick tests fill the workers' last minutes instead of a long
    # test starting last and running alone. Otherwise in collection order.
    items.sort(key=lambda item: (item.get_closest_marker("long") is None, item.get_closest_marker("graph") is None))


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop a session's shared graph after the last test of this worker that uses it, not when the
    session ends: its tests run one after another (xdist hands out their group at once), and an
    idle README graph keeps using 8% of a core, its planner looking at the load every five seconds."""
    for name in GRAPH_FIXTURES & set(item.fixturenames):
        definition = item._fixtureinfo.name2fixturedefs[name][-1]
        if definition.scope == "session" and (nextitem is None or name not in nextitem.fixturenames):
            definition.finish(item._request)


def _shared_fixture_group(item: pytest.Item) -> str | None:
    """The worker group of a test using a fixture of the suite's own (not pytest's) wider than a test:
    the fixture's name for a session-scoped one (shared across modules), else the module."""
    shared = [
        chain[-1]
        for chain in item._fixtureinfo.name2fixturedefs.values()
        if chain[-1].scope != "function" and chain[-1].baseid
    ]
    sessions = sorted(definition.argname for definition in shared if definition.scope == "session")
    return sessions[0] if sessions else item.module.__name__ if shared else None


@pytest.fixture
def dynamo_planner_config(monkeypatch: pytest.MonkeyPatch) -> type:
    """Dynamo's PlannerConfig, imported as its process imports it: with aisimulate_core's stand-in
    on the path where the real one is missing (dynamo_oss/planner/__main__.py)."""
    from dynamo_oss.planner.__main__ import STANDINS

    monkeypatch.syspath_prepend(str(STANDINS))
    from dynamo.planner.config.planner_config import PlannerConfig

    return PlannerConfig


@pytest.fixture
def graph_folder(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture(scope="session")
def disagg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedGraph]:
    """The README's graph (graphs/disagg.yaml) served as the README serves it, on the mocker and free
    ports: one start for every module that only sends it traffic (serve, observability, conformance),
    on the one worker their group runs on."""
    folder = tmp_path_factory.mktemp("disagg")
    with serving(shipped_graph_on_free_ports("disagg.yaml", folder), folder / "run") as served:
        yield served


@pytest.fixture(scope="session")
def autoscaled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedGraph]:
    """The load-autoscaled graph (tests.support.graphs.write_autoscaled_graph), its endpoint on
    0.0.0.0 behind a key: the planner's load ramp runs on it, and the exposure tests list its
    listeners (every kind of process a graph starts, Dynamo's planner included)."""
    folder = tmp_path_factory.mktemp("autoscale")
    with serving(
        write_autoscaled_graph(folder, "0.0.0.0"), folder / "run", "--mocker-time-scale", str(AUTOSCALE_SLOW)
    ) as served:
        yield served


class BaseLlmArgs(BaseModel):
    """The fields dynamo.trtllm.backend_args reads defaults from."""

    max_batch_size: int = 2048
    max_num_tokens: int = 8192
    max_seq_len: int | None = None
    max_beam_width: int = 1


@pytest.fixture(scope="module")
def trtllm_parse_args():  # noqa: ANN201 - Dynamo's parse_args
    """Dynamo 1.6's own TensorRT-LLM argument parser (dynamo/trtllm/args.py).

    It imports `tensorrt_llm.llmapi.llm_args` at module level only to read four defaults of
    BaseLlmArgs for its --help; TensorRT-LLM cannot be installed here, so a stand-in provides those
    four fields, at TensorRT-LLM's defaults."""
    llm_args = types.ModuleType("tensorrt_llm.llmapi.llm_args")
    llm_args.BaseLlmArgs = BaseLlmArgs
    llmapi = types.ModuleType("tensorrt_llm.llmapi")  # no BuildConfig: TensorRT-LLM >= 1.3.0rc21
    llmapi.llm_args = llm_args
    package = types.ModuleType("tensorrt_llm")
    package.llmapi = llmapi
    stand_ins = {"tensorrt_llm": package, "tensorrt_llm.llmapi": llmapi, "tensorrt_llm.llmapi.llm_args": llm_args}
    with pytest.MonkeyPatch.context() as patch:
        for name, module in stand_ins.items():
            patch.setitem(sys.modules, name, module)
        from dynamo.trtllm.args import parse_args

        yield parse_args
