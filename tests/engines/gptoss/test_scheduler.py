"""The gptoss engine's scheduler, driven with plain sequences (each step's sampled tokens given by the
test): chunked prefill within a token budget, decodes before prompt chunks, preemption when blocks run
out, harmony's stop tokens, and the prefill and decode roles of a disaggregated pair."""

from __future__ import annotations

from dynamo_oss.assets.tokenizer import CALL, RETURN
from dynamo_oss.engines.gptoss.scheduler import Limits, Scheduler, SequenceOutput, Step
from dynamo_oss.engines.gptoss.sequence import Status
from tests.support.gptoss import kv_cache, sequence

TOKEN = 42  # what a step samples unless a test says otherwise


def scheduler(budget: int = 16, batch: int = 8, full: int = 64, window: int = 64, **options: object) -> Scheduler:
    return Scheduler(Limits(max_batch_size=batch, max_num_tokens=budget), kv_cache(full, window), **options)


def step(sched: Scheduler, token: int = TOKEN) -> tuple[Step, list[SequenceOutput]]:
    """One step: schedule, then every sampling sequence gets `token`."""
    scheduled = sched.schedule()
    return scheduled, sched.postprocess(scheduled, [token] * len(scheduled.sampling))


def shares(scheduled: Step) -> dict[str, int]:
    return {item.seq.request_id: item.count for item in scheduled.scheduled}


def test_a_long_prompt_is_prefilled_in_chunks_of_the_step_s_budget() -> None:
    sched = scheduler(budget=16)
    seq = sequence("a", list(range(1, 41)))
    sched.add(seq)
    counts = []
    for _ in range(3):
        scheduled, outputs = step(sched)
        counts.append(shares(scheduled)["a"])
    assert counts == [16, 16, 8]
    assert [output.token for output in outputs] == [TOKEN] and seq.num_computed == 40  # sampled once, at the end


def test_decodes_go_first_and_prompt_chunks_fill_the_rest_of_the_budget() -> None:
    sched = scheduler(budget=16)
    sched.add(sequence("decoding", [1, 2, 3], max_tokens=10))
    step(sched)  # its prompt, and its first token
    sched.add(sequence("long", list(range(1, 101))))
    for _ in range(4):
        scheduled, _ = step(sched)
        assert shares(scheduled) == {"decoding": 1, "long": 15}
        assert scheduled.load.decode_requests == 1 and scheduled.load.prefill_tokens == 15


def test_the_batch_holds_at_most_max_batch_size_sequences() -> None:
    sched = scheduler(budget=64, batch=2)
    for name in "abc":
        sched.add(sequence(name, [1, 2, 3]))
    scheduled, _ = step(sched)
    assert set(shares(scheduled)) == {"a", "b"}
    assert scheduled.load.queued_prefill_requests == 1 and scheduled.load.queued_prefill_tokens == 3


def test_when_blocks_run_out_the_newest_sequence_is_preempted_and_computed_again() -> None:
    sched = scheduler(budget=64, full=6, window=64)
    old, new = sequence("old", list(range(1, 9)), max_tokens=12), sequence("new", list(range(9, 17)), max_tokens=12)
    sched.add(old)
    sched.add(new)
    step(sched)  # both prompts: 2 blocks each, 2 free
    preempted = None
    for _ in range(12):
        scheduled, _ = step(sched)
        if scheduled.preempted:
            preempted = scheduled
            break
    assert preempted is not None and preempted.preempted == [new] and new.status is Status.WAITING
    assert "new" not in shares(preempted) and shares(preempted)["old"] == 1
    assert preempted.load.queued_decode_requests == 1  # a preempted sequence had tokens out: decode work waiting
    generated = len(new.output)
    while old.status is not Status.FINISHED:
        step(sched)
    tokens = new.num_tokens
    scheduled, _ = step(sched)  # room again: its prompt and tokens so far, computed again
    # Its blocks went back last first, so "old" took its two last ones as it grew: its first block is cached.
    assert new.num_cached == 4 and shares(scheduled)["new"] == tokens - 4
    assert sched.hit_rate == 0  # a preempted sequence's prompt counts once, at its first admission
    assert len(new.output) == generated + 1


