"""The gptoss engine's disaggregated flow on this machine: a prefill engine core hands a request's KV to a
decode engine core through real NIXL agents (over host memory, GPUs being absent), as Dynamo's frontend
drives it (the prefill's answer carries the descriptor, the decode worker gets it as prefill_result), and
the answer is the one an aggregated core gives. The forward pass is tests/support/host_runner.py's rule,
whose tokens depend on every key a row attends to, so a key lost or misplaced in the handoff shows."""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Callable, Iterator

import pytest

from dynamo_oss.engines.gptoss.engine_core import Emitted, EngineCore
from dynamo_oss.engines.gptoss.handoff import HandoffLedger, read_handoff
from dynamo_oss.engines.gptoss.kv_layout import kv_pools
from dynamo_oss.engines.gptoss.scheduler import Limits, Scheduler
from tests.support.gptoss import BLOCK, SMALL, kv_cache, sequence
from tests.support.host_runner import HostRunner

PROMPT = [(7 * i + 3) % 1000 + 1 for i in range(37)]  # 37 tokens: ten 4-token blocks, past the 8-token window
OUTPUT_TOKENS = 12
DEADLINE_S = 30.0
POOLS = kv_pools(SMALL, BLOCK)
BLOCKS = {"full": 48, "window": 48}


@pytest.fixture
def cores() -> Iterator[Callable[[str], EngineCore]]:
    started: list[EngineCore] = []

    def start(role: str) -> EngineCore:
        runner = HostRunner(SMALL, POOLS, hands_over=role != "agg")
        runner.allocate_kv(BLOCKS)
        scheduler = Scheduler(Limits(max_batch_size=8, max_num_tokens=16), kv_cache(**BLOCKS), role == "prefill")
        core = EngineCore(scheduler, runner, SMALL, HandoffLedger(60.0) if role == "prefill" else None)
        core.start()
        started.append(core)
        return core

    yield start
    for core in started:
        core.stop()
        core.runner.close()


def answer(core: EngineCore, seq, **handoff) -> list[Emitted]:
    """Every output of one request, until its last (finished or failed)."""
    outputs: queue.SimpleQueue[Emitted] = queue.SimpleQueue()
    core.submit(seq, outputs.put, **handoff)
    got: list[Emitted] = []
    while not got or (got[-1].finish_reason is None and got[-1].error is None):
        got.append(outputs.get(timeout=DEADLINE_S))
    return got


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {DEADLINE_S:.0f} s"
        time.sleep(0.01)  # polling the condition against the deadline above


def test_a_request_prefilled_on_one_core_and_decoded_on_another_answers_as_one_core_does(cores) -> None:
    aggregated = [out.token for out in answer(cores("agg"), sequence("agg", PROMPT, max_tokens=OUTPUT_TOKENS))]
    prefill, decode = cores("prefill"), cores("decode")

    first = answer(prefill, sequence("p", PROMPT, max_tokens=1))  # the prefill worker caps it at one token
    assert len(first) == 1 and first[0].handoff is not None and first[0].token == aggregated[0]
    assert prefill.handoffs_pending == 1  # its blocks are held for the decode worker
    params = json.loads(first[0].handoff.model_dump_json())  # disaggregated_params, as the frontend carries them

    seq = sequence("d", PROMPT, max_tokens=OUTPUT_TOKENS)
    handoff, spans = read_handoff(params, seq, POOLS, SMALL)
    seq.append(handoff.first_token)
    decoded = answer(decode, seq, handoff=handoff, spans=spans)
    assert [out.error for out in decoded] == [None] * len(decoded)
    assert [out.token for out in decoded] == aggregated
    assert decoded[-1].finish_reason == "length"
    wait_for(lambda: prefill.handoffs_pending == 0, "the prefill worker freeing the blocks the decode worker read")
    assert prefill.scheduler.kv.held_blocks("full") == 0


def test_a_decode_core_whose_prefill_worker_is_gone_fails_the_request_and_serves_the_next(cores) -> None:
    prefill, decode = cores("prefill"), cores("decode")
    params = json.loads(answer(prefill, sequence("p", PROMPT, max_tokens=1))[0].handoff.model_dump_json())
    prefill.stop()
    prefill.runner.close()  # its NIXL agent and the memory it offered are gone

    seq = sequence("orphan", PROMPT, max_tokens=OUTPUT_TOKENS)
    handoff, spans = read_handoff(params, seq, POOLS, SMALL)
    seq.append(handoff.first_token)
    failed = answer(decode, seq, handoff=handoff, spans=spans)
    assert failed[-1].error == "the prompt's KV never arrived from its prefill worker"
    assert decode.scheduler.kv.held_blocks("full") == 0  # the blocks taken for it are back

    again = cores("prefill")
    params = json.loads(answer(again, sequence("p2", PROMPT, max_tokens=1))[0].handoff.model_dump_json())
    seq = sequence("next", PROMPT, max_tokens=OUTPUT_TOKENS)
    handoff, spans = read_handoff(params, seq, POOLS, SMALL)
    seq.append(handoff.first_token)
    assert answer(decode, seq, handoff=handoff, spans=spans)[-1].finish_reason == "length"
