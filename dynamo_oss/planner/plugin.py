"""The SLA mode's two stages inside Dynamo's planner, loaded in-process from its configuration.

- `LoadForecast` (predict): Dynamo's own load predictor (`BuiltinLoadPredict`, the one its
  throughput mode uses) over the interactive traffic the planner observes: request count, ISL and OSL
  per look, less the batch work in it (`batch_work`), which both stages take off.
- `SlaPropose` (propose): the fewest workers per autoscaled pool that keep the graph's TTFT and ITL
  targets under the larger of the observed and the predicted load plus the graph's headroom, from
  the calibrated model (`sizing`). It sets every pool it sizes on every look, holding the size when
  it has no traffic to go on, so Dynamo's load thresholds never decide beside it; Dynamo's
  reconcile and constrain stages (minimums, the GPU budget) then apply as to its own proposals.
  The load is sized for on top of what the engines hold at the look (`backlog`), which a rising
  load's window rate has not caught up with yet.
  A pool grows at once; it shrinks, straight down, to the most workers it was sized for over the
  last `scale_down_looks` looks (the stabilisation window of Kubernetes' HorizontalPodAutoscaler),
  so a lull between bursts does not drain workers the next burst needs.

Each look is published as gauges (`metrics`) and, on one host, written to the run folder for the
actuator and `dynamo status` (`look`).
"""

from __future__ import annotations

import logging
import math
import os
from collections import deque
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dynamo.planner.config.planner_config import PlannerConfig
from dynamo.planner.core.types import WorkerCapabilities
from dynamo.planner.plugins.builtins.local_planner import BuiltinLoadPredict
from dynamo.planner.plugins.types import (
    AcceptResult,
    ComponentTarget,
    OverrideResult,
    OverrideType,
    PredictStageRequest,
    PredictStageResponse,
    ProposeStageRequest,
    ProposeStageResponse,
    TrafficMetrics,
)

from dynamo_oss.catalog.names import PROMETHEUS_ENV
from dynamo_oss.perf.layout import Role
from dynamo_oss.planner import metrics
from dynamo_oss.planner.backlog import backlog_of
from dynamo_oss.planner.batch_work import BatchWork, less_batch
from dynamo_oss.planner.look import LOOK_FILE_ENV, Look
from dynamo_oss.planner.sizing import NO_BACKLOG, Load, Sizer, SizingSpec

log = logging.getLogger("dynamo_oss.planner")

SUB_COMPONENT: dict[Role, str] = {"prefill": "prefill", "decode": "decode", "agg": "decode"}  # Dynamo's names


class LoadForecast:
    """Dynamo's load predictor as a predict stage of its own, for the SLA proposal to read."""

    def __init__(self, predictor: str, interval_s: float) -> None:
        config = PlannerConfig.model_construct(
            load_predictor=predictor,
            optimization_target="sla",
            enable_throughput_scaling=True,  # BuiltinLoadPredict predicts only for a planner that plans on throughput
            throughput_adjustment_interval_seconds=int(interval_s),
        )
        self._builtin = BuiltinLoadPredict(config, WorkerCapabilities())
        self.batch_work = BatchWork(os.environ.get(PROMETHEUS_ENV))

    async def Predict(self, request: PredictStageRequest) -> PredictStageResponse:  # noqa: N802 - Dynamo's method name
        """Dynamo's forecast of the interactive traffic: batch work is taken off first (batch_work.py)."""
        context = request.context
        observations = context.observations if context else None
        if context is None or observations is None or observations.traffic is None:
            return await self._builtin.Predict(request)
        traffic, _ = await self.batch_work.interactive(observations.traffic)
        observations = observations.model_copy(update={"traffic": traffic})
        return await self._builtin.Predict(
            request.model_copy(update={"context": context.model_copy(update={"observations": observations})})
        )


