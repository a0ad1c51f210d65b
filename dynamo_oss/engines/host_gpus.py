"""The NVIDIA GPUs this host shows, for an engine that needs them to say why it cannot run here."""

from __future__ import annotations

import shutil
import subprocess


def visible_gpu_count() -> int:
    """NVIDIA GPUs this host shows through nvidia-smi (0 when there is no driver)."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=True)
    except (subprocess.SubprocessError, OSError):
        return 0
    return sum(1 for line in listing.stdout.splitlines() if line.startswith("GPU "))


def gpu_shortfall(gpus_needed: int) -> str | None:
    """Why this host's GPUs are too few for `gpus_needed`, or None when they are enough."""
    gpus = visible_gpu_count()
    return f"the graph needs {gpus_needed} NVIDIA GPUs and this host has {gpus}" if gpus < gpus_needed else None
