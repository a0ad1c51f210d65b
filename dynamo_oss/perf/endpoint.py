"""How big a graph's endpoint must be: the gateway processes and Dynamo frontends that stream what its
pools can produce at their peak.

Every streamed token costs the gateway and Dynamo's frontend CPU time, measured per API in
benchmarks/gateway_cpu and kept here as `MEASURED_CPU`. The pools' peak output rate comes from the
performance model: each decoding pool (decode, or agg) at its most workers (autoscale max), each
worker at its full batch (max_batch per attention rank, or as many sequences as its KV cache holds),
over a decode step at `CONTEXT`. For an aggregated pool that is an upper bound: its steps also carry
prompts, which the decode-only step leaves out (at 1k/1k the model's mixed steady state is 7% lower
on B200 and 14% lower on GB200). The endpoint is sized for that bound, on the safe side: the model's
B200 figure (graphs/agg.yaml, about 21.5k tok/s/GPU) is 1.1x the 19.5k published for 4 x B200 at max
throughput, its GB200 figure (graphs/gb200-nvl72.yaml, about 28k) 1.36x the 20.8k of NVIDIA's 1.5M
tok/s rack (../shared/facts/performance.md).

Processes needed = ceil(peak tok/s x us/token / 1e6): one core each, as measured (the gateway's
event loop is one core; the frontend's figure is of one process, taken here as one core too).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from dynamo_oss.deployment.model import Deployment
from dynamo_oss.graph.errors import GraphError, Problem
from dynamo_oss.perf.costs import CostModel, Factors, fitted_factors
from dynamo_oss.perf.graphs import layout_from_deployment
from dynamo_oss.perf.layout import Layout, Role, Workload

Api = Literal["chat", "responses", "completions"]

# InferenceMAX's 1k/1k point: 1k input and 1k output tokens, so a decoding sequence holds 1.5k on average.
CONTEXT = Workload(isl=1024, osl=1024)
# A frontend pod's gateway processes when the graph leaves them to sizing: a pod of a few cores schedules
# easily on any node, and more pods spread the endpoint over more of them.
MOST_PROCESSES_PER_POD = 8


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MeasuredCpu(_Model):
    """CPU time per streamed output token, median over the benchmark's runs."""

    source: str = Field(description="the committed results these figures are copied from")
    machine: str
    date: str
    code: str = Field(description="the commit the benchmark measured")
    gateway_us_per_token: dict[Api, float]
    frontend_us_per_token: dict[Api, float]


MEASURED_CPU = MeasuredCpu(
    source="benchmarks/gateway_cpu/results.json",
    machine="AMD EPYC (2 cores)",
    date="2026-12-02",
    code="3e6bf67",
    gateway_us_per_token={"chat": 21.36, "responses": 23.56, "completions": 20.14},
    frontend_us_per_token={"chat": 33.45, "responses": 33.69, "completions": 38.57},
)


class PoolPeak(_Model):
    role: Role
    workers: int = Field(description="its most workers: autoscale max, else its workers")
    gpus: int = Field(description="GPUs of those workers")
    batch: int = Field(description="sequences each attention rank decodes at once")
    tok_s_user: float = Field(description="each sequence's output speed at that batch")
    tok_s: float = Field(description="output tokens per second of all its workers")
    slowdown: float = Field(default=1.0, description="its steps this many times longer than modelled (a mocker)")


class PeakOutput(_Model):
    context: Workload = Field(description="the requests the decode step is timed at")
    tok_s: float = Field(description="output tokens per second of every decoding pool at its peak")
    gpus: int = Field(description="GPUs of the decoding pools at their most workers")
    pools: list[PoolPeak]

    @property
    def tok_s_per_gpu(self) -> float:
        return self.tok_s / self.gpus


class ApiNeed(_Model):
    """What streaming the peak on one API takes, one core per process."""

    api: Api
    gateway_us_per_token: float
    frontend_us_per_token: float
    gateway_processes: int
    frontends: int


class Chosen(_Model):
    field: str = Field(description="the graph's field")
    value: int
    sized: bool = Field(description="False: given by the graph")
    why: str


class EndpointSizing(_Model):
    """The endpoint a deployment needs and what it gets: per node on one host, per pod on a cluster."""

    peak: PeakOutput | None = Field(description="None: the performance model cannot time the pools")
    not_timed: str | None = Field(default=None, description="why there is no peak")
    measured: MeasuredCpu = MEASURED_CPU
    needs: list[ApiNeed] = Field(description="per API, for the whole endpoint; empty without a peak")
    on_cluster: bool
    cores: int | None = Field(description="the host's cores that cap what sizing picks; None on a cluster")
    frontend_nodes: int = Field(description="nodes that each run the frontends and a gateway (one host)")
    gateway_processes: Chosen | None = Field(description="on each node, or in each pod; None: no gateway")
    frontend_replicas: Chosen = Field(description="frontends on each node, or frontend pods")
    frontend_cores_per_pod: int | None = Field(
        default=None, description="on a cluster, the cores each pod's one Dynamo frontend needs at the peak"
    )
    warnings: list[Problem] = Field(default_factory=list)


