"""The speculative step in the cost model: drafting and verifying N + 1 positions costs more than a plain
step, gains the tokens a workload accepts, and stops paying once the batch makes verification dear."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dynamo_oss.catalog.hardware import HARDWARE
from dynamo_oss.catalog.models import GPT_OSS_120B
from dynamo_oss.perf.calibration import SPECULATIVE_BATCHES, speedups
from dynamo_oss.perf.costs import CostModel, fitted_factors
from dynamo_oss.perf.layout import Layout, PoolLayout, Precision, Workload
from dynamo_oss.perf.replay import simulate
from dynamo_oss.perf.search import candidate_layouts, draft_choices, steady_state
from dynamo_oss.perf.speculation import AGENTIC, CHAT, AcceptanceProfile

FACTORS = fitted_factors()
BATCHES = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048])
NOTHING_ACCEPTED = AcceptanceProfile(name="none", rates=(0.0,) * 8, source="every draft rejected")


def cost(drafts: int, hardware: str = "h200", tp: int = 8) -> CostModel:
    pool = PoolLayout(tp=tp, draft_tokens=drafts, max_batch=4096)
    return CostModel(GPT_OSS_120B, HARDWARE[hardware], pool, Precision(kv_cache="fp8"), factors=FACTORS)


def gain(drafts: int, profile: AcceptanceProfile = CHAT, context: int = 2048, **where: object) -> np.ndarray:
    """Output tokens per second with `drafts` drafts a step over without, at each of BATCHES."""
    plain, speculative = cost(0, **where).decode_ms(BATCHES, context), cost(drafts, **where).decode_ms(BATCHES, context)
    return profile.tokens_per_step(drafts) * plain / speculative


def test_profiles_give_the_published_acceptance_lengths() -> None:
    """vLLM pull request 32628's per-position acceptance, summed: 2.24 tokens a step at 3 drafts on MT-Bench."""
    assert CHAT.tokens_per_step(3) == pytest.approx(1 + 0.63 + 0.38 + 0.23, abs=1e-3)
    assert AGENTIC.tokens_per_step(3) == pytest.approx(1 + 0.71 + 0.49 + 0.32, abs=1e-3)
    assert CHAT.tokens_per_step(0) == 1.0
    assert all(CHAT.tokens_per_step(n) < CHAT.tokens_per_step(n + 1) for n in range(5))


@pytest.mark.parametrize("drafts", [1, 3, 5])
def test_an_acceptance_length_of_one_gains_nothing(drafts: int) -> None:
    """With every draft rejected a step yields its one token, so speculation only adds the drafting and the
    verification: slower at every batch, on every layout."""
    assert NOTHING_ACCEPTED.tokens_per_step(drafts) == 1.0
    for where in ({"hardware": "h200", "tp": 8}, {"hardware": "b200", "tp": 1}):
        assert np.all(gain(drafts, NOTHING_ACCEPTED, **where) < 1.0), where


@pytest.mark.parametrize("drafts", [1, 3, 5])
def test_n_drafts_at_batch_1_cost_a_fraction_of_n_more_steps_and_pay(drafts: int) -> None:
    """At batch 1 a step reads the weights once for all N + 1 positions: it costs more than a plain step,
    far less than N + 1 of them, and the tokens a chat workload accepts more than pay for it."""
    plain, speculative = float(cost(0).decode_ms(1, 2048)), float(cost(drafts).decode_ms(1, 2048))
    assert plain < speculative < (1 + 0.5 * drafts) * plain
    assert 1.4 < float(gain(drafts)[0]) < CHAT.tokens_per_step(drafts)


