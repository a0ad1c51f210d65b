"""The alert rules (dynamo_oss/observe/alerts.py) under Prometheus's own rule tester: each alert fires on
the series that should page, stays quiet on healthy ones, and the committed copy is current."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.commands import REPO, dynamo

RULES = REPO / "deploy" / "prometheus" / "alert-rules.yml"
GRAPH = "gpt-oss-120b-disagg"  # graphs/disagg.yaml: TTFT p90 2000 ms (late past the 2.2 s bucket), mean ITL 20 ms
N = f'namespace="{GRAPH}"'


def expected(alert: str, **labels: str) -> dict:
    """An alert as promtool expects it: its labels, and its annotations with `$labels` filled in."""
    rule = next(r for r in yaml.safe_load(RULES.read_text())["groups"][0]["rules"] if r.get("alert") == alert)
    all_labels = {**rule["labels"], **labels}
    fill = lambda text: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: all_labels[m[1]], text)  # noqa: E731
    return {"exp_labels": all_labels, "exp_annotations": {k: fill(v) for k, v in rule["annotations"].items()}}


def ttft(within_per_minute: int) -> list[dict]:
    """Ten first tokens a minute, `within_per_minute` of them within the 2.2 s bucket."""
    return [
        {"series": f'{TTFT}_bucket{{{N}, le="2.2"}}', "values": f"0+{within_per_minute}x400"},
        {"series": f"{TTFT}_count{{{N}}}", "values": "0+10x400"},
    ]


def itl(mean_ms: int) -> list[dict]:
    """A hundred gaps a minute of `mean_ms` on average."""
    return [
        {"series": f"{ITL}_sum{{{N}}}", "values": f"0+{mean_ms / 10:g}x400"},
        {"series": f"{ITL}_count{{{N}}}", "values": "0+100x400"},
    ]


def wanted(values: str) -> list[dict]:
    return [{"series": f'dynamo_oss_planner_wanted_workers{{{N}, pool="decode"}}', "values": values}]


TTFT, ITL = "dynamo_frontend_time_to_first_token_seconds", "dynamo_frontend_inter_token_latency_seconds"
ACTING = "1 2 " * 200  # the planner resizing every minute
CASES = {
    "ttft late, planner idle": (
        ttft(2) + itl(15) + wanted("2x400"),
        "90m",
        {
            "TTFTBudgetBurnFast": [expected("TTFTBudgetBurnFast")],
            "TTFTBudgetBurnSlow": [expected("TTFTBudgetBurnSlow")],
            "PlannerNotActing": [expected("PlannerNotActing")],
            "ITLAboveTargetFast": [],
        },
    ),
    "ttft late, planner acting": (
        ttft(2) + itl(15) + wanted(ACTING),
        "90m",
        {"TTFTBudgetBurnFast": [expected("TTFTBudgetBurnFast")], "PlannerNotActing": []},
    ),
    "ttft at the p90 target": (
        ttft(9) + itl(15) + wanted("2x400"),  # one in ten late: what a p90 target allows
        "90m",
        {"TTFTBudgetBurnFast": [], "TTFTBudgetBurnSlow": [], "PlannerNotActing": []},
    ),
    "mean itl over its target": (
        ttft(10) + itl(30) + wanted("2x400"),
        "90m",
        {
            "ITLAboveTargetFast": [expected("ITLAboveTargetFast")],
            "ITLAboveTargetSlow": [expected("ITLAboveTargetSlow")],
            "TTFTBudgetBurnFast": [],
            "PlannerNotActing": [expected("PlannerNotActing")],
        },
    ),
    "healthy, planner holding": (
        ttft(10) + itl(15) + wanted("1x400"),
        "90m",
        {"TTFTBudgetBurnFast": [], "ITLAboveTargetFast": [], "PlannerNotActing": []},
    ),
    "no decode worker": (
        [
            {"series": f'dynamo_oss_pool_workers{{{N}, state="live", pool="decode"}}', "values": "0x10"},
            {"series": f'dynamo_oss_pool_workers{{{N}, state="live", pool="prefill"}}', "values": "1x10"},
        ],
        "5m",
        {"NoWorkerLive": [expected("NoWorkerLive", pool="decode")]},
    ),
    "kv cache full": (
        [
            {
                "series": f'trtllm:kv_cache_usage_perc{{{N}, job="dynamo-workers", process="decode-0"}}',
                "values": "0.97x10",
            },
            {
                "series": f'trtllm:kv_cache_usage_perc{{{N}, job="dynamo-workers", process="decode-1"}}',
                "values": "0.5x10",
            },
        ],
        "8m",
        {"KVCacheNearlyFull": [expected("KVCacheNearlyFull", process="decode-0")]},
    ),
    "requests failing": (
        [
            {
                "series": f'dynamo_oss_gateway_requests_total{{{N}, key="alice", api="chat", status="503"}}',
                "values": "0+10x20",
            },
            {
                "series": f'dynamo_oss_gateway_requests_total{{{N}, key="alice", api="chat", status="200"}}',
                "values": "0+10x20",
            },
        ],
        "12m",
        {"RequestsFailing": [expected("RequestsFailing")]},
    ),
}


def test_the_committed_rules_are_current_and_valid() -> None:
    checked = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 16 rules found" in checked.stdout


def test_a_whole_bound_matches_as_either_prometheus_writes_it(tmp_path: Path) -> None:
    from dynamo_oss.observe.alerts import render

    (tmp_path / "rules.yml").write_text(render("g", 'namespace="g"', 1000, None, False))  # late past the 1 s bound
    series = [
        {"series": f'{TTFT}_bucket{{namespace="g", le="1.0"}}', "values": "0+2x400"},
        {"series": f'{TTFT}_count{{namespace="g"}}', "values": "0+10x400"},
    ]
    tests = {
        "rule_files": [str(tmp_path / "rules.yml")],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": 'dynamo_oss:ttft_late:ratio_rate5m{graph="g"}',
                        "eval_time": "30m",
                        "exp_samples": [{"labels": 'dynamo_oss:ttft_late:ratio_rate5m{graph="g"}', "value": 0.8}],
                    }
                ],
            }
        ],
    }
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(tests))
    result = subprocess.run(["promtool", "test", "rules", str(tmp_path / "tests.yml")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dynamo_dashboard_write_check_covers_the_rules(tmp_path: Path) -> None:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "alert-rules.yml").write_text("groups: []\n")
    code, out, _ = dynamo("dashboard", "write", "--check", "--rules-out", str(tmp_path / "rules"))
    assert code == 1 and f"{tmp_path / 'rules' / 'alert-rules.yml'}: out of date" in out


@pytest.mark.parametrize("case", CASES)
def test_each_alert_fires_when_it_should_and_not_otherwise(case: str, tmp_path: Path) -> None:
    series, at, alerts = CASES[case]
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": at, "alertname": name, "exp_alerts": exp} for name, exp in alerts.items()
                ],
            }
        ],
    }
    path = tmp_path / "tests.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
