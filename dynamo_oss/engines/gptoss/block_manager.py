"""Every sequence's KV blocks in each pool: found in the prefix cache when it is admitted, grown before a
step, given back as its window moves past them and when it ends; and the KV events Dynamo's router reads.

Prefix reuse: each full block of a sequence's tokens has a chain hash (its tokens, the hash before it, and
at the root the request's cache salt, so tenants never share blocks). A block is registered under its
hash once the step that fills it is done, in every pool; a later prompt reuses its first k blocks when
the full-attention pool has blocks 0..k-1 and the window pool has the blocks the query after them reads
(the window's last ones before block k). At least the prompt's last token is always computed again: its
logits give the first token.

KV events: Dynamo's router keeps one prefix tree of blocks per worker, so the events describe the
full-attention pool, as Dynamo's TensorRT-LLM publisher keeps only the largest window's (its blocks
stored and evicted); the window pool's blocks come and go with every step and are not published.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field

from dynamo_oss.engines.gptoss.block_pool import BlockPool
from dynamo_oss.engines.gptoss.kv_layout import KvPool, PoolName
from dynamo_oss.engines.gptoss.sequence import BlockTable, Sequence

ROUTER_POOL: PoolName = "full"  # the pool whose blocks Dynamo's router is told about


@dataclass(frozen=True)
class KvStored:
    """Full blocks of a prefix now cached, in order, after the block `parent_hash` (None: from the start)."""

    block_hashes: list[int]
    parent_hash: int | None
    token_ids: list[int]
    block_tokens: int
    cache_salt: str | None


@dataclass(frozen=True)
class KvRemoved:
    block_hashes: list[int]


KvEvent = KvStored | KvRemoved


@dataclass(frozen=True)
class PrefixHit:
    """How much of a prompt the cache holds: `blocks` full blocks, in every pool the next query reads."""

    blocks: int
    block_tokens: int

    @property
    def tokens(self) -> int:
        return self.blocks * self.block_tokens


@dataclass
class KvHold:
    """Blocks kept after their sequence ended: a prefill's, until its decode worker has read them."""

    tables: dict[PoolName, BlockTable] = field(default_factory=dict)


def chain_hash(parent: int | None, tokens: list[int], salt: str | None) -> int:
    """A block's hash from its tokens and the hash before it (at the root, the cache salt): a signed
    64-bit integer, as Dynamo's KV events carry them."""
    digest = hashlib.blake2b(digest_size=8)
    digest.update(b"root" + (salt or "").encode() if parent is None else parent.to_bytes(8, "little", signed=True))
    digest.update(array("I", tokens).tobytes())
    return int.from_bytes(digest.digest(), "little", signed=True)


