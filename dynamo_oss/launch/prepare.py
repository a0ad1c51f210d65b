"""From a deployment to the host plan `dynamo check` prints and `dynamo serve` runs.

This is where the layers meet: the deployment is timed by the performance model when pools run
on the mocker and placed on this host, beside the planner configuration its caller made. Nothing
here writes into the run folder; `write_plan_files` does, when the graph is served.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dynamo_oss.assets import model_folder, tiktoken_encodings_dir
from dynamo_oss.catalog.errors import UserError
from dynamo_oss.conformance.replay import replay_trace
from dynamo_oss.deployment.host import HostPlan, alert_rules_file, plan_host
from dynamo_oss.deployment.model import Deployment
from dynamo_oss.engines import PlannedFile
from dynamo_oss.observe.alerts import render as render_alert_rules
from dynamo_oss.perf.graphs import simulated_timings

PROFILES_FOLDER = "profiles"
SUITE_RESPONSES = "conformance-responses.jsonl"


def prepare(
    deployment: Deployment,
    node: str | None = None,
    *,
    run_dir: Path,
    planner: dict[str, Any] | None = None,
    mocker_responses: Path | None = None,
    mocker_time_scale: float = 1.0,
) -> HostPlan:
    """Time a deployment and plan `node`'s share of it (default: the node running the infrastructure),
    with `planner` (dynamo_oss.planner.settings) for its autoscaled pools; GraphError lists whatever
    stops it from running there."""
    if mocker_responses is not None:
        mocker_responses = _replay_trace(mocker_responses, deployment)
    timings = simulated_timings(deployment, run_dir / PROFILES_FOLDER, mocker_time_scale)
    if mocker_time_scale != 1.0 and not timings:
        raise UserError(
            "--mocker-time-scale: no pool runs the mocker at a modelled speed (add --engine mocker, with a built-in model)"
        )
    folder = model_files(deployment)
    suite = None
    if mocker_responses is None and "mocker" in deployment.engines:
        # The mocker answers the conformance suite's annotated requests with the suite's recorded
        # harmony, as a model would; every other request gets a generated answer.
        suite = PlannedFile(
            path=run_dir / SUITE_RESPONSES,
            purpose="conformance suite's recorded answers, replayed by the mocker",
            content=replay_trace().encode(),
        )
    plan = plan_host(
        deployment,
        node,
        run_dir=run_dir,
        model_folder=folder,
        encodings_dir=tiktoken_encodings_dir(),
        timings=timings,
        mocker_responses=suite.path if suite else mocker_responses,
        planner=planner,
    )
    if suite:
        plan.files.append(suite)
    if any(process.kind == "prometheus" for process in plan.processes):
        plan.files.append(
            PlannedFile(
                path=alert_rules_file(run_dir),
                purpose="the graph's alert rules, which its Prometheus loads",
                content=graph_alert_rules(deployment).encode(),
            )
        )
    return plan


def graph_alert_rules(deployment: Deployment, selector: str | None = None, launcher: bool = True) -> str:
    """The graph's alert rules (dynamo_oss.observe.alerts), its series picked by `selector` (default:
    the `namespace` label the graph's own Prometheus gives them); `launcher`: `dynamo serve` runs it
    and reports its pools."""
    planner = deployment.planner
    return render_alert_rules(
        deployment.name,
        selector or f'namespace="{deployment.namespace}"',
        planner.ttft_ms if planner else None,
        planner.itl_ms if planner else None,
        planner is not None,
        launcher,
    )


def model_files(deployment: Deployment) -> Path:
    """The folder with the model's tokenizer, config and chat template: a built-in model's offline
    folder (made in the shared cache on first use), else the graph's checkout."""
    model = deployment.model
    folder = model_folder(model.shape) if model.shape else model.checkout
    assert folder is not None, "the schema requires a path for a model it does not know"
    return folder


def _replay_trace(trace: Path, deployment: Deployment) -> Path:
    """--mocker-responses, resolved: a file that exists, for a graph with a mocker pool."""
    trace = trace.resolve()
    if not trace.is_file():
        raise UserError(f"--mocker-responses: file not found: {trace}")
    if "mocker" not in deployment.engines:
        raise UserError("--mocker-responses: no pool runs the mocker; add --engine mocker to replay recorded responses")
    return trace


def write_plan_files(plan: HostPlan) -> None:
    """Write every file the plan's command lines name (mocker timing profiles)."""
    for file in plan.files:
        file.write()
