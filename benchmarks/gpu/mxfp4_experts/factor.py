"""The MXFP4 expert efficiency the performance model charges, derived from the measured rows two ways.

    PYTHONPATH=. python benchmarks/gpu/mxfp4_experts/factor.py

Reads results.json and results_repeat.json beside this file (no GPU, no torch) and writes
factor.json. The model charges expert GEMMs max(FLOPs at the GEMM rate x expert_compute, weight
bytes at the copy rate x expert_memory) (dynamo_oss.perf.costs); hopper_factors.py derives
expert_memory = 0.637 from BF16 torch._grouped_mm rows at 16-1024 tokens: the time-weighted share
of the memory floor those rows reach. The same for the MXFP4 rows:
- `same_rows`: exactly that derivation (gate-up and down, 16, 64, 256 and 1024 tokens);
- `memory_dominated`: only the rows whose compute floor is under half their memory floor, where a
  max() roofline can hold. For BF16 that keeps all four token counts; for MXFP4 it drops 1024 tokens,
  where 32 routed rows per expert sit at MXFP4's ridge (bf16 GEMM rate over copy rate, in FLOPs per
  MXFP4 byte) and both floors are far from met.
Both routings are derived; the model's experts-touched formula assumes uniform routing.
hopper_factors.py takes the uniform `memory_dominated` share, mean over both runs, as the H200's
expert_memory_mxfp4 (dynamo_oss/perf/hopper_measured.json): whole decode steps on an H200
(../forward_step) bear that derivation out, not `same_rows`.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent
OPS = ("mxfp4_gate_up", "mxfp4_down")
TOKENS = (16, 64, 256, 1024)  # hopper_factors.MOE_MEMORY_TOKENS
COMPUTE_TOKENS = (16384,)  # hopper_factors.MOE_COMPUTE_TOKENS
DOMINANCE = 2.0  # memory floor over compute floor for a row to count as memory-dominated


def _share(rows: list[dict], floor: str) -> float:
    return sum(r[floor] for r in rows) / sum(r["time_us"] for r in rows)


def shares(rows: list[dict]) -> list[dict]:
    """Per routing: expert_memory by both derivations and expert_compute (16,384 tokens), with the rows used."""
    out = []
    for routing in sorted({r["routing"] for r in rows}):
        mine = [r for r in rows if r["op"] in OPS and r["routing"] == routing]
        same = [r for r in mine if r["tokens"] in TOKENS]
        dominated = [r for r in same if r["memory_floor_us"] >= DOMINANCE * r["compute_floor_us"]]
        compute = [r for r in mine if r["tokens"] in COMPUTE_TOKENS]
        if not (same and dominated and compute):
            continue
        out.append(
            {
                "routing": routing,
                "expert_memory_same_rows": _share(same, "memory_floor_us"),
                "expert_memory_memory_dominated": _share(dominated, "memory_floor_us"),
                "memory_dominated_tokens": sorted({r["tokens"] for r in dominated}),
                "expert_compute": _share(compute, "compute_floor_us"),
            }
        )
    return out


def main() -> None:
    measured = json.loads((Path(__file__).parents[3] / "dynamo_oss" / "perf" / "hopper_measured.json").read_text())
    bf16 = measured["efficiencies"]
    runs = {
        name: shares(json.loads((HERE / f"{name}.json").read_text())["rows"]) for name in ("results", "results_repeat")
    }
    document = {"about": __doc__, "bf16": {k: bf16[k] for k in ("expert_memory", "expert_compute")}, "runs": runs}
    (HERE / "factor.json").write_text(json.dumps(document, indent=1) + "\n")
    print(
        f"BF16 (hopper_measured.json): expert_memory {bf16['expert_memory']}, expert_compute {bf16['expert_compute']}"
    )
    for name, table in runs.items():
        for r in table:
            print(
                f"{name:15s} {r['routing']:8s} same rows {r['expert_memory_same_rows']:.4f} "
                f"({r['expert_memory_same_rows'] / bf16['expert_memory'] - 1:+.0%}), memory-dominated "
                f"{r['memory_dominated_tokens']} {r['expert_memory_memory_dominated']:.4f} "
                f"({r['expert_memory_memory_dominated'] / bf16['expert_memory'] - 1:+.0%}), compute "
                f"{r['expert_compute']:.4f} ({r['expert_compute'] / bf16['expert_compute'] - 1:+.0%})"
            )


if __name__ == "__main__":
    main()