class KvCacheManager:
    def __init__(self, pools: Mapping[PoolName, KvPool], num_blocks: Mapping[PoolName, int], reuse: bool) -> None:
        sizes = {pool.block_tokens for pool in pools.values()}
        if len(sizes) != 1 or ROUTER_POOL not in pools:
            raise ValueError("the pools must share one block size and include the full-attention pool")
        self.pools = dict(pools)
        self.block_tokens = sizes.pop()
        self.blocks = {name: BlockPool(num_blocks[name]) for name in pools}
        self.reuse = reuse
        self._events: list[KvEvent] = []

    # Prefix reuse.

    def block_hashes(self, seq: Sequence, blocks: int) -> list[int]:
        """The chain hashes of the sequence's first `blocks` full blocks (computed once, kept on it)."""
        size = self.block_tokens
        for index in range(len(seq.block_hashes), blocks):
            parent = seq.block_hashes[-1] if seq.block_hashes else None
            seq.block_hashes.append(
                chain_hash(parent, seq.token_ids[index * size : (index + 1) * size], seq.cache_salt)
            )
        return seq.block_hashes[:blocks]

    def prefix_hit(self, seq: Sequence) -> PrefixHit:
        """The longest prefix of whole blocks the cache holds for a sequence about to be admitted."""
        if not self.reuse:
            return PrefixHit(0, self.block_tokens)
        usable = (seq.num_tokens - 1) // self.block_tokens  # the last token is computed again, for its logits
        hashes = self.block_hashes(seq, usable)
        router_pool = self.blocks[ROUTER_POOL]
        found = 0
        while found < usable and router_pool.find(hashes[found]) is not None:
            found += 1
        for blocks in range(found, 0, -1):
            if all(self._found(name, hashes, blocks) for name in self.pools):
                return PrefixHit(blocks, self.block_tokens)
        return PrefixHit(0, self.block_tokens)

    def _found(self, name: PoolName, hashes: list[int], blocks: int) -> bool:
        kept = self.pools[name].blocks_kept(blocks * self.block_tokens)
        return all(self.blocks[name].find(hashes[index]) is not None for index in kept)

    def _hit_blocks(self, name: PoolName, seq: Sequence, hit: PrefixHit) -> tuple[range, list[int]]:
        """The logical blocks of `hit` that pool `name` keeps, and the blocks holding them."""
        hashes = self.block_hashes(seq, hit.blocks)
        kept = self.pools[name].blocks_kept(hit.tokens)
        found = [self.blocks[name].find(hashes[index]) for index in kept]
        assert all(block is not None for block in found), "a hit is what prefix_hit found"
        return kept, [block for block in found if block is not None]

    # Admission and growth.

    def can_admit(self, seq: Sequence, hit: PrefixHit, end: int) -> bool:
        """Whether admitting `seq` with `hit` and computing it up to position `end` fits every pool."""
        for name, pool in self.pools.items():
            kept, found = self._hit_blocks(name, seq, hit)
            reawakened = sum(1 for block in found if self.blocks[name].holders(block) == 0)  # free until held again
            if pool.blocks_for(end) - kept.stop + reawakened > self.blocks[name].num_free:
                return False
        return True

    def admit(self, seq: Sequence, hit: PrefixHit) -> None:
        """Hold the prefix's blocks for `seq`; it starts with their tokens computed."""
        for name in self.pools:
            kept, found = self._hit_blocks(name, seq, hit)
            for block in found:
                self.blocks[name].hold(block)
            seq.tables[name] = BlockTable(kept.start, found)
        seq.num_computed = seq.num_cached = hit.tokens

    def new_blocks(self, seq: Sequence, end: int) -> dict[PoolName, int]:
        """Blocks each pool must hand `seq` for it to hold positions up to `end`."""
        return {name: max(0, pool.blocks_for(end) - seq.tables[name].end) for name, pool in self.pools.items()}

    def can_grow(self, seq: Sequence, end: int) -> bool:
        return all(count <= self.blocks[name].num_free for name, count in self.new_blocks(seq, end).items())

    def grow(self, seq: Sequence, end: int) -> None:
        """Blocks for positions up to `end` (the step about to compute them); can_grow said they are free."""
        for name, count in self.new_blocks(seq, end).items():
            seq.tables[name].blocks += [self.blocks[name].allocate() for _ in range(count)]
        self._note_evictions()

    def commit(self, seq: Sequence, computed: int) -> None:
        """A step computed `seq` up to position `computed`: register its newly full blocks, and give back
        the window blocks no later query reads."""
        before = seq.num_computed
        seq.num_computed = computed
        if self.reuse:
            self._register(seq, before // self.block_tokens, computed // self.block_tokens)
        for name, pool in self.pools.items():
            table, first = seq.tables[name], pool.blocks_kept(computed).start
            while table.first < first:
                self.blocks[name].release(table.blocks.pop(0))
                table.first += 1

    def _register(self, seq: Sequence, start: int, end: int) -> None:
        """Register the sequence's full blocks start..end-1 in every pool; a stored event for the new ones."""
        hashes = self.block_hashes(seq, end)
        stored: list[int] = []
        for index in range(start, end):
            for name, table in seq.tables.items():
                if index >= table.first:
                    registered = self.blocks[name].register(table.blocks[index - table.first], hashes[index])
                    if name == ROUTER_POOL and registered:
                        stored.append(index)
        for run in _consecutive_runs(stored):
            size = self.block_tokens
            self._events.append(
                KvStored(
                    block_hashes=[hashes[index] for index in run],
                    parent_hash=hashes[run[0] - 1] if run[0] else None,
                    token_ids=seq.token_ids[run[0] * size : (run[-1] + 1) * size],
                    block_tokens=size,
                    cache_salt=seq.cache_salt,
                )
            )

    # The end of a sequence, and of a handoff.

    def free(self, seq: Sequence) -> None:
        """Give back every block of `seq`, its last ones first: they are evicted first, its prefix last."""
        self.release(KvHold(seq.tables))
        seq.tables = {}

    def detach(self, seq: Sequence) -> KvHold:
        """Take `seq`'s blocks off it, still held, for a handoff to read."""
        hold, seq.tables = KvHold(seq.tables), {}
        return hold

    def release(self, hold: KvHold) -> None:
        for name, table in hold.tables.items():
            for block in reversed(table.blocks):
                self.blocks[name].release(block)
        hold.tables = {}

    # A decode worker's sequence, whose prompt's KV another worker computed.

    def can_receive(self, spans: Mapping[PoolName, range]) -> bool:
        return all(len(spans[name]) <= self.blocks[name].num_free for name in self.pools)

    def receive(self, seq: Sequence, spans: Mapping[PoolName, range]) -> None:
        """New blocks for the logical blocks `spans` of each pool, for a handoff to fill."""
        for name in self.pools:
            span = spans[name]
            seq.tables[name] = BlockTable(span.start, [self.blocks[name].allocate() for _ in span])
        self._note_evictions()

    # What Dynamo's router and metrics are told.

    def take_events(self) -> list[KvEvent]:
        self._note_evictions()
        events, self._events = self._events, []
        return events

    def _note_evictions(self) -> None:
        evicted = self.blocks[ROUTER_POOL].take_evicted()
        if evicted:
            self._events.append(KvRemoved(evicted))

    def held_blocks(self, name: PoolName = ROUTER_POOL) -> int:
        return self.blocks[name].num_held

    def total_blocks(self, name: PoolName = ROUTER_POOL) -> int:
        return self.blocks[name].num_blocks


def _consecutive_runs(indices: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for index in indices:
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return runs
