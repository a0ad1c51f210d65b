"""Waiting on a condition with a deadline, never a bare sleep."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest


def wait_for(condition: Callable[[], object], timeout_s: float, what: str, every_s: float = 0.2) -> object:
    """Poll `condition` every `every_s` until it returns something truthy; fail the test at the deadline.
    A condition that starts a process to look costs CPU at each poll: give it a longer `every_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(every_s)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has exited; only its parent has not reaped it yet.
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "State:\tZ" not in status.read_text()
