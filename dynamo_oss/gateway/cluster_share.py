"""Each key's limits over the whole graph where its gateway runs in several places (frontend pods on
Kubernetes, frontend nodes on bare metal), each place counting in a ledger of its own (ledger.py).

The endpoint's first process (processes.py) keeps its place's ledger in step with the others' over
the graph's NATS. Every SYNC_S it tells them, on one subject per graph, what this place has in flight
(in all, and per key), what it has charged each key since it started (requests and tokens: counts
that only grow), and what each key has left of its minute as this place sees it. What it hears from
them goes into the ledger: their requests in flight into a row of its own, which the ledger's
in_flight adds to this place's, and their new charges (what each has charged since it was last
heard) off this place's copy of each key's minute buckets. So `concurrent_requests`,
`requests_per_minute`, `tokens_per_minute` and `gateway.max_in_flight` count the whole graph.

A place is followed while its counts keep coming. One heard for the first time, or again after it
fell silent, is taken as it is: its charges so far are its baseline, and where it sees a key's
minute lower than this place does, that level is taken (so a place that has just started, or
restarted, does not hand a key a fresh minute). One silent for EXPIRE_S is dropped: a place that
died, or was cut off, stops counting within that time.

How far a key can overrun: a place learns of another's admissions within about two sync intervals
(the other's next message, then this place's next merge) and NATS's delivery. A key can be admitted
beyond its limit what the other places admitted for it in that window that this place had not heard
of: for requests spread over time, their rate x 2 x SYNC_S at each other place (a request or two at
the shipped intervals and limits); for a burst landing on every place in the same half second, up to
its limit at each. A place that starts or rejoins also misses the charges another made before that
other was first heard, at most a sync interval's. Why that is acceptable: it is the price of
keeping NATS off every request's path, which distributed rate limiters pay the same way (Envoy's
local rate limit before its global service, Kong's rate limiting with a sync_rate); a limit here is
a fair share of the graph, not a bill (the bill is the usage metrics, counted exactly), and the
overrun is bounded by time, not growing with load.

Without NATS (unreachable, restarting), nothing is heard, every other place falls silent and is
dropped, and each place's limits hold over its own counts, as they did before they were shared: no
request waits on NATS or fails for it. The log says so once, the first process's metrics count it,
and the counts are shared again once the client reconnects.

Why core NATS messages and not a JetStream key-value bucket: counts that are worthless after a few
seconds need no storage; a bucket's max_age drops a dead place's entry without telling anyone, so
each place would track silence itself anyway; and reading every place's entry from a bucket costs a
listing per place per interval, where a subscription is handed each message once.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import time
import uuid
import zlib
from dataclasses import dataclass

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from prometheus_client import CollectorRegistry, Counter, Gauge
from pydantic import BaseModel, ConfigDict, Field, field_validator

from dynamo_oss.gateway.auth import ApiKeys, KeysUnusable
from dynamo_oss.gateway.config import GatewayConfig, NatsConnection
from dynamo_oss.gateway.fair_share import FairShare
from dynamo_oss.gateway.ledger import Ledger
from dynamo_oss.gateway.nats_connection import connect, prefixed

log = logging.getLogger("dynamo_oss.gateway.cluster_share")

SYNC_S = 0.25  # how often a place tells the others its counts and merges theirs
EXPIRE_S = 3.0  # a place not heard for this long is dropped: a dead place's requests stop counting
RETRY_S = 2.0  # how often a first connection to NATS that failed is tried again
COMPRESSION_LEVEL = 1
ACTIVE_S = 60.0  # a key is told while it has requests in flight or was charged within this (its minute)
MAX_PLACES = 1024  # places followed at once: a flood of made-up places cannot grow this place's memory
MAX_MESSAGE_BYTES = 8 * 2**20  # a message inflated past this is dropped, never held
MAX_COUNT = 1e15  # no count a place could reach: a larger one is a peer's bug or an attack


class _Peer(BaseModel):
    """A peer's message is checked before it counts: finite numbers within bounds, as a buggy or hostile
    publisher on the graph's NATS (one NATS may serve several namespaces) must not poison a key's limits."""

    model_config = ConfigDict(allow_inf_nan=False)


class KeyCounts(_Peer):
    """One key's counts at a place."""

    in_flight: int = Field(default=0, ge=0, le=10_000_000)
    requests: float = Field(default=0, ge=0, le=MAX_COUNT, description="requests charged at the place since it started")
    tokens: float = Field(default=0, ge=0, le=MAX_COUNT, description="tokens charged at the place since it started")
    levels: tuple[float | None, float | None] = Field(
        default=(None, None), description="its minute's requests and tokens left as the place sees them; None: all"
    )

    @field_validator("levels")
    @classmethod
    def _bounded(cls, levels: tuple[float | None, float | None]) -> tuple[float | None, float | None]:
        if any(level is not None and abs(level) > MAX_COUNT for level in levels):
            raise ValueError(f"a level beyond {MAX_COUNT:g}")
        return levels


