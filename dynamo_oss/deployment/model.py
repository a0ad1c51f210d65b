"""A `Deployment`: what runs, in which pools, with which engine shapes, placed on which nodes.

Building it asks each pool's engine to read its configuration once, checks what only the engines
know (a worker's GPUs against its parallelism) and places every worker (deployment.placement), so
every renderer starts from a graph that can run, placed the same way. Command lines and
environments are the renderers' business: a node's host plan (deployment.host) or a cluster's
manifests (deployment.kubernetes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from dynamo_oss.catalog.hardware import HardwareName
from dynamo_oss.catalog.models import BUILTIN_MODELS, ModelShape
from dynamo_oss.catalog.names import EngineName, PoolRole, RouterMode, component_for
from dynamo_oss.deployment.access import InfrastructureTls
from dynamo_oss.deployment.frozen import Frozen
from dynamo_oss.deployment.placement import Placement, place
from dynamo_oss.engines import EngineArgsError, EngineShape, engine_for
from dynamo_oss.graph.errors import GraphError, Problem
from dynamo_oss.graph.loader import Graph
from dynamo_oss.graph.schema import (
    DEFAULT_SYSTEM_PORT,
    BatchTargetsSection,
    EmbeddedEtcd,
    EmbeddedNats,
    EmbeddedPrometheus,
    EmbeddedTracing,
    ExternalTracing,
    FrontendAutoscaleSection,
    GatewayAuthSection,
    GatewayBatchesSection,
    GatewayLimitsSection,
    GatewayStreamingSection,
    GatewayResponsesSection,
    KeyLimitsSection,
    GraphSpec,
    NoTracing,
)


class ModelComponent(Frozen):
    served_name: str = Field(description="the name clients send")
    builtin: str | None = Field(description="gpt-oss-20b / gpt-oss-120b when dynamo-oss knows its shape")
    checkout: Path | None = Field(description="a local checkout with weights, when the graph names one")

    @property
    def shape(self) -> ModelShape | None:
        return BUILTIN_MODELS.get(self.builtin or "")


class Infrastructure(Frozen):
    """Discovery (etcd) and the event plane (NATS): started with the graph, or already running elsewhere."""

    embedded_etcd: EmbeddedEtcd | None = Field(description="where an etcd started with the graph listens")
    etcd_endpoints: list[str] = Field(default_factory=list, description="client URLs of an external etcd")
    embedded_nats: EmbeddedNats | None = Field(description="where a nats-server started with the graph listens")
    nats_url: str | None = Field(default=None, description="URL of an external NATS")
    tls: InfrastructureTls | None = Field(
        default=None, description="mutual TLS for both, its paths resolved; `{node}` in them is still to be filled"
    )


class FrontendComponent(Frozen):
    """The OpenAI endpoint, and Dynamo's OpenAI frontends and the router inside them."""

    host: str = Field(description="the address the endpoint binds")
    port: int = Field(description="the endpoint's port")
    dynamo_port: int = Field(description="the first Dynamo frontend's loopback port behind the gateway")
    router: RouterMode
    migration_limit: int
    replicas: int = Field(
        description="frontends on each node that runs them (on a cluster: frontend pods, each with its gateway)"
    )
    replicas_sized: bool = Field(description="the graph left replicas to the endpoint's sizing")
    autoscale: FrontendAutoscaleSection | None = Field(description="on a cluster, an HPA resizes the pods")
    replica_sync: bool = Field(description="several frontends share the sequences each routes")
    session_affinity_s: int | None = Field(default=None, description="idle seconds a session keeps its worker")
    cores_per_pod: int | None = Field(
        default=None,
        description="on a cluster, the cores a pod's Dynamo frontend requests: the endpoint's sizing (None: one a "
        "gateway process)",
    )


class GatewayComponent(Frozen):
    """dynamo-oss's request gateway in front of Dynamo's frontend, which then listens on loopback:
    bad requests get OpenAI errors there, and requests past capacity a 503 with Retry-After."""

    max_in_flight: int = Field(ge=1, description="generation requests admitted at once")
    keys_file: Path | None = Field(default=None, description="the file of API keys it requires, resolved")
    keys_env: str | None = Field(default=None, description="the variable holding the one API key it requires")
    key_file: Path | None = Field(default=None, description="the graph's key, resolved; None: made in the cache")
    limits: GatewayLimitsSection = Field(description="its timeouts, connection cap and body limit")
    streaming: GatewayStreamingSection = Field(description="whether a stream's tokens go out as they come")
    responses: GatewayResponsesSection = Field(description="whether and how long it stores responses")
    batches: GatewayBatchesSection = Field(description="the Batch API: its limits and share of the graph")
    batch_targets: BatchTargetsSection | None = Field(
        default=None, description="the latency batch requests must not push interactive traffic past: the planner's"
    )
    open_on_purpose: bool = Field(default=False, description="the graph says `auth: none`")
    cache_isolation: Literal["tenant", "shared"] = Field(description="whose cached prefixes a key may reuse")
    limits_per_key: KeyLimitsSection | None = Field(default=None, description="each key's share of the graph")
    processes: int = Field(description="gateway processes on each node (or pod) that runs frontends")
    processes_sized: bool = Field(description="the graph left processes to the endpoint's sizing")

    @property
    def requires_keys(self) -> bool:
        return self.keys_file is not None or self.keys_env is not None


