"""The sla planner's sizing against the calibrated model: each pool gets the fewest workers whose
predicted latency keeps its target (met at that size, missed at one fewer), within its range; a
graph whose targets no size can meet is refused by `dynamo check` with the best the model predicts;
and the propose stage Dynamo's planner calls turns a look at the traffic into set pool sizes."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest
import yaml

from dynamo_oss.deployment.model import build_deployment
from dynamo_oss.graph.loader import load_graph
from dynamo_oss.planner.settings import planner_config, sizing_spec
from dynamo_oss.planner.sizing import Backlog, Load, Sizer, erlang_c, queue_wait_ms
from tests.support.commands import REPO, dynamo
from tests.support.graphs import SLA_HIGH, SLA_LOW, SLA_PROMPT_WORDS, SLA_SLOW, SLA_TOKENS, write_sla_graph
from tests.support.ports import free_port_run

README_GRAPH = REPO / "graphs" / "disagg.yaml"
LOADS = [
    Load(requests_per_s=rate, isl=isl, osl=osl, kv_hit_rate=hit)
    for rate in (0.2, 1, 3, 6, 12)
    for isl, osl, hit in ((32768, 1024, 0.0), (8192, 512, 0.5), (1024, 256, 0.0))
]


def sizer_of(graph: Path, time_scale: float = 1.0) -> Sizer:
    return Sizer(sizing_spec(build_deployment(load_graph(graph)), time_scale))


@pytest.mark.parametrize("load", LOADS, ids=lambda load: f"{load.requests_per_s}rps-{load.isl}-{load.kv_hit_rate}")
def test_each_pool_gets_the_fewest_workers_that_keep_its_target(load: Load) -> None:
    sizer = sizer_of(README_GRAPH)
    spec = sizer.spec
    sizing = sizer.size(load)
    sizes = sizing.workers
    ttft, itl = sizer.predict(sizes, load)
    assert (ttft, itl) == (sizing.ttft_ms, sizing.itl_ms)
    for role, kept, index in (("decode", spec.itl_ms, 1), ("prefill", spec.ttft_ms, 0)):
        allowed = spec.ranges[role]
        assert allowed.min <= sizes[role] <= allowed.max
        if sizer.predict(sizes, load)[index] <= kept:  # met at the size...
            if sizes[role] > allowed.min:  # ...and missed at one fewer
                assert sizer.predict({**sizes, role: sizes[role] - 1}, load)[index] > kept
        else:  # missed only where the range ends, and the reason says so
            assert sizes[role] == allowed.max and f"{role} {allowed.max} (its most" in sizing.reason


def test_more_load_never_needs_fewer_workers() -> None:
    sizer = sizer_of(README_GRAPH)
    for isl, osl in ((32768, 1024), (2048, 256)):
        sizes = [
            sizer.size(Load(requests_per_s=rate, isl=isl, osl=osl)).workers
            for rate in (0, 0.5, 1, 2, 4, 8, 16, 32, 64, 128)
        ]
        for role in ("prefill", "decode"):
            counts = [size[role] for size in sizes]
            assert counts == sorted(counts) and counts[0] == 1, (role, counts)
        assert sizes[-1] != {"prefill": 1, "decode": 1}


def test_cached_prompt_tokens_need_less_prefill() -> None:
    sizer = sizer_of(README_GRAPH)
    cold = Load(requests_per_s=8, isl=32768, osl=1024)
    warm = cold.model_copy(update={"kv_hit_rate": 0.75})
    assert sizer.prefill_ms("prefill", warm) < 0.5 * sizer.prefill_ms("prefill", cold)
    assert sizer.size(warm).workers["prefill"] < sizer.size(cold).workers["prefill"]


def test_what_the_engines_hold_now_counts_before_the_window_rate_catches_up() -> None:
    """A rate seen over a window lags a rising load; prompts already queued and sequences already
    decoding do not: each queued prompt adds its prefill to the wait, shared by the prefill workers,
    and the decode batch is at least the sequences decoding now."""
    sizer = sizer_of(README_GRAPH)
    load = Load(requests_per_s=0.5, isl=32768, osl=1024)
    quiet = sizer.size(load)
    sizes = quiet.workers
    prefill = sizer.prefill_ms("prefill", load)
    prompts = math.ceil((sizer.spec.ttft_ms - quiet.ttft_ms) / prefill * sizes["prefill"])  # enough to miss the target
    queued = Backlog(prefill_tokens=prompts * 32768)
    assert sizer.predict(sizes, load, queued)[0] == pytest.approx(quiet.ttft_ms + prompts * prefill / sizes["prefill"])
    assert sizer.predict(sizes, load, queued)[0] > sizer.spec.ttft_ms
    assert sizer.size(load, queued).workers["prefill"] > sizes["prefill"]
    decoding = Backlog(decode_requests=400)
    assert sizer.predict(sizes, load, decoding)[1] > quiet.itl_ms
    assert sizer.size(load, decoding).workers["decode"] > sizes["decode"]
    assert "on top of 0 prompt tokens queued, 400 sequences decoding" in sizer.size(load, decoding).reason
    assert sizer.size(load, Backlog(decode_requests=1)).workers == sizes  # fewer than the rate settles at: no change


def test_the_backlog_is_read_from_each_engines_forward_pass_metrics(dynamo_planner_config: type) -> None:
    from dynamo.common.forward_pass_metrics import (
        ForwardPassMetrics,
        QueuedRequestMetrics,
        ScheduledRequestMetrics,
        encode,
    )
    from dynamo.planner.plugins.types import FpmData

    from dynamo_oss.planner.backlog import backlog_of

    def engine(queued_tokens: int = 0, decoding: int = 0, preempted: int = 0) -> bytes:
        return encode(
            ForwardPassMetrics(
                scheduled_requests=ScheduledRequestMetrics(num_decode_requests=decoding),
                queued_requests=QueuedRequestMetrics(sum_prefill_tokens=queued_tokens, num_decode_requests=preempted),
            )
        )

    fpm = FpmData(
        prefill_engines={"a/0": engine(queued_tokens=4096), "b/0": engine(queued_tokens=1000), "c/0": b"not msgpack"},
        decode_engines={"d/0": engine(decoding=7, preempted=1, queued_tokens=99), "e/0": engine(decoding=2)},
    )
    assert backlog_of(fpm, disaggregated=True) == Backlog(prefill_tokens=5096, decode_requests=10)
    assert backlog_of(fpm, disaggregated=False) == Backlog(prefill_tokens=99, decode_requests=10)  # agg files as decode
    assert backlog_of(None, disaggregated=True) == Backlog()


def test_the_queue_model_matches_textbook_values() -> None:
    assert erlang_c(1, 0.5) == pytest.approx(0.5)  # M/M/1: an arrival waits with probability rho
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)  # M/M/2 at a = 1
    # M/D/1 at rho 0.5, 100 ms service: P(wait > t) ~ 0.5 exp(-2 (mu - lambda) t); its p90 is ln 5 / 10 per s.
    assert queue_wait_ms(1, 5, 100, 0.9) == pytest.approx(1e3 * math.log(5) / 10)
    assert queue_wait_ms(1, 10, 100, 0.9) == math.inf  # the server cannot keep up
    assert queue_wait_ms(4, 0.1, 100, 0.9) == 0  # almost nobody waits


def test_the_live_ramp_is_sized_one_then_two_of_each(tmp_path: Path) -> None:
    """What tests/planner/test_autoscale_sla.py's ramp relies on, predicted offline for its graph."""
    sizer = sizer_of(write_sla_graph(tmp_path), SLA_SLOW)
    isl = SLA_PROMPT_WORDS + 80  # the words are a token each, beside the chat template's
    low, high = (Load(requests_per_s=rate, isl=isl, osl=SLA_TOKENS) for rate in (SLA_LOW, SLA_HIGH))
    assert sizer.size(low).workers == {"prefill": 1, "decode": 1}
    assert sizer.size(high).workers == {"prefill": 2, "decode": 2}
    assert max(sizer.predict({"prefill": 2, "decode": 2}, high)) < math.inf


