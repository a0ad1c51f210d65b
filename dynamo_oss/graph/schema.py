"""What a graph file may say: the pydantic schema of one gpt-oss deployment.

Every field carries its description and bounds so the schema documents itself,
and unknown keys are refused so a typo never passes silently. Paths inside the
file are relative to the file; `dynamo_oss.graph.loader` resolves them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dynamo_oss.catalog.addresses import WILDCARDS, is_loopback
from dynamo_oss.catalog.hardware import HardwareName
from dynamo_oss.catalog.models import BUILTIN_MODELS
from dynamo_oss.catalog.names import MAX_SYSTEM_PORT, EngineName, PoolRole, RouterMode

Port = Annotated[int, Field(ge=1, le=65535)]
FilePath = Annotated[Path, Field(strict=False)]  # YAML gives strings; paths are the one coercion allowed


def _mode_shorthand(value: object) -> object:
    """`etcd: embedded` is short for `etcd: {mode: embedded}`; likewise nats, prometheus and tracing."""
    return {"mode": value} if isinstance(value, str) else value


class Strict(BaseModel):
    """Base of every section: unknown keys are errors, values are not coerced across types."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ModelSection(Strict):
    name: str = Field(
        description="Served model name clients send, or a built-in gpt-oss model "
        f"({', '.join(BUILTIN_MODELS)}) whose tokenizer, config and template dynamo-oss makes offline.",
    )
    path: FilePath | None = Field(
        default=None,
        description="Local checkout with the weights (needed by trtllm workers). "
        "Left out for a built-in model: the offline model folder is used and trtllm loads from the hub name.",
    )

    @model_validator(mode="after")
    def _known_or_local(self) -> ModelSection:
        if self.path is None and self.name not in BUILTIN_MODELS:
            raise ValueError(
                f'Got name "{self.name}" with no path. It must be a built-in model '
                f"({', '.join(BUILTIN_MODELS)}) or come with a path to a local checkout."
            )
        return self

    @property
    def builtin(self) -> str | None:
        return self.name if self.name in BUILTIN_MODELS else None

    @property
    def served_name(self) -> str:
        shape = BUILTIN_MODELS.get(self.name)
        return shape.served_name if shape else self.name


NodeName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")]


class NodeSection(Strict):
    """One host of a bare-metal graph."""

    name: NodeName = Field(description="The node's name: `dynamo serve GRAPH --node NAME` starts its share there.")
    address: str = Field(
        min_length=1, description="IP address or host name its processes listen on and the other nodes reach it at."
    )
    gpus: int = Field(
        ge=0, le=72, description="GPUs on the node available to the graph (0: infrastructure and frontend only)."
    )


class HardwareSection(Strict):
    """Where the graph runs: one host (`gpus`), or several nodes (`nodes`)."""

    gpu: HardwareName = Field(description="GPU model of the nodes; sizes engine configs and the performance model.")
    gpus: int | None = Field(default=None, ge=1, le=72, description="One host: GPUs on it available to the graph.")
    nodes: int | list[NodeSection] | None = Field(
        default=None,
        description="Several nodes: a count with gpus_per_node (a cluster, where `dynamo deploy` renders it and "
        "Kubernetes picks the hosts; the nodes are named node-0, node-1, ...), or a list of named hosts with "
        "addresses (bare metal, where `dynamo serve GRAPH --node NAME` runs on each).",
    )
    gpus_per_node: int | None = Field(default=None, ge=1, le=72, description="With `nodes: N`: GPUs on each node.")

    @field_validator("nodes", mode="before")
    @classmethod
    def _node_count(cls, value: object) -> object:
        if isinstance(value, int) and not isinstance(value, bool) and not 1 <= value <= 1024:
            raise ValueError(f"Got nodes {value}. A count of nodes is 1 to 1024.")
        return value

    @model_validator(mode="after")
    def _one_way(self) -> HardwareSection:
        if (self.gpus is None) == (self.nodes is None):
            raise ValueError(
                "Give `gpus: N` (one host) or `nodes` (a count with gpus_per_node, or a list of hosts), "
                f"not {'both' if self.gpus else 'neither'}."
            )
        if isinstance(self.nodes, int) and self.gpus_per_node is None:
            raise ValueError(f"Got nodes {self.nodes} without gpus_per_node. Say how many GPUs each node has.")
        if not isinstance(self.nodes, int) and self.gpus_per_node is not None:
            raise ValueError("gpus_per_node goes with `nodes: N`; a list of nodes gives each node's `gpus`.")
        if isinstance(self.nodes, list):
            for what in ("name", "address"):
                values = [getattr(node, what) for node in self.nodes]
                twice = sorted({value for value in values if values.count(value) > 1})
                if twice:
                    raise ValueError(f"Two nodes have the {what} {', '.join(twice)}. Each node needs its own.")
        return self

    @property
    def node_gpus(self) -> dict[str, int]:
        """Each node's GPUs by name, in the graph's order; one host is one node, `local`."""
        if isinstance(self.nodes, list):
            return {node.name: node.gpus for node in self.nodes}
        if isinstance(self.nodes, int):
            return {f"node-{index}": self.gpus_per_node or 0 for index in range(self.nodes)}
        return {"local": self.gpus or 0}

    @property
    def total_gpus(self) -> int:
        return sum(self.node_gpus.values())

    @property
    def multinode(self) -> bool:
        return self.nodes is not None


