"""The Grafana dashboards: committed files match the code, and every panel documents itself."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from dynamo_oss.observe.dashboards import DASHBOARDS, render
from tests.support.commands import REPO, dynamo

COMMITTED = REPO / "deploy" / "grafana" / "dashboards"


def test_committed_dashboards_are_what_the_code_renders() -> None:
    assert sorted(p.name for p in COMMITTED.glob("*.json")) == sorted(f"{name}.json" for name in DASHBOARDS)
    code, out, err = dynamo("dashboard", "write", "--out", str(COMMITTED), "--check")
    assert code == 0, out + err


def test_check_fails_when_a_file_is_stale(tmp_path: Path) -> None:
    for name, text in render().items():
        (tmp_path / name).write_text(text)
    (tmp_path / "overview.json").write_text("{}")
    assert dynamo("dashboard", "write", "--out", str(tmp_path), "--check")[0] == 1


def test_every_panel_has_a_description_a_unit_and_queries() -> None:
    for name, text in render().items():
        board = json.loads(text)
        assert {v["name"] for v in board["templating"]["list"]} == {"datasource", "namespace", "model"}, name
        for panel in board["panels"]:
            assert panel["description"] and panel["fieldConfig"]["defaults"]["unit"], (name, panel["title"])
            assert panel["targets"] and all(t["expr"] for t in panel["targets"]), (name, panel["title"])


def test_provisioning_points_grafana_at_prometheus_and_the_dashboards() -> None:
    provisioning = REPO / "deploy" / "grafana" / "provisioning"
    source = yaml.safe_load((provisioning / "datasources" / "dynamo-oss.yaml").read_text())["datasources"][0]
    assert source["type"] == "prometheus" and source["url"].startswith("http://")
    provider = yaml.safe_load((provisioning / "dashboards" / "dynamo-oss.yaml").read_text())["providers"][0]
    assert provider["type"] == "file" and provider["options"]["path"]
