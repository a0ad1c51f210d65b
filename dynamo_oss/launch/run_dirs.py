"""Where a served graph keeps its logs and state when no --run-dir is given.

Each run gets its own folder under the cache, named by graph and start time, so the logs of a
run that ended (cleanly or not) are still there to read; the oldest finished runs beyond
`KEEP_RUNS` are removed when a new one starts.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from pydantic import ValidationError

from dynamo_oss.assets.cache import resolve_cache_root
from dynamo_oss.catalog.errors import UserError
from dynamo_oss.launch.state import RunState

KEEP_RUNS = 10


def runs_root(cache_root: Path | None = None) -> Path:
    return resolve_cache_root(cache_root) / "runs"


def new_run_dir(graph: str, cache_root: Path | None = None, keep: int = KEEP_RUNS) -> Path:
    """A fresh folder for a run of `graph`, after pruning the oldest finished runs so that at most `keep`
    runs remain with it (live runs count, and are never pruned)."""
    root = runs_root(cache_root)
    root.mkdir(parents=True, exist_ok=True)
    _prune(root, keep - 1)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for attempt in range(100):
        folder = root / (f"{graph}-{stamp}" if attempt == 0 else f"{graph}-{stamp}-{attempt}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise UserError(f"{root}: cannot make a run folder for {graph}")


def newest_run_dir(cache_root: Path | None = None) -> Path:
    """The most recently started run folder; UserError when there is none."""
    root = runs_root(cache_root)
    runs = [run for run in root.iterdir() if run.is_dir()] if root.is_dir() else []
    if not runs:
        raise UserError(f"no run folder under {root}: start a graph with `dynamo serve GRAPH`, or name its folder")
    return max(runs, key=lambda run: run.stat().st_mtime)


def _prune(root: Path, keep: int) -> None:
    """Remove the oldest finished runs until at most `keep` runs remain; a live run is never touched."""
    runs = [run for run in root.iterdir() if run.is_dir()]
    finished = sorted((run for run in runs if _finished(run)), key=lambda run: run.stat().st_mtime)
    for run in finished[: max(len(runs) - keep, 0)]:
        shutil.rmtree(run, ignore_errors=True)


def _finished(run: Path) -> bool:
    try:
        state = RunState.read(run)
    except (UserError, ValidationError):
        return True  # never started, or not ours to keep
    return state.stopped or not state.supervisor_alive