class EmbeddedEtcd(Strict):
    mode: Literal["embedded"] = "embedded"
    client_port: Port = Field(default=2379, description="Port etcd serves clients on (loopback).")
    peer_port: Port = Field(default=2380, description="Port etcd uses for peers (loopback).")


class ExternalEtcd(Strict):
    mode: Literal["external"] = "external"
    endpoints: list[str] = Field(min_length=1, description="etcd client URLs, e.g. http://etcd:2379.")


class EmbeddedNats(Strict):
    mode: Literal["embedded"] = "embedded"
    port: Port = Field(default=4222, description="Port nats-server listens on (loopback).")
    monitoring_port: Port = Field(
        default=8222,
        description="Port of nats-server's monitoring endpoint (loopback); the launcher turns it into metrics.",
    )


class ExternalNats(Strict):
    mode: Literal["external"] = "external"
    url: str = Field(description="NATS server URL, e.g. nats://nats:4222.")


class InfrastructureTlsFiles(Strict):
    """Mutual TLS for etcd and NATS: files, never the secrets themselves. Each path may contain `{node}`,
    replaced by the node's name, so one graph names every node's own certificate and key."""

    ca: FilePath = Field(
        description="PEM certificate of the authority that signed every node's certificate: etcd "
        "and NATS accept only clients it signed, and clients only servers it signed."
    )
    cert: FilePath = Field(
        description="PEM certificate of the node: served by embedded etcd and NATS on the "
        "infrastructure node (its subjectAltName must hold that node's address) and presented by "
        "every client."
    )
    key: FilePath = Field(description="PEM private key of `cert`.")


class InfrastructureSection(Strict):
    etcd: Annotated[EmbeddedEtcd | ExternalEtcd, Field(discriminator="mode")] = Field(
        default_factory=EmbeddedEtcd,
        description="Discovery store: `embedded` starts etcd with the graph; `external` uses running endpoints.",
    )
    nats: Annotated[EmbeddedNats | ExternalNats, Field(discriminator="mode")] = Field(
        default_factory=EmbeddedNats,
        description="Event plane (KV events, metrics): `embedded` starts nats-server with JetStream.",
    )

    node: NodeName | None = Field(
        default=None,
        description="With several nodes: the one that runs embedded etcd, NATS and Prometheus, the "
        "frontend and the planner (default: the first).",
    )

    tls: InfrastructureTlsFiles | Literal["none"] | None = Field(
        default=None,
        description="Mutual TLS for etcd and NATS (embedded ones serve it; every client presents its node's "
        "certificate). Required when embedded ones listen where other nodes reach them, unless this says `none`.",
    )

    @model_validator(mode="after")
    def _tls_urls(self) -> InfrastructureSection:
        if not isinstance(self.tls, InfrastructureTlsFiles):
            return self
        if isinstance(self.etcd, ExternalEtcd) and not all(url.startswith("https://") for url in self.etcd.endpoints):
            raise ValueError("With tls, etcd is reached over TLS: give infrastructure.etcd.endpoints as https:// URLs.")
        if isinstance(self.nats, ExternalNats) and not self.nats.url.startswith("tls://"):
            raise ValueError("With tls, NATS is reached over TLS: give infrastructure.nats.url as a tls:// URL.")
        return self

    _shorthand = field_validator("etcd", "nats", mode="before")(classmethod(lambda cls, value: _mode_shorthand(value)))


class FrontendAutoscaleSection(Strict):
    """Kubernetes only: a HorizontalPodAutoscaler resizes the frontend pods (each a gateway and a Dynamo
    frontend) on their CPU, through the operator's scaling adapter. `dynamo serve` starts `min` of them."""

    min: int = Field(ge=1, le=1024, description="Fewest frontend pods.")
    max: int = Field(ge=1, le=1024, description="Most frontend pods.")
    target_cpu_percent: int = Field(
        default=70, ge=10, le=100, description="The pods' average CPU use, % of their request, the HPA holds."
    )

    @model_validator(mode="after")
    def _ordered(self) -> FrontendAutoscaleSection:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is above max ({self.max}): lower min or raise max")
        return self


