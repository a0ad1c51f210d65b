"""The gateway's time to first token and inter-token latency, per request, as histograms whose buckets
carry exemplars: the trace id of a traced request that landed there, so a slow point on a dashboard
opens its trace. Observed once a request ends, never per token, and only where the graph traces.

prometheus-client keeps no exemplars in multiprocess mode (its values.py says so), and the endpoint's
series are summed over its processes: each serving process keeps its latest exemplar per bucket in a
file of the state folder, written at most once a second, and the endpoint's first process merges
them into the buckets it serves (ExemplarCollector), in OpenMetrics, the format exemplars need.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path

from prometheus_client import Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar
from prometheus_client.utils import floatToGoString

TTFT = Histogram(
    "dynamo_oss_gateway_time_to_first_token_seconds",
    "Seconds from a request's arrival at the gateway to the first bytes of Dynamo's answer, by API; a traced "
    "request's trace id is its bucket's exemplar.",
    ["api"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 60.0),
)
ITL = Histogram(
    "dynamo_oss_gateway_inter_token_latency_seconds",
    "A request's mean gap between output tokens after the first ((end - first token) / (output tokens - 1), as "
    "aiperf computes it), by API; a traced request's trace id is its bucket's exemplar.",
    ["api"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28),
)
HISTOGRAMS = {TTFT._name: TTFT, ITL._name: ITL}  # noqa: SLF001 - the names prometheus-client keeps
FLUSH_S = 1.0  # how often a serving process writes its exemplars, when it has new ones


class Exemplars:
    """One serving process's latest exemplar per histogram bucket, written to `folder`/<pid>.json."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / f"{os.getpid()}.json"
        folder.mkdir(parents=True, exist_ok=True)
        self.latest: dict[str, list] = {}  # "metric|api|le" -> [trace_id, value, unix time]
        self._flushing = False

    def observe(self, histogram: Histogram, api: str, seconds: float, trace_id: str | None) -> None:
        histogram.labels(api).observe(seconds)
        if trace_id is None:
            return
        le = next((bound for bound in histogram._upper_bounds if seconds <= bound), float("inf"))  # noqa: SLF001
        self.latest[f"{histogram._name}|{api}|{le}"] = [trace_id, seconds, time.time()]  # noqa: SLF001
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().call_later(FLUSH_S, self._flush)

    def _flush(self) -> None:
        self._flushing = False
        draft = self.path.with_suffix(".draft")
        draft.write_text(json.dumps(self.latest))
        draft.replace(self.path)


class ExemplarCollector(Collector):
    """`collector`'s families (the processes' series, summed), each bucket of the two histograms with the
    latest exemplar any process wrote for it in `folder`."""

    def __init__(self, collector: Collector, folder: Path) -> None:
        self.collector, self.folder = collector, folder

    def collect(self) -> Iterable[Metric]:
        latest = self._read()
        for family in self.collector.collect():
            if family.name in HISTOGRAMS and latest:
                family.samples = [
                    sample._replace(
                        exemplar=latest.get(f"{family.name}|{sample.labels.get('api')}|{sample.labels['le']}")
                    )
                    if sample.name.endswith("_bucket")
                    else sample
                    for sample in family.samples
                ]
            yield family

    def _read(self) -> dict[str, Exemplar]:
        """The newest exemplar per bucket over every process's file, keyed as the bucket's `le` is written."""
        newest: dict[str, list] = {}
        for path in self.folder.glob("*.json"):
            try:
                entries = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # a process's file mid-replace, or gone with it
            for key, entry in entries.items():
                if key not in newest or entry[2] > newest[key][2]:
                    newest[key] = entry
        exemplars = {}
        for key, (trace_id, value, at) in newest.items():
            name, api, le = key.split("|")
            exemplars[f"{name}|{api}|{floatToGoString(float(le))}"] = Exemplar({"trace_id": trace_id}, value, at)
        return exemplars


def exemplars_dir(state_dir: Path) -> Path:
    """Where the serving processes leave their exemplars for the endpoint's first process."""
    return state_dir / "exemplars"
