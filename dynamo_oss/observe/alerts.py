"""Alert rules as code, beside the dashboards: what pages an operator of a graph.

- TTFT and ITL against the graph's targets, as multi-window burn rates (Google's SRE workbook: a
  long window to be sure, a short one to stop as soon as it is over). The objective is 95% of
  requests within the TTFT target and 95% of inter-token gaps within the ITL target, so the error
  budget is 5%. A burn of 10 (half the requests late) over 5 min and 1 h pages; a burn of 4 (one in
  five late) over 30 min and 6 h opens a ticket. "Late" is above the smallest bucket bound of
  Dynamo 1.6's histogram at or above the target (2.2 s for a 2 s TTFT): histograms know no finer.
- No decode (or aggregated) or prefill worker live, from the launcher.
- A worker's KV cache near full: no room for the next long prompt, so requests queue.
- Requests failing: more than 5% of the gateway's answers are 5xx.
- The planner not acting while the targets are missed: it wanted the same pool sizes for 15 min
  while the fast burn held, or it reports nothing at all.

`rules(...)` returns the rule file of one graph; the embedded Prometheus loads it, `dynamo deploy`
renders it as a PrometheusRule, and deploy/prometheus/ holds the README graph's.
"""

from __future__ import annotations

from typing import Any

import yaml

# Dynamo 1.6's histogram bucket bounds, seconds (read from its frontend's /metrics).
TTFT_BOUNDS = (0.0022, 0.0047, 0.01, 0.022, 0.047, 0.1, 0.22, 0.47, 1, 2.2, 4.7, 10, 22, 48, 100, 220, 480)
ITL_BOUNDS = (0.0018, 0.0033, 0.0059, 0.011, 0.02, 0.035, 0.064, 0.12, 0.21, 0.38, 0.69, 1.2, 2.3, 4.1, 7.4, 13, 24)
BUDGET = 0.05  # 1 - the objective: 95% within the target
BURNS = {"page": (10, "5m", "1h"), "ticket": (4, "30m", "6h")}  # burn rate, short window, long window
WINDOWS = ("5m", "30m", "1h", "6h")
KV_FULL = 0.95
FAILING = 0.05


def bound_for(target_s: float, bounds: tuple[float, ...]) -> float:
    """The smallest histogram bound at or above the target (the largest, past them all)."""
    return next((bound for bound in bounds if bound >= target_s), bounds[-1])


def rules(graph: str, selector: str, ttft_ms: float | None, itl_ms: float | None, planner: bool) -> dict[str, Any]:
    """The rule groups of graph `graph`, its series picked by `selector` (`namespace="..."`); latency
    rules only when the graph has targets, the planner's only when it has a planner."""
    recorded: list[dict[str, Any]] = []
    alerts: list[dict[str, Any]] = []
    latencies = {"ttft": ("dynamo_frontend_time_to_first_token_seconds", ttft_ms, TTFT_BOUNDS, "TTFT"),
                 "itl": ("dynamo_frontend_inter_token_latency_seconds", itl_ms, ITL_BOUNDS, "inter-token gaps")}  # fmt: skip
    for short, (metric, target_ms, bounds, what) in latencies.items():
        if target_ms is None:
            continue
        bound = bound_for(target_ms / 1000, bounds)
        for window in WINDOWS:
            within = f'sum(rate({metric}_bucket{{{selector}, le="{bound:g}"}}[{window}]))'
            recorded.append({"record": f"dynamo_oss:{short}_late:ratio_rate{window}",
                             "expr": f"1 - {within} / sum(rate({metric}_count{{{selector}}}[{window}]))",
                             "labels": {"graph": graph}})  # fmt: skip
        for severity, (burn, fast, slow) in BURNS.items():
            late = burn * BUDGET
            alerts.append({
                "alert": f"{short.upper()}BudgetBurn" + ("Fast" if severity == "page" else "Slow"),
                "expr": f'dynamo_oss:{short}_late:ratio_rate{fast}{{graph="{graph}"}} > {late:g} and '
                        f'dynamo_oss:{short}_late:ratio_rate{slow}{{graph="{graph}"}} > {late:g}',
                "labels": {"severity": severity, "graph": graph},
                "annotations": {
                    "summary": f"{graph}: {what} past the {target_ms:g} ms target",
                    "description": f"More than {late:.0%} of {what} were above {bound:g} s over the last {fast} and "
                                   f"{slow}: the 5% error budget burns {burn}x too fast.",
                },
            })  # fmt: skip
    alerts += _pools(graph, selector)
    if planner and ttft_ms is not None:
        alerts.append(_planner_idle(graph, selector))
    return {"groups": [{"name": f"dynamo-oss-{graph}", "rules": recorded + alerts}]}


def _pools(graph: str, selector: str) -> list[dict[str, Any]]:
    return [
        {
            "alert": "NoWorkerLive",
            "expr": f'max by (pool) (dynamo_oss_pool_workers{{{selector}, state="live"}}) == 0',
            "for": "1m",
            "labels": {"severity": "page", "graph": graph},
            "annotations": {"summary": f"{graph}: no {{{{ $labels.pool }}}} worker live",
                            "description": "The pool has had no live worker for a minute: requests that need it fail "
                                           "with 503. Check the workers' logs in the run folder."},
        },
        {
            "alert": "KVCacheNearlyFull",
            "expr": f'max by (process) (trtllm:kv_cache_usage_perc{{{selector}, job="dynamo-workers"}}) > {KV_FULL}',
            "for": "5m",
            "labels": {"severity": "ticket", "graph": graph},
            "annotations": {"summary": f"{graph}: {{{{ $labels.process }}}}'s KV cache is over {KV_FULL:.0%} full",
                            "description": "New prompts wait for room: TTFT grows. Add decode workers, or lower "
                                           "max_batch_size."},
        },
        {
            "alert": "RequestsFailing",
            "expr": f'sum(rate(dynamo_oss_gateway_requests_total{{{selector}, status=~"5.."}}[5m])) / '
                    f"sum(rate(dynamo_oss_gateway_requests_total{{{selector}}}[5m])) > {FAILING}",
            "for": "5m",
            "labels": {"severity": "page", "graph": graph},
            "annotations": {"summary": f"{graph}: more than {FAILING:.0%} of requests fail",
                            "description": "The gateway answered 5xx to more than 5% of requests for 5 minutes."},
        },
    ]  # fmt: skip


def _planner_idle(graph: str, selector: str) -> dict[str, Any]:
    burning = " or ".join(f'dynamo_oss:{short}_late:ratio_rate5m{{graph="{graph}"}} > {BURNS["page"][0] * BUDGET:g}'
                          for short in ("ttft", "itl"))  # fmt: skip
    idle = (f"sum(changes(dynamo_oss_planner_wanted_workers{{{selector}}}[15m])) == 0 "
            f"or absent(dynamo_oss_planner_wanted_workers{{{selector}}})")  # fmt: skip
    return {
        "alert": "PlannerNotActing",
        "expr": f"({burning}) and on() ({idle})",
        "for": "15m",
        "labels": {"severity": "page", "graph": graph},
        "annotations": {"summary": f"{graph}: targets missed and the planner changes nothing",
                        "description": "The latency targets have been missed for 15 minutes while the planner wanted "
                                       "the same pool sizes, or reported nothing: is it at max_gpus or the pools' "
                                       "maximum, or not running?"},
    }  # fmt: skip


def render(graph: str, selector: str, ttft_ms: float | None, itl_ms: float | None, planner: bool) -> str:
    return yaml.safe_dump(rules(graph, selector, ttft_ms, itl_ms, planner), sort_keys=False, width=120)
