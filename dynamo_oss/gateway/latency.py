"""The latency this gateway process's answers meet now, as clients meet it: what holds batch work back
(batches/pacing.py) when the graph stops meeting its targets.

Each answer the gateway parses from a completion stream times itself (`StreamTiming`): from the completion
being asked for to its first tokens (TTFT), and its inter-token latency over the whole answer as aiperf
defines it, (last - first) / (tokens - 1). `RecentLatency` keeps the last seconds of them: the TTFT of
interactive requests (a batch request's prompt may be of any length, and says nothing of the TTFT an
interactive client meets), and the ITL of every answer, batch requests' included (they decode in the same
batches as everyone's). A request still waiting for its first token past the target counts already, so a
graph that stops answering is seen at once, not when its answers come.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field

from dynamo_oss.graph.schema import BatchTargetsSection

KEPT = 4096  # samples of each kind kept at most


@dataclass
class StreamTiming:
    """One answer's times (monotonic seconds), as its completion streams."""

    asked_at: float = field(default_factory=time.monotonic)
    first_at: float | None = None
    ended_at: float | None = None
    tokens: int = 0  # generated so far

    def first(self) -> None:
        self.first_at = time.monotonic()

    @property
    def itl_s(self) -> float | None:
        if self.first_at is None or self.ended_at is None or self.tokens < 2:
            return None
        return (self.ended_at - self.first_at) / (self.tokens - 1)


@dataclass(frozen=True)
class Judgement:
    """Whether the last seconds met the targets, and why not."""

    over: bool
    why: str
    samples: int


class RecentLatency:
    """The last seconds of this process's answers' latency."""

    def __init__(self) -> None:
        self.waiting: dict[int, StreamTiming] = {}  # interactive answers without their first token yet
        self.ttft: deque[tuple[float, float]] = deque(maxlen=KEPT)  # (when, seconds) of interactive first tokens
        self.itl: deque[tuple[float, float]] = deque(maxlen=KEPT)  # (when, seconds) of every answer that ended

    def began(self, timing: StreamTiming, interactive: bool) -> None:
        if interactive:
            self.waiting[id(timing)] = timing

    def ended(self, timing: StreamTiming) -> None:
        """The answer has ended (its exchange is over): now."""
        timing.ended_at = timing.ended_at or time.monotonic()
        waited = self.waiting.pop(id(timing), None)
        if waited is not None and timing.first_at is not None:
            self.ttft.append((timing.first_at, timing.first_at - timing.asked_at))
        itl = timing.itl_s
        if itl is not None:
            self.itl.append((time.monotonic(), itl))

    def judge(self, targets: BatchTargetsSection, window_s: float, now: float | None = None) -> Judgement:
        """Whether the interactive TTFT p90 and the mean ITL over the last `window_s` kept `targets`."""
        now = time.monotonic() if now is None else now
        self._move_first_tokens()
        since = now - window_s
        ttfts = [seconds for at, seconds in self.ttft if at >= since]
        late = targets.ttft_ms / 1000
        overdue = [now - timing.asked_at for timing in self.waiting.values() if now - timing.asked_at > late]
        itls = [seconds for at, seconds in self.itl if at >= since]
        ttft_ms = _p90(ttfts + overdue) * 1000 if ttfts or overdue else None
        itl_ms = sum(itls) / len(itls) * 1000 if itls else None
        if ttft_ms is not None and ttft_ms > targets.ttft_ms:
            return Judgement(True, f"interactive TTFT p90 {ttft_ms:.0f} ms > {targets.ttft_ms:g} ms", len(ttfts))
        if itl_ms is not None and itl_ms > targets.itl_ms:
            return Judgement(True, f"mean ITL {itl_ms:.1f} ms > {targets.itl_ms:g} ms", len(itls))
        return Judgement(False, "within targets", len(ttfts) + len(itls))

    def _move_first_tokens(self) -> None:
        """Interactive answers that have had their first token since the last look: their TTFT is a sample."""
        for key, timing in list(self.waiting.items()):
            if timing.first_at is not None:
                self.ttft.append((timing.first_at, timing.first_at - timing.asked_at))
                del self.waiting[key]


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]
