"""The header every results.json starts with: which card, driver and software produced the numbers.

Why: a number is only comparable with one from the same card and stack (the device tool may hand
out an H100 or an H200), so every run records them the same way.
"""

from __future__ import annotations

import subprocess


def _smi(*args: str) -> str:
    try:
        return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"nvidia-smi failed: {error}"


def device_header(topology: bool = False) -> dict[str, object]:
    """GPU name(s), memory and driver from nvidia-smi; torch, CUDA and Triton versions; optionally the link topology."""
    header: dict[str, object] = {
        "gpus": _smi("--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"),
    }
    try:
        import torch
    except ImportError:
        return header
    if torch.cuda.is_available():
        header["device"] = torch.cuda.get_device_name()
    header["torch"] = torch.__version__
    header["cuda"] = torch.version.cuda
    try:
        import triton

        header["triton"] = triton.__version__
    except ImportError:
        header["triton"] = None
    if topology:
        header["topology"] = _smi("topo", "-m")
    return header
