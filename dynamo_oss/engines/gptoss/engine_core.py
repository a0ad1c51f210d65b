"""The engine's step loop, on a thread of its own (a forward step holds its thread for the GPU's time):
requests come in through `submit`, and every token, finish and failure goes out through the request's
sink, called on the loop's thread; between steps it takes in what arrived, gives back handoffs read or
timed out, and tells Dynamo what the step did (forward-pass metrics, KV events, the KV snapshot).

All scheduler and KV-cache state is touched by this thread alone: `submit` and `abort` only queue.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dynamo_oss.catalog.models import ModelShape
from dynamo_oss.engines.gptoss.handoff import HandoffLedger, KvHandoff, describe, transfer_pairs
from dynamo_oss.engines.gptoss.kv_layout import PoolName
from dynamo_oss.engines.gptoss.metrics import forward_pass_fields, kv_event_batch, kv_snapshot
from dynamo_oss.engines.gptoss.model_runner import ModelRunner, step_batch
from dynamo_oss.engines.gptoss.scheduler import Scheduler, SequenceOutput
from dynamo_oss.engines.gptoss.sequence import Sequence

IDLE_WAIT_S = 0.05  # how long an idle loop waits for work before it looks at holds again
RECEIVING_WAIT_S = 0.002  # ... and, while KV is on the way, at transfers: each wait adds to a request's TTFT

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Emitted:
    """What a request's sink receives: a token (with the finish it brings), or the failure that ended it."""

    token: int | None = None
    finish_reason: str | None = None
    handoff: KvHandoff | None = None  # a prefill's descriptor, on its one output
    error: str | None = None


Sink = Callable[[Emitted], None]


@dataclass
class Publishers:
    """Where the loop tells Dynamo what it did; each set by the worker once its publisher exists."""

    forward_pass: Callable[[dict[str, Any]], None] | None = None
    kv_events: Callable[[list[dict[str, Any]]], None] | None = None
    snapshot: Callable[[Any], None] | None = None


@dataclass
class _Submitted:
    seq: Sequence
    sink: Sink
    handoff: KvHandoff | None = None
    spans: Mapping[PoolName, range] | None = None


@dataclass
class EngineCore:
    scheduler: Scheduler
    runner: ModelRunner
    shape: ModelShape
    ledger: HandoffLedger | None = None  # the prefill role's
    publishers: Publishers = field(default_factory=Publishers)
    clock: Callable[[], float] = time.monotonic
    _inbox: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    _sinks: dict[str, Sink] = field(default_factory=dict)
    _handoffs: dict[str, KvHandoff] = field(default_factory=dict)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gptoss-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._inbox.put(None)
        if self._thread is not None:
            self._thread.join()

    def submit(
        self, seq: Sequence, sink: Sink, handoff: KvHandoff | None = None, spans: Mapping[PoolName, range] | None = None
    ) -> None:
        """Queue a request (a decode worker's with the prefill's descriptor and the spans it fills)."""
        self._inbox.put(_Submitted(seq, sink, handoff, spans))

    def abort(self, request_id: str) -> None:
        self._inbox.put(request_id)

    @property
    def handoffs_pending(self) -> int:
        return self.ledger.pending if self.ledger else 0

    def _run(self) -> None:
        idle = True
        while not self._stopping.is_set():
            try:
                wait = RECEIVING_WAIT_S if self.scheduler.receiving else IDLE_WAIT_S
                self._take_in(wait if idle else None)
                self._follow_transfers()
                idle = not self._step()
            except Exception:  # a bug must end the requests it holds, not hang them
                log.exception("gptoss engine: the step loop failed; ending every request")
                self._fail_all("the engine's step loop failed")
                return

    def _take_in(self, wait_s: float | None) -> None:
        """What was queued since; after a step that did nothing, wait up to `wait_s` for something."""
        try:
            item = self._inbox.get(timeout=wait_s) if wait_s is not None else self._inbox.get_nowait()
        except queue.Empty:
            return
        while item is not None:
            if isinstance(item, _Submitted):
                self._sinks[item.seq.request_id] = item.sink
                if item.handoff is not None and item.spans is not None:
                    self._handoffs[item.seq.request_id] = item.handoff
                    self.scheduler.add_received(item.seq, item.spans)
                else:
                    self.scheduler.add(item.seq)
            elif isinstance(item, str) and (aborted := self.scheduler.abort(item)) is not None:
                self._emit(aborted.request_id, Emitted(finish_reason="cancelled"), last=True)
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return

    def _follow_transfers(self) -> None:
        progress = self.runner.poll_transfers()
        receiving = self.scheduler.receiving
        for request_id in progress.received:
            seq = receiving[request_id]
            self._handoffs.pop(request_id, None)
            if self.scheduler.kv_arrived(seq):
                self._emit(request_id, Emitted(token=seq.token_ids[seq.prompt_len]))  # the prefill's first token
            else:
                self._emit(request_id, Emitted(finish_reason="cancelled"), last=True)
        for request_id in progress.failed:
            self._handoffs.pop(request_id, None)
            self.scheduler.kv_failed(receiving[request_id])
            self._emit(request_id, Emitted(error="the prompt's KV never arrived from its prefill worker"), last=True)
        if self.ledger is not None:
            for handoff_id in progress.read:
                if (hold := self.ledger.read(handoff_id)) is not None:
                    self.scheduler.kv.release(hold)
            for hold in self.ledger.expired(self.clock()):
                self.scheduler.kv.release(hold)

    def _step(self) -> bool:
        """Schedule and run one step; False when there was nothing to do."""
        step = self.scheduler.schedule()
        for seq in step.receiving:
            handoff = self._handoffs[seq.request_id]
            self.runner.receive(seq.request_id, handoff, transfer_pairs(handoff, seq))
        if not step.scheduled:
            return bool(step.receiving)
        started = self.clock()
        tokens = self.runner.execute(step_batch(step))
        outputs = self.scheduler.postprocess(step, tokens)
        wall = self.clock() - started
        for output in outputs:
            self._emit_output(output)
        self._publish(step.load, wall)
        return True

    def _emit_output(self, output: SequenceOutput) -> None:
        seq, handoff = output.seq, None
        if output.hold is not None and self.ledger is not None:
            handoff_id = uuid.uuid4().hex
            pools = self.scheduler.kv.pools
            handoff = describe(seq, output.hold, pools, self.shape, handoff_id, self.runner.transfer_source())
            self.ledger.keep(handoff_id, output.hold, self.clock())
        emitted = Emitted(token=output.token, finish_reason=output.finish_reason, handoff=handoff)
        self._emit(seq.request_id, emitted, last=output.finish_reason is not None)

    def _emit(self, request_id: str, emitted: Emitted, last: bool = False) -> None:
        sink = self._sinks.pop(request_id, None) if last else self._sinks.get(request_id)
        if sink is not None:
            sink(emitted)

    def _publish(self, load: Any, wall: float) -> None:
        if self.publishers.forward_pass:
            self.publishers.forward_pass(forward_pass_fields(load, wall))
        events = self.scheduler.kv.take_events()
        if events and self.publishers.kv_events:
            self.publishers.kv_events(kv_event_batch(events))
        if self.publishers.snapshot:
            self.publishers.snapshot(kv_snapshot(self.scheduler.kv, self.scheduler.hit_rate))

    def _fail_all(self, reason: str) -> None:
        for request_id in list(self._sinks):
            self._emit(request_id, Emitted(error=reason), last=True)
