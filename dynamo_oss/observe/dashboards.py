"""The four dashboards of a served graph, as code: overview, disaggregation, planner, infrastructure.

Metric names are the ones Dynamo 1.6's frontend and workers export (`dynamo_frontend_*`,
`dynamo_component_*`, TensorRT-LLM's `trtllm:*`), the etcd server's, and the launcher's own
(`dynamo_oss_*`, dynamo_oss/launch/metrics.py). `uv run dynamo dashboard write` writes them to
deploy/grafana/; a test fails when the committed files differ.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from grafana_foundation_sdk.builders import dashboard
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef

from dynamo_oss.observe.panels import GRAPH, MODEL, panel

RATE = "$__rate_interval"
WORKERS = f'job="dynamo-workers", {GRAPH}'
# The mocker worker serves its engine under a hidden namespace too (engines/mocker_worker.py): count each
# request once.
PUBLIC = 'dynamo_endpoint="generate", dynamo_namespace!~"mocker_core_.*"'


def _quantile(q: float, metric: str, labels: str) -> str:
    return f"histogram_quantile({q}, sum by (le) (rate({metric}_bucket{{{labels}}}[{RATE}])))"


def _quantiles(metric: str, labels: str) -> list[tuple[str, str]]:
    return [(_quantile(q, metric, labels), f"p{round(q * 100)}") for q in (0.5, 0.99)]


def _share_within(metric: str, bound: str) -> str:
    """The share of a histogram's observations at most `bound` (one of its bucket bounds)."""
    return f'sum(rate({metric}_bucket{{le="{bound}", {MODEL}}}[{RATE}])) / sum(rate({metric}_count{{{MODEL}}}[{RATE}]))'


def _variables(board: dashboard.Dashboard) -> dashboard.Dashboard:
    datasource = DataSourceRef(type_val="prometheus", uid="${datasource}")
    return (
        board.with_variable(dashboard.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
        .with_variable(
            dashboard.QueryVariable("namespace")
            .label("graph")
            .description("The graph's name, which is its Dynamo namespace")
            .query("label_values(dynamo_oss_graph_ready, namespace)")
            .datasource(datasource)
            .multi(True)
        )
        .with_variable(
            dashboard.QueryVariable("model")
            .label("model")
            .query('label_values(dynamo_frontend_requests_total{namespace=~"$namespace"}, model)')
            .datasource(datasource)
            .multi(True)
        )
    )


def _board(uid: str, title: str, description: str) -> dashboard.Dashboard:
    return _variables(
        dashboard.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["dynamo-oss", "gpt-oss"])
        .refresh("10s")
        .time("now-30m", "now")
    )


