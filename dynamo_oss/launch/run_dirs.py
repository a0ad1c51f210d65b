"""Where a served graph keeps its logs and state when no --run-dir is given.

Each run gets its own folder under the cache, named by graph and start time, so the logs of a
run that ended (cleanly or not) are still there to read; the oldest finished runs beyond
`KEEP_RUNS` are removed when a new one starts. `find_run` is how every command about a served
graph finds its folder: by the graph's name, or the one live run.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from pydantic import ValidationError

from dynamo_oss.assets.cache import resolve_cache_root
from dynamo_oss.catalog.errors import UserError
from dynamo_oss.launch.state import RunState

KEEP_RUNS = 10
_STAMP = "%Y%m%d-%H%M%S"
# `{graph}-{stamp}[-N]`, the stamp parsed strictly so that `disagg` is no prefix of `disagg-2`'s runs.
_RUN_NAME = re.compile(r"(?P<stem>.+)-(?P<stamp>\d{8}-\d{6})(?:-(?P<n>\d+))?")


def runs_root(cache_root: Path | None = None) -> Path:
    return resolve_cache_root(cache_root) / "runs"


def new_run_dir(graph: str, cache_root: Path | None = None, keep: int = KEEP_RUNS) -> Path:
    """A fresh folder for a run of `graph`, after pruning the oldest finished runs so that at most `keep`
    runs remain with it (live runs count, and are never pruned)."""
    root = runs_root(cache_root)
    root.mkdir(parents=True, exist_ok=True)
    _prune(root, keep - 1)
    stamp = time.strftime(_STAMP)
    for attempt in range(100):
        folder = root / (f"{graph}-{stamp}" if attempt == 0 else f"{graph}-{stamp}-{attempt}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise UserError(f"{root}: cannot make a run folder for {graph}")


@dataclass(frozen=True)
class Run:
    """A run folder under the cache, with what finding a graph's run needs to know of it."""

    folder: Path
    stem: str  # the graph file's stem, from the folder's name
    started: tuple[datetime, int]  # the start time in the folder's name, then its -N: never the mtime
    graph: str | None  # the graph's `name:`, from state.json once the launcher wrote it
    live: bool

    @property
    def names(self) -> set[str]:
        return {self.stem} | ({self.graph} if self.graph else set())

    @property
    def label(self) -> str:
        return f"{self.graph} ({self.stem})" if self.graph and self.graph != self.stem else self.stem


def find_run(target: str | None, cache_root: Path | None = None) -> Path:
    """The run folder a command about a served graph means by `target`: a folder path, or a graph's name
    (its `name:` or its file's stem) for its live run, else its latest-started one; with no target, the
    one live run, else the latest-started run. Never "the folder written last": every state write
    touches that, so with two graphs served it would pick either one."""
    if target is not None:
        folder = Path(target).expanduser()
        if folder.is_dir():
            return folder
        if "/" in target or os.sep in target:
            raise UserError(f"{target}: no such run folder")
    root = runs_root(cache_root)
    every = _runs(root)
    if not every:
        raise UserError(f"no run folder under {root}: start a graph with `dynamo serve GRAPH`, or name its folder")
    runs = every if target is None else [run for run in every if target in run.names]
    if not runs:
        known = ", ".join(sorted({run.label for run in every}))
        raise UserError(f"no run of a graph named {target} under {root}; graphs with runs: {known}")
    live = sorted((run for run in runs if run.live), key=lambda run: run.started)
    if len(live) > 1:
        listed = "\n".join(f"  {run.label}  {run.folder}" for run in live)
        of = f" of {target}" if target else ""
        name = "its run folder" if target else "the graph's name or its run folder"
        raise UserError(f"{len(live)} runs{of} are live; name {name}:\n{listed}")
    if live:
        return live[0].folder
    return max(runs, key=lambda run: run.started).folder


def _runs(root: Path) -> list[Run]:
    """The run folders `new_run_dir` made under `root`; any other folder there is not ours to pick."""
    runs: list[Run] = []
    for folder in root.iterdir() if root.is_dir() else []:
        named = _RUN_NAME.fullmatch(folder.name)
        if not folder.is_dir() or named is None:
            continue
        try:
            started = datetime.strptime(named["stamp"], _STAMP)
        except ValueError:
            continue
        state = _state(folder)
        graph = state.graph if state is not None else None
        runs.append(Run(folder, named["stem"], (started, int(named["n"] or 0)), graph, _live(state)))
    return runs


def _prune(root: Path, keep: int) -> None:
    """Remove the oldest finished runs until at most `keep` runs remain; a live run is never touched."""
    runs = [run for run in root.iterdir() if run.is_dir()]
    finished = sorted((run for run in runs if _finished(run)), key=lambda run: run.stat().st_mtime)
    for run in finished[: max(len(runs) - keep, 0)]:
        shutil.rmtree(run, ignore_errors=True)


def _finished(run: Path) -> bool:
    return not _live(_state(run))


def _live(state: RunState | None) -> bool:
    """Its launcher still runs: a run that stopped, or whose launcher died, is finished."""
    return state is not None and not state.stopped and state.supervisor_alive


def _state(run: Path) -> RunState | None:
    """The run's state; None when it never started, or the file is not ours."""
    try:
        return RunState.read(run)
    except (UserError, ValidationError):
        return None