def pool_peak(
    layout: Layout,
    role: Role,
    workers: int,
    context: Workload = CONTEXT,
    factors: Factors | None = None,
    slowdown: float = 1.0,
) -> PoolPeak:
    """A decoding pool's output rate with `workers` workers, each at its full batch, its steps `slowdown`
    times longer than modelled (a mocker run slower)."""
    cost = CostModel.for_pool(layout, role, factors or fitted_factors())
    pool = layout.pools[role]
    batch = max(1, cost.largest_batch(context.isl + context.osl))
    gained = context.profile.tokens_per_step(pool.draft_tokens)  # a speculative step's tokens a sequence
    step_s = slowdown * float(cost.decode_ms(batch, context.isl + context.osl / 2)) / 1e3 / gained
    return PoolPeak(
        role=role,
        workers=workers,
        gpus=workers * pool.tp,
        batch=batch,
        tok_s_user=1 / step_s,
        tok_s=workers * pool.ranks * batch / step_s,
        slowdown=slowdown,
    )


def peak_output(
    layout: Layout,
    most_workers: Mapping[Role, int] | None = None,
    slowdown: Mapping[Role, float] | None = None,
    context: Workload = CONTEXT,
) -> PeakOutput:
    """The layout's decoding pools at their peak: `most_workers` each (default: the layout's), their
    steps `slowdown` times longer (a mocker run slower than modelled)."""
    factors = fitted_factors()
    pools = [
        pool_peak(
            layout,
            role,
            (most_workers or {}).get(role, pool.workers),
            context,
            factors,
            (slowdown or {}).get(role, 1.0),
        )
        for role, pool in layout.pools.items()
        if role in ("decode", "agg")
    ]
    return PeakOutput(context=context, tok_s=sum(p.tok_s for p in pools), gpus=sum(p.gpus for p in pools), pools=pools)


def deployment_peak(deployment: Deployment, mocker_time_scale: float = 1.0) -> PeakOutput:
    """The deployment's peak output; GraphError when the performance model cannot time its pools."""
    layout = layout_from_deployment(deployment)
    return peak_output(
        layout,
        {pool.role: pool.autoscale.max if pool.autoscale else pool.workers for pool in deployment.pools},
        {pool.role: mocker_time_scale for pool in deployment.pools if pool.engine == "mocker"},
    )


def api_needs(tok_s: float, measured: MeasuredCpu = MEASURED_CPU) -> list[ApiNeed]:
    """Gateway processes and frontends that stream `tok_s` output tokens per second, per API."""
    return [
        ApiNeed(
            api=api,
            gateway_us_per_token=gateway_us,
            frontend_us_per_token=measured.frontend_us_per_token[api],
            gateway_processes=_cores(tok_s, gateway_us),
            frontends=_cores(tok_s, measured.frontend_us_per_token[api]),
        )
        for api, gateway_us in measured.gateway_us_per_token.items()
    ]


def dearest(needs: list[ApiNeed]) -> tuple[ApiNeed, ApiNeed]:
    """What the endpoint is sized on, so that it carries the peak on any API: the API dearest per token
    for the gateway, and the one dearest for the frontend."""
    return (
        max(needs, key=lambda need: need.gateway_us_per_token),
        max(needs, key=lambda need: need.frontend_us_per_token),
    )


def _cores(tok_s: float, us_per_token: float) -> int:
    return max(1, math.ceil(tok_s * us_per_token / 1e6))


def size_endpoint(deployment: Deployment, cores: int | None, mocker_time_scale: float = 1.0) -> EndpointSizing:
    """The endpoint `deployment` needs at its pools' peak: on one host of `cores` cores, or on a cluster
    (`cores` None), where frontend pods carry it. Warns, field by field, where it falls short."""
    try:
        peak = deployment_peak(deployment, mocker_time_scale)
    except GraphError as error:
        return _untimed(deployment, cores, "; ".join(problem.message for problem in error.problems))
    needs = api_needs(peak.tok_s)
    gateway, frontend = dearest(needs)
    if cores is None:
        return _on_cluster(deployment, peak, needs, gateway, frontend)
    return _on_host(deployment, peak, needs, gateway, frontend, cores)


