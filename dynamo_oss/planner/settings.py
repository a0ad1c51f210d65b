"""Dynamo planner's configuration for a deployment, whichever connector carries out its decisions.

On one host the planner runs with its virtual connector and the launcher resizes the pools
(deployment.host); on Kubernetes it patches the DynamoGraphDeployment's replicas through its
Kubernetes connector (deployment.kubernetes). What it decides, and on which thresholds, is the
same in both places: this module. Each renderer adds only its `environment` and its listeners.
"""

from __future__ import annotations

import math
from typing import Any

from dynamo_oss.deployment.model import Deployment
from dynamo_oss.engines import engine_for
from dynamo_oss.graph.errors import GraphError, Problem
from dynamo_oss.perf.graphs import layout_from_deployment
from dynamo_oss.perf.layout import Role
from dynamo_oss.planner.sizing import Load, Range, Sizer, SizingSpec

PlannerConfig = dict[str, Any]  # Dynamo's PlannerConfig fields, as its `--config` reads them
PREDICTOR = "kalman"  # Dynamo's load predictor the sla mode forecasts with: it follows a rising trend
PLUGIN_MODULE = "dynamo_oss.planner.plugin"
RANGES_MODULE = "dynamo_oss.planner.ranges"
SCRAPES_PER_WINDOW = 4  # a rate over fewer scrapes than this is mostly extrapolation (or nothing, below two)
EXTERNAL_SCRAPE_S = 15.0  # the scrape interval assumed of a Prometheus the graph does not start


