"""The handoff's bytes: one NIXL agent per worker over its KV pools, through which a decode worker READs
a request's blocks out of its prefill worker's pools (GPU to GPU on a GPU host).

Why this shape: it is what benchmarks/gpu/kv_handoff measured between two H200s, and how vLLM's
NixlConnector works. Each pool is registered once, when it is allocated. The prefill worker's agent
name, metadata and pool addresses travel in the handoff (handoff.TransferSource), and the decode worker
loads a peer's metadata the first time it sees that agent. A request becomes one transfer whose
descriptors are the runs of blocks consecutive on both sides: NIXL costs about 4.7 us a descriptor, so
merged runs matter. The transfer completes by polling, and its notification (the handoff's id) tells
the prefill worker it may free the blocks.

A READ that has not completed by its deadline (a prefill worker gone, a link down) fails, so a request
never waits on a peer that will not answer: the engine ends it with an error, which Dynamo's frontend
may migrate. The memory kind is the runner's to say: VRAM on a GPU; DRAM, as the tests here use it.
"""

from __future__ import annotations

import base64
import importlib
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dynamo_oss.engines.gptoss.engine import NIXL_MODULES
from dynamo_oss.engines.gptoss.handoff import KvHandoff, RemotePool, TransferSource
from dynamo_oss.engines.gptoss.kv_layout import PoolName
from dynamo_oss.engines.gptoss.model_runner import TransferProgress

log = logging.getLogger(__name__)

BACKEND = "UCX"
MOST_PEERS = 256  # prefill agents whose metadata a decode worker keeps loaded; the oldest goes past that


@dataclass(frozen=True)
class PoolMemory:
    """Where one of this worker's pools lives: `blocks` blocks of `block_bytes`, from `address` on."""

    address: int
    blocks: int
    block_bytes: int
    device_id: int
    kind: Literal["VRAM", "DRAM"]


@dataclass(frozen=True)
class Run:
    """`count` blocks consecutive on both sides: source..source+count-1 into target..target+count-1."""

    source: int
    target: int
    count: int


def runs(sources: Sequence[int], targets: Sequence[int], coalesce: bool = True) -> list[Run]:
    """One run per block, or (coalesce) maximal runs of blocks consecutive on both sides."""
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} source blocks for {len(targets)} target blocks")
    merged: list[Run] = []
    for source, target in zip(sources, targets):
        last = merged[-1] if merged else None
        if coalesce and last and source == last.source + last.count and target == last.target + last.count:
            merged[-1] = Run(last.source, last.target, last.count + 1)
        else:
            merged.append(Run(source, target, 1))
    return merged


def nixl_api() -> Any:
    """NIXL's Python API, from whichever of its wheels is installed; ModuleNotFoundError names them if none."""
    for name in NIXL_MODULES:
        try:
            api = importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        if not os.environ.get("NIXL_LOG_LEVEL"):  # NIXL logs every agent's start at INFO, on stdout
            logging.getLogger("nixl").setLevel(logging.WARNING)
        return api
    raise ModuleNotFoundError(f"none of NIXL's modules is installed ({', '.join(NIXL_MODULES)})", name="nixl")


@dataclass
class _Reading:
    handle: Any
    deadline: float
    posted: float
    bytes: int
    descriptors: int