class FrontendSection(Strict):
    host: str = Field(
        default="127.0.0.1",
        description="Address the OpenAI endpoint binds to. On a graph of several nodes, a node's address "
        "(hardware.nodes) stands for each frontend node's own: no node can bind another's.",
    )
    port: Port = Field(default=8000, description="Port of the OpenAI endpoint.")
    router: RouterMode = Field(default="kv", description="How the frontend picks workers; kv is KV-cache aware.")
    migration_limit: int = Field(
        default=3, ge=0, le=100, description="Times a stream may move to another worker when its worker dies."
    )
    dynamo_port: Port | None = Field(
        default=None,
        description="Loopback port of Dynamo's own frontend behind the gateway (default: port + 1); "
        "with several frontends, the first's, the others' following it.",
    )
    replicas: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="Dynamo frontends, of one namespace with --router-replica-sync so they share what the "
        "router knows; on Kubernetes, frontend pods, each with its gateway (default: what the pools' peak "
        "output needs, from the measured CPU per token; `dynamo check` prints it and why).",
    )
    autoscale: FrontendAutoscaleSection | None = Field(
        default=None, description="Kubernetes: resize the frontend pods on CPU instead of a fixed `replicas`."
    )
    replica_sync: bool = Field(
        default=True,
        description="With several frontends and router kv: each shares the sequences it routes with the others "
        "(Dynamo's --router-replica-sync), so each weighs the workers' load as all of them see it. Off only to "
        "measure what it gives (benchmarks/multiturn).",
    )
    nodes: list[NodeName] | None = Field(
        default=None,
        description="On a graph of several nodes, the nodes that run frontends (and gateways) on "
        "host:port, each its own way in (default: infrastructure.node).",
    )
    session_affinity_s: int | None = Field(
        default=None,
        ge=1,
        le=86_400,
        description="With router kv: keep a conversation on the worker its last turn ran on while it is idle "
        "for at most this long (Dynamo's --router-session-affinity-ttl-secs). The gateway names a Responses "
        "conversation's session (header x-dynamo-session-id) from its previous_response_id or prompt_cache_key. "
        "Default: off, each turn routed on its KV overlap alone.",
    )

    @model_validator(mode="after")
    def _replicas_or_autoscale(self) -> FrontendSection:
        if self.replicas is not None and self.autoscale is not None:
            raise ValueError("Give replicas or autoscale, not both: autoscale's min is where it starts.")
        if self.session_affinity_s is not None and self.router != "kv":
            raise ValueError(
                f"session_affinity_s needs router kv (got router {self.router}): Dynamo's KV router keeps the sessions."
            )
        return self


class KeyLimitsSection(Strict):
    """One API key's share of the graph, as OpenAI limits an organisation's: past any limit a request gets
    a 429 with Retry-After and OpenAI's `x-ratelimit-*` headers, before any worker sees it. A limit left
    out is no limit."""

    concurrent_requests: int | None = Field(
        default=None, ge=1, le=1_000_000, description="Generation requests the key may have in flight at once."
    )
    requests_per_minute: int | None = Field(
        default=None,
        ge=1,
        le=10_000_000,
        description="Generation requests the key may start a minute (a bucket refilled evenly, as OpenAI's).",
    )
    tokens_per_minute: int | None = Field(
        default=None,
        ge=1,
        le=10**12,
        description="Prompt and generated "
        "tokens the key may use a minute: each answer's usage is charged as it "
        "ends, and a key that has used its minute waits for the bucket to refill.",
    )


