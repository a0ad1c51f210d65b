"""Runs a host plan: infrastructure first, then frontend and workers; waits until the model is
served; restarts what crashes, with backoff; drains everything in order on Ctrl-C or SIGTERM.

A small asyncio supervisor rather than circus (which Dynamo 0.1-0.3 used): we need
readiness gates between stages (etcd before workers, every worker registered before we
say "ready"), an ordered drain (frontend first, so in-flight streams finish on live
workers), and per-line log prefixes; each is a few lines here and a plugin there.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import time
from collections import Counter
from collections.abc import Coroutine
from typing import Any

from dynamo_oss.catalog.addresses import WILDCARDS
from dynamo_oss.catalog.names import PoolRole, component_for
from dynamo_oss.deployment.host import HostPlan, PoolPlan, gpu_env
from dynamo_oss.deployment.processes import LOOPBACK, ProcessPlan
from dynamo_oss.deployment.scrape import worker_targets
from dynamo_oss.launch import probes
from dynamo_oss.launch.control import TOKEN_FILE, ControlServer, control_app, write_token
from dynamo_oss.launch.joining import reach_infrastructure, watch_infrastructure
from dynamo_oss.launch.metrics import LauncherMetrics
from dynamo_oss.launch.process import ManagedProcess
from dynamo_oss.launch.scaling import Scaler
from dynamo_oss.launch.state import DecisionRecord, PoolState, ProcessState, RunState, write_atomically

INFRA_READY_TIMEOUT_S = 30.0
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0
HEALTHY_RUN_S = 60.0  # a process that ran this long starts its backoff over
STARTUP_CRASH_LIMIT = 3  # exits before the graph is ready that mean it never will be
GRACE_S = {
    "planner": 10.0,
    "gateway": 30.0,
    "frontend": 30.0,
    "worker": 20.0,
    "prometheus": 5.0,
    "traces": 5.0,
    "nats": 5.0,
    "etcd": 5.0,
}
INFRASTRUCTURE = ("etcd", "nats", "prometheus")  # started first, in plan order, each ready before the next


class StartupFailed(RuntimeError):
    pass


class Supervisor:
    def __init__(self, plan: HostPlan, verbose: bool = False) -> None:
        self.plan = plan
        log_dir = plan.run_dir / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir, self.verbose = log_dir, verbose
        self.name_width = max(len(p.name) for p in plan.processes + plan.spare_workers)
        self.processes = [ManagedProcess(p, log_dir, self.name_width, verbose) for p in plan.processes]
        self.recoveries: set[asyncio.Task] = set()  # "serves again" watches of restarted processes
        # each process's restart loop, by name, and the watch on another node's infrastructure
        self.watchers: dict[str, asyncio.Task] = {}
        self.metrics = LauncherMetrics(plan.namespace)
        for process in self.processes:
            self.metrics.watch(process.name, process.plan.kind)
        self.scaler = Scaler(self)
        self.last_decision: DecisionRecord | None = None
        self.control_url: str | None = None
        self.stopping = asyncio.Event()
        self.crash_looping = asyncio.Event()
        self.crash_report = ""
        self.ready = False

    def say(self, message: str) -> None:
        print(f"[dynamo-oss] {message}", flush=True)

    async def run(self, ready_timeout_s: float) -> int:
        """Serve until asked to stop. Returns the exit status."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal)
        control, serving_control = self._serve_control_api()
        try:
            started = time.monotonic()
            if self.plan.launcher_metrics is not None:
                if self.plan.nats_monitoring is not None:
                    self.metrics.watch_nats(self.plan.nats_monitoring)
                self.metrics.serve(self.plan.launcher_metrics)
            if self.plan.infrastructure_node:
                await self._unless_interrupted(reach_infrastructure(self.plan, self.say))
                if self.stopping.is_set():
                    return 0
            await self._start_infrastructure()
            for process in self.processes:
                if process.plan.kind not in INFRASTRUCTURE:
                    await process.start()
                    self._write_state()
            for process in self.processes:
                self._supervise(process)
            await self._until_served(ready_timeout_s)
            if self.stopping.is_set():
                return 0
            self.ready = True
            self._write_state()
            pools = Counter(p.role for p in self.plan.workers())
            sizes = ", ".join(f"{role} x{count}" for role, count in pools.items()) or "workers on other nodes"
            if self.plan.infrastructure_node:
                where = f" (node {self.plan.endpoint_node})" if self.plan.endpoint_node else ""
                self.say(
                    f"node {self.plan.node} ready in {time.monotonic() - started:.1f} s: {sizes} registered; "
                    f"{self.plan.endpoint}{where} serves them. Ctrl-C stops."
                )
            else:
                self.say(
                    f"ready in {time.monotonic() - started:.1f} s: {self.plan.endpoint} serves "
                    f"{self.plan.served_name} ({sizes}). Ctrl-C stops."
                )
            if self.plan.prometheus_url:
                self.say(f"metrics: Prometheus at {self.plan.prometheus_url}")
            if self.plan.traces_url:
                self.say(f"traces: Phoenix at {self.plan.traces_url} (`dynamo trace` prints one request's spans)")
            if self.plan.planner:
                self.say(f"planner: {self.plan.planner}")
            if self.plan.infrastructure_node:
                self.watchers["infrastructure"] = asyncio.create_task(watch_infrastructure(self.plan, self.say))
            await self.stopping.wait()
            return 0
        except StartupFailed as err:
            self.say(f"start-up failed: {err}")
            return 1
        except probes.NotReady as err:
            self.say(
                f"start-up failed: {err}. The processes' logs are in {self.plan.run_dir / 'logs'}; "
                "if the workers were only slow (loading weights), raise --ready-timeout"
            )
            return 1
        finally:
            for task in [*self.watchers.values(), *self.recoveries]:
                task.cancel()
            await self._drain()
            control.should_exit = True
            await serving_control

    def _on_signal(self) -> None:
        if self.stopping.is_set():
            return
        self.say("stopping: draining the gateway and frontend, then workers, then infrastructure")
        self.stopping.set()

    async def _start_infrastructure(self) -> None:
        for process in self.processes:
            if process.plan.kind not in INFRASTRUCTURE:
                continue
            await process.start()
            self._write_state()
            ready = self._infra_ready(process)
            exited = asyncio.create_task(process.wait())
            waiting = asyncio.create_task(probes.wait_until(ready, INFRA_READY_TIMEOUT_S, f"{process.name} ready"))
            done, _ = await asyncio.wait({exited, waiting}, return_when=asyncio.FIRST_COMPLETED)
            if exited in done:
                waiting.cancel()
                raise StartupFailed(f"{process.name} exited with status {exited.result()}: see {process.log_path}")
            exited.cancel()
            waiting.result()

    def _infra_ready(self, process: ManagedProcess):  # noqa: ANN202 - a probe closure
        port = process.plan.ports[0]
        if process.plan.kind == "etcd":
            return lambda: probes.etcd_healthy(self.plan.etcd)
        if process.plan.kind == "nats":
            return lambda: probes.nats_answers(port.host, port.port, self.plan.tls)
        return lambda: probes.tcp_open(port.host, port.port)

    async def _until_served(self, timeout_s: float) -> None:
        """Every worker registered in discovery and the model listed by every frontend and the endpoint."""
        expected = Counter(component_for(p.role) for p in self.plan.workers() if p.role)
        etcd = self.plan.etcd

        async def registered() -> bool:
            for component, count in expected.items():
                keys = await probes.etcd_keys(etcd, probes.instances_prefix(self.plan.namespace, component))
                if len(keys) < count:
                    return False
            return True

        async def served() -> bool:
            # Every frontend lists the model (the gateway spreads requests over all of them), then the whole
            # path as a client takes it, or, where the endpoint wants a key the launcher does not hold, the
            # gateway's open health path.
            for frontend in (p.ports[0] for p in self.plan.processes if p.kind == "frontend"):
                if self.plan.served_name not in await probes.served_models(
                    f"http://{frontend.host}:{frontend.port}/v1"
                ):
                    return False
            if not self.plan.api_keys:
                return self.plan.served_name in await probes.served_models(self.plan.endpoint)
            return await probes.http_ok(f"{self.plan.endpoint[:-3]}/health")

        if self.plan.endpoint_node:  # a frontend node serves them, not this one
            self.say(f"waiting for {sum(expected.values())} worker(s) to register")
            await self._unless_interrupted(probes.wait_until(registered, timeout_s, "every worker registered"))
            return
        self.say(f"waiting for {sum(expected.values())} worker(s) to register and the model to be served")
        await self._unless_interrupted(probes.wait_until(registered, timeout_s, "every worker registered"))
        await self._unless_interrupted(probes.wait_until(served, timeout_s, "the model listed"))
        # The embedded trace backend starts beside the graph (it is the slowest to) and is waited for
        # here: spans of requests sent once the graph says it is ready are all received.
        for traces in (p for p in self.plan.processes if p.kind == "traces"):
            for port in traces.ports:
                ready = functools.partial(probes.tcp_open, port.host, port.port)
                await self._unless_interrupted(probes.wait_until(ready, timeout_s, f"{traces.name} on {port.port}"))

    async def _unless_interrupted(self, wait: Coroutine[Any, Any, None]) -> None:
        """Run a start-up wait; give up quietly on a stop request, loudly when a process crash-loops."""
        waiting = asyncio.ensure_future(wait)
        stopped = asyncio.create_task(self.stopping.wait())
        crashed = asyncio.create_task(self.crash_looping.wait())
        done, pending = await asyncio.wait({waiting, stopped, crashed}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        if crashed in done:
            raise StartupFailed(self.crash_report)
        if waiting in done:
            waiting.result()

    def _serve_control_api(self) -> tuple[ControlServer, asyncio.Task]:
        """The control API on a loopback port the kernel picks; its URL goes into state.json."""
        token = write_token(self.plan.run_dir)
        app = control_app(self.scaler, self._state, self._decided, token)
        server, listener = ControlServer.on_loopback(app)
        host, port = listener.getsockname()
        self.control_url = f"http://{host}:{port}"
        return server, asyncio.create_task(server.serve(sockets=[listener]))

    def _decided(self, record: DecisionRecord) -> None:
        self.last_decision = record
        self._write_state()

    # The scaler's view of the workers (scaling.WorkerHost).

    def workers(self, role: PoolRole) -> list[ManagedProcess]:
        return [p for p in self.processes if p.plan.role == role and p.running and not p.draining]

    def gpus_in_use(self) -> set[int]:
        return {gpu for p in self.processes if p.plan.kind == "worker" and p.running for gpu in p.plan.gpus}

    async def start_worker(self, slot: ProcessPlan) -> ManagedProcess:
        slot = slot.model_copy(update={"env": {**slot.env, **gpu_env(slot.gpus)}})
        process = next((p for p in self.processes if p.name == slot.name), None)
        if process is None:
            process = ManagedProcess(slot, self.log_dir, self.name_width, self.verbose)
            self.processes.append(process)
            self.metrics.watch(process.name, process.plan.kind)
        process.plan, process.draining, process.retired = slot, False, False
        await process.start()
        self._supervise(process)
        self.metrics.scaled(slot.role or "", "up")
        return process

    async def retire_worker(self, process: ManagedProcess) -> None:
        process.retired = True
        await process.stop(GRACE_S["worker"])
        self.metrics.scaled(process.plan.role or "", "down")

    def pools_changed(self) -> None:
        self._write_state()
        if self.plan.worker_targets is not None:
            running = [p.plan for p in self.processes if p.plan.kind == "worker" and p.running]
            targets = worker_targets(running + self.plan.workers_elsewhere, self.plan.namespace)
            write_atomically(self.plan.worker_targets, targets)

    def _supervise(self, process: ManagedProcess) -> None:
        self.watchers[process.name] = asyncio.create_task(self._keep_running(process))

    async def _keep_running(self, process: ManagedProcess) -> None:
        """Restart the process whenever it exits, waiting longer after each quick crash; a worker
        the scaler retired stays stopped."""
        backoff = BACKOFF_FIRST_S
        while True:
            code = await process.wait()
            if self.stopping.is_set() or process.retired:
                return
            if time.monotonic() - process.started_at > HEALTHY_RUN_S:
                backoff = BACKOFF_FIRST_S
            reason = f"signal {signal.Signals(-code).name}" if code < 0 else f"status {code}"
            process.restarts += 1
            self.metrics.restarted(process.name, process.plan.kind)
            self._write_state()  # dynamo status shows it down during the backoff
            if not self.ready and process.restarts >= STARTUP_CRASH_LIMIT:
                self.crash_report = (
                    f"{process.name} exited {process.restarts} times before the graph was ready "
                    f"(last: {reason}); its output is above and in {process.log_path}"
                )
                self.crash_looping.set()
                return
            process.say(f"exited with {reason}; restarting in {backoff:.0f} s (restart {process.restarts})")
            before = await self._instances(process)
            if not await process.restart_after(backoff, BACKOFF_MAX_S, self.stopping):
                return
            self._write_state()
            if self.ready:
                watch = asyncio.create_task(self._announce_recovery(process, before))
                self.recoveries.add(watch)
                watch.add_done_callback(self.recoveries.discard)
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    async def _instances(self, process: ManagedProcess) -> set[str]:
        """The discovery keys of a worker's component (empty for other processes)."""
        if process.plan.kind != "worker" or process.plan.role is None:
            return set()
        prefix = probes.instances_prefix(self.plan.namespace, component_for(process.plan.role))
        return set(await probes.etcd_keys(self.plan.etcd, prefix))

    async def _announce_recovery(self, process: ManagedProcess, before: set[str]) -> None:
        """Say when a restarted process serves again: a worker once it registers an instance that was
        not there before the crash (the dead one's key lingers until its lease lapses), any other
        process once its port answers."""
        restarted = time.monotonic()

        async def serving() -> bool:
            if process.plan.kind == "worker":
                return bool(await self._instances(process) - before)
            use = process.plan.ports[0]
            return await probes.tcp_open(LOOPBACK if use.host in WILDCARDS else use.host, use.port)

        try:
            await probes.wait_until(serving, self.plan.ready_timeout_s, f"{process.name} serving again")
        except probes.NotReady:
            process.say(f"not serving {self.plan.ready_timeout_s:.0f} s after its restart; see {process.log_path}")
            return
        process.say(f"serves again, {time.monotonic() - restarted:.1f} s after its restart")

    async def _drain(self) -> None:
        """Gateway and frontend first (they finish in-flight streams), then workers, then NATS and etcd."""
        for process in self.processes:
            process.draining = True  # what they print while stopping (lost peers, closed streams) is expected
        for kinds in (
            ("planner",),
            ("gateway",),
            ("frontend",),
            ("worker",),
            ("prometheus", "traces"),
            ("nats",),
            ("etcd",),
        ):
            group = [p for p in self.processes if p.plan.kind in kinds]
            await asyncio.gather(*(p.stop(GRACE_S[p.plan.kind]) for p in group))
        self._write_state(stopped=True)
        self.say("stopped: every process has exited")

    def _write_state(self, stopped: bool = False) -> None:
        """The run's live facts (pids, restarts, ports, pool sizes) for `dynamo status`, tests and operators."""
        state = self._state(stopped)
        state.write(self.plan.run_dir)
        self.metrics.ready.set(1 if self.ready else 0)
        for pool in state.pools:
            self.metrics.pool(pool.role, target=pool.target, live=pool.live, draining=pool.draining)

    def _state(self, stopped: bool = False) -> RunState:
        workers = [p for p in self.processes if p.plan.kind == "worker"]

        def pool_state(pool: PoolPlan) -> PoolState:
            own = [p for p in workers if p.plan.role == pool.role]
            return PoolState(
                role=pool.role,
                engine=pool.engine,
                target=self.scaler.targets[pool.role],
                live=len(self.workers(pool.role)),
                draining=sum(1 for p in own if p.running and p.draining and not self.stopping.is_set()),
                restarts=sum(p.restarts for p in own),
                min=pool.min_workers,
                max=pool.max_workers,
                autoscaled=pool.autoscaled,
            )

        return RunState(
            graph=self.plan.graph,
            endpoint=self.plan.endpoint,
            served_name=self.plan.served_name,
            prometheus_url=self.plan.prometheus_url,
            traces_url=self.plan.traces_url,
            supervisor_pid=os.getpid(),
            ready=self.ready,
            stopped=stopped,
            pools=[pool_state(pool) for pool in self.plan.pools],
            processes=[
                ProcessState(
                    name=p.name,
                    kind=p.plan.kind,
                    role=p.plan.role,
                    pid=p.pid if p.running else None,
                    restarts=p.restarts,
                    ports=[use.port for use in p.plan.ports],
                    gpus=p.plan.gpus,
                    log=p.log_path,
                )
                for p in self.processes
            ],
            control_url=self.control_url,
            control_token_file=self.plan.run_dir / TOKEN_FILE,
            node=self.plan.node,
            namespace=self.plan.namespace,
            etcd=self.plan.etcd if self.plan.etcd_endpoints else None,
            nodes=self.plan.nodes,
            last_decision=self.last_decision,
        )