def check_refused(path: Path) -> str:
    code, out, err = dynamo("check", str(path))
    assert code == 2 and "nothing was started" in err, out + err
    return err


def changed_sla_graph(tmp_path: Path, change: dict) -> Path:
    """write_sla_graph's graph with sections merged from `change`; a None value removes the key."""
    path = write_sla_graph(tmp_path)
    graph = yaml.safe_load(path.read_text())
    for section, fields in change.items():
        if fields is None:
            del graph[section]
            continue
        graph[section] = {**graph[section], **fields}
        graph[section] = {key: value for key, value in graph[section].items() if value is not None}
    path.write_text(yaml.safe_dump(graph))
    return path


def test_targets_no_size_can_meet_are_refused_with_the_best_the_model_predicts(tmp_path: Path) -> None:
    err = check_refused(changed_sla_graph(tmp_path, {"planner": {"itl_ms": 0.5, "ttft_ms": 1}}))
    assert (
        "planner.itl_ms: 0.5 ms is below the fastest decode step the performance model predicts for this "
        "layout (disagg P 1xTP1 + D 1xTP1 on h200): "
        in err
        and " ms at batch 1; no number of workers meets it" in err
    )
    assert "planner.ttft_ms: 1 ms is below the fastest first token" in err


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"planner": {"mode": "fast"}}, "planner.mode: Input should be 'sla' or 'load'"),
        ({"observability": None}, "planner.mode: sla reads the request rate and lengths from Prometheus"),
        (
            {"pools": {"decode": {"autoscale": {"min": 1, "max": 4}, "engine": "mocker"}}},
            "pools.decode.autoscale.max: 4 workers of 1 GPUs beside the other pools' 1 need 5 GPUs, but the host has 4; "
            "lower max to at most 3",
        ),
        ({"pools": {"decode": {"autoscale": {"min": 3, "max": 2}, "engine": "mocker"}}}, "max must be at least min"),
        ({"planner": {"itl_ms": None}}, "planner.itl_ms: Field required"),
    ],
    ids=["unknown mode", "no prometheus", "range past the gpus", "min above max", "no itl target"],
)
def test_bad_planner_sections_are_named(tmp_path: Path, change: dict, named: str) -> None:
    assert named in check_refused(changed_sla_graph(tmp_path, change))