class SlaPropose:
    """Sizes the autoscaled pools for the targets on every look (see the module docstring)."""

    def __init__(self, headroom_percent: float = 0.0, scale_down_looks: int = 1, **spec: Any) -> None:
        self.spec = SizingSpec.model_validate(spec)
        self.sizer = Sizer(self.spec)
        self.headroom = 1 + headroom_percent / 100
        self.sized: deque[dict[Role, int]] = deque(maxlen=max(scale_down_looks, 1))  # the latest looks' sizes
        self.shape: tuple[float, float] | None = None  # the last ISL and OSL seen, for idle looks
        self.look_file = Path(os.environ[LOOK_FILE_ENV]) if os.environ.get(LOOK_FILE_ENV) else None
        self.batch_work = BatchWork(os.environ.get(PROMETHEUS_ENV))
        metrics.set_targets(self.spec.ttft_ms, self.spec.itl_ms)

    async def Propose(self, request: ProposeStageRequest) -> ProposeStageResponse:  # noqa: N802 - Dynamo's method name
        context = request.context
        observations = context.observations if context else None
        workers = observations.workers if observations else None
        if workers is None:
            return ProposeStageResponse(accept=AcceptResult())
        current = self._current(workers.expected_prefill, workers.expected_decode)
        traffic, batch = None, NO_BACKLOG
        if observations is not None and observations.traffic is not None:
            traffic, batch = await self.batch_work.interactive(observations.traffic)
        load = self._load(traffic, context.predictions if context else None)
        if load is None:
            return self._answer(current, current, "no traffic observed yet: holding the pools as they are", None)
        backlog = backlog_of(observations.fpm if observations else None, "agg" not in self.spec.layout.pools)
        backlog = less_batch(backlog, batch)
        sizing = self.sizer.size(
            load.model_copy(update={"requests_per_s": load.requests_per_s * self.headroom}), backlog
        )
        reason = (
            f"{sizing.reason}; seen or forecast: {load.requests_per_s:.2f} req/s, sized with "
            f"{self.headroom - 1:.0%} headroom"
        )
        wanted = self._stabilised(current, sizing.workers)
        return self._answer(current, wanted, reason, self.sizer.predict(wanted, load, backlog))  # at the load seen

    def _current(self, prefill: int | None, decode: int | None) -> dict[Role, int]:
        counts = {"prefill": prefill, "decode": decode, "agg": decode}
        return {role: counts[role] or self.spec.ranges[role].min for role in self.spec.ranges}  # type: ignore[misc]

    def _load(self, traffic: TrafficMetrics | None, predictions: Any) -> Load | None:
        """The load to size for: the larger of the last look's and the predicted next one."""
        if traffic is None or traffic.duration_s <= 0:
            return None
        observed = traffic.num_req / traffic.duration_s
        predicted = None
        if predictions is not None and predictions.predicted_num_req is not None:
            predicted = max(predictions.predicted_num_req, 0.0) / traffic.duration_s
        isl, osl = traffic.isl, traffic.osl
        if traffic.num_req > 0 and math.isfinite(isl) and math.isfinite(osl) and isl >= 1 and osl >= 1:
            self.shape = (isl, osl)
        metrics.set_load(observed, predicted, traffic.isl, traffic.osl)
        if self.shape is None:
            return None if observed == 0 and not predicted else Load(requests_per_s=0, isl=1, osl=1)
        hit = traffic.kv_hit_rate if traffic.kv_hit_rate is not None and math.isfinite(traffic.kv_hit_rate) else 0.0
        return Load(
            requests_per_s=max(observed, predicted or 0.0),
            isl=self.shape[0],
            osl=self.shape[1],
            kv_hit_rate=min(max(hit, 0.0), 1.0),
        )

    def _stabilised(self, current: dict[Role, int], sized: dict[Role, int]) -> dict[Role, int]:
        """The most workers each pool was sized for over the window: grows at once, shrinks once the
        window has no look that wanted more. The pools' size when the planner starts counts as a look."""
        if not self.sized:
            self.sized.append(current)
        self.sized.append(sized)
        return {role: max(look.get(role, count) for look in self.sized) for role, count in sized.items()}

    def _answer(
        self, current: dict[Role, int], wanted: dict[Role, int], reason: str, predicted: tuple[float, float] | None
    ) -> ProposeStageResponse:
        metrics.set_look(current, wanted, predicted)
        if wanted != current:
            changes = ", ".join(
                f"{role} {current[role]} -> {count}" for role, count in wanted.items() if count != current[role]
            )
            log.info("proposing %s: %s", changes, reason)
        if self.look_file is not None:
            Look(at=datetime.now(timezone.utc), current=current, wanted=wanted, reason=reason).write(self.look_file)
        targets = [
            ComponentTarget(sub_component_type=SUB_COMPONENT[role], replicas=count, type=OverrideType.SET)
            for role, count in wanted.items()
        ]
        return ProposeStageResponse(override=OverrideResult(targets=targets, reason="dynamo_oss_sla"))
