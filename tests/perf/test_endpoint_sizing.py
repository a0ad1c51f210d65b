"""The endpoint's sizing: the pools' peak output, the measured CPU per token, what the gateway processes
and frontends come to on one host and on a cluster, and the commands that apply and print it."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import yaml

from dynamo_oss.bench.served import measured_copy
from dynamo_oss.cli.check import plan_graph
from dynamo_oss.deployment.model import Deployment, ModelComponent, build_deployment
from dynamo_oss.graph.loader import load_graph
from dynamo_oss.graph.schema import FrontendAutoscaleSection
from dynamo_oss.perf.endpoint import (
    MEASURED_CPU,
    MOST_PROCESSES_PER_POD,
    deployment_peak,
    peak_output,
    size_endpoint,
    sized,
)
from dynamo_oss.perf.layout import Layout, PoolLayout, Precision
from tests.support.commands import REPO, dynamo

# Published gpt-oss-120b output rates per GPU at max throughput (../shared/facts/performance.md):
# TensorRT-LLM tech blog 9, 4 x B200 DP4 EP4 at 1k/2k; NVIDIA's GB200 NVL72 blog, 1.5M tok/s over 72 GPUs.
PUBLISHED_B200_TOK_S_GPU = 19_500
PUBLISHED_NVL72_TOK_S = 1_500_000


def deployment(name: str) -> Deployment:
    return build_deployment(load_graph(REPO / "graphs" / name))


def with_endpoint(base: Deployment, *, processes: int | None = None, replicas: int | None = None) -> Deployment:
    """`base` as if the graph had given gateway.processes and frontend.replicas (None: left to sizing)."""
    gateway = base.gateway.model_copy(update={"processes": processes or 1, "processes_sized": processes is None})
    frontend = base.frontend.model_copy(update={"replicas": replicas or 1, "replicas_sized": replicas is None})
    return base.model_copy(update={"gateway": gateway, "frontend": frontend})


def test_peak_is_positive_and_grows_with_the_decode_workers() -> None:
    layout = Layout(
        hardware="b200",
        precision=Precision(kv_cache="fp8"),
        pools={"prefill": PoolLayout(tp=1), "decode": PoolLayout(workers=1, tp=1, max_batch=256)},
    )
    one, three = peak_output(layout, {"decode": 1}), peak_output(layout, {"decode": 3})
    assert 0 < one.tok_s and three.tok_s == pytest.approx(3 * one.tok_s)
    assert [pool.role for pool in three.pools] == ["decode"]  # prefill produces no output tokens
    assert three.gpus == 3 and three.tok_s_per_gpu == pytest.approx(one.tok_s_per_gpu)
    # A graph's autoscaled pool counts at its most workers: graphs/disagg.yaml's decode goes to 6.
    disagg = deployment_peak(deployment("disagg.yaml"))
    assert disagg.pools[0].workers == 6 and disagg.gpus == 6


def test_the_modelled_per_gpu_rate_is_near_the_published_ones() -> None:
    """The decode-only step leaves out the prompts an aggregated pool also runs, so the model's peak is
    an upper bound: 1.1x the published B200 figure, 1.36x NVIDIA's GB200 rack (whose users run at about
    30 tok/s, the model's 800 sequences a rank at 35). Sizing on it errs towards more processes."""
    b200 = deployment_peak(deployment("agg.yaml"))
    assert 1.0 <= b200.tok_s_per_gpu / PUBLISHED_B200_TOK_S_GPU <= 1.25
    rack = deployment_peak(deployment("gb200-nvl72.yaml"))
    assert rack.gpus == 72
    assert 1.0 <= rack.tok_s / PUBLISHED_NVL72_TOK_S <= 1.5


def test_the_measured_figures_are_the_committed_benchmark_results() -> None:
    results = json.loads((REPO / MEASURED_CPU.source).read_text())
    settings, summary = results["settings"], results["summary"]
    for api in ("chat", "responses", "completions"):
        assert MEASURED_CPU.gateway_us_per_token[api] == summary[api]["gateway_us_per_token"]["median"]
        assert MEASURED_CPU.frontend_us_per_token[api] == summary[api]["frontend_us_per_token"]["median"]
    assert MEASURED_CPU.machine == f"{settings['host_cpu']} ({settings['cores']} cores)"
    assert settings["date"].startswith(MEASURED_CPU.date) and MEASURED_CPU.code == settings["code"]