class KvTransfer:
    """This worker's NIXL agent over its pools: the prefill side offers them (`source`), the decode side
    reads from them (`receive`), and both follow what completed (`poll`)."""

    def __init__(
        self,
        pools: Mapping[PoolName, PoolMemory],
        timeout_s: float,
        name: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        timing_log: Path | None = None,
    ) -> None:
        nixl = nixl_api()
        self.pools, self.timeout_s, self.clock, self.timing_log = dict(pools), timeout_s, clock, timing_log
        self.name = name or f"gptoss-{uuid.uuid4().hex[:16]}"
        self.agent = nixl.nixl_agent(self.name, nixl.nixl_agent_config(backends=[BACKEND]))
        self._registered = [
            self.agent.register_memory([(pool.address, pool.blocks * pool.block_bytes, pool.device_id, "")], pool.kind)
            for pool in self.pools.values()
        ]
        metadata = base64.b64encode(self.agent.get_agent_metadata()).decode()
        offered = {name: RemotePool(**vars(pool)) for name, pool in self.pools.items()}
        self._source = TransferSource(agent=self.name, metadata=metadata, pools=offered)
        self._peers: dict[str, str] = {}  # agent name -> the metadata loaded for it, oldest first
        self._reading: dict[str, _Reading] = {}  # request id -> its READ
        self._failed: list[str] = []

    def source(self) -> TransferSource:
        return self._source

    def receive(self, request_id: str, handoff_id: str, source: TransferSource, pairs: Mapping[PoolName, list]) -> None:
        """Start one READ of every (sender's block, this worker's block) pair, pool by pool; its notification
        is `handoff_id`. A READ that cannot be posted fails the request at the next poll."""
        try:
            peer = self._peer(source)
            local, remote = [], []
            for name, pool_pairs in pairs.items():
                ours, theirs = self.pools[name], source.pools[name]
                for run in runs([s for s, _ in pool_pairs], [t for _, t in pool_pairs]):
                    local.append(
                        (ours.address + run.target * ours.block_bytes, run.count * ours.block_bytes, ours.device_id)
                    )
                    remote.append(
                        (
                            theirs.address + run.source * theirs.block_bytes,
                            run.count * theirs.block_bytes,
                            theirs.device_id,
                        )
                    )
            kind = next(iter(self.pools.values())).kind
            remote_kind = next(iter(source.pools.values())).kind
            handle = self.agent.initialize_xfer(
                "READ",
                self.agent.get_xfer_descs(local, kind),
                self.agent.get_xfer_descs(remote, remote_kind),
                peer,
                handoff_id.encode(),
            )
            state = self.agent.transfer(handle)
            if state == "ERR":
                raise RuntimeError("NIXL refused to post the READ")
        except Exception as err:  # noqa: BLE001 - NIXL raises its own kinds; the request fails, the worker stays
            log.warning("gptoss: the KV handoff of request %s could not start: %s", request_id, err)
            self._failed.append(request_id)
            return
        now, moved = self.clock(), sum(length for _, length, _ in local)
        self._reading[request_id] = _Reading(handle, now + self.timeout_s, now, moved, len(local))

    def _peer(self, source: TransferSource) -> str:
        if self._peers.get(source.agent) != source.metadata:
            if source.agent in self._peers:  # the same name with new metadata: a restarted peer
                self.agent.remove_remote_agent(source.agent)
                del self._peers[source.agent]
            loaded = self.agent.add_remote_agent(base64.b64decode(source.metadata, validate=True))
            if isinstance(loaded, bytes):
                loaded = loaded.decode()
            if loaded != source.agent:
                self.agent.remove_remote_agent(loaded)
                raise ValueError(f"the source's metadata is agent {loaded!r}'s, not {source.agent!r}'s")
            self._peers[source.agent] = source.metadata
            if len(self._peers) > MOST_PEERS:
                oldest = next(iter(self._peers))
                self.agent.remove_remote_agent(oldest)
                del self._peers[oldest]
        return source.agent

    def poll(self) -> TransferProgress:
        """READs completed, READs failed or past their deadline (decode side), and handoffs read (prefill side)."""
        received, failed, self._failed = [], self._failed, []
        now = self.clock()
        for request_id, reading in list(self._reading.items()):
            state = self.agent.check_xfer_state(reading.handle)
            if state == "PROC" and now < reading.deadline:
                continue
            if state != "DONE":
                log.warning(
                    "gptoss: the KV handoff of request %s %s", request_id, "failed" if state == "ERR" else "timed out"
                )
            self._release(reading.handle)
            del self._reading[request_id]
            (received if state == "DONE" else failed).append(request_id)
            if state == "DONE" and self.timing_log is not None:
                self._log_timing(request_id, reading, now)
        notes = self.agent.get_new_notifs()
        read = [message.decode() for messages in notes.values() for message in messages]
        return TransferProgress(received=received, failed=failed, read=read)

    def _log_timing(self, request_id: str, reading: _Reading, now: float) -> None:
        """One line a handoff read; its time is from posting to the poll that saw it done (the engine polls
        every few milliseconds while KV is on the way), so it is an upper bound by that much."""
        line = {
            "request_id": request_id,
            "bytes": reading.bytes,
            "descriptors": reading.descriptors,
            "ms": round((now - reading.posted) * 1e3, 3),
        }
        with self.timing_log.open("a") as log:
            log.write(json.dumps(line) + "\n")

    def _release(self, handle: Any) -> None:
        try:
            self.agent.release_xfer_handle(handle)
        except Exception as err:  # noqa: BLE001 - a READ NIXL could not cancel: its handle is left to the agent
            log.warning("gptoss: a KV handoff's NIXL handle could not be released: %s", err)

    @property
    def reading(self) -> int:
        return len(self._reading)

    def close(self) -> None:
        """The agent ended: its READs released, its peers forgotten, its pools no longer offered."""
        if self.agent is None:
            return
        for reading in self._reading.values():
            self._release(reading.handle)
        self._reading.clear()
        for peer in list(self._peers):
            self.agent.remove_remote_agent(peer)
        self._peers.clear()
        for registered in self._registered:
            self.agent.deregister_memory(registered)
        self.agent = None


class HandsOver:
    """The model runner's handoff methods (model_runner.ModelRunner's) over its `transfer`: the pools' agent
    for a prefill or decode worker, None for an aggregated one, which moves no KV."""

    transfer: KvTransfer | None = None

    def transfer_source(self) -> TransferSource:
        assert self.transfer is not None, "a prefill worker's runner hands over"
        return self.transfer.source()

    def receive(self, request_id: str, handoff: KvHandoff, pairs: Mapping[PoolName, list[tuple[int, int]]]) -> None:
        assert self.transfer is not None, "a decode worker's runner receives"
        self.transfer.receive(request_id, handoff.handoff_id, handoff.source, pairs)

    def poll_transfers(self) -> TransferProgress:
        return self.transfer.poll() if self.transfer is not None else TransferProgress()
