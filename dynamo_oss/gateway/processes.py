"""The endpoint's processes: `gateway.processes` gateway processes on one port, each its own event loop
(one core), started and kept running by the process that `python -m dynamo_oss.gateway` starts first.

That first process serves no client. It empties the state folder the others share (ledger.py, and
prometheus-client's multiprocess files), starts each serving process, starts again one that dies
(backing off if it keeps dying), serves /metrics summed over all of them (and the frontend's), keeps
the ledger in step with the graph's other places where the gateway runs in several (cluster_share.py),
and on SIGTERM passes the signal on and waits while they drain. The serving processes die with it, so a
restart of the endpoint never leaves one behind on the port.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from dynamo_oss.gateway.cluster_share import keep_shared
from dynamo_oss.gateway.config import GatewayConfig
from dynamo_oss.gateway.latency_histograms import ExemplarCollector, exemplars_dir
from dynamo_oss.gateway.ledger import Ledger
from dynamo_oss.gateway.metrics_port import serve_metrics

log = logging.getLogger("dynamo_oss.gateway")

MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"  # where prometheus-client keeps each process's series
BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0)  # waits before restarting a process that keeps dying
STEADY_S = 60.0  # a process that ran this long before dying is restarted at once, as on its first death
PR_SET_PDEATHSIG = 1
DRAIN_TIMEOUT_S = 30.0  # how long streams in flight may take to finish after SIGTERM


async def run_endpoint(config: GatewayConfig, config_file: Path, drain_timeout_s: float = DRAIN_TIMEOUT_S) -> None:
    """Run the endpoint's processes until SIGTERM or SIGINT, then stop them."""
    shutil.rmtree(config.metrics_dir, ignore_errors=True)
    config.metrics_dir.mkdir(parents=True, mode=0o700)
    Ledger.create(config.ledger_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    running: dict[int, asyncio.subprocess.Process] = {}
    keepers = [loop.create_task(_keep(index, config_file, config, running, stop)) for index in range(config.processes)]
    registry = CollectorRegistry()
    if config.tracing is None:
        MultiProcessCollector(registry, path=str(config.metrics_dir))
    else:  # the latency histograms' buckets carry the traced requests' trace ids
        shutil.rmtree(exemplars_dir(config.state_dir), ignore_errors=True)
        summed = MultiProcessCollector(None, path=str(config.metrics_dir))
        registry.register(ExemplarCollector(summed, exemplars_dir(config.state_dir)))
    sharing = loop.create_task(keep_shared(config, registry)) if config.cluster_share is not None else None
    metrics = None
    if config.metrics_host is not None and config.metrics_port is not None:
        metrics = await serve_metrics(config.metrics_host, config.metrics_port, config.upstreams, registry)
    try:
        await stop.wait()
    finally:
        for process in running.values():
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        _, late = await asyncio.wait(keepers, timeout=drain_timeout_s + 5)
        for process in running.values():
            if process.returncode is None:
                process.kill()
        for keeper in late:
            keeper.cancel()
        if sharing is not None:  # only now: the other places count this one's streams while they drain
            sharing.cancel()
            await asyncio.wait([sharing])
        if metrics is not None:
            await metrics.cleanup()


async def _keep(
    index: int,
    config_file: Path,
    config: GatewayConfig,
    running: dict[int, asyncio.subprocess.Process],
    stop: asyncio.Event,
) -> None:
    """Keep serving process `index` running until `stop`."""
    deaths = 0
    env = {**os.environ, MULTIPROCESS_ENV: str(config.metrics_dir)}
    while not stop.is_set():
        started = time.monotonic()
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "dynamo_oss.gateway",
            "--config",
            str(config_file),
            "--process",
            str(index),
            env=env,
            preexec_fn=_die_with_parent,
        )
        running[index] = process
        code = await process.wait()
        # Its live gauges (the batch pacing window, what batch requests hold) go with it; its counters stay summed.
        mark_process_dead(process.pid, str(config.metrics_dir))
        if stop.is_set():
            return
        deaths = 0 if time.monotonic() - started > STEADY_S else deaths + 1
        wait = BACKOFF_S[min(deaths, len(BACKOFF_S)) - 1] if deaths else 0.0
        log.warning("gateway process %d exited with %s; starting it again in %g s", index, code, wait)
        if wait:
            try:
                await asyncio.wait_for(stop.wait(), wait)  # stopped meanwhile: not started again
            except TimeoutError:
                pass


def _die_with_parent() -> None:
    """In the serving process: SIGTERM when the first process dies, however it dies."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
