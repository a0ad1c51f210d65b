"""The npm clients tests run (Codex CLI, Claude Code), installed once from a pinned lock file, and
run in a process group of their own."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dynamo_oss.assets.cache import build_once, resolve_cache_root


def npm_client(folder: Path, binary: str) -> Path:
    """The `binary` of `folder`'s package-lock.json (npm_packages)."""
    path = npm_packages(folder) / "node_modules" / ".bin" / binary
    assert path.exists(), f"{path} is missing: remove {path.parents[2]} and run again to reinstall"
    return path


def npm_packages(folder: Path) -> Path:
    """The folder where `folder`'s package-lock.json is installed, once, by `npm ci`: a cache folder
    named by the lock file's hash; build_once's file lock and rename keep two xdist workers from
    installing into one folder, and an interrupted install from leaving half a folder."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail(
            f"npm is not on PATH: the test installs {folder}/package-lock.json with `npm ci`; install Node.js with npm"
        )
    lock = (folder / "package-lock.json").read_bytes()
    target = resolve_cache_root() / "clients" / f"npm-{hashlib.sha256(lock).hexdigest()[:16]}"

    def install(into: Path) -> None:
        for name in ("package.json", "package-lock.json"):
            shutil.copy(folder / name, into / name)
        command = [npm, "ci", "--prefix", str(into), "--no-audit", "--no-fund"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            pytest.fail(f"`{' '.join(command)}` did not finish in 600 s")
        if done.returncode != 0:
            pytest.fail(
                f"`{' '.join(command)}` failed with exit status {done.returncode}:\n"
                f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )

    return build_once(target, install)


def run_in_own_group(command: list[str], timeout_s: float, **popen: Any) -> tuple[int | None, str, str]:
    """Run `command` in a process group of its own, so everything it starts (a node wrapper's native
    binary, the shells it starts) is killed at the deadline or if the test stops.
    Returns (exit status, or None at the deadline; stdout; stderr)."""
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **popen,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
        return process.returncode, stdout, stderr
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        return None, stdout, stderr
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # whatever of the group outlived it
        except ProcessLookupError:
            pass
        if process.poll() is None:
            process.kill()
            process.wait()