class Observability(Frozen):
    """Where the graph's metrics go: an embedded Prometheus, or one outside that scrapes it itself;
    where the launcher and the gateway serve theirs; and where its traces go, if anywhere."""

    embedded_prometheus: EmbeddedPrometheus | None = Field(description="a Prometheus started with the graph")
    prometheus_url: str | None = Field(default=None, description="an external Prometheus")
    launcher_port: int = Field(description="the launcher's own /metrics")
    gateway_port: int = Field(description="the gateway's /metrics, summed over its processes")
    tracing: EmbeddedTracing | ExternalTracing | None = Field(
        default=None, description="where every process exports its spans, and the share of requests traced"
    )


class Autoscale(Frozen):
    min: int
    max: int


class Pool(Frozen):
    """One pool of identical workers."""

    role: PoolRole
    engine: EngineName = Field(description="the engine that runs the workers (after --engine)")
    engine_args: Path | None = Field(description="the engine configuration file, resolved")
    shape: EngineShape = Field(description="the configuration as the pool's own engine read it")
    gpus_per_worker: int
    workers: int = Field(description="workers at start: fixed, or the autoscale minimum")
    system_port: int = Field(description="worker i's /health and /metrics on system_port + i")
    autoscale: Autoscale | None = None

    @property
    def component(self) -> str:
        return component_for(self.role)


class Planner(Frozen):
    """Dynamo's planner, sizing the autoscaled pools for the targets (`sla`) or on load thresholds (`load`)."""

    mode: Literal["sla", "load"] = Field(description="what it sizes the pools on")
    ttft_ms: float = Field(description="the TTFT target the pools are measured against")
    itl_ms: float = Field(description="the ITL target")
    max_gpus: int
    interval_s: int = Field(description="seconds between its looks at the load")
    prefill_queue_tokens: tuple[int, int] = Field(description="grow above, shrink below: queued prompt tokens")
    decode_kv_percent: tuple[float, float] = Field(description="grow above, shrink below: KV cache in use, %")
    headroom_percent: float = Field(description="sla: how much more load than seen or forecast the pools are sized for")
    scale_down_after_s: int = Field(description="sla: a pool shrinks to the most it was sized for over this long")
    pools: list[PoolRole] = Field(description="the pools it sizes")
    metrics_port: int = Field(description="the planner's /metrics")

    @property
    def dynamo_mode(self) -> str:
        """Dynamo's name for what it sizes: both disaggregated pools, one of them, or the aggregated one."""
        if "agg" in self.pools:
            return "agg"
        return "disagg" if len(self.pools) == 2 else self.pools[0]


class Deployment(Frozen):
    """A graph as a set of components, ready for any renderer."""

    name: str = Field(description="the graph's name; also the Dynamo namespace")
    source: Path = Field(description="the graph file")
    model: ModelComponent
    hardware: HardwareName
    gpus: int = Field(description="GPUs the graph has, on all its nodes")
    infrastructure: Infrastructure
    frontend: FrontendComponent
    gateway: GatewayComponent | None = Field(description="the request gateway, unless the graph turns it off")
    pools: list[Pool] = Field(description="in start and placement order: prefill, decode, agg")
    planner: Planner | None = None
    observability: Observability | None = None
    placement: Placement = Field(description="which node runs what, and on which GPUs")

    @property
    def namespace(self) -> str:
        return self.name

    @property
    def engines(self) -> set[EngineName]:
        return {pool.engine for pool in self.pools}


