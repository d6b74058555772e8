"""A caching allocator: freed buffers' device memory (and backend storage) kept for allocations of the same size.

As CUDA's caching allocator does, a block freed on a stream is reusable at once by later work on that stream: the
stream runs in order, so every command that read the old buffer runs before any command that writes the new one.
Another stream may take the block only once every stream that used it has run past the free. Cached blocks count as
reserved memory, not allocated; :meth:`BlockCache.take_all` hands them back (``empty_cache``, or an allocation that
would otherwise run out of memory).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kohakutt.hal.allocator import Allocation

if TYPE_CHECKING:
    from kohakutt.hal.buffer import Buffer
    from kohakutt.hal.stream import Stream

BLOCK_LIMIT = 16 << 20  # blocks above this size go straight back to the allocator
CACHE_LIMIT = 256 << 20  # beyond this many cached bytes (per device), the oldest blocks go back


@dataclass(eq=False)
class Block:
    """A freed buffer's memory: its allocation, the backend storage, and the stream points it is free after."""

    key: Hashable
    alloc: Allocation
    handle: Any
    owner: Buffer  # the last buffer over the block: the backend destroys the storage through it
    marks: tuple[tuple[Stream, int], ...]  # (stream, point at the free): the freeing stream first, then other users

    def ready_for(self, stream: Stream) -> bool:
        """Whether work queued on ``stream`` from now on may use the block."""
        return all(s is stream or s.passed(m) for s, m in self.marks)


class BlockCache:
    """Cached blocks by key (size, memory kind, layout, format, page size, shape), newest last."""

    def __init__(self, block_limit: int = BLOCK_LIMIT, limit: int = CACHE_LIMIT):
        self.block_limit = block_limit
        self.limit = limit
        self.nbytes = 0  # footprint of the blocks held
        self._blocks: dict[Hashable, list[Block]] = {}
        self._order: dict[Block, None] = {}  # every block, oldest first (for eviction)

    def __len__(self) -> int:
        return len(self._order)

    def accepts(self, alloc: Allocation) -> bool:
        return 0 < alloc.footprint <= self.block_limit

    def put(self, block: Block) -> list[Block]:
        """Keep ``block``; return the oldest blocks that no longer fit under the limit (the caller releases them)."""
        self._blocks.setdefault(block.key, []).append(block)
        self._order[block] = None
        self.nbytes += block.alloc.footprint
        evicted = []
        while self.nbytes > self.limit and self._order:
            old = next(iter(self._order))
            self._remove(old)
            evicted.append(old)
        return evicted

    def take(self, key: Hashable, stream: Stream) -> Block | None:
        """The newest block of ``key`` that work on ``stream`` may use, removed from the cache; None when none is."""
        blocks = self._blocks.get(key)
        if not blocks:
            return None
        for i in range(len(blocks) - 1, -1, -1):
            b = blocks[i]
            m = b.marks
            if (m[0][0] is stream and len(m) == 1) or b.ready_for(stream):
                self._remove(b, i)
                return b
        return None

    def take_all(self) -> list[Block]:
        """Every cached block, removed from the cache."""
        blocks = list(self._order)
        self._blocks.clear()
        self._order.clear()
        self.nbytes = 0
        return blocks

    def _remove(self, block: Block, index: int | None = None) -> None:
        blocks = self._blocks[block.key]
        blocks.pop(blocks.index(block) if index is None else index)
        if not blocks:
            del self._blocks[block.key]
        del self._order[block]
        self.nbytes -= block.alloc.footprint
