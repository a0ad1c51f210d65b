"""Each serving figure as its publisher defines it, pinned on two requests computed by hand."""

from __future__ import annotations

import pytest

from dynamo_oss.perf.metrics import DEFINITIONS, RequestRecord, ServingPoint, serving_point

# A: 11 tokens, first at 600 ms, last at 1,100 ms -> ITL (1100 - 600) / 10 = 50 ms.
# B: 5 tokens, sent at 500 ms, first at 200 ms, last at 1,000 ms after sending -> ITL 800 / 4 = 200 ms.
# C: 1 token: no inter-token latency at all.
RECORDS = [
    RequestRecord(input_tokens=100, output_tokens=11, start_ms=0, ttft_ms=600, e2e_ms=1100),
    RequestRecord(input_tokens=100, output_tokens=5, start_ms=500, ttft_ms=200, e2e_ms=1000),
    RequestRecord(input_tokens=50, output_tokens=1, start_ms=100, ttft_ms=300, e2e_ms=300),
]


@pytest.fixture(scope="module")
def point() -> ServingPoint:
    return serving_point(RECORDS, concurrency=2, gpus=2)


def test_tok_s_user_is_aiperfs_mean_of_per_request_rates(point: ServingPoint) -> None:
    assert point.tok_s_user == pytest.approx((1000 / 50 + 1000 / 200) / 2)  # 12.5


def test_inferencemax_interactivity_is_1000_over_the_mean_tpot(point: ServingPoint) -> None:
    assert point.tok_s_user_tpot == pytest.approx(1000 / ((50 + 200) / 2))  # 8.0


def test_osl_over_e2e_counts_the_first_token_wait(point: ServingPoint) -> None:
    assert point.tok_s_user_e2e == pytest.approx((11 / 1.1 + 5 / 1.0 + 1 / 0.3) / 3)


def test_throughput_per_gpu_over_the_benchmark_duration(point: ServingPoint) -> None:
    # First request sent at 0 ms, last response done at 500 + 1000 = 1500 ms.
    assert point.output_tok_s == pytest.approx(17 / 1.5)
    assert point.tok_s_gpu == pytest.approx(17 / 1.5 / 2)
    assert point.total_tok_s_gpu == pytest.approx((17 + 250) / 1.5 / 2)


def test_percentiles_are_over_requests(point: ServingPoint) -> None:
    assert point.ttft_p50_ms == pytest.approx(300)
    assert point.ttft_mean_ms == pytest.approx((600 + 200 + 300) / 3)
    assert point.itl_p50_ms == pytest.approx(125)
    assert point.itl_p99_ms == pytest.approx(50 + 0.99 * 150)


def test_every_figure_names_its_definition() -> None:
    for name, field in ServingPoint.model_fields.items():
        if name.startswith(("tok_s", "total", "output", "gap")):
            assert field.description in DEFINITIONS.values(), name


def test_no_records_is_an_error() -> None:
    with pytest.raises(ValueError):
        serving_point([], concurrency=1, gpus=1)