def build_deployment(graph: Graph, *, engine_override: EngineName | None = None) -> Deployment:
    """The deployment `graph` describes; GraphError lists every problem found, field by field."""
    spec = graph.spec
    problems: list[Problem] = []
    pools = []
    for role, section in spec.pools.items():
        field = f"pools.{role}"
        engine_args = graph.engine_args_file(section)
        try:
            shape = engine_for(section.engine).read_shape(engine_args, section.gpus_per_worker)
        except EngineArgsError as err:
            problems.append(Problem(path=f"{field}.engine_args", message=str(err)))
            continue
        if shape.gpus != section.gpus_per_worker:
            problems.append(
                Problem(
                    path=f"{field}.gpus_per_worker",
                    message=f"is {section.gpus_per_worker} but {engine_args.name if engine_args else 'the engine'} "
                    f"gives each worker {shape.gpus} GPUs (tensor parallel {shape.tensor_parallel} x pipeline "
                    f"parallel {shape.pipeline_parallel})",
                )
            )
        pools.append(
            Pool(
                role=role,
                engine=engine_override or section.engine,
                engine_args=engine_args,
                shape=shape,
                gpus_per_worker=section.gpus_per_worker,
                workers=section.initial_workers,
                system_port=section.system_port or DEFAULT_SYSTEM_PORT[role],
                autoscale=Autoscale(min=section.autoscale.min, max=section.autoscale.max)
                if section.autoscale
                else None,
            )
        )
    placement, unplaced = place(spec)
    problems += unplaced
    if problems or placement is None:
        raise GraphError(str(graph.source), problems)
    model = spec.model
    planner = None
    if spec.planner is not None:
        planner = Planner(
            mode=spec.planner.mode,
            ttft_ms=spec.planner.ttft_ms,
            itl_ms=spec.planner.itl_ms,
            max_gpus=spec.planner.max_gpus or spec.hardware.total_gpus,
            interval_s=spec.planner.interval_s,
            prefill_queue_tokens=spec.planner.prefill_queue_tokens,
            decode_kv_percent=spec.planner.decode_kv_percent,
            headroom_percent=spec.planner.headroom_percent,
            scale_down_after_s=spec.planner.scale_down_after_s,
            pools=[pool.role for pool in pools if pool.autoscale],
            metrics_port=spec.planner.metrics_port,
        )
    return Deployment(
        name=spec.name,
        source=graph.source,
        model=ModelComponent(
            served_name=model.served_name,
            builtin=model.builtin,
            checkout=graph.resolve(model.path) if model.path else None,
        ),
        hardware=spec.hardware.gpu,
        gpus=spec.hardware.total_gpus,
        infrastructure=_infrastructure(graph),
        frontend=_frontend(spec),
        gateway=_gateway(graph, pools) if spec.gateway.enabled else None,
        pools=pools,
        planner=planner,
        observability=_observability(spec),
        placement=placement,
    )


def _default_admission(pools: list[Pool]) -> int:
    """Twice the sequences the decoding pools batch at once at their largest: a queue about one batch
    deep, past which waiting only adds TTFT that a client's retry elsewhere would not."""
    decoding = [pool for pool in pools if pool.role in ("decode", "agg")]
    batched = sum(
        (pool.autoscale.max if pool.autoscale else pool.workers) * pool.shape.batched_sequences for pool in decoding
    )
    return 2 * batched


def _batch_targets(spec: GraphSpec) -> BatchTargetsSection | None:
    """The targets batch requests are held to: the planner's, or, on a graph without one, the batches' own."""
    if spec.planner is not None:
        return BatchTargetsSection(ttft_ms=spec.planner.ttft_ms, itl_ms=spec.planner.itl_ms)
    return spec.gateway.batches.targets


def _gateway(graph: Graph, pools: list[Pool]) -> GatewayComponent:
    section = graph.spec.gateway
    auth = section.auth if isinstance(section.auth, GatewayAuthSection) else None
    return GatewayComponent(
        max_in_flight=section.max_in_flight or _default_admission(pools),
        keys_file=graph.resolve(auth.keys_file) if auth and auth.keys_file else None,
        keys_env=auth.keys_env if auth else None,
        key_file=graph.resolve(section.key_file) if section.key_file else None,
        limits=section.limits,
        streaming=section.streaming,
        responses=section.responses,
        batches=section.batches,
        batch_targets=_batch_targets(graph.spec),
        open_on_purpose=section.auth == "none",
        cache_isolation=section.cache_isolation,
        limits_per_key=auth.limits_per_key if auth else None,
        processes=section.processes or 1,
        processes_sized=section.processes is None,
    )


def _frontend(spec: GraphSpec) -> FrontendComponent:
    section = spec.frontend
    given = section.replicas or (section.autoscale.min if section.autoscale else None)
    return FrontendComponent(
        host=section.host,
        port=section.port,
        dynamo_port=section.dynamo_port or section.port + 1,
        router=section.router,
        migration_limit=section.migration_limit,
        replicas=given or 1,
        replicas_sized=given is None,
        autoscale=section.autoscale,
        replica_sync=section.replica_sync,
        session_affinity_s=section.session_affinity_s,
    )


def _infrastructure(graph: Graph) -> Infrastructure:
    etcd, nats, tls = graph.spec.infrastructure.etcd, graph.spec.infrastructure.nats, graph.spec.infrastructure.tls
    return Infrastructure(
        embedded_etcd=etcd if isinstance(etcd, EmbeddedEtcd) else None,
        etcd_endpoints=[] if isinstance(etcd, EmbeddedEtcd) else etcd.endpoints,
        embedded_nats=nats if isinstance(nats, EmbeddedNats) else None,
        nats_url=None if isinstance(nats, EmbeddedNats) else nats.url,
        tls=None
        if tls is None or tls == "none"
        else InfrastructureTls(ca=graph.resolve(tls.ca), cert=graph.resolve(tls.cert), key=graph.resolve(tls.key)),
    )


def _observability(spec: GraphSpec) -> Observability | None:
    section = spec.observability
    if section is None:
        return None
    prometheus = section.prometheus
    embedded = isinstance(prometheus, EmbeddedPrometheus)
    return Observability(
        embedded_prometheus=prometheus if embedded else None,
        prometheus_url=None if embedded else prometheus.url,
        launcher_port=section.launcher_port,
        gateway_port=section.gateway_port,
        tracing=None if isinstance(section.tracing, NoTracing) else section.tracing,
    )
