"""gptoss workers behind Dynamo's frontend on a lent GPU machine, started as `dynamo serve` starts them,
for the smoke runs and the study: the one way benchmarks/gpu/serving serves a layout.

The frontend's and each worker's command lines come from the project's own FrontendConfig and
GptOssEngine.worker_argv, with Dynamo's file discovery, TCP request plane and ZMQ event plane in place of
etcd and NATS, which the device has not; the graph's other processes (gateway, Prometheus) are not
started. Each worker gets its GPU by CUDA_VISIBLE_DEVICES and a system port of its own. `assets` holds
`model-<name>/` (the model folder the project builds) and `tiktoken/` (the o200k ranks Dynamo's harmony
parsers read), as .whl/serving_assets.tar.xz packs them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

from dynamo_oss.catalog.models import GPT_OSS_20B, GPT_OSS_120B, ModelShape
from dynamo_oss.catalog.names import RouterMode, component_for
from dynamo_oss.deployment.commands import FrontendConfig
from dynamo_oss.engines import WorkerContext
from dynamo_oss.engines.gptoss.engine import ENGINE

REPO = Path(__file__).resolve().parents[3]
ENGINES = REPO / "graphs" / "gptoss" / "engines"
MODELS = {model.name: model for model in (GPT_OSS_20B, GPT_OSS_120B)}
NAMESPACE, PORT, SYSTEM_PORT = "serving", 18000, 18100
READY_TIMEOUT_S = 600.0  # random weights, the largest step once, then the decode graphs


@dataclass(frozen=True)
class Worker:
    name: str
    role: str  # agg, prefill or decode: its engine file is the shipped gpt-oss-120b-h200-ROLE.yaml
    gpu: int
    kv_tokens: int | None = None  # caps its KV (kv_cache_config.max_tokens), to share a GPU with another
    logs_handoffs: bool = False  # a decode worker's handoff_config.timing_log, in the run folder


@dataclass(frozen=True)
class Layout:
    name: str
    workers: tuple[Worker, ...]
    router: RouterMode = "kv"
    gpus: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpus", len({worker.gpu for worker in self.workers}))


def environment(assets: Path, run: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DYN_NAMESPACE": NAMESPACE,
        "DYN_DISCOVERY_BACKEND": "file",
        "DYN_FILE_KV": str(run / "discovery"),
        "DYN_REQUEST_PLANE": "tcp",
        "DYN_EVENT_PLANE": "zmq",
        "DYN_TCP_RPC_HOST": "127.0.0.1",
        "DYN_TCP_RESPONSE_STREAM_HOST": "127.0.0.1",
        "DYN_SYSTEM_HOST": "127.0.0.1",
        "TIKTOKEN_ENCODINGS_BASE": str(assets / "tiktoken"),
        "PYTHONUNBUFFERED": "1",
    }


def handoff_log(worker: Worker, run: Path) -> Path:
    return run / f"{worker.name}-handoffs.jsonl"


def engine_file(worker: Worker, run: Path) -> Path:
    """The shipped engine file of the worker's role, with its KV capped if it shares its GPU and its
    handoffs logged if asked."""
    shipped = ENGINES / f"gpt-oss-120b-h200-{worker.role}.yaml"
    if worker.kv_tokens is None and not worker.logs_handoffs:
        return shipped
    args = yaml.safe_load(shipped.read_text())
    if worker.kv_tokens is not None:
        args["kv_cache_config"]["max_tokens"] = worker.kv_tokens
    if worker.logs_handoffs:
        handoff_log(worker, run).unlink(missing_ok=True)
        args.setdefault("handoff_config", {})["timing_log"] = str(handoff_log(worker, run))
    path = run / f"{worker.name}.yaml"
    path.write_text(yaml.safe_dump(args))
    return path


def commands(assets: Path, model: ModelShape, layout: Layout, run: Path) -> dict[str, list[str]]:
    """The frontend's and each worker's command line, by process name."""
    frontend = FrontendConfig(router=layout.router, migration_limit=0, listen=("127.0.0.1", PORT), namespace=NAMESPACE)
    argv = {"frontend": [sys.executable, *frontend.args()]}
    for worker in layout.workers:
        path = engine_file(worker, run)
        context = WorkerContext(
            role=worker.role,
            served_name=model.served_name,
            model_path=model.served_name,  # not a local folder: random weights of the shape
            model_folder=assets / f"model-{model.name}",
            max_context=model.max_context,
            engine_args_file=path,
            shape=ENGINE.read_shape(path, 1),
            endpoint=f"dyn://{NAMESPACE}.{component_for(worker.role)}.generate",
        )
        argv[worker.name] = [sys.executable, *ENGINE.worker_argv(context)]
    return argv


def wait_served(processes: Mapping[str, subprocess.Popen], model: ModelShape, deadline: float) -> float:
    started = time.monotonic()
    while time.monotonic() < deadline:
        for name, process in processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode} before the model was served")
        try:
            listed = httpx.get(f"http://127.0.0.1:{PORT}/v1/models", timeout=2).json()
            if any(entry["id"] == model.served_name for entry in listed.get("data", [])):
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        time.sleep(1)  # a poll of the frontend's model list, with the deadline above
    raise TimeoutError(f"the model was not served within {READY_TIMEOUT_S:.0f} s")


@contextmanager
def served(layout: Layout, model: ModelShape, assets: Path, logs: Path) -> Iterator[dict]:
    """The layout's processes, yielding once the frontend lists the model (with the command lines and how
    long that took); every process stopped afterwards, whatever happened."""
    run = Path(f"/tmp/served-{layout.name}")
    run.mkdir(exist_ok=True)
    env = environment(assets, run)
    argv = commands(assets, model, layout, run)
    gpus = {worker.name: worker.gpu for worker in layout.workers}
    processes: dict[str, subprocess.Popen] = {}
    try:
        for index, (name, command) in enumerate(argv.items()):
            own = {"DYN_SYSTEM_PORT": str(SYSTEM_PORT + index)}
            if name in gpus:
                own["CUDA_VISIBLE_DEVICES"] = str(gpus[name])
            with (logs / f"{layout.name}-{name}.log").open("w") as log:
                processes[name] = subprocess.Popen(
                    command, env={**env, **own}, stdout=log, stderr=subprocess.STDOUT, cwd=REPO
                )
        ready_s = wait_served(processes, model, time.monotonic() + READY_TIMEOUT_S)
        logs = {worker.name: str(handoff_log(worker, run)) for worker in layout.workers if worker.logs_handoffs}
        yield {
            "commands": {name: command[1:] for name, command in argv.items()},
            "ready_s": ready_s,
            "handoff_logs": logs,
        }
    finally:
        for process in processes.values():
            process.terminate()
        for process in processes.values():
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
