"""The latency this gateway process's answers meet now, as clients meet it: what holds batch work back
(batches/pacing.py) when the graph stops meeting its targets, or starts queueing.

Each answer the gateway parses from a completion stream times itself (`StreamTiming`): from the completion
being asked for to its first tokens (TTFT), and its inter-token latency over the whole answer as aiperf
defines it, (last - first) / (tokens - 1). `RecentLatency` keeps the last of them, judged at their p90 (the
targets are each request's): the TTFT of interactive
requests (a batch request's prompt may be of any length, and says nothing of the TTFT an interactive client
meets), the ITL of every answer, batch requests' included (they decode in the same batches as everyone's), and
the TTFT of batch requests against the lowest the batch has met, which shows a queue building in front of
prefill before any interactive request meets it. A request still waiting for its first token past the target
counts already, so a graph that stops answering is seen at once, not when its answers come.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field

from dynamo_oss.graph.schema import BatchTargetsSection

KEPT = 4096  # samples of each kind kept at most
QUEUE_FACTOR = 3.0  # batch TTFT this many times its floor: batch requests are queueing for prefill
MIN_SAMPLES = 8  # batch first tokens needed to judge them
FLOOR_S = 300.0  # what batch requests meet unhindered is the lowest of this long
NORMAL_TOKENS = 1024  # a prompt's TTFT is judged per token of it and this many more


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


@dataclass
class _Waiting:
    timing: StreamTiming
    interactive: bool
    prompt_tokens: int


class RecentLatency:
    """The last seconds of this process's answers' latency."""

    def __init__(self) -> None:
        self.waiting: dict[int, _Waiting] = {}  # answers without their first token yet
        self.batch: dict[int, StreamTiming] = {}  # batch answers under way
        self.ttft: deque[tuple[float, float]] = deque(maxlen=KEPT)  # (when, seconds) of interactive first tokens
        # (asked, first, prompt tokens) of batch requests' first tokens
        self.batch_ttft: deque[tuple[float, float, int]] = deque(maxlen=KEPT)
        self.itl: deque[tuple[float, float]] = deque(maxlen=KEPT)  # (when, seconds) of every answer that ended

    def began(self, timing: StreamTiming, interactive: bool, prompt_tokens: int = 0) -> None:
        self.waiting[id(timing)] = _Waiting(timing, interactive, prompt_tokens)
        if not interactive:
            self.batch[id(timing)] = timing

    def ended(self, timing: StreamTiming) -> None:
        """The answer has ended (its exchange is over): now."""
        timing.ended_at = timing.ended_at or time.monotonic()
        self.batch.pop(id(timing), None)
        waited = self.waiting.pop(id(timing), None)
        if waited is not None and timing.first_at is not None:
            self._first_token(waited)
        itl = timing.itl_s
        if itl is not None:
            self.itl.append((time.monotonic(), itl))

    def judge(self, targets: BatchTargetsSection, window_s: float, now: float | None = None) -> Judgement:
        """Whether the interactive TTFT p90 and the ITL p90 of every answer over the last `window_s` kept `targets`:
        the targets are each request's, so nine in ten must keep them, not the mean."""
        now = time.monotonic() if now is None else now
        self._look()
        since = now - window_s
        ttfts = [seconds for at, seconds in self.ttft if at >= since]
        late = targets.ttft_ms / 1000
        overdue = [
            now - w.timing.asked_at for w in self.waiting.values() if w.interactive and now - w.timing.asked_at > late
        ]
        itls = [seconds for at, seconds in self.itl if at >= since]
        ttft_ms = _quantile(ttfts + overdue, 0.9) * 1000 if ttfts or overdue else None
        itl_ms = _quantile(itls, 0.9) * 1000 if itls else None
        if ttft_ms is not None and ttft_ms > targets.ttft_ms:
            return Judgement(True, f"interactive TTFT p90 {ttft_ms:.0f} ms > {targets.ttft_ms:g} ms")
        if itl_ms is not None and itl_ms > targets.itl_ms:
            return Judgement(True, f"ITL p90 {itl_ms:.1f} ms > {targets.itl_ms:g} ms")
        return Judgement(False, "within targets")

    def batch_queueing(self, window_s: float, now: float | None = None) -> bool:
        """Batch requests wait for prefill: their median TTFT over the last `window_s` is past QUEUE_FACTOR times
        the lowest tenth of the last FLOOR_S (what the batch meets when nothing is in its way), each TTFT taken per
        prompt token (and NORMAL_TOKENS more, for what any prompt costs), so long prompts beside short ones are not
        taken for a queue."""
        now = time.monotonic() if now is None else now
        self._look()
        kept = [(first, (first - asked) / (tokens + NORMAL_TOKENS)) for asked, first, tokens in self.batch_ttft]
        recent = [seconds for first, seconds in kept if first >= now - window_s]
        floor = [seconds for first, seconds in kept if first >= now - FLOOR_S]
        if len(recent) < MIN_SAMPLES or len(floor) < MIN_SAMPLES:
            return False
        return _quantile(recent, 0.5) > QUEUE_FACTOR * _quantile(floor, 0.1)

    def batch_answered_since(self, since: float) -> bool:
        """A batch request asked for at `since` or later has had its first tokens: a change of the batch's pace
        made then is seen in what the graph does."""
        self._look()
        return any(asked >= since for asked, _, _ in self.batch_ttft)

    def batch_prefill_tokens(self) -> int:
        """Prompt tokens of the batch requests still waiting for their first token: what they add to the
        engines' prefill backlog, which the planner takes off (planner/batch_work.py)."""
        return sum(w.prompt_tokens for w in self.waiting.values() if not w.interactive and w.timing.first_at is None)

    def batch_decoding(self) -> int:
        """Batch requests that have had their first token and are still generating: sequences they hold in the
        decode pools, which the planner takes off (planner/batch_work.py)."""
        return sum(1 for timing in self.batch.values() if timing.first_at is not None)

    def _look(self) -> None:
        """Answers that have had their first token since the last look: their TTFT is a sample."""
        for key, waited in list(self.waiting.items()):
            if waited.timing.first_at is not None:
                self._first_token(waited)
                del self.waiting[key]

    def _first_token(self, waited: _Waiting) -> None:
        timing = waited.timing
        assert timing.first_at is not None
        if waited.interactive:
            self.ttft.append((timing.first_at, timing.first_at - timing.asked_at))
        else:
            self.batch_ttft.append((timing.asked_at, timing.first_at, waited.prompt_tokens))


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]