def overview() -> dashboard.Dashboard:
    return (
        _board("dynamo-oss-overview", "dynamo-oss: overview", "Requests, latency and throughput at the frontend.")
        .with_panel(
            panel(
                "Requests by status",
                "Requests finished per second at Dynamo's frontend, by status.",
                "reqps",
                [(f"sum by (status) (rate(dynamo_frontend_requests_total{{{MODEL}}}[{RATE}]))", "{{status}}")],
            )
        )
        .with_panel(
            panel(
                "Time to first token",
                "TTFT at the frontend, p50 and p99 of its histogram.",
                "s",
                _quantiles("dynamo_frontend_time_to_first_token_seconds", MODEL),
                warn_at=2,
            )
        )
        .with_panel(
            panel(
                "Inter-token latency",
                "Gaps between streamed tokens at the frontend, p50 and p99.",
                "s",
                _quantiles("dynamo_frontend_inter_token_latency_seconds", MODEL),
                warn_at=0.1,
            )
        )
        .with_panel(
            panel(
                "Time to first token, traced requests",
                "TTFT at the gateway (its arrival to Dynamo's first bytes), p50 "
                "and p99, where the graph traces (observability.tracing): each exemplar point is a traced request's trace "
                "id, which `dynamo trace --trace-id ID` prints as a span tree.",
                "s",
                _quantiles("dynamo_oss_gateway_time_to_first_token_seconds", GRAPH),
                warn_at=2,
                exemplars=True,
            )
        )
        .with_panel(
            panel(
                "End-to-end latency",
                "Request duration at the frontend, p50 and p99.",
                "s",
                _quantiles("dynamo_frontend_request_duration_seconds", MODEL),
            )
        )
        .with_panel(
            panel(
                "Tokens per second per user",
                "1 / mean inter-token gap at the frontend: a stream's speed once it started (not aiperf's "
                "per-request mean; see dynamo_oss/perf/metrics.py).",
                "none",
                [
                    (
                        f"sum(rate(dynamo_frontend_inter_token_latency_seconds_count{{{MODEL}}}[{RATE}])) / "
                        f"sum(rate(dynamo_frontend_inter_token_latency_seconds_sum{{{MODEL}}}[{RATE}]))",
                        "tok/s/user",
                    )
                ],
            )
        )
        .with_panel(
            panel(
                "Output tokens per second",
                "Output tokens the frontend streamed per second, all users.",
                "none",
                [(f"sum(rate(dynamo_frontend_output_tokens_total{{{MODEL}}}[{RATE}]))", "tok/s")],
            )
        )
        .with_panel(
            panel(
                "Requests in flight and queued",
                "Requests the frontend holds, and those waiting for a worker.",
                "none",
                [
                    (f"sum(dynamo_frontend_inflight_requests{{{MODEL}}})", "in flight"),
                    (f"sum(dynamo_frontend_queued_requests{{{MODEL}}})", "queued"),
                ],
            )
        )
        .with_panel(
            panel(
                "Requests by API key",
                "Requests the gateway answered per second, by API key name and status (`none`: "
                "no keys; `refused`: a missing or wrong key).",
                "reqps",
                [
                    (
                        f"sum by (key, status) (rate(dynamo_oss_gateway_requests_total{{{GRAPH}}}[{RATE}]))",
                        "{{key}} {{status}}",
                    )
                ],
            )
        )
        .with_panel(
            panel(
                "Tokens by API key",
                "Tokens per second in the usage of every API's answers, by API key name and kind: "
                "input (cached included), cached, output (reasoning included), reasoning. Streams count whether or not "
                "their client asked for usage.",
                "none",
                [
                    (
                        f"sum by (key, kind) (rate(dynamo_oss_gateway_tokens_total{{{GRAPH}}}[{RATE}]))",
                        "{{key}} {{kind}}",
                    )
                ],
            )
        )
        .with_panel(
            panel(
                "Cached share of input by API key",
                "The share of each key's prompt tokens read from the prefix cache "
                "(on a disaggregated graph, the prefill workers' hits): the input a cached-token price discounts.",
                "percentunit",
                [
                    (
                        f'sum by (key) (rate(dynamo_oss_gateway_tokens_total{{kind="cached", {GRAPH}}}[{RATE}])) / '
                        f'sum by (key) (rate(dynamo_oss_gateway_tokens_total{{kind="input", {GRAPH}}}[{RATE}]))',
                        "{{key}}",
                    )
                ],
            )
        )
    )


def disaggregation() -> dashboard.Dashboard:
    return (
        _board(
            "dynamo-oss-disaggregation",
            "dynamo-oss: disaggregation",
            "Load per pool and per worker, KV cache, KV reuse and handoff.",
        )
        .with_panel(
            panel(
                "Requests per worker",
                "Requests each worker started per second, by pool.",
                "reqps",
                [
                    (
                        f"sum by (pool, process) (rate(dynamo_component_requests_total{{{WORKERS}, {PUBLIC}}}[{RATE}]))",
                        "{{pool}} {{process}}",
                    )
                ],
            )
        )
        .with_panel(
            panel(
                "KV cache usage",
                "Share of each worker's KV cache blocks in use.",
                "percentunit",
                [(f"max by (pool, process) (trtllm:kv_cache_usage_perc{{{WORKERS}}})", "{{pool}} {{process}}")],
                warn_at=0.9,
            )
        )
        .with_panel(
            panel(
                "Running and waiting requests",
                "Sequences each worker runs, and those it queues (prefill queue).",
                "none",
                [
                    (f"sum by (pool, process) (trtllm:num_requests_running{{{WORKERS}}})", "running {{process}}"),
                    (f"sum by (pool, process) (trtllm:num_requests_waiting{{{WORKERS}}})", "waiting {{process}}"),
                ],
            )
        )
        .with_panel(
            panel(
                "KV hit rate",
                "Share of a prompt the KV router found cached on the worker it chose (mean).",
                "percentunit",
                [
                    (
                        f'sum(rate(dynamo_component_router_kv_hit_rate_sum{{job="dynamo-frontend", {GRAPH}}}[{RATE}])) / '
                        f'sum(rate(dynamo_component_router_kv_hit_rate_count{{job="dynamo-frontend", {GRAPH}}}[{RATE}]))',
                        "hit rate",
                    )
                ],
            )
        )
        .with_panel(
            panel(
                "KV handoff latency (router estimate)",
                "The router's estimate of the prefill-to-decode KV transfer, p50 and p99; engines that report "
                "measured handoffs add their own series.",
                "s",
                _quantiles(
                    "dynamo_component_router_kv_transfer_estimated_latency_seconds", f'job="dynamo-frontend", {GRAPH}'
                ),
            )
        )
        .with_panel(
            panel(
                "Router time to first token",
                "TTFT as the router measures it per request, p50 and p99.",
                "s",
                _quantiles("dynamo_component_router_time_to_first_token_seconds", f'job="dynamo-frontend", {GRAPH}'),
            )
        )
    )


