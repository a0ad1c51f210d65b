"""A deployment rendered for a Kubernetes cluster that runs Dynamo's operator (`dynamo deploy`).

The same graph that `dynamo serve` runs on one host becomes, the way `helm template` renders a chart:
- a ConfigMap with each pool's TensorRT-LLM engine arguments (the graph's files, verbatim), the
  harmony chat template the workers give the frontend, and the gateway's configuration;
- a DynamoGraphDeployment (nvidia.com/v1beta1, Dynamo 1.6's current API): the frontend pods
  (`frontend.replicas` of them, each Dynamo's frontend behind dynamo-oss's request gateway, a second
  container of `gateway.processes` processes, unless the graph turns it off; the operator's Service
  spreads connections over the pods, and their frontends share the router's state),
  one component per pool with its replicas and GPUs (a worker wider than a node, as the placement
  spans it, is a multinode component: `multinode.nodeCount` pods of GPUs per node each), and
  Dynamo's planner with its Kubernetes connector when a pool autoscales;
- with `frontend.autoscale`, a HorizontalPodAutoscaler on the frontend pods' CPU, through the scaling
  adapter the operator makes for the frontend component;
- a PodMonitor, so a prometheus-operator Prometheus scrapes the frontend, workers and planner;
- the gateway stores responses in the NATS the operator gives Dynamo's frontend: the operator sets
  NATS_SERVER in the frontend's own container only, so that container writes it to a volume the
  two share before it starts Dynamo's frontend, and the gateway reads it there. The bucket is named
  after the Kubernetes namespace and the graph, as one NATS may serve every graph of a cluster;
- nothing secret: the gateway reads the graph's key for the Responses API's encrypted reasoning
  from a Secret the operator of the cluster creates (`reasoning_key_secret`; README says how), so
  every frontend replica opens what another sealed and no key is ever written into a manifest;
  the clients' API keys likewise come from a Secret (`api_keys_secret`), as a file or a variable.
  Every pod's gateway reads the one configuration, so all share the store, the keys and the
  reasoning key. Its limits (max_in_flight, each key's share) hold over the pod's processes and,
  with several pods, over the pods too: each pod's gateway shares its counts with the others over
  the same NATS (gateway/cluster_share.py);
- the Grafana dashboards as a ConfigMap that Grafana's dashboard sidecar loads.

The operator supplies what belongs to the cluster: DYN_NAMESPACE and discovery, the frontend's
Service, ports and probes. Worker command lines come from the pool's engine, as on a host; only
paths (the mounted ConfigMap) and the namespace (the operator's, by Kubernetes' $(VAR) expansion) differ.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field

from dynamo_oss.assets.template import TEMPLATE_FILE, chat_template
from dynamo_oss.deployment.commands import (
    FRONTEND_ENV,
    frontend_config,
    gateway_args,
    gateway_config,
    worker_context,
)
from dynamo_oss.deployment.model import Deployment, Pool
from dynamo_oss.deployment.processes import LOOPBACK
from dynamo_oss.deployment.tracing import (
    DYNAMO_LOGGING,
    DYNAMO_LOGGING_FILE,
    dynamo_env,
    gateway_tracing,
    otlp_endpoint,
    tracing_of,
)
from dynamo_oss.engines import engine_for
from dynamo_oss.gateway.config import GatewayConfig, NatsConnection
from dynamo_oss.catalog.names import FRONTEND_METRICS_PATH, PROMETHEUS_ENV
from dynamo_oss.graph.errors import GraphError, Problem
from dynamo_oss.graph.schema import EmbeddedPrometheus, EmbeddedTracing

OPERATOR_API_VERSION = "nvidia.com/v1beta1"
CONFIG_MOUNT = Path("/opt/dynamo-oss/config")  # the ConfigMap of engine arguments and chat template
MODEL_CACHE_MOUNT = "/opt/models"  # the model-cache volume; Hugging Face downloads land there (HF_HOME)
FRONTEND_PORT = 8000  # the port the operator's frontend Service and probes use (its container port "http")
DYNAMO_FRONTEND_PORT = 8001  # Dynamo's frontend behind the gateway, on the pod's loopback
GATEWAY_METRICS_PORT = 9093  # the gateway's /metrics (usage per API key), container port "gateway-metrics"
REASONING_KEY_MOUNT = Path("/etc/dynamo-oss/reasoning")  # the Secret holding the reasoning key, as file `key`
API_KEYS_MOUNT = Path("/etc/dynamo-oss/api-keys")  # the Secret holding the clients' API keys, as file `keys`
GATEWAY_STATE_MOUNT = Path("/run/dynamo-oss/gateway")  # what the gateway's processes share (in memory)
NATS_ADDRESS_MOUNT = Path("/run/dynamo-oss/nats")  # where the frontend's container writes NATS_SERVER, as `server`
# /dev/shm for NCCL and NIXL buffers: the published gpt-oss-120b TensorRT-LLM recipe's size.
WORKER_SHARED_MEMORY = "80Gi"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_DNS_LABEL = 63
GATEWAY_CONFIG = "gateway.json"  # the gateway's configuration, a key of the ConfigMap
COMPONENT_NAMES = ("frontend", "prefill", "decode", "agg", "planner")  # the components' names in the graph


class ClusterTarget(BaseModel):
    """Where and with what the manifests run: `dynamo deploy`'s options."""

    namespace: str | None = Field(None, description="Kubernetes namespace; left out, kubectl's current one")
    image: str = Field(description="the dynamo-oss image (Dockerfile) every component runs")
    model_cache: str | None = Field(None, description="a PersistentVolumeClaim holding the Hugging Face cache")
    dashboards: dict[str, str] = Field(default_factory=dict, description="Grafana dashboard files: name -> JSON")