def test_the_planner_runs_the_plugins_at_the_mocker_speed_it_sizes_for(tmp_path: Path) -> None:
    deployment = build_deployment(load_graph(write_sla_graph(tmp_path)))
    config = planner_config(deployment, mocker_time_scale=SLA_SLOW)
    assert config is not None and config["optimization_target"] == "load" and config["mode"] == "disagg"
    plugins = {entry["class"]: entry for entry in config["plugin_registration"]["in_process_plugins"]}
    assert plugins["SlaPropose"]["kwargs"]["time_scale"] == SLA_SLOW
    assert plugins["SlaPropose"]["priority"] < 10  # ahead of Dynamo's load proposal, whose sizes it replaces
    assert plugins["LoadForecast"]["kwargs"]["predictor"] == "kalman"
    # It looks every 2 s at the traffic of the last 4 s: four of the graph's 1 s scrapes.
    assert (
        plugins["SlaPropose"]["execution_interval_seconds"] == 2
        and plugins["SlaPropose"]["observation_window_seconds"] == 4
    )
    assert config["throughput_adjustment_interval_seconds"] == 4


@pytest.fixture
def propose(tmp_path: Path, dynamo_planner_config: type):  # noqa: ANN201 - returns a closure
    """The sla propose stage for write_sla_graph's graph, and a way to show it one look."""
    from dynamo.planner.plugins.types import (
        ObservationData,
        PipelineContext,
        PredictionData,
        ProposeStageRequest,
        TrafficMetrics,
        WorkerState,
    )

    from dynamo_oss.planner.plugin import SlaPropose

    config = planner_config(build_deployment(load_graph(write_sla_graph(tmp_path))), SLA_SLOW)
    entry = next(e for e in config["plugin_registration"]["in_process_plugins"] if e["class"] == "SlaPropose")
    stage = SlaPropose(**entry["kwargs"])

    def look(rate: float | None, current: tuple[int, int], predicted: float | None = None) -> dict[str, int]:
        traffic = None if rate is None else TrafficMetrics(duration_s=2, num_req=2 * rate, isl=3080, osl=100)
        workers = WorkerState(expected_prefill=current[0], expected_decode=current[1])
        predictions = None if predicted is None else PredictionData(predicted_num_req=2 * predicted)
        context = PipelineContext(
            observations=ObservationData(traffic=traffic, workers=workers), predictions=predictions
        )
        response = asyncio.run(stage.Propose(ProposeStageRequest(context=context)))
        return {target.sub_component_type: target.replicas for target in response.override.targets}

    look.stage = stage  # type: ignore[attr-defined]
    return look


