"""The disaggregated handoff's bookkeeping: which blocks of which pool a prefill worker hands a decode
worker, the descriptor that carries them in Dynamo's `disaggregated_params`, and how long the prefill
worker keeps them.

Which blocks: the decode worker's first step computes the first token at position P (the prompt's
length), whose query reads keys 0..P-1 in the full-attention layers and P-127..P-1 in the window layers.
So a handoff carries all of the prompt's blocks of the full-attention pool and only the window's last
blocks of the window pool (at most five 32-token blocks), as TensorRT-LLM's cache formatter sends only
the window's blocks for window layers. The bytes are the model runner's to move (NIXL, GPU to GPU):
`transfer_pairs` says which block of the prefill worker's pool lands in which of the decode worker's.

The flow Dynamo's frontend drives: the prefill worker's first answer carries the descriptor
(`disaggregated_params`), the frontend picks a decode worker and sends it the request with the
descriptor (`prefill_result.disaggregated_params`); the decode worker checks it is for the request's own
prompt and this engine's layout, takes blocks for the spans, and pulls the KV. The prefill worker keeps
the blocks until the decode worker says it has read them, or for the engine file's hold_timeout_s.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dynamo_oss.catalog.models import ModelShape
from dynamo_oss.engines.gptoss.block_manager import KvHold
from dynamo_oss.engines.gptoss.kv_layout import KvPool, PoolName
from dynamo_oss.engines.gptoss.sequence import Sequence

HANDOFF_VERSION = 1


class HandoffError(ValueError):
    """A descriptor the decode worker will not act on; the message names the field."""


class PoolBlocks(BaseModel):
    """A handoff's blocks of one pool: logical blocks first..first+len(blocks)-1, as the sender holds them."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    first: int = Field(ge=0)
    blocks: list[int] = Field(min_length=1)


class RemotePool(BaseModel):
    """Where one of the prefill worker's pools lives, as its NIXL agent registered it."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    address: int = Field(ge=0)
    blocks: int = Field(ge=1)
    block_bytes: int = Field(ge=1)
    device_id: int = Field(ge=0)
    kind: Literal["VRAM", "DRAM"]


class TransferSource(BaseModel):
    """Where a decode worker reads a handoff's blocks from: the prefill worker's NIXL agent (its name and
    metadata, loaded once per peer) and its pools (kv_transfer.py)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    agent: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    metadata: str = Field(max_length=1 << 20, description="the agent's NIXL metadata, base64")
    pools: dict[PoolName, RemotePool]