def render_manifests(
    deployment: Deployment,
    target: ClusterTarget,
    planner: dict[str, Any] | None = None,
    alert_rules: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Every resource the deployment needs on the cluster; GraphError names what cannot be deployed.
    `planner` is Dynamo's planner configuration for the autoscaled pools (dynamo_oss.planner.settings);
    `alert_rules` the graph's rule groups (dynamo_oss.observe.alerts, its series picked by
    `graph="NAME"`, the label the PodMonitor gives them), rendered as a PrometheusRule."""
    problems = _cluster_problems(deployment, target)
    if problems:
        raise GraphError(str(deployment.source), problems)
    name = deployment.name
    components = [_frontend_component(deployment, target)]
    components += [_pool_component(deployment, pool, target) for pool in deployment.pools]
    if planner is not None:
        components.append(_planner_component(deployment, planner, target))
    graph = {
        "apiVersion": OPERATOR_API_VERSION,
        "kind": "DynamoGraphDeployment",
        "metadata": _metadata(name, target),
        "spec": {"backendFramework": "trtllm", "components": components},
    }
    manifests = [_config_map(deployment, target), graph, _pod_monitor(deployment, target)]
    if deployment.frontend.autoscale is not None:
        manifests.append(_frontend_autoscaler(deployment, target))
    if target.dashboards:
        dashboards = _metadata(f"{name}-dashboards", target)
        dashboards["labels"]["grafana_dashboard"] = "1"  # what Grafana's dashboard sidecar looks for
        manifests.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": dashboards, "data": target.dashboards})
    if alert_rules:
        rules = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule"}
        manifests.append({**rules, "metadata": _metadata(f"{name}-alerts", target), "spec": alert_rules})
    return manifests


def manifests_yaml(manifests: list[dict[str, Any]], source: str) -> str:
    """One multi-document YAML stream, as `kubectl apply -f` takes it."""
    header = f"# Rendered by `dynamo deploy {source}`; edit the graph, not this file.\n"
    body = yaml.dump_all(manifests, Dumper=_BlockTextDumper, sort_keys=False, width=120, explicit_start=True)
    return header + body


class _BlockTextDumper(yaml.SafeDumper):
    """Writes multi-line strings (engine files, the chat template, dashboards) as readable `|` blocks,
    and repeated values in full rather than as YAML anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _text(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_BlockTextDumper.add_representer(str, _text)


def _cluster_problems(deployment: Deployment, target: ClusterTarget) -> list[Problem]:
    problems = []
    gateway = deployment.gateway
    if gateway is not None and not gateway.requires_keys and not gateway.open_on_purpose:
        problems.append(
            Problem(
                path="gateway.auth",
                message="is not given; on the cluster the gateway listens on "
                "the pod network, behind the frontend Service: give the API keys (`auth: {keys_env: "
                f"VAR}}` or `{{keys_file: FILE}}`, read from the Secret {api_keys_secret(deployment)}), "
                "or say `auth: none` to leave the endpoint open on purpose",
            )
        )
    longest = max(len(name) for name in COMPONENT_NAMES)
    if len(deployment.name) + 1 + longest > MAX_DNS_LABEL:
        problems.append(
            Problem(
                path="name",
                message=f"is {len(deployment.name)} characters; on a cluster it names "
                f"Services NAME-COMPONENT, which fit {MAX_DNS_LABEL} characters only with a name of "
                f"at most {MAX_DNS_LABEL - 1 - longest}",
            )
        )
    if target.namespace is not None and not DNS_LABEL.match(target.namespace):
        problems.append(Problem(path="--namespace", message=f"{target.namespace!r} is not a Kubernetes namespace name"))
    if deployment.model.builtin is None:
        problems.append(
            Problem(
                path="model.path",
                message="names a local checkout; on a cluster the workers load "
                "a built-in model from the Hugging Face hub (into --model-cache)",
            )
        )
    if isinstance(tracing_of(deployment), EmbeddedTracing):
        problems.append(
            Problem(
                path="observability.tracing",
                message="is embedded, a trace backend `dynamo serve` starts on one host; on a cluster give "
                "{mode: external, endpoint: http://COLLECTOR:4317} (an OpenTelemetry Collector, Jaeger, Tempo)",
            )
        )
    for pool in deployment.pools:
        if pool.engine != "trtllm":
            problems.append(
                Problem(
                    path=f"pools.{pool.role}.engine",
                    message=f"is {pool.engine}; dynamo deploy renders TensorRT-LLM workers (trtllm)",
                )
            )
        speculative = pool.shape.speculative
        if speculative is not None and speculative.local_draft:
            problems.append(
                Problem(
                    path=f"pools.{pool.role}.engine_args",
                    message=f"speculative_config.speculative_model names the folder {speculative.draft_model} of "
                    "this host; on a cluster the workers load the draft head from the Hugging Face hub (into "
                    "--model-cache), so name it there, e.g. nvidia/gpt-oss-120b-Eagle3-v3",
                )
            )
    return problems


def _metadata(name: str, target: ClusterTarget) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if target.namespace:
        metadata["namespace"] = target.namespace
    metadata["labels"] = {"app.kubernetes.io/managed-by": "dynamo-oss"}
    return metadata


def _config_map(deployment: Deployment, target: ClusterTarget) -> dict[str, Any]:
    data = {f"{pool.role}.yaml": pool.engine_args.read_text() for pool in deployment.pools if pool.engine_args}
    data[TEMPLATE_FILE] = chat_template()
    if tracing_of(deployment):
        data[DYNAMO_LOGGING_FILE] = DYNAMO_LOGGING
    if deployment.gateway:
        data[GATEWAY_CONFIG] = _gateway_config(deployment).model_dump_json(indent=1, exclude_none=True)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(_config_name(deployment), target),
        "data": data,
    }


