"""Each key's fair share of the graph: limits per key in the keys file or the graph, a 429 with Retry-After
and OpenAI's x-ratelimit-* headers past any of them, and other keys untouched. The buckets on their own,
then the keyed graph's grace (3 requests a minute), heidi (1 request in flight) and ivan (60 tokens a
minute), each with judy beside it, who has no limits."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from dynamo_oss.gateway.auth import ApiKeys, KeysUnusable
from dynamo_oss.gateway.errors import ApiError
from dynamo_oss.gateway.fair_share import FairShare
from dynamo_oss.gateway.ledger import Ledger
from dynamo_oss.graph.schema import KeyLimitsSection
from tests.support.graphs import KEYS
from tests.support.served import ServedGraph
from tests.support.waiting import wait_for

MODEL = "openai/gpt-oss-20b"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


def one_process(default: KeyLimitsSection | None, own: dict[str, KeyLimitsSection], *keys: str) -> FairShare:
    """The admission of an endpoint of one process (its ledger in memory)."""
    return FairShare(default, own, None, Ledger(list(keys), processes=1, process=0, path=None))


def refusal(shares: FairShare, key: str | None) -> ApiError:
    with pytest.raises(ApiError) as refused:
        shares.admit(key)
    return refused.value


def test_a_key_s_limits_come_from_its_line_else_the_graph_s(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("alice sk-a== team requests_per_minute=2 tokens_per_minute=500\nbob sk-b\n")
    keys = ApiKeys.from_file(path)
    assert keys.name_of(b"/v1/models", b"Bearer sk-a==") == "alice" and keys.tenant_of("alice") == "team"
    shares = one_process(KeyLimitsSection(concurrent_requests=4), keys.limits, *keys.names)
    for _ in range(2):
        assert dict(shares.admit("alice").headers)[b"x-ratelimit-limit-tokens"] == b"500"
    assert "2 requests per minute" in refusal(shares, "alice").message  # its line's, not the graph's 4
    for _ in range(4):
        assert shares.admit("bob").headers == []  # the graph's concurrency only: no minute to report
    assert "4 requests in flight" in refusal(shares, "bob").message
    unlimited = one_process(None, {}, "carol")
    assert [unlimited.admit(key).headers for key in ("carol", None)] == [[], []]
    path.write_text("alice sk-a requests_per_minute=many\n")
    with pytest.raises(KeysUnusable, match="line 1: limits are NAME=N"):
        ApiKeys.from_file(path)


def test_past_a_limit_is_a_429_saying_when_to_come_back() -> None:
    shares = one_process(KeyLimitsSection(concurrent_requests=2, requests_per_minute=3, tokens_per_minute=100), {}, "k")
    first = shares.admit("k")
    shares.admit("k")
    busy = refusal(shares, "k")  # two in flight
    assert (busy.status, busy.code, busy.retry_after) == (429, "rate_limit_exceeded", 1)
    shares.done(first, 160)  # prompt and output: past its minute's tokens
    spent = refusal(shares, "k")
    assert "100 tokens per minute" in spent.message and spent.retry_after >= 36  # 60+1 at 100/min
    sent = dict(spent.headers)
    assert sent[b"x-ratelimit-limit-tokens"] == b"100" and sent[b"x-ratelimit-remaining-tokens"] == b"0"
    assert sent[b"x-ratelimit-remaining-requests"] == b"1" and sent[b"x-ratelimit-reset-requests"].endswith(b"s")


def test_a_minute_s_requests_refill_evenly() -> None:
    shares = one_process(KeyLimitsSection(requests_per_minute=60), {}, "k")
    for _ in range(60):
        shares.done(shares.admit("k"), 0)
    assert refusal(shares, "k").retry_after == 1  # one a second
    level, at = shares.ledger.bucket(0, 0)
    shares.ledger.set_bucket(0, 0, level, at - 1.5)  # a second and a half later
    assert dict(shares.admit("k").headers)[b"x-ratelimit-remaining-requests"] == b"0"


def post(graph: ServedGraph, key: str, **body: object) -> httpx.Response:
    return httpx.post(
        f"{graph.endpoint}/chat/completions",
        json={**CHAT, **body},
        headers={"authorization": f"Bearer {KEYS[key]}"},
        timeout=60,
    )


def test_a_key_past_its_requests_a_minute_gets_429s_and_another_key_none(keyed_graph: ServedGraph) -> None:
    served = [post(keyed_graph, "grace") for _ in range(3)]
    assert [reply.status_code for reply in served] == [200, 200, 200]
    assert [reply.headers["x-ratelimit-remaining-requests"] for reply in served] == ["2", "1", "0"]
    assert served[0].headers["x-ratelimit-limit-requests"] == "3"
    refused = post(keyed_graph, "grace")
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1, refused.text
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert (
        post(keyed_graph, "judy").status_code == 200
        and "x-ratelimit-limit-requests" not in post(keyed_graph, "judy").headers
    )


def test_a_key_with_one_request_in_flight_gets_a_429_for_a_second(keyed_graph: ServedGraph) -> None:
    long = {**CHAT, "max_tokens": 100_000, "ignore_eos": True, "min_tokens": 100_000, "stream": True}  # past any buffer
    with httpx.Client(timeout=60, headers={"authorization": f"Bearer {KEYS['heidi']}"}) as client:
        with client.stream("POST", f"{keyed_graph.endpoint}/chat/completions", json=long) as streaming:
            lines = streaming.iter_lines()  # kept: a generator dropped would close the stream
            assert streaming.status_code == 200 and next(lines)  # in flight
            second = post(keyed_graph, "heidi")
            assert second.status_code == 429 and "1 requests in flight" in second.json()["error"]["message"]
            count = client.post(f"{keyed_graph.endpoint}/responses/input_tokens", json={"model": MODEL, "input": "Hi."})
            assert count.status_code == 429  # a count renders, at the gateway's cost: admitted as a request
            assert post(keyed_graph, "judy").status_code == 200
    # The stream closed: its place is free again once the gateway has seen it go.
    wait_for(lambda: post(keyed_graph, "heidi").status_code == 200, 30, "heidi's place to be free")


def test_a_key_that_has_used_its_minute_s_tokens_waits(keyed_graph: ServedGraph) -> None:
    first = post(keyed_graph, "ivan")  # a prompt of about 70 tokens: past 60 at once
    assert first.status_code == 200 and first.headers["x-ratelimit-limit-tokens"] == "60"
    refused = post(keyed_graph, "ivan")
    assert refused.status_code == 429 and "60 tokens per minute" in refused.json()["error"]["message"]
    assert refused.headers["x-ratelimit-remaining-tokens"] == "0"
