"""Dynamo planner's configuration for a deployment, whichever connector carries out its decisions.

On one host the planner runs with its virtual connector and the launcher resizes the pools
(deployment.host); on Kubernetes it patches the DynamoGraphDeployment's replicas through its
Kubernetes connector (deployment.kubernetes). What it decides, and on which thresholds, is the
same in both places: this module. Each renderer adds only its `environment` and its listeners.
"""

from __future__ import annotations

from typing import Any

from dynamo_oss.deployment.model import Deployment
from dynamo_oss.engines import engine_for
from dynamo_oss.graph.errors import GraphError, Problem

PlannerConfig = dict[str, Any]  # Dynamo's PlannerConfig fields, as its `--config` reads them


def planner_config(deployment: Deployment) -> PlannerConfig | None:
    """The planner's `--config` fields that follow from the graph, or None when no pool autoscales;
    GraphError when the planner cannot size the graph's pools.

    It decides on load (its `load` target): the `sla` target needs AISimulate's performance
    model, which cannot be installed here.
    """
    planner = deployment.planner
    if planner is None:
        return None
    scaled = [pool for pool in deployment.pools if pool.role in planner.pools]
    engines = {pool.engine for pool in scaled}
    if len(engines) > 1:
        raise GraphError(str(deployment.source), [Problem(path="planner", message=f"the autoscaled pools run "
                         f"{' and '.join(sorted(engines))}; the planner sizes pools of one engine")])  # fmt: skip
    fixed_gpus = sum(pool.workers * pool.gpus_per_worker for pool in deployment.pools if pool.autoscale is None)
    most_gpus = sum(pool.autoscale.max * pool.gpus_per_worker for pool in scaled if pool.autoscale)
    gpus = {pool.role: pool.gpus_per_worker for pool in deployment.pools}
    mins = {pool.role: pool.autoscale.min for pool in scaled if pool.autoscale}
    return {
        "backend": engine_for(scaled[0].engine).name,
        "mode": planner.mode,
        "optimization_target": "load",
        "enable_throughput_scaling": False,
        "model_name": deployment.model.served_name,
        "max_gpu_budget": min(planner.max_gpus - fixed_gpus, most_gpus),
        "load_adjustment_interval_seconds": planner.interval_s,
        "prefill_scale_up_queue_tokens": planner.prefill_queue_tokens[0],
        "prefill_scale_down_queue_tokens": planner.prefill_queue_tokens[1],
        "decode_scale_up_kv_rate": planner.decode_kv_percent[0],
        "decode_scale_down_kv_rate": planner.decode_kv_percent[1],
        "prefill_engine_num_gpu": gpus.get("prefill", 1),
        "decode_engine_num_gpu": gpus.get("decode", gpus.get("agg", 1)),
        **({"min_endpoint": mins["agg"]} if "agg" in mins else {}),
        **({"prefill_min_endpoint": mins["prefill"]} if "prefill" in mins else {}),
        **({"decode_min_endpoint": mins["decode"]} if "decode" in mins else {}),
    }