def planner() -> dashboard.Dashboard:
    return (
        _board(
            "dynamo-oss-planner",
            "dynamo-oss: planner",
            "Pool sizes, the planner's decisions and the load it planned for, latency against the targets.",
        )
        .with_panel(
            panel(
                "Workers per pool",
                "Each pool's target and live workers, from the launcher.",
                "none",
                [
                    (
                        f'sum by (pool, state) (dynamo_oss_pool_workers{{state=~"target|live|draining", {GRAPH}}})',
                        "{{pool}} {{state}}",
                    )
                ],
            )
        )
        .with_panel(
            panel(
                "Scaling actions",
                "Workers added (up) and removed (down) per pool over the dashboard's range.",
                "none",
                [
                    (
                        f"sum by (pool, direction) (increase(dynamo_oss_scaling_actions_total{{{GRAPH}}}[$__range]))",
                        "{{pool}} {{direction}}",
                    )
                ],
            )
        )
        .with_panel(
            panel(
                "TTFT p90 against the target",
                "Measured p90 time to first token, the graph's target (planner.ttft_ms), and what the performance "
                "model predicted at the sizes the sla planner proposed.",
                "s",
                [
                    (_quantile(0.9, "dynamo_frontend_time_to_first_token_seconds", MODEL), "measured p90"),
                    (f'max(dynamo_oss_planner_target_latency_ms{{metric="ttft", {GRAPH}}}) / 1e3', "target"),
                    (f'max(dynamo_oss_planner_predicted_latency_ms{{metric="ttft", {GRAPH}}}) / 1e3', "predicted p90"),
                ],
            )
        )
        .with_panel(
            panel(
                "ITL against the target",
                "Measured mean inter-token latency, the graph's target (planner.itl_ms), and what the performance "
                "model predicted at the sizes the sla planner proposed.",
                "s",
                [
                    (
                        f"sum(rate(dynamo_frontend_inter_token_latency_seconds_sum{{{MODEL}}}[{RATE}])) / "
                        f"sum(rate(dynamo_frontend_inter_token_latency_seconds_count{{{MODEL}}}[{RATE}]))",
                        "measured mean",
                    ),
                    (f'max(dynamo_oss_planner_target_latency_ms{{metric="itl", {GRAPH}}}) / 1e3', "target"),
                    (f'max(dynamo_oss_planner_predicted_latency_ms{{metric="itl", {GRAPH}}}) / 1e3', "predicted"),
                ],
            )
        )
        .with_panel(
            panel(
                "Load: predicted against what came",
                "Requests per second the planner observed over each look, and what Dynamo's load predictor "
                "forecast for the next one (sla mode).",
                "reqps",
                [(f'max by (source) (dynamo_oss_planner_load{{quantity="requests_per_s", {GRAPH}}})', "{{source}}")],
            )
        )
        .with_panel(
            panel(
                "Planner decisions",
                "Workers the sla planner proposed per pool against those it found, and its looks by what it "
                "proposed (grow, shrink, hold) over the dashboard's range.",
                "none",
                [
                    (f"max by (pool) (dynamo_oss_planner_wanted_workers{{{GRAPH}}})", "{{pool}} wanted"),
                    (f"max by (pool) (dynamo_oss_planner_current_workers{{{GRAPH}}})", "{{pool}} found"),
                    (
                        f"sum by (proposal) (increase(dynamo_oss_planner_looks_total{{{GRAPH}}}[$__range]))",
                        "looks: {{proposal}}",
                    ),
                ],
            )
        )
        .with_panel(
            panel(
                "Share within the targets",
                "Requests whose TTFT was at most 2.2 s, and inter-token gaps of at most 64 ms: the bounds of "
                "Dynamo 1.6's histogram buckets nearest a 2 s TTFT and a 50 ms ITL target.",
                "percentunit",
                [
                    (_share_within("dynamo_frontend_time_to_first_token_seconds", "2.2"), "TTFT <= 2.2 s"),
                    (_share_within("dynamo_frontend_inter_token_latency_seconds", "0.064"), "ITL <= 64 ms"),
                ],
            )
        )
    )


