"""What the pools' engines hold at a look, read from the forward-pass metrics Dynamo's planner
collects from every engine (the same figures its load mode compares with thresholds)."""

from __future__ import annotations

from collections.abc import Iterator

from dynamo.common.forward_pass_metrics import ForwardPassMetrics, decode
from dynamo.planner.plugins.types import FpmData

from dynamo_oss.planner.sizing import NO_BACKLOG, Backlog


def backlog_of(fpm: FpmData | None, disaggregated: bool) -> Backlog:
    """Prompt tokens queued where prompts are prefilled (the prefill pool, or an aggregated pool, which
    Dynamo files as decode), and the sequences decoding or queued to decode; nothing when no engine
    reported this look."""
    if fpm is None:
        return NO_BACKLOG
    prefilling = fpm.prefill_engines if disaggregated else fpm.decode_engines
    return Backlog(
        prefill_tokens=sum(m.queued_requests.sum_prefill_tokens for m in _engines(prefilling)),
        decode_requests=sum(
            m.scheduled_requests.num_decode_requests + m.queued_requests.num_decode_requests
            for m in _engines(fpm.decode_engines)
        ),
    )


def _engines(payloads: dict[str, bytes]) -> Iterator[ForwardPassMetrics]:
    """Each engine's latest metrics; one Dynamo cannot decode (another version) is skipped, as Dynamo does."""
    for payload in payloads.values():
        metrics = decode(payload)
        if metrics is not None:
            yield metrics
