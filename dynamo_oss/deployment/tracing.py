"""What every process of a traced graph (observability.tracing) is told, written once for both renderers,
so a host plan and a DynamoGraphDeployment set the same: Dynamo's processes the OpenTelemetry variables
Dynamo 1.6's runtime reads, the gateway its TracingConfig.

Read from the ai-dynamo-runtime 1.6 wheel and tried on the disaggregated mocker graph: with
OTEL_EXPORT_ENABLED the runtime exports its spans over OTLP/gRPC to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
and its log records to OTEL_EXPORTER_OTLP_LOGS_ENDPOINT (which does not fall back to the traces one:
left unset, it is localhost:4317, whoever listens there); it continues an incoming W3C traceparent,
honours its sampled flag, and samples a trace it starts itself by OTEL_TRACES_SAMPLER.
"""

from __future__ import annotations

from pathlib import Path

from dynamo_oss.deployment.model import Deployment
from dynamo_oss.gateway.config import TracingConfig
from dynamo_oss.graph.schema import EmbeddedTracing, ExternalTracing

# Dynamo's runtime logs every failed OTLP export at ERROR, once a second per process: for an endpoint
# that is down, and for its log records where the backend takes no logs (Phoenix answers UNIMPLEMENTED).
# Its logging configuration file turns those targets off (DYN_LOG cannot: the runtime adds its own
# `opentelemetry_sdk=error` after it); the gateway says once that spans are being dropped, and counts them.
DYNAMO_LOGGING_FILE = "dynamo-logging.toml"
DYNAMO_LOGGING = '[log_filters]\n"opentelemetry" = "off"\n"opentelemetry_sdk" = "off"\n"opentelemetry-otlp" = "off"\n'


def tracing_of(deployment: Deployment) -> EmbeddedTracing | ExternalTracing | None:
    return deployment.observability.tracing if deployment.observability else None


def otlp_endpoint(tracing: EmbeddedTracing | ExternalTracing, address: str) -> str:
    """Where the graph's processes export: an embedded backend on `address` (the infrastructure node's)."""
    if isinstance(tracing, EmbeddedTracing):
        return f"http://{address}:{tracing.otlp_port}"
    return tracing.endpoint.rstrip("/")


def dynamo_env(tracing: EmbeddedTracing | ExternalTracing, endpoint: str, logging_file: Path) -> dict[str, str]:
    """The variables every Dynamo process of the graph gets (its service name apart: service_env)."""
    return {
        "OTEL_EXPORT_ENABLED": "1",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": endpoint,
        # A trace the gateway decided on is followed (its traceparent's flag); one a Dynamo process starts
        # itself (a request straight to a worker) is sampled at the graph's ratio too.
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": f"{tracing.sample_ratio:g}",
        "DYN_LOGGING_CONFIG_PATH": str(logging_file),
        # Tried on the harmony mocker, whose handler forwards each request to its engine through Dynamo's
        # Python client: with DYN_LOG unset, the engine's spans (`client_request`, `router.route_request`,
        # its `handle_payload`) started traces of their own; with it set, they joined the request's.
        # Dynamo's default level, said out loud (the frontend and planner set their own).
        "DYN_LOG": "info",
    }


def service_env(deployment: Deployment, service: str) -> dict[str, str]:
    """A Dynamo process's name in its spans (`dynamo-frontend`, `dynamo-prefill`, ...); nothing untraced."""
    return {"OTEL_SERVICE_NAME": service} if tracing_of(deployment) else {}


def gateway_tracing(deployment: Deployment, address: str) -> TracingConfig | None:
    tracing = tracing_of(deployment)
    if tracing is None:
        return None
    return TracingConfig(endpoint=otlp_endpoint(tracing, address), sample_ratio=tracing.sample_ratio)
