"""One side of a KV handoff, as a prefill or a decode worker process runs it.

    python -m benchmarks.gpu.kv_handoff.worker prefill --folder DIR --device cuda:0
    python -m benchmarks.gpu.kv_handoff.worker decode --folder DIR --device cuda:1

Both read DIR/plan.json, allocate one pool (prefill writes each request's KV into it, decode's
stays poisoned), register it with NIXL and publish their agent metadata and pool address. The
initiator (decode for op READ, prefill for op WRITE) loads its peer's metadata and, per request,
runs one untimed first transfer (it opens the peer's memory) and then timed repeats; it publishes
the timings and notifies the peer. Decode then checks every byte it holds against what prefill
wrote. Each side leaves only once the other has finished, so no notification is lost with an
exiting process.
"""

from __future__ import annotations

import argparse
import base64
import statistics
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from benchmarks.gpu.kv_handoff import rendezvous
from benchmarks.gpu.kv_handoff.agent import Agent, PoolView
from benchmarks.gpu.kv_handoff.plan import Plan, Request
from benchmarks.gpu.kv_handoff.pool import BlockPool, request_content
from benchmarks.gpu.kv_handoff.rendezvous import DECODE, PREFILL, TIMINGS, VERIFIED

TIMEOUT_S = 300.0
MIN_REPEATS = 3


def initiator(plan: Plan) -> str:
    return DECODE if plan.op == "READ" else PREFILL


def time_request(agent: Agent, peer: str, remote: PoolView, request: Request, plan: Plan) -> dict:
    """Seconds of the first transfer, and the median and minimum of the timed repeats."""
    transfer = agent.request_transfer(peer, remote, request.sources, request.targets, plan.op, plan.mode, plan.parts)
    first = transfer.run(TIMEOUT_S)
    times: list[float] = []
    started = time.perf_counter()
    while len(times) < MIN_REPEATS or (len(times) < plan.repeats and time.perf_counter() - started < plan.budget_s):
        times.append(transfer.run(TIMEOUT_S))
    transfer.release()
    nbytes = len(request.sources) * plan.block_bytes
    return {
        "tokens": request.tokens,
        "blocks": len(request.sources),
        "bytes": nbytes,
        "first_s": first,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "repeats": len(times),
        "gbps": nbytes / statistics.median(times) / 1e9,
    }


def verify(pool: BlockPool, plan: Plan, folder: Path) -> list[bool]:
    """Whether each request's target blocks hold exactly what prefill wrote."""
    intact = []
    for request in plan.requests:
        received = pool.read(request.targets)
        if plan.dump:
            np.save(folder / f"received-{request.seed}.npy", received)
        intact.append(
            bool(np.array_equal(received, request_content(request.seed, len(request.targets), plan.block_bytes)))
        )
    return intact


def run_worker(role: str, plan: Plan, folder: Path, device: str) -> None:
    peer_role = DECODE if role == PREFILL else PREFILL
    pool = BlockPool(plan.pool_blocks, plan.block_bytes, device)
    if role == PREFILL:
        for request in plan.requests:
            pool.write(request.sources, request_content(request.seed, len(request.sources), plan.block_bytes))
            if plan.dump:
                np.save(folder / f"sent-{request.seed}.npy", pool.read(request.sources))
    agent = Agent(role, pool, plan.backend_params)
    rendezvous.publish(
        folder, role, {"metadata": base64.b64encode(agent.metadata()).decode(), "pool": asdict(PoolView.of(pool))}
    )
    if role == initiator(plan):
        published = rendezvous.wait_for(folder, peer_role, TIMEOUT_S)
        peer = agent.connect(base64.b64decode(published["metadata"]))
        remote = PoolView(**published["pool"])
        rendezvous.publish(
            folder, TIMINGS, {"results": [time_request(agent, peer, remote, r, plan) for r in plan.requests]}
        )
        agent.notify(peer)
    else:
        agent.wait_notified(initiator(plan), TIMEOUT_S)
    if role == DECODE:
        rendezvous.publish(folder, VERIFIED, {"intact": verify(pool, plan, folder)})
    rendezvous.publish(folder, f"{role}-finished", {})
    rendezvous.wait_for(folder, f"{peer_role}-finished", TIMEOUT_S)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=[PREFILL, DECODE])
    parser.add_argument("--folder", type=Path, required=True, help="holds plan.json; the workers publish here")
    parser.add_argument("--device", default="cpu", help='"cpu" or "cuda:N"')
    args = parser.parse_args()
    run_worker(args.role, Plan.load(args.folder / "plan.json"), args.folder, args.device)


if __name__ == "__main__":
    main()
