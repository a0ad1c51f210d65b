"""Alert rules as code, beside the dashboards: what pages an operator of a graph.

- TTFT against the graph's target, which is a p90 (the sla planner sizes prefill for it): the
  objective is 90% of requests within it, an error budget of 10%, watched as multi-window burn
  rates (Google's SRE workbook: a long window to be sure, a short one to stop as soon as it is
  over). Half the requests late over 5 min and 1 h (a burn of 5) pages; one in five over 30 min
  and 6 h (a burn of 2) opens a ticket. "Late" is above the smallest bucket bound of Dynamo 1.6's
  histogram at or above the target (2.2 s for a 2 s target): histograms know no finer.
- ITL against its target, which is a mean (the planner sizes decode for it): the mean gap over
  5 min and 1 h above it pages, over 30 min and 6 h opens a ticket.
- No pool worker live, from the launcher (so only where `dynamo serve` runs the graph).
- A worker's KV cache near full: no room for the next long prompt, so requests queue.
- Requests failing: more than 5% of the gateway's answers are 5xx.
- The planner not acting while the targets are missed: it wanted the same pool sizes for 15 min
  while the short windows were past the targets, or it reports nothing.

`rules(...)` returns the rule file of one graph; the embedded Prometheus loads it, `dynamo deploy`
renders it as a PrometheusRule, and deploy/prometheus/ holds the README graph's.
"""

from __future__ import annotations

from typing import Any

import yaml

# Dynamo 1.6's TTFT histogram bucket bounds, seconds (read from its frontend's /metrics).
TTFT_BOUNDS = (0.0022, 0.0047, 0.01, 0.022, 0.047, 0.1, 0.22, 0.47, 1, 2.2, 4.7, 10, 22, 48, 100, 220, 480)
TTFT = "dynamo_frontend_time_to_first_token_seconds"
ITL = "dynamo_frontend_inter_token_latency_seconds"
BUDGET = 0.10  # 1 - the TTFT objective: 90% within the target, as the target is a p90
BURNS = {"page": (5, "5m", "1h"), "ticket": (2, "30m", "6h")}  # burn rate (or, for ITL, 1), short and long window
WINDOWS = ("5m", "30m", "1h", "6h")
KV_FULL = 0.95
FAILING = 0.05


def bound_for(target_s: float, bounds: tuple[float, ...]) -> float:
    """The smallest histogram bound at or above the target (the largest, past them all)."""
    return next((bound for bound in bounds if bound >= target_s), bounds[-1])


def rules(
    graph: str, selector: str, ttft_ms: float | None, itl_ms: float | None, planner: bool, launcher: bool = True
) -> dict[str, Any]:
    """The rule groups of graph `graph`, its series picked by `selector` (`namespace="..."`): latency
    rules when the graph has targets, the planner's when it has a planner, the pools' when its
    launcher (`dynamo serve`) reports them."""
    recorded: list[dict[str, Any]] = []
    alerts: list[dict[str, Any]] = []
    if ttft_ms is not None:
        bound = bound_for(ttft_ms / 1000, TTFT_BOUNDS)
        # Prometheus 2 writes a whole bound as "1", Prometheus 3 as "1.0": either matches.
        le = f'le=~"{f"{bound:g}".replace(".", "[.]")}([.]0)?"'  # [.]: a dot, with no escape to quote
        for window in WINDOWS:
            within = f"sum(rate({TTFT}_bucket{{{selector}, {le}}}[{window}]))"
            recorded.append(
                {
                    "record": f"dynamo_oss:ttft_late:ratio_rate{window}",
                    "expr": f"1 - {within} / sum(rate({TTFT}_count{{{selector}}}[{window}]))",
                    "labels": {"graph": graph},
                }
            )
        for severity, (burn, fast, slow) in BURNS.items():
            late = burn * BUDGET
            alerts.append(
                _over(
                    graph,
                    "TTFTBudgetBurn",
                    severity,
                    "ttft_late:ratio_rate",
                    late,
                    fast,
                    slow,
                    f"TTFT past the {ttft_ms:g} ms target",
                    f"More than {late:.0%} of requests took over {bound:g} s to their first token over "
                    f"the last {fast} and {slow}: the 10% error budget burns {burn}x too fast.",
                )
            )
    if itl_ms is not None:
        for window in WINDOWS:
            recorded.append(
                {
                    "record": f"dynamo_oss:itl_mean_seconds:rate{window}",
                    "expr": f"sum(rate({ITL}_sum{{{selector}}}[{window}])) / "
                    f"sum(rate({ITL}_count{{{selector}}}[{window}]))",
                    "labels": {"graph": graph},
                }
            )
        for severity, (_, fast, slow) in BURNS.items():
            alerts.append(
                _over(
                    graph,
                    "ITLAboveTarget",
                    severity,
                    "itl_mean_seconds:rate",
                    itl_ms / 1000,
                    fast,
                    slow,
                    f"mean ITL past the {itl_ms:g} ms target",
                    f"The mean gap between tokens was over {itl_ms:g} ms over the last {fast} and {slow}.",
                )
            )
    alerts += _pools(graph, selector, launcher)
    if planner and (ttft_ms is not None or itl_ms is not None):
        alerts.append(_planner_idle(graph, selector, ttft_ms is not None, itl_ms))
    return {"groups": [{"name": f"dynamo-oss-{graph}", "rules": recorded + alerts}]}


