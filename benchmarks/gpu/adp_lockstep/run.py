"""Attention DP + expert parallelism on real GPUs: does one rank's prefill chunk stall the other's decode?

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    python -m torch.distributed.run --standalone --nproc_per_node 2 -m benchmarks.gpu.adp_lockstep.run --out DIR

One gpt-oss-120b decoder layer (dynamo_oss/engines/gptoss/forward/layer.py: full-attention or 128-window
layer) per rank, attention data-parallel (each rank its own tokens, its own KV cache, its own copy
of the attention weights and the router) and the MoE expert-parallel over the ranks (each of W ranks
holds 128 / W experts): route locally, all-to-all the routed rows to the experts' ranks (dispatch),
grouped-GEMM there, all-to-all the results back (combine), weighted sum. NCCL through
torch.distributed; NVLink multicast stays off (the variables above are forced below too).

Scenarios, each rank's step = one layer over its own tokens:
- `decode`: every rank carries a decode batch only (nobody has a chunk);
- `chunk0`: rank 0 carries a prefill chunk plus its decode batch, the others a decode batch only;
- `chunk_all`: every rank carries a chunk plus its decode batch (the performance model's
  "every rank equally loaded").

Timing: each rank captures its step in a CUDA graph (NCCL calls included; eager if capture fails,
said per row), then every rank replays it back to back N times after a barrier, a CUDA event
recorded between replays; a rank's step time is the median interval between its events (the first
3 dropped). Back to back, a rank can run ahead of the others only until the next all-to-all, so
this interval is the step period each rank sees, waits included.

The split sizes of the all-to-alls are host integers (NCCL needs them); they are computed once per
case from the case's fixed inputs (the routing is recomputed in every step and gives the same
counts), and the step still exchanges the per-rank counts with a small all-to-all, as engines do.
"""

from __future__ import annotations

import os

for _name, _value in (
    ("NCCL_NVLS_ENABLE", "0"),
    ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
    ("NVSHMEM_DISABLE_NVLS", "1"),
):
    os.environ[_name] = _value  # NVLink multicast off, whatever the caller set (device KINDS.md)

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from benchmarks.gpu.kernels import moe  # noqa: E402
from benchmarks.gpu.common.checks import relative_error  # noqa: E402
from benchmarks.gpu.common.device import device_header  # noqa: E402
from benchmarks.gpu.common.results import Results, markdown_table  # noqa: E402
from dynamo_oss.catalog.models import GPT_OSS_120B, ModelShape  # noqa: E402
from dynamo_oss.engines.gptoss.forward import attention as sink_attention  # noqa: E402
from dynamo_oss.engines.gptoss.forward import layer  # noqa: E402

CHUNKS = [2048, 8192, 16384]
BATCHES = [32, 128]
CONTEXT = 8192
SCENARIOS = ("decode", "chunk0", "chunk_all")


@dataclass
class Plan:
    """Static all-to-all split sizes of one case on this rank."""

    send: list[int]  # rows this rank sends to each rank
    recv: list[int]  # rows this rank receives from each rank


class EPMoe:
    """The MoE of one rank under expert parallelism: this rank's experts are [rank * E/W, (rank + 1) * E/W)."""

    def __init__(self, m: ModelShape, rank: int, world: int, local: moe.Experts) -> None:
        self.m, self.rank, self.world, self.local = m, rank, world, local
        self.per_rank = m.num_experts // world
        self.plan: Plan | None = None
        self.device = local.gate_up.device

    def route(self, h: torch.Tensor, w: layer.LayerWeights, k: int):
        logits = w.router(h)
        top, experts = logits.topk(k, dim=-1)
        gates = top.softmax(dim=-1, dtype=torch.float32).to(h.dtype)
        flat = experts.flatten()
        order = flat.argsort(stable=True)  # by expert, hence by destination rank
        return order // k, gates.flatten()[order], flat[order]

    def counts_per_rank(self, h: torch.Tensor, w: layer.LayerWeights, k: int) -> list[int]:
        _, _, expert = self.route(h, w, k)
        dest = torch.div(expert, self.per_rank, rounding_mode="floor")
        return torch.bincount(dest, minlength=self.world).tolist()

    def __call__(self, h: torch.Tensor, w: layer.LayerWeights, k: int) -> torch.Tensor:
        plan = self.plan
        token_of_row, gate_of_row, expert = self.route(h, w, k)
        rows = h[token_of_row]
        dest = torch.div(expert, self.per_rank, rounding_mode="floor")
        counts = torch.zeros(self.world, dtype=torch.int64, device=h.device)
        counts.scatter_add_(0, dest, torch.ones_like(dest))
        peer_counts = torch.empty_like(counts)
        dist.all_to_all_single(peer_counts, counts)  # the count exchange engines do before dispatch
        received = sum(plan.recv)
        recv_rows = h.new_empty(received, h.shape[1])
        dist.all_to_all_single(recv_rows, rows, plan.recv, plan.send)
        recv_expert = expert.new_empty(received)
        dist.all_to_all_single(recv_expert, expert, plan.recv, plan.send)
        local = recv_expert - self.rank * self.per_rank
        order = local.argsort(stable=True)
        grouped = recv_rows[order]
        per_expert = torch.zeros(self.per_rank, dtype=torch.int32, device=h.device)
        per_expert.scatter_add_(0, local, torch.ones_like(local, dtype=torch.int32))
        routing = moe.Routing(token_of_row=order, gate_of_row=order, offsets=per_expert.cumsum(0, dtype=torch.int32))
        out = moe.down(self.local, moe.swiglu(moe.gate_up(self.local, grouped, routing)), routing)
        back = torch.empty_like(out).index_copy_(0, order, out)  # received order again
        combined = h.new_empty(rows.shape[0], h.shape[1])
        dist.all_to_all_single(combined, back, plan.send, plan.recv)
        return torch.zeros_like(h).index_add_(0, token_of_row, combined * gate_of_row[:, None])


