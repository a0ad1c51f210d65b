"""Out-of-band exchange between the two workers: JSON documents in a shared folder.

Why files: prefill and decode workers swap NIXL agent metadata and block tables before any
transfer, over whatever side channel the deployment has (Dynamo uses its discovery plane). A
folder both processes see is the smallest such channel that works the same with or without GPUs.
Writes are atomic (write, then rename), and readers wait on a condition with a deadline.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

# The roles, and the documents the workers publish besides their metadata.
PREFILL, DECODE = "prefill", "decode"
TIMINGS, VERIFIED = "timings", "verified"


def publish(folder: Path, name: str, document: dict) -> None:
    """Make `document` visible under `name`, all at once."""
    partial = folder / f".{name}.{os.getpid()}.partial"
    partial.write_text(json.dumps(document))
    partial.rename(folder / f"{name}.json")


def wait_for(folder: Path, name: str, timeout_s: float) -> dict:
    """The document published under `name`; TimeoutError if none appears by the deadline."""
    path = folder / f"{name}.json"
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"nothing published as {name!r} in {folder} within {timeout_s:.0f} s")
        time.sleep(0.01)
    return json.loads(path.read_text())
