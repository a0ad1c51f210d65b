"""Running the `dynamo` command from a test: in this process, or as a subprocess."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DYNAMO = [sys.executable, "-m", "dynamo_oss.cli"]


def dynamo(*args: str) -> tuple[int, str, str]:
    """Run the `dynamo` command in this process, from the repository's root: (exit status, stdout, stderr)."""
    from dynamo_oss.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(REPO), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exit_:  # argparse refusing a flag
            code = exit_.code
    return code, out.getvalue(), err.getvalue()


# Commands that take over the process's signals or run until stopped: always a process of their own.
OWN_PROCESS = {"serve", "bench"}


def run_dynamo(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
    """`dynamo ARGS` from the repository's root: its exit status and output. Commands that only read,
    write files or call a graph's APIs run in this process (a subprocess costs a CPU-second of imports
    each time, and the suite runs dozens); `serve` and `bench` run as a subprocess, within `timeout_s`."""
    if args[0] in OWN_PROCESS:
        return subprocess.run([*DYNAMO, *args], capture_output=True, text=True, timeout=timeout_s, cwd=REPO)
    return subprocess.CompletedProcess([*DYNAMO, *args], *dynamo(*args))
