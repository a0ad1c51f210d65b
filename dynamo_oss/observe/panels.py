"""One way to build a panel: a time series of PromQL queries with its unit, description and thresholds.

Queries use the dashboards' variables: `$namespace` (the graph), `$model` (the served model) and
Grafana's `$__rate_interval`; `queries_of` lists them so a test can run each against Prometheus.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard, prometheus, timeseries
from grafana_foundation_sdk.models.dashboard import DataSourceRef, Threshold, ThresholdsMode

DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
GRAPH = 'namespace=~"$namespace"'  # the scrape config labels every target with its graph's namespace
MODEL = 'namespace=~"$namespace", model=~"$model"'


def panel(
    title: str,
    description: str,
    unit: str,
    queries: list[tuple[str, str]],
    *,
    warn_at: float | None = None,
    width: int = 12,
    exemplars: bool = False,
) -> timeseries.Panel:
    """A time series of (PromQL, legend) queries; `warn_at` paints the value past which it turns red;
    `exemplars` asks Prometheus for its series' exemplars too (Grafana draws them as points)."""
    built = (
        timeseries.Panel().title(title).description(description).unit(unit).datasource(DATASOURCE).height(8).span(width)
    )
    for ref, (expr, legend) in zip("ABCDEFGH", queries, strict=False):
        query = prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DATASOURCE)
        built = built.with_target(query.exemplar(True) if exemplars else query)
    if warn_at is not None:
        built = built.thresholds(
            dashboard.ThresholdsConfig()
            .mode(ThresholdsMode.ABSOLUTE)
            .steps([Threshold(value=None, color="green"), Threshold(value=warn_at, color="red")])
        )
    return built