class GatewayAuthSection(Strict):
    """API keys the gateway requires as `Authorization: Bearer KEY` (or `x-api-key: KEY`): where they
    are, never the keys."""

    keys_file: FilePath | None = Field(
        default=None,
        description="File of keys, a `NAME KEY` or `NAME KEY TENANT` line each (# starts a comment): NAME "
        "labels the key's usage in metrics and logs, never the key; TENANT (default: NAME) is whose cached "
        "prefixes the key shares (cache_isolation).",
    )
    keys_env: str | None = Field(
        default=None,
        pattern=r"^[A-Z_][A-Z0-9_]*$",
        description="Environment variable holding one key (the "
        "gateway's environment; on Kubernetes, a Secret's key of that name); its usage is labelled with the name.",
    )

    limits_per_key: KeyLimitsSection | None = Field(
        default=None,
        description="Each key's share of the graph, unless its line in keys_file says otherwise "
        "(`NAME KEY [TENANT] concurrent_requests=N requests_per_minute=N tokens_per_minute=N`); none by default.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> GatewayAuthSection:
        if (self.keys_file is None) == (self.keys_env is None):
            raise ValueError("Give keys_file or keys_env: one source of API keys.")
        return self


class GatewayLimitsSection(Strict):
    """How much a client may take of the gateway (nginx's defaults for the timeouts). A request's target
    is at most 8 KiB (else 414) and its head 64 KiB (else 431), counted as they arrive."""

    header_timeout_s: float = Field(
        default=60,
        gt=0,
        le=3600,
        description="Seconds a client has to send a "
        "request's headers (nginx's client_header_timeout); then 408 and closed.",
    )
    body_timeout_s: float = Field(
        default=60,
        gt=0,
        le=3600,
        description="Seconds allowed between two reads of a "
        "request's body (nginx's client_body_timeout); then 408 and closed.",
    )
    keep_alive_timeout_s: float = Field(
        default=75,
        gt=0,
        le=3600,
        description="Seconds an idle keep-alive connection stays open (nginx's keepalive_timeout).",
    )
    write_timeout_s: float = Field(
        default=60,
        gt=0,
        le=3600,
        description="Seconds a client may take none of its "
        "answer (nginx's send_timeout); then its connection is dropped, which stops its "
        "generation and frees its place.",
    )
    max_connections: int = Field(
        default=4096,
        ge=1,
        le=1_000_000,
        description="Client connections open at once; past it a new one is closed as it opens, and the log says so.",
    )
    max_body_mib: int = Field(
        default=64,
        ge=1,
        le=1024,
        description="Largest request body, MiB; a larger declared Content-Length gets a 413 before the body is read.",
    )
    max_buffered_mib: int = Field(
        default=1024,
        ge=1,
        le=1024 * 1024,
        description="Request bodies the gateway "
        "holds at once, MiB, over all connections; past it a request gets a 503 with "
        "Retry-After before its body is read.",
    )


class GatewayResponsesSection(Strict):
    """Stored responses of the Responses API (`store`, `previous_response_id`, GET and DELETE
    /v1/responses/{id}): kept in a JetStream key-value bucket of the graph's NATS, which every
    gateway of the graph shares, so a conversation continues on any of them and across restarts."""

    store: bool = Field(
        default=True,
        description="Keep each response unless its request says `store: false` (OpenAI's default). Off: "
        "nothing is kept, and `previous_response_id` gets a 400 saying to send the whole conversation.",
    )
    retention_s: int = Field(
        default=30 * 24 * 3600,
        ge=1,
        le=365 * 24 * 3600,
        description="Seconds a stored response is kept (OpenAI keeps them 30 days, the default); past "
        "it, GET and previous_response_id get a 404 naming it, and NATS drops it.",
    )
    max_mib: int = Field(
        default=1024,
        ge=1,
        le=1024 * 1024,
        description="Most MiB the stored responses take in NATS (JetStream's own store, which Dynamo's "
        "KV router shares); past it the oldest are dropped first. Background responses' events (kept for "
        "`stream=true` resumption) take at most as much again.",
    )
    max_background_per_key: int = Field(
        default=16,
        ge=1,
        le=100_000,
        description="Background responses (`background: true`) one API key may have queued or running at once, "
        "over every gateway of the graph; past it, creating another gets a 429. Each also holds one of the "
        "key's concurrent_requests and of gateway.max_in_flight until it ends, as a client's request does.",
    )


class BatchTargetsSection(Strict):
    """The latency a graph without a planner holds its interactive traffic to, which batch work must not push
    past (a graph with a planner holds it to the planner's targets)."""

    ttft_ms: float = Field(gt=0, description="Time-to-first-token target, ms (p90 of interactive requests).")
    itl_ms: float = Field(gt=0, description="Inter-token latency target, ms (p90 of every stream).")


class GatewayBatchesSection(Strict):
    """OpenAI's Batch API (`/v1/files`, `/v1/batches`): JSONL files of requests kept in the graph's NATS object
    store, run by the gateway in the capacity interactive traffic leaves, their answers written to output and
    error files. Every file and batch belongs to the API key that made it."""

    enabled: bool = Field(default=True, description="Serve /v1/files and /v1/batches (they need the graph's NATS).")
    max_file_mib: int = Field(
        default=64,
        ge=1,
        le=1024,
        description="Largest batch input file, MiB (OpenAI allows 200 MB); an upload is also bounded by "
        "gateway.limits.max_body_mib, the smaller of the two applying. Past it, a 400 at upload.",
    )
    max_lines: int = Field(
        default=50_000,
        ge=1,
        le=1_000_000,
        description="Most requests in one batch file (OpenAI's limit); past it, a 400 at upload.",
    )
    max_mib: int = Field(
        default=8192,
        ge=1,
        le=1024 * 1024,
        description="Most MiB the files (input, output and error) take in NATS together; a full store refuses "
        "new uploads with a 400 saying to delete files, and never drops one a batch still needs. The answers of "
        "batches under way, kept until their files are written, take at most as much again.",
    )
    max_mib_per_key: int = Field(
        default=2048,
        ge=1,
        le=1024 * 1024,
        description="Most MiB of files one API key may keep, so no key fills the store for the others.",
    )
    max_batches_per_key: int = Field(
        default=8,
        ge=1,
        le=10_000,
        description="Batches one API key may have not yet ended (validating, in progress, finalizing, "
        "cancelling); past it, creating another gets a 429.",
    )
    max_share: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="Most of gateway.max_in_flight that batch requests may hold at once, over the graph: the "
        "rest stays for interactive requests, which batch work never turns away.",
    )
    retention_s: int = Field(
        default=30 * 24 * 3600,
        ge=3600,
        le=365 * 24 * 3600,
        description="Seconds files and batches are kept (an output file counts from its batch's end); past "
        "it NATS drops them.",
    )
    targets: BatchTargetsSection | None = Field(
        default=None,
        description="A graph without a planner: the TTFT and ITL its interactive traffic is held to, past which "
        "batch requests are held back. A graph with a planner uses the planner's targets, and this is "
        "refused. Without either, batch requests are bounded by max_share alone.",
    )