def _over(
    graph: str, name: str, severity: str, record: str, limit: float, fast: str, slow: str, summary: str, why: str
) -> dict[str, Any]:
    """An alert that fires when the recorded series is over `limit` in both windows."""
    return {
        "alert": name + ("Fast" if severity == "page" else "Slow"),
        "expr": f'dynamo_oss:{record}{fast}{{graph="{graph}"}} > {limit:g} and '
        f'dynamo_oss:{record}{slow}{{graph="{graph}"}} > {limit:g}',
        "labels": {"severity": severity, "graph": graph},
        "annotations": {"summary": f"{graph}: {summary}", "description": why},
    }


def _pools(graph: str, selector: str, launcher: bool) -> list[dict[str, Any]]:
    no_worker = [
        {
            "alert": "NoWorkerLive",
            "expr": f'max by (pool) (dynamo_oss_pool_workers{{{selector}, state="live"}}) == 0',
            "for": "1m",
            "labels": {"severity": "page", "graph": graph},
            "annotations": {
                "summary": f"{graph}: no {{{{ $labels.pool }}}} worker live",
                "description": "The pool has had no live worker for a minute: requests that need it fail "
                "with 503. Check the workers' logs in the run folder.",
            },
        },
    ]
    return (no_worker if launcher else []) + [
        {
            "alert": "KVCacheNearlyFull",
            "expr": f"max by (process) (trtllm:kv_cache_usage_perc{{{selector}}}) > {KV_FULL}",
            "for": "5m",
            "labels": {"severity": "ticket", "graph": graph},
            "annotations": {
                "summary": f"{graph}: {{{{ $labels.process }}}}'s KV cache is over {KV_FULL:.0%} full",
                "description": "New prompts wait for room: TTFT grows. Add decode workers, or lower max_batch_size.",
            },
        },
        {
            "alert": "RequestsFailing",
            "expr": f'sum(rate(dynamo_oss_gateway_requests_total{{{selector}, status=~"5.."}}[5m])) / '
            f"sum(rate(dynamo_oss_gateway_requests_total{{{selector}}}[5m])) > {FAILING}",
            "for": "5m",
            "labels": {"severity": "page", "graph": graph},
            "annotations": {
                "summary": f"{graph}: more than {FAILING:.0%} of requests fail",
                "description": "The gateway answered 5xx to more than 5% of requests for 5 minutes.",
            },
        },
    ]


def _planner_idle(graph: str, selector: str, ttft: bool, itl_ms: float | None) -> dict[str, Any]:
    missed = [f'dynamo_oss:ttft_late:ratio_rate5m{{graph="{graph}"}} > {BURNS["page"][0] * BUDGET:g}'] if ttft else []
    missed += [f'dynamo_oss:itl_mean_seconds:rate5m{{graph="{graph}"}} > {itl_ms / 1000:g}'] if itl_ms else []
    idle = (
        f"sum(changes(dynamo_oss_planner_wanted_workers{{{selector}}}[15m])) == 0 "
        f"or absent(dynamo_oss_planner_wanted_workers{{{selector}}})"
    )
    return {
        "alert": "PlannerNotActing",
        "expr": f"({' or '.join(missed)}) and on() ({idle})",
        "for": "15m",
        "labels": {"severity": "page", "graph": graph},
        "annotations": {
            "summary": f"{graph}: targets missed and the planner changes nothing",
            "description": "The latency targets have been missed for 15 minutes while the planner wanted "
            "the same pool sizes, or reported nothing: is it at max_gpus or the pools' "
            "maximum, or not running?",
        },
    }


def render(
    graph: str, selector: str, ttft_ms: float | None, itl_ms: float | None, planner: bool, launcher: bool = True
) -> str:
    return yaml.safe_dump(rules(graph, selector, ttft_ms, itl_ms, planner, launcher), sort_keys=False, width=120)