class KvHandoff(BaseModel):
    """What a prefill worker's answer tells the decode worker about a request's KV."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    version: Literal[1] = HANDOFF_VERSION
    engine: Literal["gptoss"] = "gptoss"
    handoff_id: str = Field(pattern=r"^[0-9a-f]{32}$")
    model: str
    block_tokens: int = Field(ge=1)
    prompt_tokens: int = Field(ge=1)
    prompt_digest: str = Field(pattern=r"^[0-9a-f]{64}$", description="sha256 of the prompt's token ids")
    first_token: int = Field(ge=0)
    cached_tokens: int = Field(ge=0, description="the prompt's tokens the prefill worker found in its cache")
    pools: dict[PoolName, PoolBlocks]
    source: TransferSource
    worker_id: dict[str, int | None] | None = Field(
        None, description="the prefill worker's id and rank, which Dynamo's runtime may add on the way (unused)"
    )


def handoff_spans(pools: Mapping[PoolName, KvPool], prompt_tokens: int) -> dict[PoolName, range]:
    """The logical blocks of each pool a handoff of a `prompt_tokens`-token prompt carries."""
    return {name: pool.blocks_kept(prompt_tokens) for name, pool in pools.items()}


def prompt_digest(token_ids: list[int]) -> str:
    return hashlib.sha256(array("I", token_ids).tobytes()).hexdigest()


def describe(
    seq: Sequence,
    hold: KvHold,
    pools: Mapping[PoolName, KvPool],
    model: ModelShape,
    handoff_id: str,
    source: TransferSource,
) -> KvHandoff:
    """The prefill side: the descriptor of finished prefill `seq`, whose blocks `hold` keeps."""
    prompt = seq.token_ids[: seq.prompt_len]
    blocks = {}
    for name, span in handoff_spans(pools, seq.prompt_len).items():
        table = hold.tables[name]
        assert table.first == span.start and table.end == span.stop, "a finished prefill keeps what it hands over"
        blocks[name] = PoolBlocks(first=span.start, blocks=list(table.blocks))
    return KvHandoff(
        handoff_id=handoff_id,
        model=model.name,
        block_tokens=next(iter(pools.values())).block_tokens,
        prompt_tokens=seq.prompt_len,
        prompt_digest=prompt_digest(prompt),
        first_token=seq.token_ids[seq.prompt_len],
        cached_tokens=seq.num_cached,
        pools=blocks,
        source=source,
    )


def read_handoff(
    params: Any, seq: Sequence, pools: Mapping[PoolName, KvPool], model: ModelShape
) -> tuple[KvHandoff, dict[PoolName, range]]:
    """The decode side: the descriptor of a prefill for `seq`'s prompt, checked against the prompt and this
    worker's layout, and the spans of blocks it must take for it; HandoffError names what does not fit."""
    try:
        handoff = KvHandoff.model_validate(params)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "disaggregated_params"
        raise HandoffError(f"prefill_result.disaggregated_params.{where}: {first['msg']}") from None
    block_tokens = next(iter(pools.values())).block_tokens
    ours = {"model": model.name, "block_tokens": block_tokens, "prompt_tokens": seq.prompt_len}
    for field, value in ours.items():
        if getattr(handoff, field) != value:
            raise HandoffError(
                f"prefill_result.disaggregated_params.{field}: {getattr(handoff, field)!r}, but this worker's is {value!r}"
            )
    if handoff.prompt_digest != prompt_digest(seq.token_ids[: seq.prompt_len]):
        raise HandoffError("prefill_result.disaggregated_params.prompt_digest: the prefill was of another prompt")
    if handoff.first_token >= model.vocab_size:
        raise HandoffError(f"prefill_result.disaggregated_params.first_token: {handoff.first_token} is not a token id")
    spans = handoff_spans(pools, seq.prompt_len)
    for name, span in spans.items():
        sent = handoff.pools.get(name)
        if sent is None or sent.first != span.start or len(sent.blocks) != len(span):
            raise HandoffError(
                f"prefill_result.disaggregated_params.pools.{name}: blocks {span.start}..{span.stop - 1} expected "
                f"for a {seq.prompt_len}-token prompt"
            )
    check_source(handoff, pools, model)
    return handoff, spans


def check_source(handoff: KvHandoff, pools: Mapping[PoolName, KvPool], model: ModelShape) -> None:
    """The prefill worker's pools are laid out as this worker's, and hold every block the handoff names."""
    where = "prefill_result.disaggregated_params"
    offered = handoff.source.pools
    if sorted(offered) != sorted(pools):
        raise HandoffError(
            f"{where}.source.pools: the prefill worker offers pools {sorted(offered)}, this worker needs {sorted(pools)}"
        )
    for name, pool in pools.items():
        remote, ours = offered[name], pool.block_bytes(model)
        if remote.block_bytes != ours:
            raise HandoffError(
                f"{where}.source.pools.{name}.block_bytes: {remote.block_bytes}, but this worker's blocks are {ours} bytes"
            )
        if (past := max(handoff.pools[name].blocks)) >= remote.blocks:
            raise HandoffError(
                f"{where}.pools.{name}.blocks: block {past} is past the prefill worker's {remote.blocks}"
            )


def transfer_pairs(handoff: KvHandoff, seq: Sequence) -> dict[PoolName, list[tuple[int, int]]]:
    """For each pool, (the prefill worker's block, the decode worker's block) of every logical block sent."""
    return {name: list(zip(sent.blocks, seq.tables[name].blocks, strict=True)) for name, sent in handoff.pools.items()}


@dataclass
class _Held:
    hold: KvHold
    deadline: float


class HandoffLedger:
    """The prefill side's handed-over blocks, until the decode worker has read them or they time out."""

    def __init__(self, hold_timeout_s: float) -> None:
        self.hold_timeout_s = hold_timeout_s
        self._held: dict[str, _Held] = {}

    def keep(self, handoff_id: str, hold: KvHold, now: float) -> None:
        self._held[handoff_id] = _Held(hold, now + self.hold_timeout_s)

    def read(self, handoff_id: str) -> KvHold | None:
        """The decode worker has read `handoff_id`'s blocks: they can go (None if they went already)."""
        held = self._held.pop(handoff_id, None)
        return held.hold if held else None

    def expired(self, now: float) -> list[KvHold]:
        """The holds no decode worker read in time: to be given back."""
        late = [handoff_id for handoff_id, held in self._held.items() if held.deadline <= now]
        return [self._held.pop(handoff_id).hold for handoff_id in late]

    @property
    def pending(self) -> int:
        return len(self._held)