def test_a_host_with_cores_enough_gets_what_the_peak_needs() -> None:
    sizing = size_endpoint(deployment("disagg.yaml"), cores=64)
    peak = sizing.peak.tok_s
    # Sized on the dearest API per token of each: Responses for the gateway, completions for the frontend.
    gateway_us, frontend_us = MEASURED_CPU.gateway_us_per_token, MEASURED_CPU.frontend_us_per_token
    assert sizing.gateway_processes.value == math.ceil(peak * gateway_us["responses"] / 1e6) == 3
    assert sizing.frontend_replicas.value == math.ceil(peak * frontend_us["completions"] / 1e6) == 4
    assert sizing.gateway_processes.sized and sizing.frontend_replicas.sized and sizing.warnings == []
    chat = next(need for need in sizing.needs if need.api == "chat")
    assert chat.gateway_processes == math.ceil(peak * gateway_us["chat"] / 1e6)


def test_sizing_caps_at_the_hosts_cores_and_says_so() -> None:
    sizing = size_endpoint(deployment("disagg.yaml"), cores=2)
    assert sizing.gateway_processes.value + sizing.frontend_replicas.value == 2
    problems = {problem.path: problem.message for problem in sizing.warnings}
    assert set(problems) == {"gateway.processes", "frontend.replicas"}
    assert "of the 3 that the pools' peak of 88," in problems["gateway.processes"]
    assert (
        "this host's 2 cores" in problems["gateway.processes"] and "serve on 7 cores" in problems["gateway.processes"]
    )


def test_explicit_values_stand_and_warn_when_they_cannot_carry_the_peak(tmp_path: Path) -> None:
    graph = measured_copy(REPO / "graphs" / "disagg.yaml")
    graph["gateway"] = {"processes": 1}
    graph["frontend"]["replicas"] = 9
    path = tmp_path / "given.yaml"
    path.write_text(yaml.safe_dump(graph))
    sizing = size_endpoint(build_deployment(load_graph(path)), cores=64)
    assert (sizing.gateway_processes.value, sizing.gateway_processes.sized) == (1, False)
    assert sizing.gateway_processes.why == "given by the graph" and sizing.frontend_replicas.value == 9
    assert [problem.path for problem in sizing.warnings] == ["gateway.processes"]  # 9 frontends carry it
    message = sizing.warnings[0].message
    assert message.startswith("is 1: 1 gateway processes carry about 42,445 tok/s") and message.endswith("needs 3")


def test_sized_fills_only_what_the_graph_left_to_sizing() -> None:
    given = with_endpoint(deployment("disagg.yaml"), processes=5)
    sizing = size_endpoint(given, cores=64)
    result = sized(given, sizing)
    assert result.gateway.processes == 5 and result.frontend.replicas == 4 == sizing.frontend_replicas.value
    unchanged = {"frontend": {"replicas"}, "gateway": {"processes"}}
    assert result.model_dump(exclude=unchanged) == given.model_dump(exclude=unchanged)
    assert result.gateway.processes_sized is False and result.frontend.replicas_sized is True


