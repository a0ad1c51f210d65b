"""Continuous batching with chunked prefill: what each step computes, within a token budget.

Every step first gives each running sequence its share of the budget, oldest first: one token to each
decoding sequence, the next chunk to a prompt being prefilled; then admits waiting sequences, first come
first served, their prompts cut into chunks that fill what the budget has left. So decodes are never
held up by a long prompt, which spreads over as many steps as its length needs (TensorRT-LLM's and vLLM's
chunked prefill). When a running sequence's next blocks are not free, the newest running sequence is
preempted: its blocks go back (its registered prefix stays cached) and it waits at the front of the
queue to be computed again, its generated tokens part of its prompt then.

By role:
- aggregated: as above;
- prefill: a sequence ends once its first token is sampled (the request's max_tokens is 1) and keeps its
  blocks (`SequenceOutput.hold`) for its decode worker to read;
- decode: a sequence arrives with its first token and the blocks its prompt's KV will fill
  (`add_received`); it holds blocks while the KV is on the way (AWAITING_KV) and decodes from its arrival
  (`kv_arrived`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence as Tokens
from dataclasses import dataclass, field

from dynamo_oss.engines.gptoss.block_manager import KvCacheManager, KvHold
from dynamo_oss.engines.gptoss.kv_layout import PoolName
from dynamo_oss.engines.gptoss.sequence import Sequence, Status


@dataclass(frozen=True)
class Limits:
    max_batch_size: int  # sequences holding blocks at once, running or receiving their KV
    max_num_tokens: int  # tokens one step computes


@dataclass(frozen=True)
class ScheduledSequence:
    seq: Sequence
    start: int  # the first position this step computes
    count: int  # how many
    samples: bool  # the step reaches the sequence's last token: its logits give the next token
    prefill: bool  # a prompt chunk (else one decode token)


@dataclass(frozen=True)
class StepLoad:
    """What a step computes and what waits, in the terms of Dynamo's forward-pass metrics."""

    prefill_requests: int = 0
    prefill_tokens: int = 0  # computed this step
    prefill_kv_tokens: int = 0  # read from the cache: earlier chunks and prefix hits
    decode_requests: int = 0
    decode_kv_tokens: int = 0  # the decoding sequences' context
    queued_prefill_requests: int = 0
    queued_prefill_tokens: int = 0
    queued_decode_requests: int = 0  # preempted: they had generated tokens
    queued_decode_kv_tokens: int = 0


@dataclass
class Step:
    scheduled: list[ScheduledSequence] = field(default_factory=list)
    receiving: list[Sequence] = field(default_factory=list)  # blocks given this step: start their KV's transfer
    preempted: list[Sequence] = field(default_factory=list)
    load: StepLoad = StepLoad()

    @property
    def num_tokens(self) -> int:
        return sum(item.count for item in self.scheduled)

    @property
    def sampling(self) -> list[Sequence]:
        """The sequences a token is sampled for, in the order `postprocess` takes the tokens."""
        return [item.seq for item in self.scheduled if item.samples]


@dataclass(frozen=True)
class SequenceOutput:
    seq: Sequence
    token: int
    finish_reason: str | None
    hold: KvHold | None = None  # a finished prefill's blocks, kept for its decode worker


