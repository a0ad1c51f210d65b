"""Resizing pools on one host: what Dynamo's operator does on Kubernetes, done by the launcher.

Growing starts workers in the pool's free slots (the ports the host plan reserved) on free GPUs,
and counts as done only once each new worker has registered in discovery, where the frontend
routes to it. Shrinking drains first: the worker's discovery key is deleted, so nothing new is
routed to it; its streams in flight finish (counted from its own /metrics); then it is stopped.
Dynamo's workers abort their streams on SIGTERM, which is what users report of the planner's
scale-down on Kubernetes (dynamo issues 13559 and 13565), so a worker is never signalled while
it still streams.

A resize is checked whole before anything moves: a pool's size range, and the GPU budget.
One resize runs at a time, whoever asked (the planner or `dynamo scale`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

from pydantic import BaseModel, Field

from dynamo_oss.catalog.names import PoolRole
from dynamo_oss.deployment.host import HostPlan, PoolPlan
from dynamo_oss.deployment.processes import ProcessPlan
from dynamo_oss.launch import probes
from dynamo_oss.launch.process import ManagedProcess

DRAIN_TIMEOUT_S = 900.0  # a worker whose streams outlast this is stopped anyway, and the log says so
IDLE_CHECKS = 2  # consecutive reads of zero streams that end a drain (a request routed just before the
# key went may still be on its way to the worker)
DRAIN_POLL_S = 0.5


class ScaleRefused(ValueError):
    """A resize that cannot be carried out; the message says why, and nothing was changed."""


class ScaleFailed(RuntimeError):
    """A new worker did not come up; the message says which and where its log is."""


class PoolChange(BaseModel):
    role: PoolRole
    before: int
    after: int


class ScaleOutcome(BaseModel):
    """What one resize did."""

    reason: str = Field(description="who asked: `dynamo scale`, or the planner's decision")
    changes: list[PoolChange]
    seconds: float = Field(description="from the request to the last new worker registered or old one stopped")


class WorkerHost(Protocol):
    """What the scaler needs of the supervisor that owns the processes."""

    plan: HostPlan

    def workers(self, role: PoolRole) -> list[ManagedProcess]:
        """The pool's workers that are running and not draining."""

    def gpus_in_use(self) -> set[int]:
        """GPUs of every worker process still alive, draining ones included."""

    async def start_worker(self, slot: ProcessPlan) -> ManagedProcess:
        """Start (or restart) a worker slot under supervision."""

    async def retire_worker(self, process: ManagedProcess) -> None:
        """Stop a drained worker for good: it is not restarted."""

    def pools_changed(self) -> None:
        """Record the new pool sizes (state file, metrics, Prometheus targets)."""


