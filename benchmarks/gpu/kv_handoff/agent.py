"""A NIXL agent over one block pool: register it once, connect to the peer, move blocks between them.

Why this shape: it is what a disaggregated decode worker does with NIXL (vLLM's NixlConnector
works this way): the whole pool is registered once at start-up, peers swap agent metadata out of
band, and each request becomes one transfer of the prefill worker's blocks into the decode
worker's blocks (decode READs them, or prefill WRITEs them), completed by polling, then a
notification tells the peer the blocks are done with.

Two ways to describe a request's bytes:
- "per_block": one descriptor per block, from descriptor lists of every block of both pools
  prepared once per peer (prep_xfer_dlist), picked by block index per request (make_prepped_xfer);
- "coalesced": one descriptor per run of blocks consecutive on both sides (initialize_xfer).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from nixl_cu13 import nixl_agent, nixl_agent_config

from benchmarks.gpu.kv_handoff.pool import BlockPool
from dynamo_oss.engines.gptoss.kv_transfer import Run, runs

BACKEND = "UCX"
DONE = b"done"


@dataclass(frozen=True)
class PoolView:
    """Where a pool lives, as its peer needs to address it."""

    address: int
    block_bytes: int
    num_blocks: int
    device_id: int
    mem_type: str

    @classmethod
    def of(cls, pool: BlockPool) -> PoolView:
        return cls(pool.address, pool.block_bytes, pool.num_blocks, pool.device_id, pool.mem_type)

    def block_descriptors(self) -> np.ndarray:
        """(address, length, device) of every block: NIXL's N x 3 descriptor array."""
        addresses = self.address + self.block_bytes * np.arange(self.num_blocks, dtype=np.uint64)
        rows = [
            addresses,
            np.full(self.num_blocks, self.block_bytes, np.uint64),
            np.full(self.num_blocks, self.device_id, np.uint64),
        ]
        return np.stack(rows, axis=1)

    def run_descriptors(self, runs: list[Run], side: str) -> np.ndarray:
        """One descriptor per run, on the source or the target side."""
        starts = np.array([run.source if side == "source" else run.target for run in runs], dtype=np.uint64)
        counts = np.array([run.count for run in runs], dtype=np.uint64)
        rows = [
            self.address + self.block_bytes * starts,
            self.block_bytes * counts,
            np.full(len(runs), self.device_id, np.uint64),
        ]
        return np.stack(rows, axis=1)


class Agent:
    """One worker's NIXL agent with its pool registered."""

    def __init__(self, name: str, pool: BlockPool, backend_params: dict[str, str]) -> None:
        self.nixl = nixl_agent(name, nixl_agent_config(backends=[]))
        self.nixl.create_backend(BACKEND, {**self.nixl.get_plugin_params(BACKEND), **backend_params})
        self.local = PoolView.of(pool)
        self.nixl.register_memory([(pool.address, pool.nbytes, pool.device_id, "")], pool.mem_type)
        self._prepped: dict[str, tuple] = {}

    def metadata(self) -> bytes:
        return self.nixl.get_agent_metadata()

    def connect(self, metadata: bytes) -> str:
        """Load the peer's metadata; returns its agent name."""
        return self.nixl.add_remote_agent(metadata)

    def request_transfer(
        self, peer: str, remote: PoolView, sources: list[int], targets: list[int], op: str, mode: str, parts: int = 1
    ) -> Transfer:
        """A reusable transfer of prefill's `sources` blocks into decode's `targets` blocks, as `parts`
        transfer requests posted together (several requests in flight, as concurrent handoffs are).

        op "READ": this agent is decode and pulls; op "WRITE": this agent is prefill and pushes.
        """
        bounds = [len(sources) * i // parts for i in range(parts + 1)]
        slices = [slice(start, end) for start, end in zip(bounds, bounds[1:]) if end > start]
        return Transfer(self.nixl, [self._handle(peer, remote, sources[s], targets[s], op, mode) for s in slices])

    def _handle(
        self, peer: str, remote: PoolView, sources: list[int], targets: list[int], op: str, mode: str
    ) -> object:
        local_side, remote_side = ("target", "source") if op == "READ" else ("source", "target")
        if mode == "coalesced":
            merged = runs(sources, targets, coalesce=True)
            local = self.nixl.get_xfer_descs(self.local.run_descriptors(merged, local_side), self.local.mem_type)
            far = self.nixl.get_xfer_descs(remote.run_descriptors(merged, remote_side), remote.mem_type)
            return self.nixl.initialize_xfer(op, local, far, peer)
        if mode == "per_block":
            local_list, far_list = self._block_lists(peer, remote)
            local_blocks, remote_blocks = (targets, sources) if op == "READ" else (sources, targets)
            return self.nixl.make_prepped_xfer(
                op,
                local_list,
                np.array(local_blocks, dtype=np.int32),
                far_list,
                np.array(remote_blocks, dtype=np.int32),
            )
        raise ValueError(f"unknown descriptor mode {mode!r}")

    def _block_lists(self, peer: str, remote: PoolView) -> tuple:
        """Descriptor lists of every block of both pools, prepared once per peer."""
        if peer not in self._prepped:
            local = self.nixl.prep_xfer_dlist("NIXL_INIT_AGENT", self.local.block_descriptors(), self.local.mem_type)
            far = self.nixl.prep_xfer_dlist(peer, remote.block_descriptors(), remote.mem_type)
            self._prepped[peer] = (local, far)
        return self._prepped[peer]

    def notify(self, peer: str) -> None:
        self.nixl.send_notif(peer, DONE)

    def wait_notified(self, peer: str, timeout_s: float) -> None:
        """Block until `peer` says it is done with the blocks, or raise at the deadline."""
        deadline = time.monotonic() + timeout_s
        while not self.nixl.check_remote_xfer_done(peer, DONE):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no notification from {peer} within {timeout_s:.0f} s")
            time.sleep(0.001)


class Transfer:
    """Prepared transfer requests, posted together again and again; done when all are."""

    def __init__(self, nixl: nixl_agent, handles: list[object]) -> None:
        self.nixl, self.handles = nixl, handles

    def run(self, timeout_s: float) -> float:
        """Post every request, poll until all completed, return the seconds it took."""
        started = time.perf_counter()
        pending = [handle for handle in self.handles if self._state(self.nixl.transfer(handle)) == "PROC"]
        while pending:
            if time.perf_counter() - started > timeout_s:
                raise TimeoutError(f"transfer still in progress after {timeout_s:.0f} s")
            pending = [handle for handle in pending if self._state(self.nixl.check_xfer_state(handle)) == "PROC"]
        return time.perf_counter() - started

    @staticmethod
    def _state(state: str) -> str:
        if state not in ("DONE", "PROC"):
            raise RuntimeError(f"transfer ended in state {state}")
        return state

    def release(self) -> None:
        for handle in self.handles:
            self.nixl.release_xfer_handle(handle)