class Scheduler:
    def __init__(self, limits: Limits, kv: KvCacheManager, keep_finished_kv: bool = False) -> None:
        self.limits = limits
        self.kv = kv
        self.keep_finished_kv = keep_finished_kv  # the prefill role: a finished sequence's KV is handed over
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # in admission order
        self.to_receive: deque[tuple[Sequence, Mapping[PoolName, range]]] = deque()
        self.receiving: dict[str, Sequence] = {}
        self._abandoned: set[str] = set()  # aborted while their KV was on the way
        self._prompt_tokens = self._cached_tokens = 0  # over the prompts admitted so far, for the hit rate

    # Arrivals and departures.

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def add_received(self, seq: Sequence, spans: Mapping[PoolName, range]) -> None:
        """A decode worker's sequence: its prompt and first token, and the logical blocks of each pool its
        prompt's KV arrives in."""
        self.to_receive.append((seq, spans))

    def kv_arrived(self, seq: Sequence) -> bool:
        """Its prompt's KV is in its blocks: it decodes from the next step. False when it was aborted
        meanwhile: its blocks are given back now that nothing writes to them."""
        del self.receiving[seq.request_id]
        if seq.request_id in self._abandoned:
            self._abandoned.discard(seq.request_id)
            self._finish(seq, "cancelled")
            return False
        seq.num_computed = seq.prompt_len
        seq.status = Status.RUNNING
        self.running.append(seq)
        return True

    def kv_failed(self, seq: Sequence) -> None:
        """Its KV never came (the prefill worker is gone): the request ends, its blocks go back."""
        del self.receiving[seq.request_id]
        self._abandoned.discard(seq.request_id)
        self._finish(seq, "error")

    def abort(self, request_id: str) -> Sequence | None:
        """End a request wherever it is; its blocks go back (once no transfer writes to them)."""
        if request_id in self.receiving:
            self._abandoned.add(request_id)
            return None
        for queue in (self.waiting, self.running):
            for seq in queue:
                if seq.request_id == request_id:
                    queue.remove(seq)
                    self._finish(seq, "cancelled")
                    return seq
        for entry in self.to_receive:
            if entry[0].request_id == request_id:
                self.to_receive.remove(entry)
                entry[0].status, entry[0].finish_reason = Status.FINISHED, "cancelled"
                return entry[0]
        return None

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.to_receive)

    @property
    def hit_rate(self) -> float | None:
        """The share of admitted prompts' tokens found in the prefix cache; None before any."""
        return self._cached_tokens / self._prompt_tokens if self._prompt_tokens else None

    @property
    def holding(self) -> int:
        """Sequences holding blocks: the batch max_batch_size bounds."""
        return len(self.running) + len(self.receiving)

    # One step.

    def schedule(self) -> Step:
        step = Step()
        budget = self.limits.max_num_tokens
        self._start_receiving(step)
        index = 0
        while index < len(self.running) and budget > 0:
            seq = self.running[index]
            count = min(seq.num_uncomputed, budget)
            if not self._make_room(seq, seq.num_computed + count, step):
                continue  # `seq` itself was preempted; the next one is now at `index`
            self.kv.grow(seq, seq.num_computed + count)
            step.scheduled.append(self._scheduled(seq, count))
            budget -= count
            index += 1
        while self.waiting and budget > 0 and not step.preempted and self.holding < self.limits.max_batch_size:
            seq = self.waiting[0]
            hit = self.kv.prefix_hit(seq)
            count = min(seq.num_tokens - hit.tokens, budget)
            if not self.kv.can_admit(seq, hit, hit.tokens + count):
                break  # first come, first served: nobody overtakes the sequence at the front
            self.waiting.popleft()
            if not seq.admitted_before:  # a preempted sequence's prompt was counted already
                seq.admitted_before = True
                self._prompt_tokens += seq.prompt_len
                self._cached_tokens += hit.tokens
            self.kv.admit(seq, hit)
            self.kv.grow(seq, seq.num_computed + count)
            seq.status = Status.RUNNING
            self.running.append(seq)
            step.scheduled.append(self._scheduled(seq, count))
            budget -= count
        step.load = self._load(step)
        return step

    def _start_receiving(self, step: Step) -> None:
        while self.to_receive and self.holding < self.limits.max_batch_size:
            seq, spans = self.to_receive[0]
            if not self.kv.can_receive(spans):
                return
            self.to_receive.popleft()
            self.kv.receive(seq, spans)
            seq.status = Status.AWAITING_KV
            self.receiving[seq.request_id] = seq
            step.receiving.append(seq)

    def _make_room(self, seq: Sequence, end: int, step: Step) -> bool:
        """Preempt the newest running sequences until `seq` can grow to `end`; False if it was one of them."""
        while not self.kv.can_grow(seq, end):
            victim = self.running.pop()
            self._preempt(victim, step)
            if victim is seq:
                return False
        return True

    def _preempt(self, seq: Sequence, step: Step) -> None:
        self.kv.free(seq)
        seq.num_computed = 0
        seq.status = Status.WAITING
        self.waiting.appendleft(seq)
        step.preempted.append(seq)

    @staticmethod
    def _scheduled(seq: Sequence, count: int) -> ScheduledSequence:
        end = seq.num_computed + count
        return ScheduledSequence(seq, seq.num_computed, count, samples=end == seq.num_tokens, prefill=seq.is_prefilling)

    def _load(self, step: Step) -> StepLoad:
        prefills = [item for item in step.scheduled if item.prefill]
        decodes = [item for item in step.scheduled if not item.prefill]
        queued = [seq for seq in self.waiting if not seq.output]
        preempted = [seq for seq in self.waiting if seq.output]
        return StepLoad(
            prefill_requests=len(prefills),
            prefill_tokens=sum(item.count for item in prefills),
            prefill_kv_tokens=sum(item.start for item in prefills),
            decode_requests=len(decodes),
            decode_kv_tokens=sum(item.seq.num_tokens for item in decodes),
            queued_prefill_requests=len(queued),
            queued_prefill_tokens=sum(seq.num_tokens for seq in queued),
            queued_decode_requests=len(preempted),
            queued_decode_kv_tokens=sum(seq.num_tokens for seq in preempted),
        )

    # After the step.

    def postprocess(self, step: Step, sampled: Tokens[int]) -> list[SequenceOutput]:
        """Record what `step` computed and the tokens sampled for `step.sampling`, in that order; what each
        sampling sequence emits, and how it finishes."""
        if len(sampled) != len(step.sampling):
            raise ValueError(f"{len(sampled)} tokens for {len(step.sampling)} sampling sequences")
        tokens = iter(sampled)
        outputs = []
        for item in step.scheduled:
            seq = item.seq
            token = next(tokens) if item.samples else None
            if seq.status is not Status.RUNNING:
                continue  # aborted since it was scheduled
            self.kv.commit(seq, item.start + item.count)
            if token is None:
                continue
            reason = seq.append(token)
            hold = None
            if reason is not None:
                self.running.remove(seq)
                hold = self._finish(seq, reason)
            outputs.append(SequenceOutput(seq, token, reason, hold))
        return outputs

    def _finish(self, seq: Sequence, reason: str) -> KvHold | None:
        seq.status, seq.finish_reason = Status.FINISHED, reason
        if self.keep_finished_kv and reason in ("stop", "length"):
            return self.kv.detach(seq)
        self.kv.free(seq)
        return None

    def sequences(self) -> Iterable[Sequence]:
        yield from self.waiting
        yield from self.running
        yield from self.receiving.values()
        yield from (seq for seq, _ in self.to_receive)
