"""A dashboard drawn without Grafana: each panel's queries over a time range, as one PNG.

For a look where no Grafana runs (a CI log, an issue): the same PromQL the dashboards hold, with
their variables filled in, through Prometheus's range API, drawn with matplotlib.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import httpx

from dynamo_oss.catalog.errors import UserError

UNITS = {"s": "seconds", "reqps": "requests/s", "percentunit": "share", "none": ""}


def fill(expr: str, namespace: str, model: str, step_s: int) -> str:
    """A dashboard query with Grafana's variables replaced for one graph."""
    rate = f"{max(4 * step_s, 60)}s"
    values = {"$namespace": namespace, "$model": model, "$__rate_interval": rate, "$__range": rate}
    for variable, value in values.items():
        expr = expr.replace(variable, value)
    return expr


def series(
    prometheus: str, expr: str, legend_format: str, start: float, end: float, step_s: int
) -> list[tuple[str, list[float], list[float]]]:
    """(legend, times, values) of each series a range query returns; legends as Grafana fills them."""
    try:
        response = httpx.get(
            f"{prometheus}/api/v1/query_range",
            params={"query": expr, "start": start, "end": end, "step": step_s},
            timeout=30,
        )
        response.raise_for_status()
    except httpx.HTTPError as err:
        raise UserError(f"{prometheus}: cannot query Prometheus: {err}") from None
    out = []
    for row in response.json()["data"]["result"]:
        legend = legend_format
        for label, value in row["metric"].items():
            legend = legend.replace("{{" + label + "}}", value)
        times = [float(t) - end for t, _ in row["values"]]
        values = [float(v) if v not in ("NaN", "+Inf", "-Inf") else math.nan for _, v in row["values"]]
        out.append((legend or expr[:40], times, values))
    return out


def snapshot(
    dashboard_json: str, prometheus: str, namespace: str, model: str, out: Path, minutes: float = 15, step_s: int = 5
) -> Path:
    """Draw every panel of one rendered dashboard over the last `minutes` into `out` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after choosing the file-only backend

    board = json.loads(dashboard_json)
    panels = board.get("panels", [])
    end = time.time()
    start = end - 60 * minutes
    columns = 2
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(12, 3.2 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels, strict=False):
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "none")
        for target in panel.get("targets", []):
            expr = fill(target["expr"], namespace, model, step_s)
            for legend, times, values in series(prometheus, expr, target.get("legendFormat", ""), start, end, step_s):
                ax.plot([t / 60 for t in times], values, label=legend, lw=1.2)
        ax.set_title(panel["title"], fontsize=9)
        ax.set_xlabel("minutes before the snapshot", fontsize=7)
        ax.set_ylabel(UNITS.get(unit, unit), fontsize=7)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.suptitle(f"{board['title']} — graph {namespace}, model {model}", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