def _untimed(deployment: Deployment, cores: int | None, why: str) -> EndpointSizing:
    """No peak to size on: the graph's values, else one of each."""
    reason = "sized: 1, as the performance model cannot time the pools"
    gateway = deployment.gateway
    return EndpointSizing(
        peak=None,
        not_timed=why,
        needs=[],
        on_cluster=cores is None,
        cores=cores,
        frontend_nodes=_frontend_nodes(deployment, cores),
        gateway_processes=None
        if gateway is None
        else Chosen(
            field="gateway.processes",
            value=gateway.processes,
            sized=gateway.processes_sized,
            why=reason if gateway.processes_sized else "given by the graph",
        ),
        frontend_replicas=Chosen(
            field="frontend.replicas",
            value=deployment.frontend.replicas,
            sized=deployment.frontend.replicas_sized,
            why=reason if deployment.frontend.replicas_sized else "given by the graph",
        ),
    )


def _frontend_nodes(deployment: Deployment, cores: int | None) -> int:
    """Nodes that each run the frontends and a gateway; on a cluster the pods stand for them."""
    return 1 if cores is None else len(deployment.placement.frontend_nodes)


def _mocker_hint(deployment: Deployment) -> str:
    return " or slow the mocker (--mocker-time-scale)" if any(p.engine == "mocker" for p in deployment.pools) else ""


def _share_cores(
    gateway: int, frontends: int, given_gateway: int | None, given_frontends: int | None, cores: int
) -> tuple[int, int]:
    """Gateway processes and frontends for the needs `gateway` and `frontends` (0 gateway: none), the
    graph's given values kept: they share one host's cores, so together sizing keeps them within `cores`,
    splitting in proportion to the needs, at least one each."""
    if given_gateway is not None and given_frontends is not None:
        return given_gateway, given_frontends
    if given_gateway is not None:
        return given_gateway, min(frontends, max(1, cores - given_gateway))
    if given_frontends is not None:
        return min(gateway, max(1, cores - given_frontends)), given_frontends
    if gateway + frontends <= cores:
        return gateway, frontends
    processes = min(gateway, max(1, round(cores * gateway / (gateway + frontends))))
    return processes, min(frontends, max(1, cores - processes))


class _Demand(NamedTuple):
    """What the peak asks of one field: `need` of `what` at `us` per token on `api`."""

    field: str
    what: str
    need: int
    given: int | None
    api: Api
    us: float

    def carried(self, count: int) -> str:
        return (
            f"{count} {self.what} carry about {count * 1e6 / self.us:,.0f} tok/s at {self.us:g} us/token ({self.api})"
        )


def _on_host(
    deployment: Deployment, peak: PeakOutput, needs: list[ApiNeed], gateway: ApiNeed, frontend: ApiNeed, cores: int
) -> EndpointSizing:
    """Each node that runs frontends carries its share of the peak on its own cores."""
    nodes = _frontend_nodes(deployment, cores)
    rate = peak.tok_s / nodes
    peak_text = f"the pools' peak of {rate:,.0f} tok/s" + (f" on each of {nodes} frontend nodes" if nodes > 1 else "")
    frontends = _Demand(
        field="frontend.replicas",
        what="frontends",
        need=_cores(rate, frontend.frontend_us_per_token),
        given=None if deployment.frontend.replicas_sized else deployment.frontend.replicas,
        api=frontend.api,
        us=frontend.frontend_us_per_token,
    )
    processes = None
    if deployment.gateway is not None:
        processes = _Demand(
            field="gateway.processes",
            what="gateway processes",
            need=_cores(rate, gateway.gateway_us_per_token),
            given=None if deployment.gateway.processes_sized else deployment.gateway.processes,
            api=gateway.api,
            us=gateway.gateway_us_per_token,
        )
    gateway_need = processes.need if processes else 0
    given_processes = processes.given if processes else None
    counts = _share_cores(gateway_need, frontends.need, given_processes, frontends.given, cores)
    warnings: list[Problem] = []

    def choose(demand: _Demand, value: int) -> Chosen:
        if demand.given is not None:
            if value < demand.need:
                message = f"is {value}: {demand.carried(value)}; {peak_text} needs {demand.need}"
                warnings.append(Problem(path=demand.field, message=message))
            return Chosen(field=demand.field, value=value, sized=False, why="given by the graph")
        why = f"sized: {demand.api}, the dearest per token, needs {demand.need}"
        if value < demand.need:
            why += f"; capped: gateway processes and frontends share this host's {cores} cores"
            message = (
                f"sized to {value} of the {demand.need} that {peak_text} needs ({demand.us:g} us/token, "
                f"{demand.api}): gateway processes and frontends share this host's {cores} cores. To carry the "
                f"peak, serve on {gateway_need + frontends.need} cores{_mocker_hint(deployment)}"
            )
            warnings.append(Problem(path=demand.field, message=message))
        return Chosen(field=demand.field, value=value, sized=True, why=why)

    return EndpointSizing(
        peak=peak,
        needs=needs,
        on_cluster=False,
        cores=cores,
        frontend_nodes=nodes,
        gateway_processes=choose(processes, counts[0]) if processes else None,
        frontend_replicas=choose(frontends, counts[1]),
        warnings=warnings,
    )


