"""Each component's command line, written once for every renderer.

A node's host plan (deployment.host) and a cluster's manifests (deployment.kubernetes) run the same
programs with the same settings; what differs is given as arguments: where a process listens, where
files are (the run folder or a mounted ConfigMap), the Python that runs it (this environment's or
the image's `python3`) and the Dynamo namespace (the graph's, or the operator's $(DYN_NAMESPACE)).
The gateway reads one typed file (gateway.config.GatewayConfig), which each renderer writes once;
Dynamo's frontend takes flags, which its FrontendConfig renders.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from dynamo_oss.catalog.names import RouterMode
from dynamo_oss.deployment.frozen import Frozen
from dynamo_oss.deployment.model import Deployment, Pool
from dynamo_oss.engines import SimulatedTiming, WorkerContext
from dynamo_oss.gateway.config import (
    BatchesConfig,
    ClusterShareConfig,
    GatewayConfig,
    NatsConnection,
    ResponsesStoreConfig,
    TracingConfig,
)


# Dynamo 1.6's gpt-oss parsers warn on healthy streams: the reasoning parser for every chunk of the
# final channel that carries no text (the end token), the harmony tool parser for answers it finds no
# call in. Measured on the conformance suite's traffic: 14 WARN lines for 20 requests, none of them
# a fault. Those two parsers log errors only; every other module of the frontend keeps Dynamo's level.
FRONTEND_LOG = (
    "info,dynamo_parsers::reasoning::gpt_oss_parser=error,dynamo_parsers::tool_calling::harmony::harmony_parser=error"
)


# Dynamo's frontend's environment: its log levels, and its admin route (`/busy_threshold`, which marks
# every worker busy for every client) turned off, since nothing of this project sets thresholds.
FRONTEND_ENV = {"DYN_LOG": FRONTEND_LOG, "DYN_DISABLE_FRONTEND_ADMIN_API": "1"}


class FrontendConfig(Frozen):
    """One Dynamo frontend, as the deployment and a renderer place it: the graph's router and migration
    settings, where it listens and the namespace whose workers it counts."""

    router: RouterMode
    migration_limit: int
    listen: tuple[str, int] | None = Field(default=None, description="None: Dynamo's default")
    namespace: str | None = Field(default=None, description="None: DYN_NAMESPACE's, which the operator sets")
    replica_sync: bool = Field(
        default=False, description="one of several frontends: share active sequences and KV events with the others"
    )
    session_affinity_s: int | None = Field(default=None, description="idle seconds a session keeps its worker")

    def args(self) -> list[str]:
        """Its arguments after the interpreter."""
        where = ["--http-host", self.listen[0], "--http-port", str(self.listen[1])] if self.listen else []
        args = ["-m", "dynamo.frontend", *where, "--router-mode", self.router]
        args += ["--router-replica-sync"] if self.replica_sync and self.router == "kv" else []
        args += ["--migration-limit", str(self.migration_limit)]
        if self.session_affinity_s is not None and self.router == "kv":
            args += ["--router-session-affinity-ttl-secs", str(self.session_affinity_s)]
        return args + (["--namespace", self.namespace] if self.namespace else [])


def frontend_config(deployment: Deployment, listen: tuple[str, int] | None, namespace: str | None) -> FrontendConfig:
    frontend = deployment.frontend
    return FrontendConfig(
        router=frontend.router,
        migration_limit=frontend.migration_limit,
        listen=listen,
        namespace=namespace,
        replica_sync=frontend.replica_sync and (frontend.replicas > 1 or frontend.autoscale is not None),
        session_affinity_s=frontend.session_affinity_s,
    )


def gateway_config(
    deployment: Deployment,
    listen: tuple[str, int],
    upstreams: list[str],
    *,
    state_dir: Path,
    key_file: Path,
    make_key: bool,
    api_keys_file: Path | None,
    model_folder: Path | None = None,
    model: str | None = None,
    metrics: tuple[str, int] | None = None,
    nats: NatsConnection | None = None,
    several_places: bool = False,
    tracing: TracingConfig | None = None,
) -> GatewayConfig:
    """What the gateway on `listen` is told, in front of the Dynamo frontends at `upstreams`: its tokenizer
    from `model_folder` (or made from the built-in `model`), what its processes share in `state_dir`, the
    graph's key in `key_file` (made there on first start where `make_key` says so), the clients' keys in `api_keys_file` (where the graph's keys file is, here),
    its /metrics on `metrics`, and how it reaches the graph's NATS (`nats`; without it, it keeps nothing
    there), where it stores responses when the graph keeps them and, when the graph's gateway runs in
    `several_places` (pods, nodes), shares its limits' counts with the others. A gateway in one place
    counts alone, with no NATS traffic for it. With `tracing`, it records its spans and exports them there."""
    gateway = deployment.gateway
    assert gateway is not None
    responses = stored_responses(deployment) if nats is not None else None
    batches = batch_api(deployment) if nats is not None else None
    share = ClusterShareConfig(channel=limits_channel(deployment.name)) if nats is not None and several_places else None
    return GatewayConfig(
        processes=gateway.processes,
        state_dir=state_dir,
        host=listen[0],
        port=listen[1],
        upstreams=upstreams,
        model_folder=model_folder,
        model=model,
        reasoning_key_file=key_file,
        make_reasoning_key=make_key,
        keys_file=api_keys_file,
        keys_env=gateway.keys_env,
        cache_isolation=gateway.cache_isolation,
        limits_per_key=gateway.limits_per_key,
        limits=gateway.limits,
        streaming=gateway.streaming,
        max_in_flight=gateway.max_in_flight,
        metrics_host=metrics[0] if metrics else None,
        metrics_port=metrics[1] if metrics else None,
        nats=nats if responses is not None or batches is not None or share is not None else None,
        responses=responses,
        batches=batches,
        cluster_share=share,
        tracing=tracing,
    )


def stored_responses(deployment: Deployment) -> ResponsesStoreConfig | None:
    """Where the gateway keeps responses in the graph's NATS, or None when the graph keeps none."""
    gateway = deployment.gateway
    assert gateway is not None
    if not gateway.responses.store:
        return None
    return ResponsesStoreConfig(bucket=responses_bucket(deployment.name), settings=gateway.responses)


