"""One request as the engine runs it: its tokens, how many are in the KV cache, its blocks, when it stops.

A sequence's tokens are its prompt then what it has generated; `num_computed` of them have their K and V
in the cache. A step computes the next tokens of each sequence it schedules (a prompt chunk, or the one
token sampled last) and, once the sequence's every token is computed, samples the next one. A sequence
decoding has one token not computed yet: the one it sampled last.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence as Tokens
from dataclasses import dataclass, field

from dynamo_oss.engines.gptoss.kv_layout import PoolName
from dynamo_oss.engines.gptoss.sampling import SamplingParams


class Status(enum.Enum):
    WAITING = "waiting"  # queued, or preempted: holds no blocks
    AWAITING_KV = "awaiting_kv"  # a decode worker's: blocks held, its prompt's KV on the way from prefill
    RUNNING = "running"  # holds blocks; prefilling or decoding
    FINISHED = "finished"


@dataclass(frozen=True)
class StopRule:
    """When a sequence stops: a stop token (harmony's, the request's, its end of text) once `min_tokens`
    are out, unless `ignore_eos`; always at `max_tokens`."""

    max_tokens: int
    stop_tokens: frozenset[int]
    min_tokens: int = 0
    ignore_eos: bool = False

    def finish_reason(self, output: Tokens[int]) -> str | None:
        if not self.ignore_eos and len(output) >= max(self.min_tokens, 1) and output[-1] in self.stop_tokens:
            return "stop"
        if len(output) >= self.max_tokens:
            return "length"
        return None


@dataclass
class BlockTable:
    """A sequence's blocks in one pool: logical blocks first..first+len(blocks)-1 and their physical ids.
    (A window pool's table starts past the blocks its window has left behind.)"""

    first: int = 0
    blocks: list[int] = field(default_factory=list)

    @property
    def end(self) -> int:
        return self.first + len(self.blocks)


@dataclass(eq=False)
class Sequence:
    request_id: str
    token_ids: list[int]  # the prompt, then the tokens generated
    prompt_len: int
    sampling: SamplingParams
    stop: StopRule
    max_seq_len: int
    cache_salt: str | None = None  # the request's tenant: its prefix blocks are its own
    status: Status = Status.WAITING
    num_computed: int = 0
    num_cached: int = 0  # prompt tokens found in the prefix cache when it was admitted
    admitted_before: bool = False  # admitted once already: it was preempted since
    tables: dict[PoolName, BlockTable] = field(default_factory=dict)
    block_hashes: list[int] = field(default_factory=list)  # chain hashes of its full blocks, as far as known
    finish_reason: str | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def output(self) -> list[int]:
        return self.token_ids[self.prompt_len :]

    @property
    def num_uncomputed(self) -> int:
        return self.num_tokens - self.num_computed

    @property
    def is_prefilling(self) -> bool:
        return self.num_computed < self.prompt_len

    def append(self, token: int) -> str | None:
        """Add a sampled token; the finish reason when the sequence stops with it."""
        self.token_ids.append(token)
        reason = self.stop.finish_reason(self.output)
        if reason is None and self.num_tokens >= self.max_seq_len:
            reason = "length"
        return reason
