"""Running the `dynamo` command from a test: in this process, or as a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DYNAMO = [sys.executable, "-m", "dynamo_oss.cli"]


def dynamo(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the `dynamo` command in this process: (exit status, stdout, stderr)."""
    from dynamo_oss.cli import main

    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_dynamo(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*DYNAMO, *args], capture_output=True, text=True, timeout=timeout_s, cwd=REPO)