def test_a_cluster_sizes_frontend_pods_and_processes_per_pod() -> None:
    shipped = deployment("gb200-nvl72.yaml")
    assert shipped.gateway is not None
    rack = shipped.model_copy(  # the rack's graph with its endpoint left to the sizing
        update={
            "gateway": shipped.gateway.model_copy(update={"processes": 1, "processes_sized": True}),
            "frontend": shipped.frontend.model_copy(update={"autoscale": None, "replicas": 1, "replicas_sized": True}),
        }
    )
    sizing = size_endpoint(rack, cores=None)
    need = math.ceil(sizing.peak.tok_s * MEASURED_CPU.gateway_us_per_token["responses"] / 1e6)
    assert sizing.on_cluster and sizing.gateway_processes.value == MOST_PROCESSES_PER_POD
    assert sizing.frontend_replicas.value == math.ceil(need / MOST_PROCESSES_PER_POD) == 6
    frontend_cores = math.ceil(sizing.peak.tok_s * MEASURED_CPU.frontend_us_per_token["completions"] / 1e6)
    assert sizing.frontend_cores_per_pod == math.ceil(frontend_cores / 6)
    assert sizing.warnings == []  # no host cap on a cluster
    # An autoscaled frontend keeps its min and max, and says when max pods cannot carry the peak.
    frontend = rack.frontend.model_copy(
        update={"autoscale": FrontendAutoscaleSection(min=2, max=4), "replicas": 2, "replicas_sized": False}
    )
    autoscaled = size_endpoint(rack.model_copy(update={"frontend": frontend}), cores=None)
    assert autoscaled.frontend_replicas.value == 2 and not autoscaled.frontend_replicas.sized
    assert [problem.path for problem in autoscaled.warnings] == ["frontend.autoscale.max"]
    assert autoscaled.warnings[0].message.startswith("is 4: 4 pods of 8 gateway processes")
    assert autoscaled.warnings[0].message.endswith(": set it to 6")


def test_a_slowed_mocker_needs_less_and_an_untimed_model_keeps_one_of_each() -> None:
    disagg = deployment("disagg.yaml")
    mocked = disagg.model_copy(update={"pools": [p.model_copy(update={"engine": "mocker"}) for p in disagg.pools]})
    assert deployment_peak(mocked, 4.0).tok_s == pytest.approx(deployment_peak(disagg).tok_s / 4)
    custom = ModelComponent(served_name="my-model", builtin=None, checkout=None)
    sizing = size_endpoint(disagg.model_copy(update={"model": custom}), cores=64)
    assert sizing.peak is None and "not a built-in gpt-oss model" in sizing.not_timed
    assert sizing.gateway_processes.value == sizing.frontend_replicas.value == 1 and sizing.needs == []


def test_check_prints_the_endpoint_of_a_cluster_graph() -> None:
    code, out, err = dynamo("check", str(REPO / "graphs" / "gb200-nvl72.yaml"))
    assert code == 0, err
    section = out[out.index("  endpoint sizing") :]
    assert "per GPU x 72 decoding GPUs" in section and "measured on AMD EPYC (2 cores)" in section
    assert (
        "frontend.replicas  6 pods  (given by the graph: frontend.autoscale starts 6, its HPA grows it to 24)"
        in section
    )
    assert "gateway.processes  8 a pod  (given by the graph)" in section
    assert "responses                23.6         48" in section  # the graph's 6 to 24 pods of 8 carry these 48
    code, out, err = dynamo("check", str(REPO / "graphs" / "gb200-nvl72.yaml"), "--json")
    endpoint = json.loads(out)["endpoint_sizing"]
    assert endpoint["frontend_replicas"]["value"] == 6 and endpoint["peak"]["gpus"] == 72


def test_check_and_serve_start_the_sized_endpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    built, plan = plan_graph(REPO / "graphs" / "disagg.yaml", tmp_path)
    assert built.gateway.processes == 3 and built.frontend.replicas == 4
    assert len([process for process in plan.processes if process.kind == "frontend"]) == 4
    code, out, err = dynamo("check", "graphs/disagg.yaml", "--json")
    checked = json.loads(out)
    frontends = [process for process in checked["processes"] if process["kind"] == "frontend"]
    assert len(frontends) == checked["endpoint_sizing"]["frontend_replicas"]["value"] == 4


def test_plan_prints_the_endpoint_each_layout_needs() -> None:
    plan = "plan --model gpt-oss-20b --hardware h100 --gpus 2 --isl 2048 --osl 128 --concurrency 1,4,16"
    code, out, err = dynamo(*plan.split(), "--keep", "1", "--top", "1")
    assert code == 0, err
    endpoint = [line for line in out.splitlines() if line.startswith("# endpoint: ")]
    assert endpoint and "gateway processes (responses)" in endpoint[0] and "frontends (completions)" in endpoint[0]
    assert "modelled at 2,048 input + 128 output tokens" in endpoint[0]