def step_times(step_fn, repeats: int, graph: bool) -> list[float]:
    """Seconds between consecutive steps on this rank, replayed back to back after a barrier."""
    dist.barrier()
    torch.cuda.synchronize()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(repeats + 1)]
    events[0].record()
    for i in range(repeats):
        step_fn()
        events[i + 1].record()
    torch.cuda.synchronize()
    return [events[i].elapsed_time(events[i + 1]) / 1e3 for i in range(repeats)][3:]


def time_case(fn, budget_s: float = 0.5) -> tuple[list[float], str]:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    estimate = torch.tensor([(time.perf_counter() - start) / 3], device="cuda")
    dist.all_reduce(estimate, op=dist.ReduceOp.MAX)
    repeats = int(max(20, min(200, budget_s / max(float(estimate), 1e-6)))) + 3
    try:
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()
            with torch.cuda.graph(graph, stream=stream):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        ok = torch.tensor([1.0], device="cuda")
    except Exception:  # noqa: BLE001
        traceback.print_exc(limit=3)
        torch.cuda.synchronize()
        ok = torch.tensor([0.0], device="cuda")
        graph = None
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    if float(ok) == 1.0:
        times = step_times(graph.replay, repeats, True)
        del graph
        return times, "graph"
    return step_times(fn, repeats, False), "eager"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local_rank)
    device = f"cuda:{local_rank}"
    dist.init_process_group("nccl", device_id=torch.device(device))
    torch._dynamo.config.recompile_limit = 256
    m = GPT_OSS_120B
    started = time.perf_counter()
    chunks, batches = ([2048], [32]) if args.quick else (CHUNKS, BATCHES)

    torch.manual_seed(0)  # attention weights and router: the same on every rank (replicated)
    w = layer.LayerWeights.random(m, device)
    torch.manual_seed(1000 + rank)  # this rank's experts and inputs
    per_rank = m.num_experts // world
    local = moe.Experts(
        gate_up=torch.randn(per_rank, 2 * m.intermediate_size, m.hidden_size, device=device, dtype=torch.bfloat16).mul_(
            0.02
        ),
        down=torch.randn(per_rank, m.hidden_size, m.intermediate_size, device=device, dtype=torch.bfloat16).mul_(0.02),
    )
    ep = EPMoe(m, rank, world, local)
    caches = {
        "full": tuple(
            torch.randn(max(batches), m.num_key_value_heads, CONTEXT, m.head_dim, device=device, dtype=torch.bfloat16)
            for _ in range(2)
        ),
        "window": tuple(
            torch.randn(
                max(batches), m.num_key_value_heads, m.sliding_window, m.head_dim, device=device, dtype=torch.bfloat16
            )
            for _ in range(2)
        ),
    }
    cos, sin = layer.rope_table(m, max(CONTEXT, max(chunks)) + 1, device)
    xc_pool = torch.randn(max(chunks), m.hidden_size, device=device, dtype=torch.bfloat16)
    xd_pool = torch.randn(max(batches), m.hidden_size, device=device, dtype=torch.bfloat16)

    def build(name: str, chunk: int, batch: int):
        window = None if name == "full" else m.sliding_window
        x = torch.cat([xc_pool[:chunk], xd_pool[:batch]])
        step = layer.make_step(x, chunk, batch, CONTEXT, window, *caches[name], device)
        # Plan: counts from the step's own routing (one eager pass up to the router, identical inputs).
        h_probe = {}

        def probe(h, weights, k):
            h_probe["h"] = h
            return torch.zeros_like(h)

        layer.layer_forward(m, w, step, cos, sin, probe)
        send = ep.counts_per_rank(h_probe["h"], w, m.experts_per_token)
        send_t = torch.tensor(send, device=device)
        recv_t = torch.empty_like(send_t)
        dist.all_to_all_single(recv_t, send_t)
        ep.plan = Plan(send=send, recv=recv_t.tolist())
        return step, dict(ep.plan.__dict__)

    checks = {}
    if world == 2 or world == 1:
        # EP MoE against the same experts run locally: gather all experts on every rank for the check.
        h = torch.randn(64 + rank, m.hidden_size, device=device, dtype=torch.bfloat16)
        ep.plan = Plan(send=ep.counts_per_rank(h, w, m.experts_per_token), recv=[0] * world)
        send_t = torch.tensor(ep.plan.send, device=device)
        recv_t = torch.empty_like(send_t)
        dist.all_to_all_single(recv_t, send_t)
        ep.plan.recv = recv_t.tolist()
        got = ep(h, w, m.experts_per_token)
        gate_up = [torch.empty_like(local.gate_up) for _ in range(world)]
        down = [torch.empty_like(local.down) for _ in range(world)]
        dist.all_gather(gate_up, local.gate_up)
        dist.all_gather(down, local.down)
        everything = moe.Experts(torch.cat(gate_up), torch.cat(down))
        ref = moe.moe_block(h, w.router.weight, w.router.bias, everything, m.experts_per_token)
        checks["ep moe vs all experts local"] = relative_error(got, ref)
        del gate_up, down, everything
        torch.cuda.empty_cache()

    results = Results(
        args.out,
        {
            "model": m.name,
            **device_header(),
            "gpus_used": world,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())),
            "env": {
                k: os.environ.get(k)
                for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")
            },
            "decode_kernel": sink_attention.DECODE_KERNEL["name"],
            "context": CONTEXT,
            "checks": checks,
            "timing": "each rank's step (one layer) captured in a CUDA graph with its NCCL all-to-alls, replayed "
            "back to back on every rank after a barrier; a rank's step time is the median interval between CUDA "
            "events recorded between its replays (first 3 dropped), p10/p90 kept",
        },
    )

    def record(row: dict) -> None:
        gathered = [None] * world
        dist.all_gather_object(gathered, row)
        if rank == 0:
            merged = {k: v for k, v in gathered[0].items() if not k.startswith("r_")}
            for r, g in enumerate(gathered):
                for k, v in g.items():
                    if k.startswith("r_"):
                        merged[f"rank{r}_{k[2:]}"] = v
            results.add(merged)
            print(json.dumps(merged), flush=True)

    def run_case(name: str, scenario: str, chunk: int, batch: int) -> None:
        mine = chunk if (scenario == "chunk_all" or (scenario == "chunk0" and rank == 0)) else 0
        try:
            step, plan = build(name, mine, batch)
            times, method = time_case(lambda: layer.layer_forward(m, w, step, cos, sin, ep))
            error = None
        except Exception:  # noqa: BLE001
            error = traceback.format_exc(limit=4)
            times, method, plan = [float("nan")], "failed", {}
        row = {
            "layer": name,
            "scenario": scenario,
            "chunk": chunk if scenario != "decode" else 0,
            "batch": batch,
            "context": CONTEXT,
            "timing": method,
            "r_tokens": mine + batch,
            "r_step_us": statistics.median(times) * 1e6,
            "r_p10_us": sorted(times)[len(times) // 10] * 1e6,
            "r_p90_us": sorted(times)[(9 * len(times)) // 10] * 1e6,
            "r_send_rows": plan.get("send"),
            "r_recv_rows": plan.get("recv"),
            "r_error": error,
        }
        record(row)
        if error and rank == 0:
            results.failures.append(f"{name} {scenario} {chunk} {batch}: {error}")

    for name in ("full", "window"):
        for batch in batches:
            run_case(name, "decode", 0, batch)
            for chunk in chunks:
                run_case(name, "chunk0", chunk, batch)
                run_case(name, "chunk_all", chunk, batch)
        if rank == 0:
            print(f"{name} done at {time.perf_counter() - started:.0f} s", flush=True)

    if rank == 0:
        results.save()
        print(markdown(results.rows, world))
    dist.barrier()
    dist.destroy_process_group()


def markdown(rows: list[dict], world: int) -> str:
    base = {(r["layer"], r["batch"]): r for r in rows if r["scenario"] == "decode"}
    both = {(r["layer"], r["chunk"], r["batch"]): r for r in rows if r["scenario"] == "chunk_all"}
    last = world - 1
    headers = [
        "layer",
        "chunk on rank 0",
        "batch per rank",
        f"rank {last}, nobody has a chunk (us)",
        f"rank {last}, rank 0 has a chunk (us)",
        f"rank {last} slowdown",
        "rank 0 (us)",
        "every rank has a chunk (us)",
    ]
    cells = []
    for r in rows:
        b = base.get((r["layer"], r["batch"]))
        if r["scenario"] != "chunk0" or b is None:
            continue
        a = both.get((r["layer"], r["chunk"], r["batch"]))
        t1, t0 = r[f"rank{last}_step_us"], r["rank0_step_us"]
        cells.append(
            [
                r["layer"],
                r["chunk"],
                r["batch"],
                f"{b[f'rank{last}_step_us']:.0f}",
                f"{t1:.0f}",
                f"{t1 / b[f'rank{last}_step_us']:.2f}x",
                f"{t0:.0f}",
                f"{a[f'rank{last}_step_us'] if a else float('nan'):.0f}",
            ]
        )
    return markdown_table(headers, cells)


if __name__ == "__main__":
    main()
