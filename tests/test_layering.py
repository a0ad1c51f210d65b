"""Packages import only downward: catalog facts, assets, the graph schema, engines, the gateway (whose
configuration the deployment builds), the deployment model and its renderers, then perf, conformance and the dashboards, launch, the planner, live benchmarks, and the commands."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "dynamo_oss"
LAYERS = [
    "catalog",
    "assets",
    "graph",
    "engines",
    "gateway",
    "deployment",
    "perf",
    "conformance",
    "observe",
    "launch",
    "planner",
    "bench",
    "cli",
]


def imported_packages(path: Path) -> set[str]:
    """The dynamo_oss packages a module imports, at any depth in the file (lazy imports count too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        found |= {name.split(".")[1] for name in names if name.startswith("dynamo_oss.") and name.count(".") >= 1}
    return found


def layer_violations() -> list[str]:
    violations = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        own = relative.parts[0] if len(relative.parts) > 1 else None
        if own is None:
            continue  # dynamo_oss/__init__.py
        for imported in imported_packages(path):
            if imported != own and LAYERS.index(imported) > LAYERS.index(own):
                violations.append(f"{relative}: {own} imports {imported}, a layer above it")
    return violations


def test_every_package_has_a_layer() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(LAYERS)
    assert [p.name for p in PACKAGE.glob("*.py")] == ["__init__.py"]  # no module outside the layers


def test_packages_import_only_downward() -> None:
    assert layer_violations() == []


def test_the_check_would_catch_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "upward.py"
    module.write_text("def f():\n    from dynamo_oss.perf.layout import Layout\n")
    assert imported_packages(module) == {"perf"}
    assert LAYERS.index("perf") > LAYERS.index("engines")
