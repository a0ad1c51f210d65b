"""The physical blocks of one KV pool: who holds each, which hold a known prefix, which go first.

A block is held by every sequence (or handoff) that reads it; at no holder it is free. A free block
that holds a full block of a known prefix (its chain hash registered) stays findable until the pool
needs the room: new blocks come from the plain free blocks first, then from the cached ones, least
recently freed first, and a cached block taken so is evicted (its hash recorded for a removed event).
"""

from __future__ import annotations

from collections import OrderedDict, deque


class OutOfBlocks(RuntimeError):
    """More blocks asked of a pool than it has free: a scheduler bug, since it checks first."""


class BlockPool:
    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"a pool needs at least one block; got {num_blocks}")
        self.num_blocks = num_blocks
        self._holders = [0] * num_blocks
        self._hash_of: list[int | None] = [None] * num_blocks
        self._block_of: dict[int, int] = {}
        self._plain: deque[int] = deque(range(num_blocks))
        self._cached: OrderedDict[int, None] = OrderedDict()  # free blocks of a known prefix, oldest first
        self._evicted: list[int] = []

    @property
    def num_free(self) -> int:
        return len(self._plain) + len(self._cached)

    @property
    def num_held(self) -> int:
        return self.num_blocks - self.num_free

    def allocate(self) -> int:
        """A free block, now held once; a plain one if there is one, else the oldest cached one, evicted."""
        if self._plain:
            block = self._plain.popleft()
        elif self._cached:
            block, _ = self._cached.popitem(last=False)
            evicted = self._hash_of[block]
            assert evicted is not None
            del self._block_of[evicted]
            self._hash_of[block] = None
            self._evicted.append(evicted)
        else:
            raise OutOfBlocks(f"all {self.num_blocks} blocks are held")
        self._holders[block] = 1
        return block

    def hold(self, block: int) -> None:
        """One more holder of `block` (a cache hit, or a handoff keeping it)."""
        if self._holders[block] == 0:
            del self._cached[block]  # only a cached block is found, so a free one found is cached
        self._holders[block] += 1

    def release(self, block: int) -> None:
        """One holder fewer; at none the block is free, and stays findable if it holds a known prefix."""
        if self._holders[block] <= 0:
            raise ValueError(f"block {block} released more often than held")
        self._holders[block] -= 1
        if self._holders[block] == 0:
            if self._hash_of[block] is None:
                self._plain.append(block)
            else:
                self._cached[block] = None

    def holders(self, block: int) -> int:
        return self._holders[block]

    def find(self, block_hash: int) -> int | None:
        """The block holding the full block of prefix `block_hash`, held or free, if the pool has it."""
        return self._block_of.get(block_hash)

    def register(self, block: int, block_hash: int) -> bool:
        """Record that held `block` holds the full block of prefix `block_hash`; False when another block
        already does (two sequences computed the same prefix at once): the first stays the one found."""
        if block_hash in self._block_of or self._hash_of[block] is not None:
            return False
        self._hash_of[block] = block_hash
        self._block_of[block_hash] = block
        return True

    def take_evicted(self) -> list[int]:
        """The prefix hashes evicted since the last call, in order."""
        evicted, self._evicted = self._evicted, []
        return evicted
