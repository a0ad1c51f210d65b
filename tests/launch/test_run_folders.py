"""Which run folder `dynamo status`, `dynamo scale` and `dynamo dashboard snapshot` talk to: the graph
named, or the one live run, by start time, never the folder written last (every state write touches
its mtime, so with two graphs served the last-written pick resized the other graph)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import pytest

from dynamo_oss.catalog.errors import UserError
from dynamo_oss.launch.run_dirs import find_run, runs_root
from dynamo_oss.launch.state import RunState
from tests.support.commands import dynamo

DEAD_PID = 2**31 - 1  # above any pid_max: no such process


def _run(cache: Path, folder: str, graph: str | None, how: Literal["live", "stopped", "died"], mtime: float) -> Path:
    """A run folder as `dynamo serve` leaves it (`graph` None: its state was never written), with a
    misleading mtime. A live run's launcher is this process; a stopped one's too, but it said so."""
    run = runs_root(cache) / folder
    run.mkdir(parents=True)
    if graph is not None:
        RunState(
            graph=graph,
            endpoint=f"http://127.0.0.1:8000/v1#{folder}",
            served_name="gpt-oss-120b",
            supervisor_pid=DEAD_PID if how == "died" else os.getpid(),
            ready=True,
            stopped=how == "stopped",
            pools=[],
            processes=[],
        ).write(run)
    os.utime(run, (mtime, mtime))
    return run


@pytest.fixture
def two_live(tmp_path: Path) -> tuple[Path, Path]:
    """disagg started first yet written last; agg started later, its folder older by mtime."""
    disagg = _run(tmp_path, "disagg-20260101-100000", "gpt-oss-120b-disagg", "live", mtime=3000)
    agg = _run(tmp_path, "agg-20260101-110000", "gpt-oss-120b-agg", "live", mtime=1000)
    return disagg, agg


def test_a_graph_name_finds_its_own_run_whichever_folder_changed_last(
    tmp_path: Path, two_live: tuple[Path, Path]
) -> None:
    disagg, agg = two_live
    assert find_run("agg", tmp_path) == agg and find_run("gpt-oss-120b-agg", tmp_path) == agg
    assert find_run("disagg", tmp_path) == disagg and find_run("gpt-oss-120b-disagg", tmp_path) == disagg


def test_no_name_with_two_live_runs_asks_for_one(tmp_path: Path, two_live: tuple[Path, Path]) -> None:
    disagg, agg = two_live
    with pytest.raises(UserError) as refused:
        find_run(None, tmp_path)
    message = str(refused.value)
    assert "2 runs are live" in message and "name the graph's name or its run folder" in message
    assert f"gpt-oss-120b-disagg (disagg)  {disagg}" in message and f"gpt-oss-120b-agg (agg)  {agg}" in message


def test_no_name_picks_the_one_live_run_over_a_newer_stopped_one(tmp_path: Path) -> None:
    live = _run(tmp_path, "agg-20260101-100000", "gpt-oss-120b-agg", "live", mtime=1000)
    _run(tmp_path, "disagg-20260101-120000", "gpt-oss-120b-disagg", "stopped", mtime=3000)
    _run(tmp_path, "disagg-20260101-130000", "gpt-oss-120b-disagg", "died", mtime=2000)  # its launcher died
    assert find_run(None, tmp_path) == live


def test_with_nothing_live_the_latest_started_run_not_the_latest_written(tmp_path: Path) -> None:
    later = _run(tmp_path, "agg-20260101-100000-1", "gpt-oss-120b-agg", "died", mtime=1000)
    _run(tmp_path, "agg-20260101-100000", "gpt-oss-120b-agg", "died", mtime=3000)
    _run(tmp_path, "disagg-20251231-230000", "gpt-oss-120b-disagg", "stopped", mtime=4000)
    assert find_run(None, tmp_path) == later
    assert find_run("agg", tmp_path) == later  # a stopped run can still be shown by name


def test_a_name_prefers_its_live_run_to_a_later_stopped_one(tmp_path: Path) -> None:
    live = _run(tmp_path, "disagg-20260101-100000", "gpt-oss-120b-disagg", "live", mtime=1000)
    _run(tmp_path, "disagg-20260101-120000", "gpt-oss-120b-disagg", "died", mtime=3000)
    assert find_run("disagg", tmp_path) == live


def test_a_graph_is_not_confused_with_one_whose_name_it_begins(tmp_path: Path) -> None:
    disagg = _run(tmp_path, "disagg-20260101-100000", "disagg", "died", mtime=1000)
    disagg_2 = _run(tmp_path, "disagg-2-20260101-120000", "disagg-2", "live", mtime=3000)
    disagg_2_again = _run(tmp_path, "disagg-2-20260101-130000-1", None, "died", mtime=4000)
    assert find_run("disagg", tmp_path) == disagg
    assert find_run("disagg-2", tmp_path) == disagg_2
    RunState.read(disagg_2).model_copy(update={"stopped": True}).write(disagg_2)  # now the latest started wins
    assert find_run("disagg-2", tmp_path) == disagg_2_again and find_run("disagg", tmp_path) == disagg


def test_two_live_runs_of_one_graph_ask_for_the_folder(tmp_path: Path) -> None:
    first = _run(tmp_path, "agg-20260101-100000", "gpt-oss-120b-agg", "live", mtime=1000)
    second = _run(tmp_path, "agg-copy-20260101-110000", "gpt-oss-120b-agg", "live", mtime=2000)
    with pytest.raises(UserError, match="2 runs of gpt-oss-120b-agg are live; name its run folder") as refused:
        find_run("gpt-oss-120b-agg", tmp_path)
    assert str(first) in str(refused.value) and str(second) in str(refused.value)
    assert find_run("agg-copy", tmp_path) == second  # the file's name tells them apart


def test_an_unknown_name_says_which_graphs_have_runs(tmp_path: Path, two_live: tuple[Path, Path]) -> None:
    _run(tmp_path, "never-written-20260101-090000", None, "died", mtime=1000)
    with pytest.raises(UserError) as refused:
        find_run("agg-h200", tmp_path)
    assert str(refused.value).endswith(
        "graphs with runs: gpt-oss-120b-agg (agg), gpt-oss-120b-disagg (disagg), never-written"
    )
    assert "no run of a graph named agg-h200" in str(refused.value)


def test_a_folder_is_taken_as_it_is(tmp_path: Path, two_live: tuple[Path, Path]) -> None:
    elsewhere = tmp_path / "my-run"
    elsewhere.mkdir()
    assert find_run(str(elsewhere), tmp_path) == elsewhere
    assert find_run(str(two_live[0]), tmp_path) == two_live[0]
    with pytest.raises(UserError, match="no such run folder"):
        find_run(str(tmp_path / "gone"), tmp_path)


def test_no_runs_at_all(tmp_path: Path) -> None:
    (runs_root(tmp_path) / "not-a-run").mkdir(parents=True)  # no start time in its name: not one of ours
    with pytest.raises(UserError, match="no run folder under .*: start a graph with `dynamo serve GRAPH`"):
        find_run(None, tmp_path)
    with pytest.raises(UserError, match="no run folder under"):
        find_run("agg", tmp_path)


def test_status_and_scale_take_a_graph_name(
    tmp_path: Path, two_live: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DYNAMO_OSS_CACHE", str(tmp_path))
    disagg, agg = two_live
    code, out, err = dynamo("status", "agg")
    assert code == 0, err
    assert out.startswith("graph gpt-oss-120b-agg: ready, http://127.0.0.1:8000/v1#agg-")
    assert f"  run folder: {agg}\n" in out
    code, out, err = dynamo("status", "gpt-oss-120b-disagg", "--json")
    assert code == 0 and '"graph": "gpt-oss-120b-disagg"' in out, err
    # No control API in these fake runs: the refusal names the folder scale picked.
    code, out, err = dynamo("scale", "decode", "2", "disagg")
    assert code == 2 and f"no launcher is running in {disagg}:" in err
    code, out, err = dynamo("scale", "decode", "2")
    assert code == 2 and "2 runs are live" in err and str(disagg) in err and str(agg) in err
    code, out, err = dynamo("scale", "decode", "2", "agg-h200")
    assert code == 2 and "graphs with runs: gpt-oss-120b-agg (agg), gpt-oss-120b-disagg (disagg)" in err


def test_the_help_says_a_graph_name_or_a_run_folder() -> None:
    for command in (["status"], ["scale"], ["dashboard", "snapshot"]):
        code, out, _ = dynamo(*command, "--help")
        assert code == 0 and "GRAPH|RUN_DIR" in out and "graph's name" in out and "run folder" in out, command
