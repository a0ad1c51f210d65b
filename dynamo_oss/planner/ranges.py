"""The graph's pool ranges as a constrain stage inside Dynamo's planner, in both modes.

Dynamo's planner knows one GPU budget for all pools, not each pool's `autoscale: {min, max}`. Its
load mode would propose a fifth decode worker for a pool of at most four whenever the budget had
room; the launcher refuses that, and since Dynamo's virtual connector counts scaling as in progress
until the pools reach the proposed size, the planner then waited for ever. As a constrain stage
(AT_LEAST min, AT_MOST max for each autoscaled pool) the ranges cap every proposal, Dynamo's own
and the sla mode's, before it becomes a decision.
"""

from __future__ import annotations

from dynamo.planner.plugins.types import (
    ComponentTarget,
    ConstrainStageRequest,
    ConstrainStageResponse,
    OverrideResult,
    OverrideType,
)

from dynamo_oss.perf.layout import Role
from dynamo_oss.planner.plugin import SUB_COMPONENT
from dynamo_oss.planner.sizing import Range


class PoolRanges:
    """AT_LEAST min and AT_MOST max for each autoscaled pool, on every look."""

    def __init__(self, ranges: dict[Role, dict[str, int]]) -> None:
        bounds = {role: Range.model_validate(pool) for role, pool in ranges.items()}
        self.targets = [
            ComponentTarget(sub_component_type=SUB_COMPONENT[role], replicas=count, type=kind)
            for role, pool in bounds.items()
            for count, kind in ((pool.min, OverrideType.AT_LEAST), (pool.max, OverrideType.AT_MOST))
        ]

    async def Constrain(self, request: ConstrainStageRequest) -> ConstrainStageResponse:  # noqa: N802 - Dynamo's name
        return ConstrainStageResponse(override=OverrideResult(targets=self.targets, reason="dynamo_oss_pool_ranges"))