def test_speculation_stops_paying_past_a_batch_and_sooner_with_more_drafts() -> None:
    """At large batches verifying N + 1 positions a sequence makes the step compute- and overhead-bound: the
    gain falls below 1, first for the most drafts. Measured on 8 H200s (TensorRT-LLM pull request 12130) the
    gain fell from 1.97x at batch 1 to 1.3-1.5x at 32-64."""
    stops = {}
    for drafts in (1, 3, 5):
        paying = gain(drafts) >= 1.0
        assert paying[0] and not paying[-1], drafts
        first_loss = int(np.argmin(paying))
        assert np.all(paying[:first_loss]) and not np.any(paying[first_loss:]), drafts
        stops[drafts] = int(BATCHES[first_loss])
    assert stops[5] < stops[3] <= stops[1]
    assert 128 <= stops[3] <= 512


def test_the_replay_gives_the_published_speedups_within_15_percent() -> None:
    """The speculative factors are fitted on these ratios (dynamo calibrate --refit); the replay drives
    Dynamo's mocker with --aic-nextn at chat acceptance, so this also checks the mocker honours the step."""
    for s in speedups(FACTORS, SPECULATIVE_BATCHES):
        assert s.predicted == pytest.approx(s.published, rel=0.15), s.batch


def test_the_mockers_speculative_tokens_come_at_the_models_pace() -> None:
    """Dynamo's mocker draws each step's accepted drafts and emits them together: its time per output
    token is the model's speculative step over the tokens a step gains."""
    layout = Layout(hardware="h200", pools={"agg": PoolLayout(tp=8, draft_tokens=3)})
    workload = Workload(isl=128, osl=2048)
    (point,) = simulate(layout, workload, [1], requests=8, factors=FACTORS)
    step = float(CostModel.for_pool(layout, "agg", FACTORS).decode_ms(1, 128 + 1024))
    assert 1000 / point.tok_s_user_tpot == pytest.approx(step / CHAT.tokens_per_step(3), rel=0.1)


def test_plan_speculates_for_speed_and_drafts_less_for_density() -> None:
    """Over every layout of 8 B200s at 8k/1k, the most interactive point drafts several tokens; the densest
    point drafts fewer (or none): its batch is where verification is dear."""
    workload = Workload(isl=8192, osl=1024)
    layouts = candidate_layouts(
        "gpt-oss-120b", "b200", 8, workload, precision=Precision(kv_cache="fp8"), drafts=draft_choices("gpt-oss-120b")
    )
    curves = [(layout, steady_state(layout, workload, FACTORS)) for layout in layouts]
    fastest = max(((layout, curve[:, 1].max()) for layout, curve in curves if len(curve)), key=lambda x: x[1])[0]
    densest = max(((layout, curve[:, 0].max()) for layout, curve in curves if len(curve)), key=lambda x: x[1])[0]
    drafts = {
        layout.describe(): max(pool.draft_tokens for pool in layout.pools.values()) for layout in (fastest, densest)
    }
    assert drafts[fastest.describe()] >= 3
    assert drafts[densest.describe()] < drafts[fastest.describe()]
    assert draft_choices("gpt-oss-20b") == (0,)  # no published head for the engine files to name


def test_the_planner_sizes_a_speculative_decode_pool_on_its_time_per_token() -> None:
    """The SLA planner's ITL for a speculative pool is its step over the tokens the step gains."""
    from dynamo_oss.planner.sizing import Load, Range, Sizer, SizingSpec

    def sizer(drafts: int) -> Sizer:
        layout = Layout(
            hardware="b200",
            precision=Precision(kv_cache="fp8"),
            pools={"prefill": PoolLayout(draft_tokens=drafts), "decode": PoolLayout(draft_tokens=drafts)},
        )
        return Sizer(SizingSpec(layout=layout, ranges={"decode": Range(min=1, max=8)}, ttft_ms=5000, itl_ms=8))

    load = Load(requests_per_s=1.0, isl=2048, osl=512)
    plain, speculative = sizer(0), sizer(3)
    assert speculative.decode_token_ms(1, load) == pytest.approx(
        speculative.decode_step_ms(1, load) / CHAT.tokens_per_step(3)
    )
    assert speculative.predict({"decode": 1}, load)[1] < plain.predict({"decode": 1}, load)[1]
    assert not math.isinf(speculative.predict({"decode": 1}, load)[1])
