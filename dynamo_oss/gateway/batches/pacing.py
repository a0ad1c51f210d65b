"""How many batch requests this gateway process may have in flight now: the capacity interactive traffic
leaves, found as TCP finds a link's: a window that grows while the graph meets its targets and nothing queues,
and shrinks when it does not.

Two bounds hold whatever the window says. Over the graph, batch requests hold at most
`gateway.batches.max_share` of `gateway.max_in_flight`, counted in the ledger every process shares (and every
place, where the graph's gateway runs in several), so interactive requests always find room; and a batch
request starts only while the graph is below max_in_flight; interactive requests are admitted without
counting batch requests (fair_share.py), so batch work never turns an interactive request away. Within them, the window follows the latency this process's answers meet (latency.py), judged every
TICK_S over the last LOOK_S:

- the interactive TTFT p90 or the ITL p90 of every answer past nine tenths of the graph's targets (the
  planner's, or gateway.batches.targets; a margin, since the interactive requests meet a spread around the
  p90): the window halves, at most once per HOLD_S, since answers already under way still
  show the load before the cut. At zero no batch request runs until the graph meets its targets again; then
  one does, to see.
- batch requests queueing for prefill (their median TTFT a prompt token three times what they meet when
  nothing is in their way): the graph has no room left, and more batch work would only queue; the window
  shrinks by an eighth (never below one: a queue alone does not stop the batch), at most once per HOLD_S.
- otherwise, while every place in the window is taken and a request sent since the last change has had its
  first tokens (the change is seen in what the graph does: one round trip, as TCP grows once per round trip):
  the window doubles until the first miss or queue (slow start), then grows by one.

A graph without targets runs batch requests up to the share alone.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time

from dynamo_oss.gateway.batches.metrics import DECODING, PREFILL, WINDOW
from dynamo_oss.gateway.fair_share import FairShare, Ticket
from dynamo_oss.gateway.latency import RecentLatency
from dynamo_oss.graph.schema import BatchTargetsSection

log = logging.getLogger("dynamo_oss.gateway.batches")

TICK_S = 1.0  # how often the window is judged
LOOK_S = 10.0  # the latency judged: answers of the last seconds
HOLD_S = 5.0  # after a cut, no other cut (and no growth) for this long
RECHECK_S = 0.25  # a request waiting for room looks at the graph's ledger again this often
MARGIN = 0.9  # the share of the graph's targets batch work holds the graph's latency to


class Pacer:
    """Admission of this process's batch requests (see the module docstring)."""

    def __init__(
        self, fair_share: FairShare, share: int, targets: BatchTargetsSection | None, latency: RecentLatency
    ) -> None:
        self.fair_share, self.share, self.targets, self.latency = fair_share, share, targets, latency
        # Held a tenth inside the targets: at the targets themselves a tenth of the interactive requests would miss.
        self.held_to = (
            BatchTargetsSection(ttft_ms=targets.ttft_ms * MARGIN, itl_ms=targets.itl_ms * MARGIN) if targets else None
        )
        self.window = share if targets is None else 1
        WINDOW.set(self.window)
        self.in_flight = 0
        self.slow_start = True
        self.held_until = 0.0
        self.changed_at = -math.inf  # when the window last moved
        self._room = asyncio.Event()
        self._ticking: asyncio.Task | None = None

    def start(self) -> None:
        if self._ticking is None and self.targets is not None:
            self._ticking = asyncio.get_running_loop().create_task(self._tick_for_ever())

    async def admitted(self) -> Ticket:
        """Wait for room for one batch request, and count it in (give it back with `done`)."""
        while True:
            if self.in_flight < self.window:
                ticket = self.fair_share.admit_batch(self.share)
                if ticket is not None:
                    self.in_flight += 1
                    return ticket
            self._room.clear()
            try:
                await asyncio.wait_for(self._room.wait(), RECHECK_S)
            except TimeoutError:
                pass  # the graph's other processes may have let some go: look at the ledger again

    def done(self, ticket: Ticket) -> None:
        self.in_flight -= 1
        self.fair_share.batch_done(ticket)
        self._room.set()

    def tick(self, now: float | None = None) -> None:
        """Judge the last LOOK_S and move the window."""
        assert self.held_to is not None
        now = time.monotonic() if now is None else now
        judged = self.latency.judge(self.held_to, LOOK_S, now)
        PREFILL.set(self.latency.batch_prefill_tokens())
        DECODING.set(self.latency.batch_decoding())
        if now < self.held_until:
            return
        if judged.over:
            if self.window:
                log.info("batch requests held back to %d at once: %s", self.window // 2, judged.why)
            self._move(self.window // 2, now)
            self.held_until = now + HOLD_S
        elif self.window == 0:
            self._move(1, now)  # the graph meets its targets again: one request, to see
        elif self.latency.batch_queueing(LOOK_S, now):
            self._move(max(1, self.window - max(1, self.window // 8)), now)
            self.held_until = now + HOLD_S
        elif self.in_flight >= self.window and self.latency.batch_answered_since(self.changed_at):
            self._move(min(self.share, self.window * 2 if self.slow_start else self.window + 1), now, grown=True)

    def _move(self, window: int, now: float, grown: bool = False) -> None:
        self.slow_start = self.slow_start and grown
        self.window, self.changed_at = max(0, window), now
        WINDOW.set(self.window)
        self._room.set()

    async def _tick_for_ever(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)  # the controller's period, not a wait on anything
            self.tick()

    async def close(self) -> None:
        if self._ticking is not None:
            self._ticking.cancel()