def test_the_propose_stage_grows_at_once_and_shrinks_to_the_most_its_window_wanted(propose) -> None:  # noqa: ANN001
    assert propose(None, (1, 1)) == {"prefill": 1, "decode": 1}  # no traffic yet: it holds
    assert propose(SLA_HIGH, (1, 1)) == {"prefill": 2, "decode": 2}
    wanted = [propose(SLA_LOW, (2, 2)) for _ in range(5)]  # scale_down_after_s: 10 s of 2 s looks
    assert wanted[:-1] == [{"prefill": 2, "decode": 2}] * 4 and wanted[-1] == {"prefill": 1, "decode": 1}
    assert propose(SLA_LOW, (1, 1), predicted=SLA_HIGH) == {"prefill": 2, "decode": 2}  # the forecast counts


def test_the_propose_stage_sizes_with_the_graphs_headroom(propose) -> None:  # noqa: ANN001
    """The low rate plus 20% stays at one worker each; a rate one worker keeps only without the 20% gets two."""
    sizer = propose.stage.sizer
    load = Load(requests_per_s=SLA_LOW, isl=3080, osl=SLA_TOKENS)
    rate = next(
        r / 100
        for r in range(20, 250)
        if sizer.size(load.model_copy(update={"requests_per_s": r / 100 * 1.2})).workers != {"prefill": 1, "decode": 1}
    )
    assert sizer.size(load.model_copy(update={"requests_per_s": rate})).workers == {"prefill": 1, "decode": 1}
    assert propose(SLA_LOW, (1, 1)) == {"prefill": 1, "decode": 1}
    assert propose(rate, (1, 1)) != {"prefill": 1, "decode": 1}


def test_an_aggregated_pool_is_sized_for_both_targets(tmp_path: Path) -> None:
    path = write_sla_graph(tmp_path)
    graph = yaml.safe_load(path.read_text())
    graph["pools"] = {"agg": {"autoscale": {"min": 1, "max": 4}, "engine": "mocker", "system_port": free_port_run(4)}}
    path.write_text(yaml.safe_dump(graph))
    sizer = sizer_of(path, SLA_SLOW)
    grown = set()
    for rate in (0.1, 0.5, 1, 2, 4):
        load = Load(requests_per_s=rate, isl=2048, osl=SLA_TOKENS)
        workers = sizer.size(load).workers["agg"]
        grown.add(workers)
        ttft, itl = sizer.predict({"agg": workers}, load)
        assert (ttft <= 1500 and itl <= 40) or workers == 4
        if workers > 1:
            fewer = sizer.predict({"agg": workers - 1}, load)
            assert fewer[0] > 1500 or fewer[1] > 40
    assert len(grown) > 1
    config = planner_config(build_deployment(load_graph(path)), SLA_SLOW)
    assert config["mode"] == "agg" and config["min_endpoint"] == 1