def _config_name(deployment: Deployment) -> str:
    return f"{deployment.name}-config"


def _gateway_config(deployment: Deployment) -> GatewayConfig:
    """The gateway's configuration in the frontend's pod: the Service's port, Dynamo's frontend on the
    pod's loopback, the Secrets' mounts, and the NATS the operator gives the frontend's container, which
    the pods' gateways share their limits' counts over when there may be more than one pod."""
    gateway = deployment.gateway
    assert gateway is not None and deployment.model.builtin is not None  # _cluster_problems refuses checkouts
    return gateway_config(
        deployment,
        ("0.0.0.0", FRONTEND_PORT),
        [f"http://{LOOPBACK}:{DYNAMO_FRONTEND_PORT}"],
        state_dir=GATEWAY_STATE_MOUNT,
        key_file=REASONING_KEY_MOUNT / "key",
        make_key=False,  # the Secret's, which the operator creates
        api_keys_file=API_KEYS_MOUNT / "keys" if gateway.keys_file else None,
        model=deployment.model.builtin,
        metrics=("0.0.0.0", GATEWAY_METRICS_PORT),
        nats=NatsConnection(url_file=NATS_ADDRESS_MOUNT / "server", prefix_env="POD_NAMESPACE"),
        several_places=deployment.frontend.replicas > 1 or deployment.frontend.autoscale is not None,
        tracing=gateway_tracing(deployment, LOOPBACK),
    )