def infrastructure() -> dashboard.Dashboard:
    return (
        _board(
            "dynamo-oss-infrastructure",
            "dynamo-oss: infrastructure",
            "etcd, scrape targets, and what the launcher did: restarts and readiness.",
        )
        .with_panel(
            panel(
                "Scrape targets up",
                "1 for each target Prometheus reaches, by job.",
                "none",
                [(f"sum by (job) (up{{{GRAPH}}})", "{{job}}")],
            )
        )
        .with_panel(
            panel(
                "etcd has a leader",
                "1 while the embedded etcd has a leader: discovery works.",
                "none",
                [(f'max(etcd_server_has_leader{{job="etcd", {GRAPH}}})', "leader")],
            )
        )
        .with_panel(
            panel(
                "etcd proposals failed",
                "Failed raft proposals per second: writes etcd could not commit.",
                "none",
                [(f'sum(rate(etcd_server_proposals_failed_total{{job="etcd", {GRAPH}}}[{RATE}]))', "failed")],
                warn_at=0.01,
            )
        )
        .with_panel(
            panel(
                "NATS up and connections",
                "1 while nats-server answers (from the launcher), and its client connections.",
                "none",
                [
                    (f"max(dynamo_oss_nats_up{{{GRAPH}}})", "up"),
                    (f"max(dynamo_oss_nats_connections{{{GRAPH}}})", "connections"),
                ],
            )
        )
        .with_panel(
            panel(
                "NATS messages",
                "Messages nats-server received and delivered per second (KV events, metrics).",
                "none",
                [
                    (f"sum(rate(dynamo_oss_nats_in_msgs_total{{{GRAPH}}}[{RATE}]))", "in"),
                    (f"sum(rate(dynamo_oss_nats_out_msgs_total{{{GRAPH}}}[{RATE}]))", "out"),
                ],
            )
        )
        .with_panel(
            panel(
                "Process restarts",
                "Restarts by process over the dashboard's range, from the launcher.",
                "none",
                [
                    (
                        f"sum by (process) (increase(dynamo_oss_process_restarts_total{{{GRAPH}}}[$__range]))",
                        "{{process}}",
                    )
                ],
                warn_at=1,
            )
        )
        .with_panel(
            panel(
                "Graph ready",
                "1 once every worker registered and the model was served.",
                "none",
                [(f"max(dynamo_oss_graph_ready{{{GRAPH}}})", "ready")],
            )
        )
    )


DASHBOARDS: dict[str, Callable[[], dashboard.Dashboard]] = {
    "overview": overview,
    "disaggregation": disaggregation,
    "planner": planner,
    "infrastructure": infrastructure,
}


def render() -> dict[str, str]:
    """{file name: dashboard JSON} for deploy/grafana/."""
    return {
        f"{name}.json": json.dumps(build().build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"
        for name, build in DASHBOARDS.items()
    }


def queries(rendered: str) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query in one rendered dashboard."""
    board = json.loads(rendered)
    return [(p["title"], t["expr"]) for p in board.get("panels", []) for t in p.get("targets", [])]
