"""What the gptoss engine tells Dynamo, checked against Dynamo 1.6's own publishers and consumers: the
forward-pass metrics as FpmDirectPublisher takes them and the project's planner reads them back, the KV
events as KvEventPublisher takes them, and the KV snapshot of the worker's gauges."""

from __future__ import annotations

import re

import msgspec
from dynamo.common.forward_pass_metrics import ForwardPassMetrics, QueuedRequestMetrics, ScheduledRequestMetrics
from dynamo.llm import FpmDirectPublisher, KvEventPublisher

from dynamo_oss.engines.gptoss.metrics import forward_pass_fields, kv_event_batch, kv_snapshot
from dynamo_oss.engines.gptoss.scheduler import Limits, Scheduler, StepLoad
from tests.support.gptoss import kv_cache, sequence


def parameters(method: object) -> set[str]:
    """A Rust-bound method's keyword parameters, from the signature it exports."""
    signature = method.__text_signature__  # type: ignore[attr-defined]
    return {name for name in re.findall(r"(\w+)(?:=[^,)]*)?\s*[,)]", signature) if name != "self"}


def test_the_forward_pass_fields_are_fpm_direct_publisher_s_arguments_and_the_planner_reads_them(
    dynamo_planner_config: type,
) -> None:
    from dynamo.planner.plugins.types import FpmData

    from dynamo_oss.planner.backlog import backlog_of
    from dynamo_oss.planner.sizing import Backlog

    load = StepLoad(
        prefill_requests=1,
        prefill_tokens=500,
        prefill_kv_tokens=64,
        decode_requests=7,
        decode_kv_tokens=9000,
        queued_prefill_requests=2,
        queued_prefill_tokens=4096,
        queued_decode_requests=1,
        queued_decode_kv_tokens=300,
    )
    fields = forward_pass_fields(load, wall_time_s=0.031)
    assert set(fields) == parameters(FpmDirectPublisher.publish)
    # What Dynamo's publisher sends for these arguments (its scheduled_* and queued_* halves), as the
    # planner's plugins receive it.
    scheduled = {key.removeprefix("scheduled_"): value for key, value in fields.items() if key.startswith("scheduled_")}
    queued = {key.removeprefix("queued_"): value for key, value in fields.items() if key.startswith("queued_")}
    metrics = ForwardPassMetrics(
        worker_id="7",
        wall_time=fields["wall_time_secs"],
        scheduled_requests=ScheduledRequestMetrics(**scheduled),
        queued_requests=QueuedRequestMetrics(**queued),
    )
    payload = msgspec.msgpack.encode(metrics)
    disaggregated = FpmData(prefill_engines={"7/0": payload}, decode_engines={"8/0": payload})
    assert backlog_of(disaggregated, disaggregated=True) == Backlog(prefill_tokens=4096, decode_requests=8)


def test_the_kv_events_are_what_kv_event_publisher_takes() -> None:
    kv = kv_cache(full=4, window=16)
    sched = Scheduler(Limits(max_batch_size=4, max_num_tokens=64), kv)
    for name, start in (("a", 1), ("b", 100)):  # the second evicts the first's blocks
        seq = sequence(name, list(range(start, start + 12)), max_tokens=1, salt="alice")
        sched.add(seq)
        step = sched.schedule()
        sched.postprocess(step, [0] * len(step.sampling))
    batch = kv_event_batch(kv.take_events())
    assert [event["type"] for event in batch] == ["stored", "removed", "stored"]
    stored = parameters(KvEventPublisher.publish_stored)
    for event in batch:
        keys = set(event) - {"type"}
        assert keys <= (stored if event["type"] == "stored" else parameters(KvEventPublisher.publish_removed))
        if event["type"] == "stored":
            assert len(event["token_ids"]) == sum(event["num_block_tokens"]) == 4 * len(event["block_hashes"])
            assert event["cache_salt"] == "alice" and event["parent_hash"] is None
    assert set(batch[1]["block_hashes"]) <= set(batch[0]["block_hashes"])


def test_the_snapshot_counts_the_full_attention_pool_and_a_hit_rate_only_with_reuse() -> None:
    kv = kv_cache(full=10, window=10)
    seq = sequence("a", list(range(1, 13)))
    kv.admit(seq, kv.prefix_hit(seq))
    kv.grow(seq, 12)
    snapshot = kv_snapshot(kv, hit_rate=0.25)
    assert (snapshot.kv_used_blocks, snapshot.kv_total_blocks, snapshot.gpu_cache_usage) == (3, 10, 0.3)
    assert snapshot.kv_cache_hit_rate == 0.25
    assert kv_snapshot(kv_cache(full=10, window=10, reuse=False), hit_rate=0.0).kv_cache_hit_rate is None