def test_a_sequence_stops_at_harmony_s_stop_tokens_once_min_tokens_are_out() -> None:
    for token, reason in [(RETURN, "stop"), (CALL, "stop"), (TOKEN, None)]:
        sched = scheduler()
        sched.add(sequence("a", [1, 2, 3]))
        _, (output,) = step(sched, token)
        assert output.finish_reason == reason, token
    sched = scheduler()
    sched.add(sequence("min", [1, 2, 3], min_tokens=2))
    assert step(sched, RETURN)[1][0].finish_reason is None
    assert step(sched, RETURN)[1][0].finish_reason == "stop"
    sched = scheduler()
    sched.add(sequence("bench", [1, 2, 3], max_tokens=3, ignore_eos=True))
    reasons = [step(sched, RETURN)[1][0].finish_reason for _ in range(3)]
    assert reasons == [None, None, "length"]
    assert sched.kv.held_blocks() == 0 and not sched.has_work


def test_a_request_s_own_stop_tokens_and_end_of_text_stop_it_too() -> None:
    sched = scheduler()
    sched.add(sequence("a", [1, 2, 3], stop_token_ids_hidden=[77]))
    assert step(sched, 77)[1][0].finish_reason == "stop"


def test_a_prefill_worker_s_sequence_ends_at_its_first_token_and_keeps_its_blocks() -> None:
    sched = scheduler(keep_finished_kv=True)
    seq = sequence("a", list(range(1, 11)), max_tokens=1)
    sched.add(seq)
    _, (output,) = step(sched)
    assert output.finish_reason == "length" and output.hold is not None
    assert sched.kv.held_blocks("full") == 3 and sched.kv.held_blocks("window") == 3  # positions 3..10 of the window
    sched.kv.release(output.hold)
    assert sched.kv.held_blocks("full") == 0 and sched.kv.held_blocks("window") == 0


def test_a_decode_worker_s_sequence_holds_its_blocks_while_its_kv_arrives_then_decodes() -> None:
    sched = scheduler()
    seq = sequence("a", list(range(1, 11)), max_tokens=4)
    seq.append(TOKEN)  # the first token, sampled by the prefill worker
    spans = {"full": range(0, 3), "window": range(0, 3)}
    sched.add_received(seq, spans)
    scheduled, outputs = step(sched)
    assert scheduled.receiving == [seq] and scheduled.scheduled == [] and outputs == []
    assert seq.status is Status.AWAITING_KV and sched.kv.held_blocks("full") == 3
    assert sched.kv_arrived(seq)
    scheduled, (output,) = step(sched)
    assert shares(scheduled) == {"a": 1} and scheduled.scheduled[0].start == 10 and not scheduled.scheduled[0].prefill
    assert output.token == TOKEN and seq.output == [TOKEN, TOKEN]


def test_a_request_aborted_while_its_kv_arrives_gives_its_blocks_back_once_the_transfer_is_over() -> None:
    sched = scheduler()
    seq = sequence("a", list(range(1, 11)))
    seq.append(TOKEN)
    sched.add_received(seq, {"full": range(0, 3), "window": range(0, 3)})
    step(sched)
    assert sched.abort("a") is None  # a transfer still writes to its blocks
    assert sched.kv.held_blocks("full") == 3
    assert not sched.kv_arrived(seq)
    assert seq.finish_reason == "cancelled" and sched.kv.held_blocks("full") == 0


def test_an_aborted_request_gives_its_blocks_back_at_once() -> None:
    sched = scheduler()
    sched.add(sequence("a", list(range(1, 11)), max_tokens=8))
    step(sched)
    aborted = sched.abort("a")
    assert aborted is not None and aborted.finish_reason == "cancelled"
    assert sched.kv.held_blocks("full") == 0 and not sched.has_work


def test_the_step_s_load_is_what_dynamo_s_forward_pass_metrics_count() -> None:
    sched = scheduler(budget=16)
    sched.add(sequence("decoding", [1, 2, 3, 4, 5], max_tokens=10))
    step(sched)
    sched.add(sequence("prompt", list(range(100, 130))))
    sched.add(sequence("queued", list(range(1, 8))))
    scheduled, _ = step(sched)  # one decode, 15 tokens of "prompt"; "queued" waits
    assert scheduled.load.decode_kv_tokens == 6 and scheduled.load.prefill_kv_tokens == 0
    scheduled, _ = step(sched)
    load = scheduled.load
    assert (load.prefill_requests, load.prefill_tokens, load.prefill_kv_tokens) == (1, 15, 15)
    assert (load.decode_requests, load.decode_kv_tokens) == (1, 7)
    assert (load.queued_prefill_requests, load.queued_prefill_tokens) == (1, 7)
