"""What the engine tells Dynamo, in Dynamo's own formats: each step's forward-pass metrics (which the
planner reads; `FpmDirectPublisher.publish`'s arguments, as Dynamo's TensorRT-LLM worker fills them), the
KV events of its full-attention pool (which the KV router's prefix tree is built from;
`KvEventPublisher.publish_batch`'s events), and the KV usage snapshot behind the worker's
`dynamo_component_*` gauges and the router's load signal (`ComponentSnapshot`)."""

from __future__ import annotations

from typing import Any

from dynamo.common.backend.publisher import ComponentSnapshot

from dynamo_oss.engines.gptoss.block_manager import KvCacheManager, KvEvent, KvStored
from dynamo_oss.engines.gptoss.scheduler import StepLoad


def forward_pass_fields(load: StepLoad, wall_time_s: float, dp_rank: int = 0) -> dict[str, Any]:
    """One step's `FpmDirectPublisher.publish` keyword arguments."""
    return {
        "dp_rank": dp_rank,
        "scheduled_num_prefill_requests": load.prefill_requests,
        "scheduled_sum_prefill_tokens": load.prefill_tokens,
        "scheduled_sum_prefill_kv_tokens": load.prefill_kv_tokens,
        "scheduled_num_decode_requests": load.decode_requests,
        "scheduled_sum_decode_kv_tokens": load.decode_kv_tokens,
        "queued_num_prefill_requests": load.queued_prefill_requests,
        "queued_sum_prefill_tokens": load.queued_prefill_tokens,
        "queued_num_decode_requests": load.queued_decode_requests,
        "queued_sum_decode_kv_tokens": load.queued_decode_kv_tokens,
        "wall_time_secs": wall_time_s,
    }


def kv_event_batch(events: list[KvEvent]) -> list[dict[str, Any]]:
    """The events as `KvEventPublisher.publish_batch` takes them, in order."""
    batch: list[dict[str, Any]] = []
    for event in events:
        if isinstance(event, KvStored):
            batch.append(
                {
                    "type": "stored",
                    "token_ids": event.token_ids,
                    "num_block_tokens": [event.block_tokens] * len(event.block_hashes),
                    "block_hashes": event.block_hashes,
                    "parent_hash": event.parent_hash,
                    "cache_salt": event.cache_salt,
                }
            )
        else:
            batch.append({"type": "removed", "block_hashes": event.block_hashes})
    return batch


def kv_snapshot(kv: KvCacheManager, hit_rate: float | None, dp_rank: int = 0) -> ComponentSnapshot:
    """The full-attention pool's use (the one that grows with context, whose blocks the router counts)."""
    used, total = kv.held_blocks(), kv.total_blocks()
    return ComponentSnapshot(
        kv_used_blocks=used,
        kv_total_blocks=total,
        gpu_cache_usage=used / total,
        dp_rank=dp_rank,
        kv_cache_hit_rate=hit_rate if kv.reuse else None,
    )