class Scaler:
    def __init__(self, host: WorkerHost) -> None:
        self.host = host
        self.plan = host.plan
        self.lock = asyncio.Lock()
        # What each pool should have: the last resize's sizes, else what the graph starts with.
        self.targets: dict[PoolRole, int] = {pool.role: len(self.plan.workers(pool.role)) for pool in self.plan.pools}

    def sizes(self) -> dict[PoolRole, int]:
        return {pool.role: len(self.host.workers(pool.role)) for pool in self.plan.pools}

    async def resize(self, wanted: dict[PoolRole, int], reason: str) -> ScaleOutcome:
        """Bring each pool in `wanted` to its size: shrink first (its GPUs may be what growth needs)."""
        async with self.lock:
            started = time.monotonic()
            self._check(wanted)
            self.targets.update(wanted)
            before = self.sizes()
            changes = [PoolChange(role=role, before=before[role], after=size) for role, size in wanted.items()]
            moving = [change for change in changes if change.after != change.before]
            if moving:
                self.say(f"{reason}: " + ", ".join(f"{c.role} {c.before} -> {c.after}" for c in moving))
            try:
                await asyncio.gather(*(self._shrink(c.role, c.before - c.after) for c in moving if c.after < c.before))
                await asyncio.gather(*(self._grow(c.role, c.after - c.before) for c in moving if c.after > c.before))
            except ScaleFailed:
                self.targets.update(self.sizes())  # what the pools have, not what could not be had
                raise
            outcome = ScaleOutcome(reason=reason, changes=changes, seconds=time.monotonic() - started)
            if moving:
                self.say(f"{reason}: done in {outcome.seconds:.1f} s")
            return outcome

    def _check(self, wanted: dict[PoolRole, int]) -> None:
        """ScaleRefused unless `wanted` is within each pool's range and the GPU budget."""
        sizes = self.sizes()
        for role, size in wanted.items():
            pool = self.plan.pool(role)
            if pool is None:
                known = ", ".join(p.role for p in self.plan.pools)
                raise ScaleRefused(f"the graph has no pool {role} (its pools: {known})")
            if not pool.min_workers <= size <= pool.max_workers:
                hint = ""
                if not pool.autoscaled:
                    hint = " (a fixed pool shrinks and regrows; `autoscale: {min, max}` lets it grow)"
                raise ScaleRefused(
                    f"pool {role} runs {pool.min_workers} to {pool.max_workers} workers, not {size}{hint}"
                )
        total = {**sizes, **wanted}
        gpus = sum(total[pool.role] * pool.gpus_per_worker for pool in self.plan.pools)
        if gpus > self.plan.gpu_budget:
            demand = ", ".join(f"{p.role} {total[p.role]} x {p.gpus_per_worker}" for p in self.plan.pools)
            raise ScaleRefused(
                f"the pools would need {gpus} GPUs ({demand}) but the GPU budget is {self.plan.gpu_budget}"
            )

    async def _grow(self, role: PoolRole, count: int) -> None:
        # No worker is draining here: drains finish before growth, and one resize runs at a time.
        running = {process.name for process in self.host.workers(role)}
        free_slots = [slot for slot in self.plan.worker_slots(role) if slot.name not in running][:count]
        pool = self.plan.pool(role)
        assert pool is not None
        starting = []
        for slot in free_slots:
            gpus = self._free_gpus(pool)
            starting.append(await self.host.start_worker(slot.model_copy(update={"gpus": gpus})))
        self.host.pools_changed()
        await asyncio.gather(*(self._registered(process, pool) for process in starting))

    def _free_gpus(self, pool: PoolPlan) -> list[int]:
        used = self.host.gpus_in_use()
        free = [gpu for gpu in range(self.plan.gpus) if gpu not in used]
        if len(free) < pool.gpus_per_worker:
            raise ScaleRefused(f"pool {pool.role}: {pool.gpus_per_worker} GPUs needed, {len(free)} free")
        return free[: pool.gpus_per_worker]

    async def _registered(self, process: ManagedProcess, pool: PoolPlan) -> None:
        """Until the worker's instance is in discovery, where the frontend routes to it."""
        system, etcd = process.plan.ports[0], self.plan.etcd
        prefix = probes.instances_prefix(self.plan.namespace, pool.component)

        async def registered() -> bool:
            own = await probes.worker_streams(system.host, system.port, self.plan.namespace)
            if not own:
                return False
            keys = set(await probes.etcd_keys(etcd, prefix))
            return any(prefix + worker_id in keys for worker_id in own)

        try:
            await probes.wait_until(registered, self.plan.ready_timeout_s, f"{process.name} registered")
        except probes.NotReady as error:
            await self.host.retire_worker(process)
            self.host.pools_changed()
            raise ScaleFailed(f"{error}; it was stopped again, see {process.log_path}") from error
        process.say(f"serving: registered {time.monotonic() - process.started_at:.1f} s after its start")

    async def _shrink(self, role: PoolRole, count: int) -> None:
        pool = self.plan.pool(role)
        assert pool is not None
        leaving = sorted(self.host.workers(role), key=lambda p: p.name)[-count:]
        for process in leaving:
            process.draining = True
        self.host.pools_changed()
        await asyncio.gather(*(self._drain(process, pool) for process in leaving))
        self.host.pools_changed()

    async def _drain(self, process: ManagedProcess, pool: PoolPlan) -> None:
        """Out of discovery, streams finished, then stopped."""
        started = time.monotonic()
        system, namespace = process.plan.ports[0], self.plan.namespace
        own = await probes.worker_streams(system.host, system.port, namespace) or {}
        prefix = probes.instances_prefix(namespace, pool.component)
        for worker_id in own:
            await probes.etcd_delete(self.plan.etcd, prefix + worker_id)
        process.say(f"draining: out of discovery, {sum(own.values()):.0f} stream(s) in flight")
        idle = 0
        while idle < IDLE_CHECKS and process.running:
            if time.monotonic() - started > DRAIN_TIMEOUT_S:
                process.say(f"still streaming {DRAIN_TIMEOUT_S:.0f} s into its drain; stopping it anyway")
                break
            await asyncio.sleep(DRAIN_POLL_S)  # the poll interval of a condition wait
            streams = await probes.worker_streams(system.host, system.port, namespace)
            idle = idle + 1 if streams is not None and sum(streams.values()) == 0 else 0
        await self.host.retire_worker(process)
        process.say(f"stopped after a {time.monotonic() - started:.1f} s drain")

    def say(self, message: str) -> None:
        print(f"[dynamo-oss] {message}", flush=True)