class PlaceCounts(_Peer):
    """What a place tells the others every SYNC_S: unknown fields are ignored, for a place of a later
    version during a rolling update."""

    place: str = Field(max_length=256)
    in_flight: int = Field(ge=0, le=10_000_000)
    keys: dict[str, KeyCounts] = Field(
        default_factory=dict, description="keys with requests in flight or charged within ACTIVE_S"
    )

    def encode(self) -> bytes:
        return zlib.compress(self.model_dump_json(exclude_defaults=True).encode(), COMPRESSION_LEVEL)

    @classmethod
    def decode(cls, data: bytes) -> PlaceCounts:
        inflating = zlib.decompressobj()
        plain = inflating.decompress(data, MAX_MESSAGE_BYTES)
        if inflating.unconsumed_tail:
            raise ValueError(f"a message inflating past {MAX_MESSAGE_BYTES} bytes")
        return cls.model_validate_json(plain)


@dataclass
class _Heard:
    counts: PlaceCounts
    at: float  # this place's monotonic clock when it came: places' clocks are never compared


class ClusterShare:
    """One place's share of the graph's counts: the others' merged into its ledger, its own told. No
    I/O here: keep_in_step runs it over NATS."""

    def __init__(self, place: str, share: FairShare) -> None:
        self.place = place
        self.share = share
        self._heard: dict[str, _Heard] = {}
        # Each followed place's charges as last merged, by key: what it charges past them is new.
        self._merged: dict[str, dict[str, tuple[float, float]]] = {}
        # This place's charges of each key as last seen, and when they last changed.
        self._charged: dict[str, tuple[tuple[float, float], float]] = {}

    @property
    def places(self) -> int:
        """Other places whose counts this place's limits include."""
        return len(self._merged)

    def hear(self, counts: PlaceCounts, now: float) -> None:
        if counts.place == self.place:
            return
        if counts.place not in self._heard and len(self._heard) >= MAX_PLACES:
            log.debug("limits: place %s not followed: %d places already are", counts.place, MAX_PLACES)
            return
        self._heard[counts.place] = _Heard(counts, now)

    def sync(self, now: float) -> PlaceCounts:
        """The others' counts, as last heard, merged into this place's ledger; and this place's counts."""
        ledger = self.share.ledger
        with ledger.locked():
            for place in [place for place, heard in self._heard.items() if now - heard.at > EXPIRE_S]:
                log.info("limits: place %s fell silent; its counts no longer count here", place)
                del self._heard[place]
            for place in self._merged.keys() - self._heard.keys():
                del self._merged[place]
            total, by_slot = 0, {}
            for place, heard in self._heard.items():
                total += heard.counts.in_flight
                for key, counts in heard.counts.keys.items():
                    slot = ledger.slots.get(key)
                    if slot is not None and counts.in_flight:
                        by_slot[slot] = by_slot.get(slot, 0) + counts.in_flight
                self._merge_charges(place, heard.counts, now)
            ledger.set_elsewhere(total, by_slot)
            return self._own(now)

    def _merge_charges(self, place: str, counts: PlaceCounts, now: float) -> None:
        merged = self._merged.get(place)
        if merged is None:
            log.info("limits: counting place %s's requests here", place)
            merged = self._merged[place] = {}
            for key, of_key in counts.keys.items():
                if key in self.share.ledger.slots:
                    self.share.lower_to(key, of_key.levels, now)
                    merged[key] = (of_key.requests, of_key.tokens)
            return
        for key, of_key in counts.keys.items():
            if key not in self.share.ledger.slots:
                continue  # a key this place does not know (another keys file, during an update)
            requests, tokens = merged.get(key, (0.0, 0.0))  # a key new to a followed place: all of it is new
            if of_key.requests >= requests and of_key.tokens >= tokens:
                self.share.spend(key, of_key.requests - requests, of_key.tokens - tokens, now)
            merged[key] = (of_key.requests, of_key.tokens)

    def _own(self, now: float) -> PlaceCounts:
        """This place's counts of the keys active here or told of by others. A key idle here for ACTIVE_S
        is left out (its charges are unchanged, so a place that follows this one loses nothing): the
        message grows with the keys in use, not with every key ever used."""
        ledger = self.share.ledger
        heard = {key for heard in self._heard.values() for key in heard.counts.keys}
        keys = {}
        for key, (in_flight, requests, tokens) in zip(ledger.keys, ledger.here_by_slot(), strict=True):
            if self._charged.get(key, (None, 0.0))[0] != (requests, tokens):
                self._charged[key] = ((requests, tokens), now)
            active = in_flight or now - self._charged[key][1] < ACTIVE_S and (requests or tokens)
            if not (active or key in heard):
                continue  # a key idle here and nowhere else mentioned: nothing new to tell
            levels = self.share.levels(key, now)
            if active or levels != (None, None):
                keys[key] = KeyCounts(in_flight=in_flight, requests=requests, tokens=tokens, levels=levels)
        return PlaceCounts(place=self.place, in_flight=ledger.in_flight_here(), keys=keys)


