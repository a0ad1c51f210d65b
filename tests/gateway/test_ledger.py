"""The ledger every gateway process of an endpoint shares (ledger.py), driven as two processes would
drive it: two FairShares over one file, each its own row. A key's limits and the graph's capacity
hold over both, and a process started again in a killed one's place leaves nothing counted."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from dynamo_oss.gateway.errors import ApiError
from dynamo_oss.gateway.fair_share import FairShare
from dynamo_oss.gateway.ledger import Ledger
from dynamo_oss.graph.schema import KeyLimitsSection

KEYS = ["alice", "heidi"]


def process(path: Path, index: int, max_in_flight: int | None = None, **limits: int) -> FairShare:
    """What gateway process `index` of two admits with: `limits` for every key."""
    ledger = Ledger(KEYS, processes=2, process=index, path=path)
    return FairShare(KeyLimitsSection(**limits) if limits else None, {}, max_in_flight, ledger)


def refused(share: FairShare, key: str) -> int:
    with pytest.raises(ApiError) as refusal:
        share.admit(key)
    return refusal.value.status


def test_a_key_s_concurrent_requests_are_counted_over_both_processes(tmp_path: Path) -> None:
    Ledger.create(tmp_path / "ledger")
    first, second = (process(tmp_path / "ledger", index, concurrent_requests=1) for index in (0, 1))
    ticket = first.admit("heidi")
    assert refused(second, "heidi") == 429
    second.admit("alice")  # another key's share is its own
    first.done(ticket, tokens=10)
    second.admit("heidi")


def test_the_graph_s_capacity_is_counted_over_both_processes(tmp_path: Path) -> None:
    Ledger.create(tmp_path / "ledger")
    first, second = (process(tmp_path / "ledger", index, max_in_flight=2) for index in (0, 1))
    first.admit(None)
    second.admit(None)
    assert refused(first, None) == 503 and refused(second, None) == 503


def test_a_key_s_minute_is_one_bucket_for_both_processes(tmp_path: Path) -> None:
    Ledger.create(tmp_path / "ledger")
    first, second = (process(tmp_path / "ledger", index, requests_per_minute=3) for index in (0, 1))
    for share in (first, second, first):
        share.done(share.admit("alice"), tokens=0)
    assert refused(second, "alice") == 429 and refused(first, "alice") == 429
    assert dict(second.admit("heidi").headers)[b"x-ratelimit-remaining-requests"] == b"2"


def test_a_process_started_in_a_killed_one_s_place_leaves_nothing_counted(tmp_path: Path) -> None:
    Ledger.create(tmp_path / "ledger")
    killed, other = (process(tmp_path / "ledger", index, concurrent_requests=1) for index in (0, 1))
    killed.admit("heidi")  # in flight when it was killed: never done
    assert refused(other, "heidi") == 429
    process(tmp_path / "ledger", 0, concurrent_requests=1)  # its successor zeroes its row
    other.admit("heidi")


def test_a_process_index_outside_the_endpoint_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="process 2 is not one of 2"):
        Ledger(KEYS, processes=2, process=2, path=tmp_path / "ledger")


def test_the_first_process_opens_it_without_a_row_and_other_places_count_in_every_process(tmp_path: Path) -> None:
    """What cluster_share.py writes and reads: the other places' requests in flight, and this place's charges."""
    Ledger.create(tmp_path / "ledger")
    first = Ledger(KEYS, processes=2, process=None, path=tmp_path / "ledger")
    serving, other = (process(tmp_path / "ledger", index, concurrent_requests=2) for index in (0, 1))
    ticket = serving.admit("heidi")
    heidi = first.slot("heidi")
    with first.locked():
        first.set_elsewhere(3, {heidi: 1})
        assert (first.in_flight(), first.in_flight_here(), first.in_flight(heidi)) == (4, 1, 2)
    assert refused(other, "heidi") == 429  # one here, one at another place
    serving.done(ticket, tokens=7)
    with first.locked():
        # Each key's, then the batch requests' column (ledger.BATCH_LINES), which nothing here used.
        assert first.charged(heidi) == (1, 7) and first.here_by_slot() == [(0, 0, 0), (0, 1, 7), (0, 0, 0)]
        first.set_elsewhere(0, {})
    other.admit("heidi")
    Ledger(KEYS, processes=2, process=None, path=tmp_path / "ledger")  # opened again: it zeroes no row
    serving.admit("heidi")
    assert refused(other, "heidi") == 429


def test_an_answer_s_end_is_counted_whole_under_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """done() frees the place, charges the tokens and adds to the place's charges all under the one flock:
    another process (here another open file) can take it at no point between."""
    Ledger.create(tmp_path / "ledger")
    share = process(tmp_path / "ledger", 0, tokens_per_minute=1000)
    ticket = share.admit("alice")
    other = os.open(tmp_path / "ledger", os.O_RDWR)
    held: list[bool] = []
    charge = share.ledger.charge

    def charge_and_look(*args: object, **kwargs: object) -> None:
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(other, fcntl.LOCK_UN)
            held.append(False)
        except BlockingIOError:
            held.append(True)
        charge(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(share.ledger, "charge", charge_and_look)
    try:
        share.done(ticket, tokens=10)
    finally:
        os.close(other)
    assert held == [True]
