"""Each component's command line, written once for every renderer.

A node's host plan (deployment.host) and a cluster's manifests (deployment.kubernetes) run the same
programs with the same flags; what differs is given as arguments: where a process listens, where
files are (the run folder or a mounted ConfigMap), the Python that runs it (this environment's or
the image's `python3`) and the Dynamo namespace (the graph's, or the operator's $(DYN_NAMESPACE)).
Each function returns the arguments after the interpreter.
"""

from __future__ import annotations

from pathlib import Path

from dynamo_oss.deployment.model import Deployment, Pool
from dynamo_oss.engines import SimulatedTiming, WorkerContext


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


def frontend_args(deployment: Deployment, listen: tuple[str, int] | None, namespace: str | None) -> list[str]:
    """Dynamo's OpenAI frontend with the graph's router and migration settings, on `listen` (else
    Dynamo's default), counting the workers of `namespace` (else DYN_NAMESPACE's)."""
    frontend = deployment.frontend
    where = ["--http-host", listen[0], "--http-port", str(listen[1])] if listen else []
    args = [
        "-m",
        "dynamo.frontend",
        *where,
        "--router-mode",
        frontend.router,
        "--migration-limit",
        str(frontend.migration_limit),
    ]
    return args + (["--namespace", namespace] if namespace else [])


def gateway_args(
    deployment: Deployment,
    listen: tuple[str, int],
    upstream: str,
    model: list[str],
    key_file: Path,
    api_keys_file: Path | None,
    metrics: tuple[str, int] | None = None,
    responses_store: list[str] | None = None,
) -> list[str]:
    """dynamo-oss's request gateway on `listen`, in front of Dynamo's frontend at `upstream`; `model`
    says where its tokenizer comes from (`--model-folder DIR` or `--model NAME`); `key_file` holds the
    reasoning key and `api_keys_file` (where the graph's API keys file is, here) the clients' keys;
    `metrics` is where it serves /metrics; `responses_store` where the graph's NATS is and the bucket
    its responses go in (`--responses-nats URL` or `--responses-nats-file F`, `--responses-bucket B`),
    used when the graph stores responses."""
    gateway = deployment.gateway
    assert gateway is not None
    limits, responses = gateway.limits, gateway.responses
    keys = (["--keys-file", str(api_keys_file)] if api_keys_file else []) + (
        ["--keys-env", gateway.keys_env] if gateway.keys_env else []
    )
    store = (
        [
            *responses_store,
            "--responses-retention-s",
            str(responses.retention_s),
            "--responses-max-mib",
            str(responses.max_mib),
        ]
        if responses.store and responses_store
        else []
    )
    return [
        "-m",
        "dynamo_oss.gateway",
        "--host",
        listen[0],
        "--port",
        str(listen[1]),
        "--upstream",
        upstream,
        *model,
        "--max-in-flight",
        str(gateway.max_in_flight),
        "--reasoning-key-file",
        str(key_file),
        *keys,
        "--header-timeout-s",
        f"{limits.header_timeout_s:g}",
        "--body-timeout-s",
        f"{limits.body_timeout_s:g}",
        "--keep-alive-timeout-s",
        f"{limits.keep_alive_timeout_s:g}",
        "--write-timeout-s",
        f"{limits.write_timeout_s:g}",
        "--max-connections",
        str(limits.max_connections),
        "--max-body-mib",
        str(limits.max_body_mib),
        "--max-buffered-mib",
        str(limits.max_buffered_mib),
        *(["--cache-isolation", "shared"] if gateway.shared_cache else []),
        *(
            ["--limits-per-key", gateway.limits_per_key.model_dump_json(exclude_none=True)]
            if gateway.limits_per_key
            else []
        ),
        *(["--metrics", f"{metrics[0]}:{metrics[1]}"] if metrics else []),
        *store,
    ]


def responses_bucket(graph: str) -> str:
    """The NATS key-value bucket a graph's responses are stored in: its own, beside other graphs'."""
    return f"responses-{graph}"


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