class ShareMetrics:
    """The first process's own series, beside its serving processes' (processes.py)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.places = Gauge(
            "dynamo_oss_gateway_limits_places",
            "Other places of the graph's gateway (pods, nodes) whose counts this place's limits include.",
            registry=registry,
        )
        self.connected = Gauge(
            "dynamo_oss_gateway_limits_shared",
            "1 while this place shares its limits' counts over the graph's NATS; 0 while its limits hold alone.",
            registry=registry,
        )
        self.outages = Counter(
            "dynamo_oss_gateway_limits_share_outages",
            "Times the graph's NATS became unreachable to this place, its limits falling back to its own counts.",
            registry=registry,
        )


class _Link:
    """This place's NATS connection for the share: made in the background (never delaying a merge),
    its losses and returns said once each in the log and counted."""

    def __init__(self, connection: NatsConnection, subject: str, cluster: ClusterShare, metrics: ShareMetrics) -> None:
        self.connection, self.subject, self.cluster, self.metrics = connection, subject, cluster, metrics
        self.client: Client | None = None
        self.shared: bool | None = None  # None: not known yet
        self._closing = False  # its own close is no outage
        self._connecting = asyncio.get_running_loop().create_task(self._connect())

    async def tell(self, counts: PlaceCounts) -> None:
        if self.client is None or not self.client.is_connected:
            return
        try:
            await self.client.publish(self.subject, counts.encode())
        except nats.errors.Error as error:
            self._lost(error)

    async def close(self) -> None:
        self._closing = True
        self._connecting.cancel()
        if self.client is not None and not self.client.is_closed:
            await self.client.close()

    async def _connect(self) -> None:
        """Until connected: the client tries the server again and again itself, but a URL file that cannot
        be read is tried here, every RETRY_S."""
        while True:
            try:
                client = await connect(
                    self.connection,
                    "dynamo-oss-gateway-limits",
                    self._error,
                    no_echo=True,  # this place's own counts are not news to it
                    disconnected_cb=self._disconnected,
                    reconnected_cb=self._reconnected,
                )
            except (OSError, TimeoutError, nats.errors.Error) as error:
                self._lost(error)
                await asyncio.sleep(RETRY_S)
                continue
            self.client = client
            await client.subscribe(self.subject, cb=self._heard)  # connected: renewed by the client on reconnect
            self._back()
            return

    async def _heard(self, message: Msg) -> None:
        try:
            counts = PlaceCounts.decode(message.data)
        except (zlib.error, ValueError) as error:  # pydantic's ValidationError is a ValueError
            log.debug("limits: an unreadable message on %s: %s", self.subject, error)
            return
        self.cluster.hear(counts, time.monotonic())

    def _lost(self, why: object) -> None:
        if self._closing:
            return
        if self.shared is not False:
            log.warning(
                "limits: the graph's NATS is unreachable (%s): each place's limits hold over its own counts "
                "until it is back",
                why or type(why).__name__,
            )
            self.metrics.outages.inc()
            self.metrics.connected.set(0)
        self.shared = False

    def _back(self) -> None:
        if self.shared is not True:
            log.info("limits: shared with the graph's other places over NATS (%s)", self.subject)
            self.metrics.connected.set(1)
        self.shared = True

    async def _disconnected(self) -> None:
        self._lost("disconnected")

    async def _reconnected(self) -> None:
        self._back()

    async def _error(self, error: Exception) -> None:
        """The client's errors, among them each attempt to connect that failed (it tries again itself)."""
        if self.client is None or not self.client.is_connected:
            self._lost(error)
        else:
            log.debug("limits: NATS: %s", error)


async def keep_in_step(cluster: ClusterShare, connection: NatsConnection, subject: str, metrics: ShareMetrics) -> None:
    """Merge and tell every SYNC_S until cancelled, whether NATS is there or not."""
    link = _Link(connection, subject, cluster, metrics)
    try:
        while True:
            try:
                counts = cluster.sync(time.monotonic())
                metrics.places.set(cluster.places)
                await link.tell(counts)
            except Exception:  # a bug here: logged, and the serving processes admit on as they were
                log.exception("limits: keeping the places' counts in step failed")
            await asyncio.sleep(SYNC_S)
    finally:
        await link.close()


async def keep_shared(config: GatewayConfig, registry: CollectorRegistry) -> None:
    """The endpoint's share of the graph's limits, in its first process, until cancelled."""
    assert config.cluster_share is not None and config.nats is not None
    try:
        keys = ApiKeys.configured(config.keys_file, config.keys_env)
    except KeysUnusable:
        return  # the serving processes say why, and do not start
    ledger = Ledger(keys.names if keys else [], config.processes, None, config.ledger_file)
    share = FairShare(config.limits_per_key, keys.limits if keys else {}, config.max_in_flight, ledger)
    subject = f"dynamo-oss.limits.{prefixed(config.nats, config.cluster_share.channel)}"
    try:
        await keep_in_step(ClusterShare(place_name(), share), config.nats, subject, ShareMetrics(registry))
    finally:
        ledger.close()


def place_name() -> str:
    """This place's name among the graph's: its host's (on Kubernetes, the pod's), and a part of its own,
    as a place restarted under the same name is another place, whose charges start again from none."""
    return f"{re.sub(r'[^A-Za-z0-9_.-]', '-', socket.gethostname())}-{uuid.uuid4().hex[:8]}"