class GatewayStreamingSection(Strict):
    """How a stream's tokens go out: each as it comes (the default), or gathered for a moment so that
    one read and one write carry several, which costs the gateway less CPU per token when a stream's
    tokens come faster than it reads them one by one."""

    coalesce_ms: float = Field(
        default=0,
        ge=0,
        le=200,
        description="A stream whose reads come less than this many milliseconds apart is read again only "
        "this long after a read that gave its client something, and everything that came meanwhile goes out "
        "at once: fewer reads and writes a token, for up to this much delay a token. A slower stream is read as "
        "it comes. 0: every read as it comes. Like vLLM's and SGLang's --stream-interval (off by default there "
        "too), counted in time rather than tokens, since the gateway's cost is a read, whatever it carries.",
    )


class GatewaySection(Strict):
    """dynamo-oss's request gateway, which clients meet at frontend.host:port."""

    enabled: bool = Field(
        default=True,
        description="Put the gateway on frontend.port: it refuses bad requests with OpenAI-style 4xx errors "
        "(unknown model, malformed messages, invalid tool schemas, prompts past the context) before they reach a "
        "worker. Off: Dynamo's frontend listens on frontend.port itself.",
    )
    max_in_flight: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="Generation requests the gateway admits at once; past it, a 503 with Retry-After tells "
        "clients to come back rather than wait in an unbounded queue (default: twice the sequences the "
        "decoding pools batch at once, at their largest).",
    )

    auth: GatewayAuthSection | Literal["none"] | None = Field(
        default=None,
        description="API keys clients must show. Without them the endpoint may bind only a loopback address, "
        "unless this says `none`.",
    )
    limits: GatewayLimitsSection = Field(default_factory=GatewayLimitsSection)
    streaming: GatewayStreamingSection = Field(default_factory=GatewayStreamingSection)
    cache_isolation: Literal["tenant", "shared"] = Field(
        default="tenant",
        description="With API keys: `tenant` gives each key's tenant its own cache salt, so tenants never "
        "reuse each other's cached prefixes (a shared prefix is prefilled once per tenant, not once); "
        "`shared` lets every key reuse every cached prefix. Without keys, all requests share the cache.",
    )
    responses: GatewayResponsesSection = Field(default_factory=GatewayResponsesSection)
    batches: GatewayBatchesSection = Field(default_factory=GatewayBatchesSection)
    key_file: FilePath | None = Field(
        default=None,
        description="The graph's key (32 random bytes, or their base64; owner-only), which seals reasoning and "
        "salts each tenant's cache: every node that runs a frontend must read the same one, so a graph whose "
        "frontend.nodes names several gives this file, copied to each (`head -c 32 /dev/urandom > graph.key; "
        "chmod 600 graph.key`). Default: made on first start in this host's cache and kept across runs. On "
        "Kubernetes a Secret holds it.",
    )
    processes: int | None = Field(
        default=None,
        ge=1,
        le=256,
        description="Gateway processes on each node that runs frontends, each its own event loop (one core) "
        "on the one port (SO_REUSEPORT spreads connections); limits stay graph-wide. Default: what the "
        "pools' peak output needs from the measured CPU per token, at most the host's cores.",
    )

    @model_validator(mode="after")
    def _limits_need_the_gateway(self) -> GatewaySection:
        if not self.enabled and (
            self.max_in_flight is not None or isinstance(self.auth, GatewayAuthSection) or self.processes is not None
        ):
            raise ValueError(
                "Got max_in_flight, auth or processes with enabled false. The gateway does those: turn it on."
            )
        return self


class AutoscaleSection(Strict):
    min: int = Field(ge=1, le=64, description="Fewest workers the planner keeps; the pool starts with this many.")
    max: int = Field(ge=1, le=64, description="Most workers the planner may run.")

    @model_validator(mode="after")
    def _ordered(self) -> AutoscaleSection:
        if self.max < self.min:
            raise ValueError(f"Got min {self.min} and max {self.max}. max must be at least min.")
        return self


# A pool's first worker system port when the graph gives none.
DEFAULT_SYSTEM_PORT: dict[str, int] = {"prefill": 8100, "decode": 8200, "agg": 8100}


