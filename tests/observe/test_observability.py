"""Metrics of a served graph: an embedded Prometheus scrapes every target the graph starts, and the
launcher's own metrics say what only it knows (pool sizes, readiness, restarts)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.support.graphs import shipped_graph_on_free_ports
from tests.support.served import ServedGraph
from tests.support.waiting import wait_for

JOBS = {"dynamo-frontend", "dynamo-workers", "etcd", "dynamo-oss-launcher", "dynamo-planner", "dynamo-oss-gateway"}


def prometheus(served: ServedGraph) -> str:
    port = next(p["ports"][0] for p in served.state()["processes"] if p["name"] == "prometheus")
    return f"http://127.0.0.1:{port}"


def query(served: ServedGraph, promql: str) -> list[dict]:
    response = httpx.get(f"{prometheus(served)}/api/v1/query", params={"query": promql}, timeout=10)
    response.raise_for_status()
    return response.json()["data"]["result"]


def test_every_target_the_graph_starts_is_scraped_and_up(disagg: ServedGraph) -> None:
    def targets_up() -> dict[str, set[str]] | None:
        response = httpx.get(f"{prometheus(disagg)}/api/v1/targets", timeout=10).json()
        active = response["data"]["activeTargets"]
        by_job: dict[str, set[str]] = {}
        for target in active:
            by_job.setdefault(target["labels"]["job"], set()).add(target["health"])
        return by_job if set(by_job) == JOBS and all(h == {"up"} for h in by_job.values()) else None

    wait_for(targets_up, 60, "Prometheus to scrape every target of the graph")
    workers = query(disagg, 'up{job="dynamo-workers"}')
    assert {(r["metric"]["pool"], r["metric"]["process"]) for r in workers} == {
        ("prefill", "prefill-0"),
        ("decode", "decode-0"),
    }


def test_the_launcher_reports_pool_sizes_and_readiness(disagg: ServedGraph) -> None:
    def live_workers() -> dict[str, float] | None:
        rows = query(disagg, 'dynamo_oss_pool_workers{state="live"}')
        return {r["metric"]["pool"]: float(r["value"][1]) for r in rows} or None

    assert wait_for(live_workers, 60, "the launcher's pool sizes in Prometheus") == {"prefill": 1.0, "decode": 1.0}
    ready = wait_for(
        lambda: [float(r["value"][1]) for r in query(disagg, "dynamo_oss_graph_ready") if r["value"][1] == "1"],
        30,
        "the launcher's readiness in Prometheus",
    )
    assert ready == [1.0]


def test_a_graph_that_does_not_trace_runs_no_process_told_to_export(disagg: ServedGraph) -> None:
    """Tracing off (the shipped graphs'): no Dynamo process has OTEL_EXPORT_ENABLED, so none exports, the
    gateway has no tracer, and neither a trace backend nor Prometheus's exemplar storage is started."""
    processes = disagg.state()["processes"]
    assert all(p["kind"] != "traces" for p in processes)
    for process in processes:
        environ = Path(f"/proc/{process['pid']}/environ").read_bytes().split(b"\0")
        assert not [v for v in environ if v.startswith(b"OTEL_")], process["name"]
    assert '"tracing"' not in (disagg.run_dir / "gateway.json").read_text()
    prometheus_pid = next(p["pid"] for p in processes if p["name"] == "prometheus")
    assert b"exemplar-storage" not in Path(f"/proc/{prometheus_pid}/cmdline").read_bytes()


def test_prometheus_listens_on_loopback_only(disagg: ServedGraph) -> None:
    assert prometheus(disagg).startswith("http://127.0.0.1:")
    config = (disagg.run_dir / "prometheus.yml").read_text()
    assert "127.0.0.1:" in config and "0.0.0.0" not in config  # targets are scraped over loopback


def test_a_missing_prometheus_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dynamo_oss.cli.check import plan_graph
    from dynamo_oss.graph.errors import GraphError

    monkeypatch.setattr(
        "dynamo_oss.deployment.embedded.find_binary", lambda name: None if name == "prometheus" else name
    )
    with pytest.raises(GraphError) as error:
        plan_graph(shipped_graph_on_free_ports("disagg.yaml", tmp_path), tmp_path / "run", "mocker")
    assert "observability.prometheus: prometheus is not installed: install Debian's package" in str(error.value)


# Panels whose queries cannot have data on this graph, and why.
NO_DATA_HERE: dict[tuple[str, str], str] = {
    ("overview", "Time to first token, traced requests"): "the README's graph does not trace",
}


def test_every_dashboard_query_returns_data_under_load(disagg: ServedGraph) -> None:
    import openai

    from dynamo_oss.observe.dashboards import queries, render

    client = openai.OpenAI(base_url=disagg.endpoint, api_key="-", max_retries=0, timeout=60)

    def request() -> None:
        stream = client.chat.completions.create(
            model="openai/gpt-oss-120b",
            messages=[{"role": "user", "content": "Tell me about Paris."}],
            max_tokens=48,
            stream=True,  # no include_usage: the gateway counts each stream's tokens all the same
        )
        assert list(stream)

    for _ in range(4):
        request()
    values = {
        "$namespace": disagg.state()["graph"],
        "$model": "openai/gpt-oss-120b",
        "$__rate_interval": "1m",
        "$__range": "10m",
    }

    empty: list[tuple[str, str, str]] = []

    def all_have_data() -> bool:
        request()  # the load goes on while the planner looks at it
        empty.clear()
        for name, text in render().items():
            for title, expr in queries(text):
                for variable, value in values.items():
                    expr = expr.replace(variable, value)
                if (name.removesuffix(".json"), title) not in NO_DATA_HERE and not query(disagg, expr):
                    empty.append((name, title, expr))
        return not empty

    try:
        wait_for(all_have_data, 60, "every dashboard query to return data")
    except pytest.fail.Exception:
        pytest.fail(f"dashboard queries without data: {empty}")


def test_a_snapshot_draws_a_dashboard_from_prometheus(disagg: ServedGraph, tmp_path: Path) -> None:
    from tests.support.commands import run_dynamo

    result = run_dynamo(
        "dashboard",
        "snapshot",
        str(disagg.run_dir),
        "--out",
        str(tmp_path),
        "--minutes",
        "2",
        "--only",
        "overview",
        timeout_s=120,
    )
    assert result.returncode == 0, result.stderr
    png = tmp_path / "overview.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000


def test_prometheus_evaluates_the_graphs_alert_rules(disagg: ServedGraph) -> None:
    def groups() -> list[dict] | None:
        found = httpx.get(f"{prometheus(disagg)}/api/v1/rules", timeout=10).json()["data"]["groups"]
        evaluated = [g for g in found if all(r.get("lastEvaluation", "").startswith("2") for r in g["rules"])]
        return evaluated if evaluated and evaluated[0]["rules"][0].get("evaluationTime") is not None else None

    (group,) = wait_for(groups, 60, "Prometheus to evaluate the graph's alert rules")
    assert group["name"] == f"dynamo-oss-{disagg.state()['graph']}"
    assert {r["name"] for r in group["rules"] if r["type"] == "alerting"} >= {
        "TTFTBudgetBurnFast",
        "NoWorkerLive",
        "PlannerNotActing",
        "RequestsFailing",
    }
    assert all(r["health"] == "ok" for r in group["rules"]), group["rules"]
