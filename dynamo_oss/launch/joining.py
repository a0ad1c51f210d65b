"""A node of a graph whose infrastructure runs on another node: joining it, and noticing its loss.

The node holding etcd and NATS may start after this one, or be rebooting; rather than let every
worker crash-loop against an address that does not answer yet, the launcher waits, says what it is
waiting for at intervals, and gives up at a deadline naming what it could not reach. Once serving,
it watches etcd and says when the infrastructure node stops answering (the workers here then lose
their leases, exit and are restarted until it is back) and when it answers again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from dynamo_oss.deployment.host import HostPlan
from dynamo_oss.launch import probes

JOIN_TIMEOUT_S = 300.0
PROGRESS_EVERY_S = 10.0
WATCH_EVERY_S = 2.0


async def reach_infrastructure(plan: HostPlan, say: Callable[[str], None], timeout_s: float = JOIN_TIMEOUT_S) -> None:
    """Until the graph's etcd is healthy and its NATS accepts connections; probes.NotReady past the deadline."""
    nats = urlsplit(plan.nats_url)
    services = {
        f"etcd {plan.etcd_endpoints[0]}": lambda: probes.etcd_healthy(plan.etcd),
        f"NATS {plan.nats_url}": lambda: probes.nats_answers(nats.hostname or "", nats.port or 4222, plan.tls),
    }
    started = time.monotonic()
    said = started
    say(f"node {plan.node}: waiting for the infrastructure on node {plan.infrastructure_node} ({', '.join(services)})")
    missing = list(services)

    async def reached() -> bool:
        nonlocal missing, said
        missing = [name for name, probe in services.items() if not await probe()]
        if missing and time.monotonic() - said >= PROGRESS_EVERY_S:
            said = time.monotonic()
            say(f"node {plan.node}: still waiting after {said - started:.0f} s for {', '.join(missing)}")
        return not missing

    try:
        await probes.wait_until(reached, timeout_s, "the infrastructure")
    except probes.NotReady:
        raise probes.NotReady(
            f"could not reach {', '.join(missing)} on node {plan.infrastructure_node} within "
            f"{timeout_s:.0f} s; is `dynamo serve --node {plan.infrastructure_node}` running "
            "there, and is its address reachable from this node?"
        ) from None


async def watch_infrastructure(plan: HostPlan, say: Callable[[str], None]) -> None:
    """Say when the graph's etcd stops answering and when it answers again; runs until cancelled."""
    etcd, reachable, since = plan.etcd, True, time.monotonic()
    while True:
        await asyncio.sleep(WATCH_EVERY_S)
        if await probes.etcd_healthy(etcd) == reachable:
            continue
        reachable, lost_for = not reachable, time.monotonic() - since
        since = time.monotonic()
        if reachable:
            say(
                f"node {plan.node}: the infrastructure on node {plan.infrastructure_node} answers again after "
                f"{lost_for:.0f} s; workers that lost their leases register again as they restart"
            )
        else:
            say(
                f"node {plan.node}: lost the infrastructure on node {plan.infrastructure_node} (etcd {etcd.endpoint} does not "
                "answer); this node's workers exit when their leases expire and are restarted until it is back"
            )