def batch_api(deployment: Deployment) -> BatchesConfig | None:
    """Where the gateway keeps files and batches in the graph's NATS, or None when the graph serves no Batch API."""
    gateway = deployment.gateway
    assert gateway is not None
    if not gateway.batches.enabled:
        return None
    return BatchesConfig(
        files_bucket=f"files-{deployment.name}",
        batches_bucket=f"batches-{deployment.name}",
        settings=gateway.batches,
        targets=gateway.batch_targets,
    )


def gateway_args(config_file: Path) -> list[str]:
    """The gateway's arguments after the interpreter: everything else is in its configuration file."""
    return ["-m", "dynamo_oss.gateway", "--config", str(config_file)]


def responses_bucket(graph: str) -> str:
    """The NATS key-value bucket a graph's responses are stored in: its own, beside other graphs'."""
    return f"responses-{graph}"


def limits_channel(graph: str) -> str:
    """The name a graph's gateway places share their limits' counts under in NATS: its own."""
    return f"limits-{graph}"


def worker_context(
    deployment: Deployment,
    pool: Pool,
    *,
    model_path: str,
    model_folder: Path,
    engine_args_file: Path | None,
    namespace: str,
    response_trace: Path | None = None,
    timing: SimulatedTiming | None = None,
    network_interface: str | None = None,
) -> WorkerContext:
    """What the pool's engine needs for a worker's command line and environment."""
    model = deployment.model
    return WorkerContext(
        role=pool.role,
        served_name=model.served_name,
        model_path=model_path,
        model_folder=model_folder,
        max_context=model.shape.max_context if model.shape else None,
        engine_args_file=engine_args_file,
        shape=pool.shape,
        endpoint=f"dyn://{namespace}.{pool.component}.generate",
        response_trace=response_trace,
        timing=timing,
        network_interface=network_interface,
    )
