"""How busy this machine's cores were during a run: a live benchmark on one host measures the
host as much as the deployment once every core is busy, and must say so."""

from __future__ import annotations

import threading
import time
from pathlib import Path

PROC_STAT = Path("/proc/stat")
INTERVAL_S = 0.25


def _jiffies() -> tuple[int, int] | None:
    """(busy, total) CPU time of all cores since boot; None where /proc/stat does not exist."""
    try:
        fields = [int(v) for v in PROC_STAT.read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user
    return total - idle, total


class CpuSampler:
    """Samples /proc/stat in a thread while a run goes on; `busy_between` answers for any window."""

    def __init__(self) -> None:
        self._samples: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="cpu-sampler", daemon=True)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while True:
            jiffies = _jiffies()
            if jiffies is not None:
                self._samples.append((time.time(), *jiffies))
            if self._stop.wait(INTERVAL_S):
                return

    def busy_between(self, start_s: float, end_s: float) -> float | None:
        """Share of all cores busy from `start_s` to `end_s` (epoch seconds); None without two samples."""
        inside = [s for s in self._samples if start_s - INTERVAL_S <= s[0] <= end_s + INTERVAL_S]
        if len(inside) < 2 or inside[-1][2] == inside[0][2]:
            return None
        return (inside[-1][1] - inside[0][1]) / (inside[-1][2] - inside[0][2])