def _on_cluster(
    deployment: Deployment, peak: PeakOutput, needs: list[ApiNeed], gateway: ApiNeed, frontend: ApiNeed
) -> EndpointSizing:
    """Frontend pods carry the peak, each `gateway.processes` gateway processes and one Dynamo frontend.

    Sized, a pod gets at most MOST_PROCESSES_PER_POD processes and the pods are as many as the peak
    needs; a pod's one frontend then needs the frontends' share of the cores. Without a gateway, the
    pods' frontends are sized the same way on their own need."""
    frontend_need = frontend.frontends
    pod_need = gateway.gateway_processes if deployment.gateway else frontend_need
    autoscale = deployment.frontend.autoscale
    fixed = None if deployment.frontend.replicas_sized or autoscale else deployment.frontend.replicas
    given_per_pod = (
        deployment.gateway.processes if deployment.gateway and not deployment.gateway.processes_sized else None
    )
    per_pod = given_per_pod or min(MOST_PROCESSES_PER_POD, math.ceil(pod_need / (fixed or 1)))
    pods = fixed or (autoscale.min if autoscale else math.ceil(pod_need / per_pod))
    most = autoscale.max if autoscale else pods
    at_peak = min(most, max(pods, math.ceil(pod_need / per_pod)))
    unit = "gateway processes" if deployment.gateway else "frontend cores"
    api = gateway if deployment.gateway else frontend
    us = api.gateway_us_per_token if deployment.gateway else api.frontend_us_per_token
    warnings = []
    if most * per_pod < pod_need:
        field = "frontend.autoscale.max" if autoscale else "frontend.replicas"
        message = (
            f"is {most}: {most} pods of {per_pod} {unit} carry about {most * per_pod * 1e6 / us:,.0f} tok/s at "
            f"{us:g} us/token ({api.api}); the pools' peak of {peak.tok_s:,.0f} tok/s needs {pod_need} {unit}: "
            f"set it to {math.ceil(pod_need / per_pod)}"
        )
        warnings.append(Problem(path=field, message=message))
    if fixed is not None:
        replicas_why = "given by the graph"
    elif autoscale:
        replicas_why = (
            f"given by the graph: frontend.autoscale starts {autoscale.min}, its HPA grows it to {autoscale.max}"
        )
    else:
        replicas_why = f"sized: {api.api}, the dearest per token, needs {pod_need} {unit}, {per_pod} a pod"
    processes = None
    if deployment.gateway is not None:
        processes = Chosen(
            field="gateway.processes",
            value=per_pod,
            sized=given_per_pod is None,
            why="given by the graph"
            if given_per_pod
            else f"sized: {pod_need} in all, at most {MOST_PROCESSES_PER_POD} a pod, so a pod of a few cores "
            "schedules easily",
        )
    return EndpointSizing(
        peak=peak,
        needs=needs,
        on_cluster=True,
        cores=None,
        frontend_nodes=1,
        gateway_processes=processes,
        frontend_replicas=Chosen(
            field="frontend.replicas", value=pods, sized=deployment.frontend.replicas_sized, why=replicas_why
        ),
        frontend_cores_per_pod=math.ceil(frontend_need / at_peak),
        warnings=warnings,
    )


def sized(deployment: Deployment, sizing: EndpointSizing) -> Deployment:
    """`deployment` with the gateway processes and frontend replicas the graph left to sizing filled in, and on
    a cluster the cores each pod's frontend needs at the peak."""
    frontend, gateway = deployment.frontend, deployment.gateway
    if frontend.replicas_sized:
        frontend = frontend.model_copy(update={"replicas": sizing.frontend_replicas.value})
    frontend = frontend.model_copy(update={"cores_per_pod": sizing.frontend_cores_per_pod})
    if gateway is not None and gateway.processes_sized and sizing.gateway_processes is not None:
        gateway = gateway.model_copy(update={"processes": sizing.gateway_processes.value})
    return deployment.model_copy(update={"frontend": frontend, "gateway": gateway})
