"""`python -m dynamo_oss.planner.actuator RUN_DIR`: carries out Dynamo's planner decisions on one host.

Dynamo's planner in its `virtual` environment only publishes decisions (in etcd, under
v1/NAMESPACE/planner/) and waits for an acknowledgement; on Kubernetes the operator acts on
them. Here this small process takes each one through Dynamo's own `VirtualConnectorClient`,
hands it to the launcher's control API (the path `dynamo scale` takes too), and acknowledges it
only once the launcher is done: new workers registered, or old ones drained and stopped. A
decision the launcher refuses (past the GPU budget or a pool's range) is acknowledged as well,
with the launcher's reason in its log, so the planner decides again from the pools as they are.

It runs as one of the graph's processes, so the launcher restarts it if it fails.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from pathlib import Path

from dynamo._core import DistributedRuntime, VirtualConnectorClient

from dynamo_oss.catalog.errors import UserError
from dynamo_oss.catalog.names import PoolRole
from dynamo_oss.launch.control_client import ControlClient
from dynamo_oss.planner.look import Look

log = logging.getLogger("dynamo_oss.planner.actuator")


def decided_sizes(prefill: int, decode: int, roles: list[PoolRole]) -> dict[PoolRole, int]:
    """The pool sizes a decision sets: the planner says -1 for a count it leaves alone, and names an
    aggregated pool's workers as decode workers."""
    sizes: dict[PoolRole, int] = {}
    if "prefill" in roles and prefill >= 0:
        sizes["prefill"] = prefill
    decode_role: PoolRole = "agg" if "agg" in roles else "decode"
    if decode_role in roles and decode >= 0:
        sizes[decode_role] = decode
    return sizes


async def relay(run_dir: Path, roles: list[PoolRole]) -> None:
    loop = asyncio.get_running_loop()
    runtime = DistributedRuntime(loop, os.environ.get("DYN_DISCOVERY_BACKEND", "etcd"), "tcp")
    decisions = VirtualConnectorClient(runtime, os.environ["DYN_NAMESPACE"])
    control = ControlClient.for_run(run_dir)
    log.info("waiting for the planner's decisions on pools %s", ", ".join(roles))
    while True:
        await decisions.wait()
        decision = await decisions.get()
        sizes = decided_sizes(decision.num_prefill_workers, decision.num_decode_workers, roles)
        if sizes:
            try:
                look = Look.read(run_dir)  # the sla mode's reason for it, when it gives one
                why = look.reason if look and all(look.wanted.get(role) == n for role, n in sizes.items()) else None
                await asyncio.to_thread(control.decide, decision.decision_id, sizes, why)
            except UserError as error:  # refused or failed: the launcher has logged why
                log.warning("decision %s not carried out: %s", decision.decision_id, error)
        await decisions.complete(decision)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="the run folder of the launcher to drive")
    parser.add_argument("--pools", required=True, help="comma-separated pools the planner sizes")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(relay(args.run_dir, args.pools.split(",")))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