class PoolSection(Strict):
    workers: int | None = Field(
        default=None, ge=1, le=64, description="Fixed number of worker processes. Give this or `autoscale`."
    )
    autoscale: AutoscaleSection | None = Field(
        default=None,
        description="Let the planner size the pool between min and max workers against the `planner` targets. "
        "Give this or `workers`.",
    )
    gpus_per_worker: int = Field(
        default=1,
        ge=1,
        le=72,
        description="GPUs each worker owns (its TP x PP group); "
        "wider than a node, it spans whole nodes of one NVLink domain.",
    )
    engine: EngineName = Field(
        default="trtllm",
        description="trtllm (TensorRT-LLM on GPUs), gptoss (the project's own gpt-oss engine, on GPUs) "
        "or mocker (Dynamo's simulated engine).",
    )
    engine_args: FilePath | None = Field(
        default=None,
        description="Engine configuration YAML (TensorRT-LLM extra engine args for trtllm, the gptoss engine's "
        "own arguments for gptoss), relative to the graph file.",
    )
    nodes: list[NodeName] | None = Field(
        default=None, min_length=1, description="With several nodes: the ones its workers may run on (default: any)."
    )
    system_port: Annotated[int, Field(ge=1, le=MAX_SYSTEM_PORT)] | None = Field(
        default=None,
        description="First port of the workers' own /health and /metrics; worker i uses system_port + i. "
        f"Default: {DEFAULT_SYSTEM_PORT['prefill']} for prefill and agg, {DEFAULT_SYSTEM_PORT['decode']} for decode. "
        "At most {MAX_SYSTEM_PORT} (Dynamo reads it as a "
        "16-bit signed integer).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> PoolSection:
        if (self.workers is None) == (self.autoscale is None):
            given = "both" if self.workers is not None else "neither"
            raise ValueError(
                f"Got {given} of workers and autoscale. A pool must have either `workers: N` "
                "or `autoscale: {min: N, max: M}`."
            )
        if self.engine == "trtllm" and self.engine_args is None:
            raise ValueError("engine trtllm needs engine_args: a TensorRT-LLM engine configuration YAML")
        if self.system_port is not None and self.system_port + self.most_workers - 1 > MAX_SYSTEM_PORT:
            raise ValueError(
                f"system ports {self.system_port}..{self.system_port + self.most_workers - 1} go past "
                f"{MAX_SYSTEM_PORT}, the highest port Dynamo accepts for a worker (DYN_SYSTEM_PORT is a "
                "16-bit signed integer)"
            )
        return self

    @property
    def initial_workers(self) -> int:
        """Workers the pool starts with: fixed, or the autoscale minimum."""
        return self.workers if self.workers is not None else self.autoscale.min  # type: ignore[union-attr]

    @property
    def most_workers(self) -> int:
        return self.workers if self.workers is not None else self.autoscale.max  # type: ignore[union-attr]


class PoolsSection(Strict):
    prefill: PoolSection | None = Field(
        default=None, description="Prefill workers: compute the prompt's KV cache and hand it to a decode worker."
    )
    decode: PoolSection | None = Field(
        default=None, description="Decode workers: receive the KV cache and generate the tokens."
    )
    agg: PoolSection | None = Field(default=None, description="Aggregated workers: prefill and decode in one engine.")

    @model_validator(mode="after")
    def _one_shape(self) -> PoolsSection:
        disagg = self.prefill is not None or self.decode is not None
        if disagg and self.agg is not None:
            raise ValueError("Got agg beside prefill/decode. A graph is either aggregated (agg) or disaggregated.")
        if disagg and (self.prefill is None or self.decode is None):
            raise ValueError("A disaggregated graph needs both a prefill and a decode pool.")
        if not disagg and self.agg is None:
            raise ValueError("No pools. Give prefill and decode, or agg.")
        return self

    def items(self) -> list[tuple[PoolRole, PoolSection]]:
        """Pools in start and placement order: prefill, decode, agg."""
        pools = (("prefill", self.prefill), ("decode", self.decode), ("agg", self.agg))
        return [(role, pool) for role, pool in pools if pool is not None]


class EmbeddedPrometheus(Strict):
    mode: Literal["embedded"] = "embedded"
    port: Port = Field(default=9090, description="Port Prometheus serves its UI and API on (loopback).")
    scrape_interval_s: float = Field(default=5.0, gt=0, le=300, description="Seconds between scrapes.")


class ExternalPrometheus(Strict):
    mode: Literal["external"] = "external"
    url: str = Field(description="Prometheus that scrapes this graph, e.g. http://prometheus:9090.")


SampleRatio = Annotated[
    float,
    Field(
        ge=0,
        le=1,
        description="Share of requests traced, decided once per request by the gateway (or by a client's "
        "sampled traceparent) and followed by every process of the graph: 1 traces every request, 0.01 one in a "
        "hundred.",
    ),
]


class EmbeddedTracing(Strict):
    """Arize Phoenix started with the graph on loopback: it receives OTLP over gRPC and keeps its spans in the
    run folder."""

    mode: Literal["embedded"] = "embedded"
    port: Port = Field(default=6006, description="Port of the trace backend's UI and API (loopback).")
    otlp_port: Port = Field(default=4317, description="Port it receives OTLP over gRPC on (loopback).")
    sample_ratio: SampleRatio = 1.0


class ExternalTracing(Strict):
    mode: Literal["external"] = "external"
    endpoint: str = Field(
        pattern=r"^https?://[^/\s]+/?$",
        description="OTLP over gRPC endpoint every process of the graph exports its spans and logs to, e.g. "
        "http://otel-collector:4317 (an OpenTelemetry Collector, Jaeger, Tempo, Phoenix).",
    )
    sample_ratio: SampleRatio = 1.0


class NoTracing(Strict):
    mode: Literal["off"] = "off"


class ObservabilitySection(Strict):
    prometheus: Annotated[EmbeddedPrometheus | ExternalPrometheus, Field(discriminator="mode")] = Field(
        default_factory=EmbeddedPrometheus,
        description="`embedded` starts Prometheus (Debian's prometheus package) with a scrape config made from "
        "the graph; `external` names one that scrapes the graph itself.",
    )
    launcher_port: Port = Field(
        default=9091, description="Port of the launcher's own /metrics: restarts, pool sizes, readiness (loopback)."
    )
    gateway_port: Port = Field(
        default=9093,
        description="Loopback port of the gateway's /metrics (requests and tokens per API key), "
        "scraped by the graph's Prometheus.",
    )
    tracing: Annotated[EmbeddedTracing | ExternalTracing | NoTracing, Field(discriminator="mode")] = Field(
        default_factory=NoTracing,
        description="One trace per request, from the gateway through Dynamo's frontend, router and workers "
        "(OpenTelemetry): `embedded` starts a trace backend with the graph, `external` exports to an OTLP "
        "endpoint, `off` (the default) exports nothing.",
    )

    _shorthand = field_validator("prometheus", "tracing", mode="before")(
        classmethod(lambda cls, value: _mode_shorthand(value))
    )


class PlannerSection(Strict):
    """How Dynamo's planner sizes the autoscaled pools. `sla` (the default) sizes each one for the
    TTFT and ITL targets from the project's calibrated performance model; `load` grows and shrinks
    it on thresholds: prompt tokens queued at prefill, the share of the KV cache in use at decode."""

    mode: Literal["sla", "load"] = Field(
        default="sla",
        description="sla: the fewest workers whose predicted TTFT p90 and ITL keep the targets under the observed "
        "and predicted load (needs observability.prometheus, where the planner reads the load); load: Dynamo's "
        "thresholds, prefill_queue_tokens and decode_kv_percent.",
    )
    ttft_ms: float = Field(
        gt=0,
        description="Time-to-first-token target (SLO), ms: the p90 the sla mode sizes "
        "prefill for, and what dashboards and benchmarks measure the pools against.",
    )
    itl_ms: float = Field(
        gt=0, description="Inter-token latency target (SLO), ms: the mean the sla mode sizes decode for, likewise."
    )
    max_gpus: int | None = Field(
        default=None, ge=1, le=1024, description="Most GPUs all pools may use together (default: all the graph's)."
    )
    interval_s: int = Field(default=5, ge=1, le=600, description="Seconds between the planner's looks at the load.")
    prefill_queue_tokens: tuple[int, int] = Field(
        default=(16384, 1024),
        description="load mode: [grow above, shrink below]: prompt tokens waiting in a prefill worker's queue.",
    )
    decode_kv_percent: tuple[float, float] = Field(
        default=(80.0, 30.0),
        description="load mode: [grow above, shrink below]: share of a decode (or aggregated) worker's KV cache in "
        "use, %.",
    )
    headroom_percent: float = Field(
        default=20,
        ge=0,
        le=200,
        description="sla mode: sizes the pools for this much more load than it observed "
        "or forecast, %: room for load that rises between looks and for the time a new worker takes to serve.",
    )
    scale_down_after_s: int = Field(
        default=300,
        ge=0,
        le=3600,
        description="sla mode: a pool shrinks only to the most workers it was sized for "
        "over this many seconds, so a lull does not drain workers the next burst needs (Kubernetes' "
        "HorizontalPodAutoscaler waits 300 s by default; a TensorRT-LLM worker loading gpt-oss takes minutes).",
    )
    metrics_port: Port = Field(
        default=9092,
        description="Port of the planner's /metrics on one host (loopback), scraped by the graph's Prometheus.",
    )

    @field_validator("prefill_queue_tokens", "decode_kv_percent", mode="before")
    @classmethod
    def _pair(cls, value: object) -> object:
        return tuple(value) if isinstance(value, list) else value  # YAML gives [up, down] as a list

    @model_validator(mode="after")
    def _grow_above_shrink(self) -> PlannerSection:
        for name in ("prefill_queue_tokens", "decode_kv_percent"):
            up, down = getattr(self, name)
            if not 0 <= down < up:
                raise ValueError(
                    f"Got {name} [{up:g}, {down:g}]. It must be [grow above, shrink below], with 0 <= shrink < grow."
                )
        if self.decode_kv_percent[0] > 100:
            raise ValueError(f"Got decode_kv_percent up {self.decode_kv_percent[0]:g}. A share is at most 100%.")
        return self


class GraphSpec(Strict):
    """One gpt-oss deployment: model, hardware, infrastructure, frontend and worker pools."""

    name: str = Field(
        pattern=r"^[a-z0-9][a-z0-9-]{0,62}$",
        description="Deployment name; also the Dynamo namespace, so two graphs never see each other's workers.",
    )
    model: ModelSection
    hardware: HardwareSection
    infrastructure: InfrastructureSection = Field(default_factory=InfrastructureSection)
    frontend: FrontendSection = Field(default_factory=FrontendSection)
    gateway: GatewaySection = Field(default_factory=GatewaySection)
    pools: PoolsSection
    planner: PlannerSection | None = Field(
        default=None, description="Latency targets and GPU budget for the pools that autoscale."
    )
    observability: ObservabilitySection | None = Field(
        default=None,
        description="Metrics (Prometheus and the launcher's own /metrics) and traces. Left out: none of them.",
    )

    @model_validator(mode="after")
    def _planner_for_autoscale(self) -> GraphSpec:
        scaled = [role for role, pool in self.pools.items() if pool.autoscale is not None]
        if scaled and self.planner is None:
            raise ValueError(
                f"pools {', '.join(scaled)} autoscale, so the graph needs planner targets: "
                "planner: {ttft_ms: ..., itl_ms: ...}"
            )
        if self.planner is not None and not scaled:
            raise ValueError("Got a planner section but no pool autoscales. Give a pool `autoscale: {min, max}`.")
        if self.planner is not None and self.gateway.batches.targets is not None:
            raise ValueError(
                "gateway.batches.targets: batch requests are held to the planner's targets (planner.ttft_ms and "
                "itl_ms) on a graph with a planner; leave gateway.batches.targets out"
            )
        if self.planner and self.planner.max_gpus and self.planner.max_gpus > self.hardware.total_gpus:
            raise ValueError(
                f"planner.max_gpus is {self.planner.max_gpus} but the graph has {self.hardware.total_gpus} GPUs"
            )
        nodes = list(self.hardware.node_gpus)
        named = [("infrastructure.node", [self.infrastructure.node] if self.infrastructure.node else [])]
        named += [(f"pools.{role}.nodes", pool.nodes or []) for role, pool in self.pools.items()]
        named.append(("frontend.nodes", self.frontend.nodes or []))
        for field, names in named:
            if names and not self.hardware.multinode:
                raise ValueError(f"{field} names nodes, but the graph runs on one host: list them in hardware.nodes")
            unknown = [name for name in names if name not in nodes]
            if unknown:
                raise ValueError(
                    f"{field} names {', '.join(unknown)}, which hardware.nodes does not have "
                    f"(it has {', '.join(nodes)})"
                )
        self._infrastructure_reached_securely()
        self._endpoint_on_every_frontend_node()
        self._one_key_on_every_frontend_node()
        if self.gateway.auth is None and not is_loopback(self.frontend.host):
            raise ValueError(
                f"gateway.auth: the endpoint listens on {self.frontend.host}, beyond this host, so it needs API keys: "
                "give gateway.auth {keys_file: FILE} (a `NAME KEY` line each) or {keys_env: VAR}, or say "
                "`auth: none` to leave it open on a network you trust."
            )
        return self

    def _infrastructure_reached_securely(self) -> None:
        """Embedded etcd and NATS on an address other nodes reach serve mutual TLS, or the graph says
        `tls: none` on purpose."""
        infra = self.infrastructure
        embedded = isinstance(infra.etcd, EmbeddedEtcd) or isinstance(infra.nats, EmbeddedNats)
        if infra.tls is not None or not embedded or not isinstance(self.hardware.nodes, list):
            return
        address = next(node.address for node in self.hardware.nodes if node.name == self.infrastructure_node)
        if not is_loopback(address):
            raise ValueError(
                f"infrastructure.tls: embedded etcd and NATS listen on {address}, where the other nodes reach them, "
                "so they need mutual TLS: give infrastructure.tls {ca, cert, key} (PEM files; `{node}` in a path "
                "is the node's name), or say `tls: none` to run them open on a network you trust."
            )

    def _endpoint_on_every_frontend_node(self) -> None:
        """Several frontend nodes each bind frontend.host: loopback, a wildcard, or a node's address (each
        node's own, then); any other address is at most one node's, so the others could not start."""
        frontends, host = self.frontend.nodes or [], self.frontend.host
        if len(frontends) < 2 or is_loopback(host) or host in WILDCARDS or not isinstance(self.hardware.nodes, list):
            return
        if host not in {node.address for node in self.hardware.nodes}:
            raise ValueError(
                f"frontend.host: {host} is no node's address, and frontend.nodes ({', '.join(frontends)}) each "
                "bind it: give a node's address (each frontend node then binds its own), 127.0.0.1 or 0.0.0.0."
            )

    def _one_key_on_every_frontend_node(self) -> None:
        """Each node's gateway would otherwise make a key of its own: reasoning sealed through one node would
        not open through another, and a tenant's prompts would be cached apart on each."""
        frontends = self.frontend.nodes or []
        if len(frontends) > 1 and self.gateway.enabled and self.gateway.key_file is None:
            raise ValueError(
                f"gateway.key_file: frontend.nodes runs a gateway on {', '.join(frontends)}, and each would make "
                "a graph key of its own, so reasoning sealed through one would not open through another: give "
                "gateway.key_file, one file copied to every frontend node (`head -c 32 /dev/urandom > graph.key; "
                "chmod 600 graph.key`)."
            )

    @property
    def infrastructure_node(self) -> str:
        return self.infrastructure.node or next(iter(self.hardware.node_gpus))

    @field_validator("model", mode="before")
    @classmethod
    def _model_shorthand(cls, value: object) -> object:
        """`model: gpt-oss-120b` is short for `model: {name: gpt-oss-120b}`."""
        return {"name": value} if isinstance(value, str) else value