def _frontend_component(deployment: Deployment, target: ClusterTarget) -> dict[str, Any]:
    """Dynamo's frontend with the graph's router and migration settings; with the request gateway in
    front, Dynamo's frontend listens on the pod's loopback and the gateway takes the Service's port."""
    listen = (LOOPBACK, DYNAMO_FRONTEND_PORT) if deployment.gateway else None
    args = frontend_config(deployment, listen, namespace=None).args()  # the operator sets DYN_NAMESPACE
    main: dict[str, Any] = {
        "name": "main",
        "image": target.image,
        "command": ["python3"],
        "args": args,
        "env": _env({**_traced(deployment, "dynamo-frontend"), **FRONTEND_ENV}),
    }
    if tracing_of(deployment):  # Dynamo's log filters, in the ConfigMap
        main["volumeMounts"] = [_config_mount()]
    containers = [main]
    if deployment.gateway:
        keys = deployment.gateway
        uses_nats = _gateway_config(deployment).nats is not None
        mounts = [
            {"name": "dynamo-oss-config", "mountPath": str(CONFIG_MOUNT), "readOnly": True},
            {"name": "reasoning-key", "mountPath": str(REASONING_KEY_MOUNT), "readOnly": True},
            {"name": "gateway-state", "mountPath": str(GATEWAY_STATE_MOUNT)},
        ]
        # Owner-only, as the gateway requires of the graph's key (graph_key.py).
        volumes = [
            {"name": "dynamo-oss-config", "configMap": {"name": _config_name(deployment)}},
            {"name": "reasoning-key", "secret": {"secretName": reasoning_key_secret(deployment), "defaultMode": 0o400}},
            {"name": "gateway-state", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
        ]
        container: dict[str, Any] = {
            "name": "gateway",
            "image": target.image,
            "command": ["python3"],
            "args": gateway_args(CONFIG_MOUNT / GATEWAY_CONFIG),
            "volumeMounts": mounts,
            "ports": [{"name": "gateway-metrics", "containerPort": GATEWAY_METRICS_PORT}],
            # A core for each of its processes (one event loop each): what the HPA's CPU target is a share of.
            "resources": {"requests": {"cpu": str(keys.processes)}},
        }
        env: list[dict[str, Any]] = []
        if keys.keys_file:  # the API keys: the Secret's `keys`, a `NAME KEY` line each, as a file
            mounts.append({"name": "api-keys", "mountPath": str(API_KEYS_MOUNT), "readOnly": True})
            volumes.append({"name": "api-keys", "secret": {"secretName": api_keys_secret(deployment)}})
        if keys.keys_env:  # the one API key: the Secret's key of the variable's name
            secret_key = {"secretKeyRef": {"name": api_keys_secret(deployment), "key": keys.keys_env}}
            env.append({"name": keys.keys_env, "valueFrom": secret_key})
        if uses_nats:  # the NATS the operator gives the frontend's container, passed on through a shared volume
            main["command"] = ["/bin/sh", "-c"]
            main["args"] = [
                f"(umask 077 && printf '%s' \"$NATS_SERVER\" > {NATS_ADDRESS_MOUNT / 'server'}) && exec python3 "
                + shlex.join(args)
            ]
            main["volumeMounts"] = [
                *main.get("volumeMounts", []),
                {"name": "nats-address", "mountPath": str(NATS_ADDRESS_MOUNT)},
            ]
            mounts.append({"name": "nats-address", "mountPath": str(NATS_ADDRESS_MOUNT), "readOnly": True})
            volumes.append({"name": "nats-address", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}})
            env.append({"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}})
        if env:
            container["env"] = env
        containers.append(container)
        spec: dict[str, Any] = {"containers": containers, "volumes": volumes}
    else:
        config = [{"name": "dynamo-oss-config", "configMap": {"name": _config_name(deployment)}}]
        spec = {"containers": containers, **({"volumes": config} if tracing_of(deployment) else {})}
    # What the pod's Dynamo frontend needs at the pools' peak (perf/endpoint.py), else a core a gateway process.
    cores = deployment.frontend.cores_per_pod or (deployment.gateway.processes if deployment.gateway else 1)
    main["resources"] = {"requests": {"cpu": str(cores)}}
    component: dict[str, Any] = {"name": "frontend", "type": "frontend", "replicas": deployment.frontend.replicas}
    if deployment.frontend.autoscale is not None:  # the operator's adapter, whose /scale the HPA drives
        component["scalingAdapter"] = {"enabled": True}
    return {**component, "podTemplate": {"spec": spec}}


def _frontend_autoscaler(deployment: Deployment, target: ClusterTarget) -> dict[str, Any]:
    """A HorizontalPodAutoscaler on the frontend pods' CPU, through the scaling adapter the operator makes
    for the frontend component (NAME-frontend, a /scale subresource), as Dynamo's autoscaling guide does.
    Scaling down waits five minutes, as a stream may last that long; scaling up does not wait."""
    autoscale = deployment.frontend.autoscale
    assert autoscale is not None
    cpu = {"type": "Utilization", "averageUtilization": autoscale.target_cpu_percent}
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _metadata(f"{deployment.name}-frontend", target),
        "spec": {
            "scaleTargetRef": {
                "apiVersion": OPERATOR_API_VERSION,
                "kind": "DynamoGraphDeploymentScalingAdapter",
                "name": f"{deployment.name}-frontend",
            },
            "minReplicas": autoscale.min,
            "maxReplicas": autoscale.max,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": cpu}}],
            "behavior": {
                "scaleDown": {"stabilizationWindowSeconds": 300},
                "scaleUp": {"stabilizationWindowSeconds": 0},
            },
        },
    }


def api_keys_secret(deployment: Deployment) -> str:
    """The Secret holding the clients' API keys, as the graph's gateway.auth names them: key `keys` (a
    `NAME KEY` line each) for keys_file, or the key named after keys_env."""
    return f"{deployment.name}-api-keys"


def reasoning_key_secret(deployment: Deployment) -> str:
    """The Secret (key `key`: 32 random bytes, base64) every gateway of the graph reads its key from."""
    return f"{deployment.name}-reasoning-key"


def _pool_component(deployment: Deployment, pool: Pool, target: ClusterTarget) -> dict[str, Any]:
    engine = engine_for(pool.engine)
    context = worker_context(
        deployment,
        pool,
        model_path=deployment.model.served_name,  # the hub name: weights download into the model cache
        model_folder=CONFIG_MOUNT,
        engine_args_file=CONFIG_MOUNT / f"{pool.role}.yaml",
        namespace="$(DYN_NAMESPACE)",  # the operator sets DYN_NAMESPACE
    )
    env = {**_traced(deployment, f"dynamo-{pool.role}"), **engine.worker_env(context)}
    mounts = [_config_mount()]
    volumes: list[dict[str, Any]] = [{"name": "dynamo-oss-config", "configMap": {"name": _config_name(deployment)}}]
    if target.model_cache:
        env["HF_HOME"] = MODEL_CACHE_MOUNT
        mounts.append({"name": "model-cache", "mountPath": MODEL_CACHE_MOUNT})
        volumes.append({"name": "model-cache", "persistentVolumeClaim": {"claimName": target.model_cache}})
    nodes = max(len(slot.nodes) for slot in deployment.placement.slots if slot.role == pool.role)
    gpus = {"nvidia.com/gpu": str(pool.gpus_per_worker // nodes)}  # per pod: one pod per node of a worker
    container = {
        "name": "main",
        "image": target.image,
        "command": ["python3"],
        "args": engine.worker_argv(context),
        "env": [{"name": key, "value": value} for key, value in sorted(env.items())],
        "resources": {"limits": gpus, "requests": gpus},
        "volumeMounts": mounts,
    }
    component: dict[str, Any] = {"name": pool.role, "type": "worker" if pool.role == "agg" else pool.role}
    component["replicas"] = pool.workers  # the autoscale minimum for a pool the planner sizes
    if nodes > 1:
        # A worker across nodes: the operator starts a pod per node and, for TensorRT-LLM, runs the
        # command under mpirun from the leader pod (through trtllm-llmapi-launch); the other pods run sshd.
        component["multinode"] = {"nodeCount": nodes}
    component["sharedMemorySize"] = WORKER_SHARED_MEMORY
    component["podTemplate"] = {"spec": {"containers": [container], "volumes": volumes}}
    return component


def _planner_component(deployment: Deployment, settings: dict[str, Any], target: ClusterTarget) -> dict[str, Any]:
    """Dynamo's planner, resizing the pools by patching this DynamoGraphDeployment's replicas."""
    config = {"environment": "kubernetes", **settings}
    container: dict[str, Any] = {
        "name": "main",
        "image": target.image,
        "command": ["python3"],
        "args": ["-m", "dynamo_oss.planner", "--config", json.dumps(config, separators=(",", ":"))],
    }
    observability = deployment.observability
    env = _traced(deployment, "dynamo-planner")
    if observability and observability.prometheus_url:
        env[PROMETHEUS_ENV] = observability.prometheus_url
    if env:
        container["env"] = _env(env)
    spec: dict[str, Any] = {"containers": [container]}
    if tracing_of(deployment):  # Dynamo's log filters, in the ConfigMap
        container["volumeMounts"] = [_config_mount()]
        spec["volumes"] = [{"name": "dynamo-oss-config", "configMap": {"name": _config_name(deployment)}}]
    return {"name": "planner", "type": "planner", "replicas": 1, "podTemplate": {"spec": spec}}


def _traced(deployment: Deployment, service: str) -> dict[str, str]:
    """A Dynamo component's OpenTelemetry variables (deployment/tracing.py), as every host process gets them."""
    tracing = tracing_of(deployment)
    if tracing is None:
        return {}
    assert not isinstance(tracing, EmbeddedTracing)  # _cluster_problems refuses it
    return {
        **dynamo_env(tracing, otlp_endpoint(tracing, LOOPBACK), CONFIG_MOUNT / DYNAMO_LOGGING_FILE),
        "OTEL_SERVICE_NAME": service,
    }


def _env(values: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": name, "value": value} for name, value in values.items()]


def _config_mount() -> dict[str, Any]:
    return {"name": "dynamo-oss-config", "mountPath": str(CONFIG_MOUNT), "readOnly": True}


def _pod_monitor(deployment: Deployment, target: ClusterTarget) -> dict[str, Any]:
    """Scrape every pod of the graph on the ports the operator names: the frontend's `http`, the
    workers' `system` and the planner's `metrics`; a pod without the port gives no target. The
    frontend's series get the `dynamo_namespace` Dynamo's planner selects its traffic by, which
    Dynamo's frontend does not set itself: the operator's DYN_NAMESPACE, KUBERNETES-NAMESPACE-NAME."""
    embedded = deployment.observability.embedded_prometheus if deployment.observability else None
    interval = f"{(embedded or EmbeddedPrometheus()).scrape_interval_s:g}s"  # the graph's, else the default
    # Dynamo's frontend: on its own port, or, behind the gateway (on the pod's loopback), through the
    # gateway's metrics port, which the frontend Service does not expose (the endpoint serves no /metrics).
    frontend = ("gateway-metrics", FRONTEND_METRICS_PATH) if deployment.gateway else ("http", "/metrics")
    scraped = [frontend, ("system", "/metrics"), ("metrics", "/metrics"), ("gateway-metrics", "/metrics")]
    endpoints = [{"port": port, "path": path, "interval": interval, "honorLabels": True} for port, path in scraped]
    for endpoint in endpoints:  # the graph's name on every series, as its alert rules select them
        endpoint["relabelings"] = [{"targetLabel": "graph", "replacement": deployment.name}]
    endpoints[0]["relabelings"].append(
        {
            "sourceLabels": ["__meta_kubernetes_namespace"],
            "targetLabel": "dynamo_namespace",
            "replacement": f"$1-{deployment.name}",
        }
    )
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": _metadata(deployment.name, target),
        "spec": {
            "selector": {"matchLabels": {"nvidia.com/dynamo-graph-deployment-name": deployment.name}},
            "podMetricsEndpoints": endpoints,
        },
    }