def planner_config(deployment: Deployment, mocker_time_scale: float = 1.0) -> PlannerConfig | None:
    """The planner's `--config` fields that follow from the graph, or None when no pool autoscales;
    GraphError when the planner cannot size the graph's pools. `mocker_time_scale` is how much
    slower than modelled mocker pools run (`--mocker-time-scale`), which the sla mode sizes for.

    Both modes run Dynamo's `load` optimization target, its only one that needs no AISimulate
    model; in `sla` mode the project's predict and propose stages, loaded in-process, set every
    autoscaled pool's size on every look, so the load thresholds never decide.
    """
    planner = deployment.planner
    if planner is None:
        return None
    scaled = [pool for pool in deployment.pools if pool.role in planner.pools]
    engines = {pool.engine for pool in scaled}
    if len(engines) > 1:
        raise GraphError(
            str(deployment.source),
            [
                Problem(
                    path="planner",
                    message=f"the autoscaled pools run "
                    f"{' and '.join(sorted(engines))}; the planner sizes pools of one engine",
                )
            ],
        )
    fixed_gpus = sum(pool.workers * pool.gpus_per_worker for pool in deployment.pools if pool.autoscale is None)
    most_gpus = sum(pool.autoscale.max * pool.gpus_per_worker for pool in scaled if pool.autoscale)
    gpus = {pool.role: pool.gpus_per_worker for pool in deployment.pools}
    mins = {pool.role: pool.autoscale.min for pool in scaled if pool.autoscale}
    config: PlannerConfig = {
        "backend": engine_for(scaled[0].engine).planner_backend,
        "mode": planner.dynamo_mode,
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
    plugins = [range_plugin(deployment)]
    if planner.mode == "sla":
        window = traffic_window_s(deployment)
        config["throughput_adjustment_interval_seconds"] = window  # Dynamo reads the traffic over this window
        time_scale = mocker_time_scale if engines == {"mocker"} else 1.0
        plugins += sla_plugins(deployment, window, time_scale)
    config["plugin_registration"] = {"in_process_plugins": plugins}
    return config


def range_plugin(deployment: Deployment) -> dict[str, Any]:
    """The pools' `autoscale` ranges as a constrain stage (`ranges.PoolRanges`), in either mode."""
    assert deployment.planner is not None
    ranges = {role: bounds.model_dump() for role, bounds in pool_ranges(deployment).items()}
    return {
        "module": RANGES_MODULE,
        "class": "PoolRanges",
        "plugin_id": "dynamo_oss_pool_ranges",
        "plugin_type": "constrain",
        "priority": 0,
        "execution_interval_seconds": deployment.planner.interval_s,
        "kwargs": {"ranges": ranges},
    }


def traffic_window_s(deployment: Deployment) -> int:
    """The window the sla mode reads the request rate and lengths over: whole looks, spanning at least
    SCRAPES_PER_WINDOW scrapes of the graph's Prometheus, so the rate is measured, not extrapolated."""
    assert deployment.planner is not None
    embedded = deployment.observability.embedded_prometheus if deployment.observability else None
    scrape = embedded.scrape_interval_s if embedded else EXTERNAL_SCRAPE_S
    interval = deployment.planner.interval_s
    return interval * math.ceil(SCRAPES_PER_WINDOW * scrape / interval)


def sla_plugins(deployment: Deployment, window_s: int, time_scale: float) -> list[dict[str, Any]]:
    """The sla mode's predict and propose stages, as Dynamo's in-process plugin entries, looking every
    `interval_s` at the traffic of the last `window_s`, sized for pools `time_scale` times slower than modelled."""
    assert deployment.planner is not None
    spec = sizing_spec(deployment, time_scale)
    interval = deployment.planner.interval_s
    stage = {
        "module": PLUGIN_MODULE,
        "priority": 0,
        "execution_interval_seconds": interval,
        "observation_window_seconds": window_s,
    }
    return [
        {
            **stage,
            "class": "LoadForecast",
            "plugin_id": "dynamo_oss_load_forecast",
            "plugin_type": "predict",
            "needs": ["observations.traffic"],
            "kwargs": {"predictor": PREDICTOR, "interval_s": interval},
        },
        {
            **stage,
            "class": "SlaPropose",
            "plugin_id": "dynamo_oss_sla",
            "plugin_type": "propose",
            "needs": ["observations.traffic", "observations.workers", "observations.fpm", "predictions"],
            "kwargs": {
                **spec.model_dump(mode="json"),
                "headroom_percent": deployment.planner.headroom_percent,
                "scale_down_looks": math.ceil(deployment.planner.scale_down_after_s / interval),
            },
        },
    ]


def pool_ranges(deployment: Deployment) -> dict[Role, Range]:
    """Each autoscaled pool's `autoscale: {min, max}`."""
    return {
        pool.role: Range(min=pool.autoscale.min, max=pool.autoscale.max) for pool in deployment.pools if pool.autoscale
    }


def sizing_spec(deployment: Deployment, time_scale: float = 1.0) -> SizingSpec:
    """What the sla mode sizes with; GraphError when the model cannot time the graph or no size can
    meet its targets."""
    planner = deployment.planner
    assert planner is not None
    source = str(deployment.source)
    if deployment.observability is None:
        raise GraphError(
            source,
            [
                Problem(
                    path="planner.mode",
                    message="sla reads the request rate and lengths from "
                    "Prometheus: give the graph `observability: {prometheus: embedded}`, or use mode load",
                )
            ],
        )
    try:
        layout = layout_from_deployment(deployment)
    except GraphError as error:
        problems = [
            p.model_copy(update={"message": f"{p.message} (mode sla sizes pools with it; mode load does not need it)"})
            for p in error.problems
        ]
        raise GraphError(source, problems) from None
    spec = SizingSpec(
        layout=layout,
        ranges=pool_ranges(deployment),
        ttft_ms=planner.ttft_ms,
        itl_ms=planner.itl_ms,
        time_scale=time_scale,
    )
    ttft, itl = Sizer(spec).fastest_ms(Load(requests_per_s=0, isl=1, osl=1))
    problems = []
    if itl > planner.itl_ms:
        problems.append(
            Problem(
                path="planner.itl_ms",
                message=f"{planner.itl_ms:g} ms is below the fastest decode "
                f"step the performance model predicts for this layout ({layout.describe()} on "
                f"{layout.hardware}): {itl:.2f} ms at batch 1; no number of workers meets it. Raise itl_ms, or give "
                "the decode pool a faster layout (`dynamo plan` compares them)",
            )
        )
    if ttft > planner.ttft_ms:
        problems.append(
            Problem(
                path="planner.ttft_ms",
                message=f"{planner.ttft_ms:g} ms is below the fastest first "
                f"token the performance model predicts for this layout ({layout.describe()} on "
                f"{layout.hardware}): {ttft:.2f} ms for a one-token prompt alone. Raise ttft_ms, or give the pools "
                "a faster layout (`dynamo plan` compares them)",
            )
        )
    if problems:
        raise GraphError(source, problems)
    return spec
