"""A sweep's results folder: what was asked, what each run measured, where aiperf's exports are.

RESULTS/sweep.json is the typed record (`Sweep`); RESULTS/runs/cN/ holds aiperf's own export of
the run at concurrency N; RESULTS/graph/ a copy of the graph that was served, if one was.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from dynamo_oss.catalog.errors import read_json_file
from dynamo_oss.perf.metrics import DEFINITIONS, ServingPoint
from dynamo_oss.perf.replay import default_requests

SWEEP_FILE = "sweep.json"
BUSY_LIMIT = 0.9  # above this share of every core busy, the machine, not the deployment, sets the pace


class SweepParameters(BaseModel):
    """What every run of a sweep sends: a closed loop of streaming chat requests of exact lengths."""

    isl: int = Field(ge=1, description="prompt tokens per request (aiperf's synthetic prompts)")
    osl: int = Field(ge=2, description="output tokens per request, exact (ignore_eos, min_tokens = max_tokens)")
    concurrencies: list[int] = Field(min_length=1, description="streams kept in flight, one run each")
    requests: int | None = Field(None, ge=1, description="measured requests per run; None: 10 per stream, at least 40")
    warmup: int | None = Field(None, ge=0, description="unmeasured requests first; None: one per stream")
    seed: int = Field(
        0,
        description="the prompts: each concurrency's run sends its own (`seed_at`), and a second sweep with the "
        "same seed sends the same ones again, which a deployment with prefix caching answers from cache",
    )
    model: str = Field(description="the model name requests carry")
    tokenizer: str = Field(description="what aiperf builds prompts with: a model folder or hub name")
    gpus: int = Field(ge=1, description="GPUs of all pools, the divisor of tok/s/GPU")
    time_scale: float = Field(1.0, gt=0, description="mocker workers ran this many times slower than modelled")

    def requests_at(self, concurrency: int) -> int:
        return self.requests or default_requests(concurrency)

    def seed_at(self, concurrency: int) -> int:
        """aiperf's random seed for one run: fixed, and different for every concurrency, so no run is
        sped up by prompts an earlier one left in the prefix cache."""
        return self.seed * 1_000_003 + concurrency

    def warmup_at(self, concurrency: int) -> int:
        return concurrency if self.warmup is None else self.warmup


class RunResult(BaseModel):
    """One concurrency, as aiperf measured it; `point` carries the figures under the names the
    simulation uses (perf.metrics.DEFINITIONS), so live and simulated sweeps compare directly."""

    concurrency: int
    point: ServingPoint
    failed: int = Field(description="requests that ended in an error")
    request_rate: float = Field(description="finished requests per second")
    host_cpu_busy: float | None = Field(description="share of all this machine's cores busy while measuring")
    artifacts: str = Field(description="aiperf's export, relative to the results folder")

    @property
    def machine_bound(self) -> bool:
        """The host was saturated: the figures say more about this machine than about the deployment."""
        return self.host_cpu_busy is not None and self.host_cpu_busy >= BUSY_LIMIT


class Sweep(BaseModel):
    label: str = Field(description="the graph's name, or the URL")
    target: str = Field(description="what was benchmarked: a graph file or a URL")
    endpoint: str = Field(description="the OpenAI base URL aiperf sent to")
    parameters: SweepParameters
    runs: list[RunResult] = Field(default_factory=list)
    definitions: dict[str, str] = Field(default_factory=lambda: dict(DEFINITIONS))

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        temporary = folder / f"{SWEEP_FILE}.tmp"
        temporary.write_text(self.model_dump_json(indent=2))
        temporary.replace(folder / SWEEP_FILE)

    @classmethod
    def load(cls, folder: Path) -> Sweep:
        path = folder / SWEEP_FILE if folder.is_dir() else folder
        return read_json_file(
            cls, path, missing="give a results folder `dynamo bench` wrote", kind="a dynamo bench results file"
        )

    @property
    def points(self) -> list[ServingPoint]:
        return [run.point for run in self.runs]
