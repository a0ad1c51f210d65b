"""What one gateway process is told, in one typed file: where it listens, which Dynamo frontends it
forwards to, where its keys and the graph's key are, its limits, where stored responses live,
whether its limits are shared with the gateway's other places, and where its spans go.

The deployment builds it from the graph (deployment.commands.gateway_config) and each renderer
writes it once: a file of the run folder on a host, a ConfigMap's key on Kubernetes. The gateway
reads nothing else (`python -m dynamo_oss.gateway --config FILE`), so a setting has the one name
the graph gives it, and the one default the graph's schema gives it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dynamo_oss.catalog.models import BUILTIN_MODELS
from dynamo_oss.graph.schema import (
    BatchTargetsSection,
    GatewayBatchesSection,
    GatewayLimitsSection,
    GatewayStreamingSection,
    GatewayResponsesSection,
    KeyLimitsSection,
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NatsTlsFiles(_Strict):
    """The node's PEM files, for a NATS that asks clients for a certificate."""

    ca: Path
    cert: Path
    key: Path


class NatsConnection(_Strict):
    """How the gateway reaches the graph's NATS, for whatever it keeps there: one set of settings, named
    once, whichever of the gateway's parts uses it."""

    url: str | None = Field(default=None, description="the graph's NATS")
    url_file: Path | None = Field(
        default=None, description="a file holding that URL, read once another process has written it"
    )
    prefix_env: str | None = Field(
        default=None,
        description="an environment variable whose value, and a dash, goes before the names the gateway gives "
        "in NATS (on Kubernetes the pod's namespace, which one NATS may serve beside others)",
    )
    tls: NatsTlsFiles | None = None

    @model_validator(mode="after")
    def _one_address(self) -> NatsConnection:
        if (self.url is None) == (self.url_file is None):
            raise ValueError("give the NATS server's url or the url_file that holds it")
        return self


class ResponsesStoreConfig(_Strict):
    """Where the graph's stored responses live: a JetStream key-value bucket of the graph's NATS."""

    bucket: str = Field(description="the key-value bucket, one per graph")
    settings: GatewayResponsesSection = Field(description="how long and how much it keeps")


class BatchesConfig(_Strict):
    """Where the graph's files and batches live in its NATS, and what holds batch requests back."""

    files_bucket: str = Field(description="the object store of files (input, output, error), one per graph")
    batches_bucket: str = Field(description="the key-value bucket of batches, one per graph")
    settings: GatewayBatchesSection = Field(description="limits, share of the graph, retention")
    targets: BatchTargetsSection | None = Field(
        default=None, description="the latency batch requests must not push interactive traffic past"
    )


class ClusterShareConfig(_Strict):
    """The endpoint is one of several places (pods, nodes) of the graph's gateway, which share each key's
    counts over the graph's NATS so its limits hold over the graph (cluster_share.py)."""

    channel: str = Field(description="the name the places of one graph share their counts under, one per graph")


class TracingConfig(_Strict):
    """Where the gateway exports its spans (the endpoint every process of the graph exports to), and the
    share of requests it starts a trace for (a client's sampled traceparent is always continued)."""

    endpoint: str = Field(description="OTLP over gRPC, e.g. http://127.0.0.1:4317")
    sample_ratio: float = Field(ge=0, le=1)


class GatewayConfig(_Strict):
    """Everything a gateway process needs; every process of a graph's endpoint reads the same one."""

    processes: int = Field(default=1, ge=1, le=256, description="gateway processes serving the one port")
    state_dir: Path = Field(
        description="what the processes share: the ledger of requests in flight and each key's minute, and "
        "their metrics (prometheus-client's multiprocess files); emptied when the endpoint starts"
    )
    host: str = Field(description="the address the endpoint binds")
    port: int = Field(ge=1, le=65535, description="the endpoint's port, shared by every process (SO_REUSEPORT)")
    upstreams: list[str] = Field(
        min_length=1, description="the Dynamo frontends' base URLs, e.g. http://127.0.0.1:8001"
    )
    model_folder: Path | None = Field(default=None, description="tokenizer and chat template, for context checks")
    model: Literal[tuple(BUILTIN_MODELS)] | None = Field(  # type: ignore[valid-type]
        default=None, description="a built-in model whose tokenizer and template are made offline at start"
    )
    reasoning_key_file: Path | None = Field(
        default=None,
        description="the graph's key, which seals reasoning and salts each tenant's cache; without it, a key "
        "of this process only",
    )
    make_reasoning_key: bool = Field(
        default=False,
        description="make reasoning_key_file on first start when there is none (a key of this host's cache); "
        "otherwise it must be there (a key file the graph names, a Kubernetes Secret)",
    )
    keys_file: Path | None = Field(default=None, description="API keys it requires, a `NAME KEY [TENANT]` line each")
    keys_env: str | None = Field(default=None, description="the variable holding the one API key it requires")
    cache_isolation: Literal["tenant", "shared"] = "tenant"
    limits_per_key: KeyLimitsSection | None = None
    limits: GatewayLimitsSection = Field(default_factory=GatewayLimitsSection)
    streaming: GatewayStreamingSection = Field(default_factory=GatewayStreamingSection)
    max_in_flight: int | None = Field(default=None, ge=1, description="generation requests admitted at once")
    metrics_host: str | None = Field(
        default=None, description="where /metrics (every process's series, summed) and /metrics/frontend are served"
    )
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    nats: NatsConnection | None = Field(default=None, description="the graph's NATS; None: nothing is kept there")
    responses: ResponsesStoreConfig | None = Field(default=None, description="None: the graph keeps no responses")
    batches: BatchesConfig | None = Field(default=None, description="None: no Batch API")
    cluster_share: ClusterShareConfig | None = Field(
        default=None, description="None: the graph's gateway runs in this place alone, whose counts are its limits"
    )
    tracing: TracingConfig | None = Field(default=None, description="None: no spans, nothing exported")

    @model_validator(mode="after")
    def _nats_for_what_it_keeps(self) -> GatewayConfig:
        kept = (self.responses, self.batches, self.cluster_share)
        if any(setting is not None for setting in kept) and self.nats is None:
            raise ValueError("responses, batches and the places' shared counts are kept in the graph's NATS: give nats")
        if self.batches is not None and self.max_in_flight is None:
            raise ValueError("batch requests take a share of max_in_flight: give max_in_flight")
        return self

    @classmethod
    def read(cls, path: Path) -> GatewayConfig:
        return cls.model_validate_json(path.read_bytes())

    @property
    def ledger_file(self) -> Path:
        return self.state_dir / "ledger"

    @property
    def metrics_dir(self) -> Path:
        return self.state_dir / "metrics"
