"""An exchange with Dynamo's frontend that no client reads (forwarding.Clientless), against a stand-in frontend:
the transform's output is what a client's stream would have carried, and leaving it drops the frontend's
connection mid-answer, as a client that leaves does (which stops the generation). Through the shell: a
detached generation (routes.Detached) is answered at once and holds its admission until its work ends,
and a local answer's events stop when the client leaves."""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import AsyncIterator, Callable

import httpx

from dynamo_oss.gateway.app import Gateway, serve
from dynamo_oss.gateway.forwarding import Clientless
from dynamo_oss.gateway.graph_key import GraphKey
from dynamo_oss.gateway.ids import ItemIds, new_id
from dynamo_oss.gateway.protocol.responses import ResponsesRequest
from dynamo_oss.gateway.responses.route import ResponsesAnswer
from dynamo_oss.gateway.routes import EventStreamAnswer, Exchange, Upstream
from tests.support.frontends import StandInFrontend
from tests.support.harmony import render_request, sealed_with
from tests.support.ports import free_ports

SEAL = sealed_with(b"c")
DEADLINE_S = 10


def transform() -> ResponsesAnswer:
    request = ResponsesRequest(model="m", input="Say hello.", stream=True)
    prompt = render_request(request, SEAL, datetime.date(2026, 11, 25))
    return ResponsesAnswer(request, prompt, SEAL, ItemIds(new_id("resp")))


def events(output: bytes) -> list[dict]:
    return [json.loads(line[6:]) for line in output.decode().splitlines() if line.startswith("data: ")]


def test_an_exchange_no_client_reads_gets_the_answer_a_client_s_stream_would_carry() -> None:
    async def run() -> tuple[list[tuple[bytes, bool]], Clientless, StandInFrontend]:
        frontend = StandInFrontend()
        gateway = Gateway([await frontend.start()], None, GraphKey(b"g" * 32))
        written: list[tuple[bytes, bool]] = []
        exchange = Clientless(
            gateway,
            "responses",
            b"POST",
            [(b"x-tenant", b"t")],
            Upstream(b"/v1/completions", b'{"prompt": [1]}', transform()),
            lambda data, last: written.append((data, last)),
        )
        await asyncio.wait_for(exchange.forward(), DEADLINE_S)
        await gateway.close()
        await frontend.stop()
        return written, exchange, frontend

    written, exchange, frontend = asyncio.run(run())
    assert frontend.requests == [{"prompt": [1]}]
    assert written[-1][1] and not any(last for _, last in written[:-1])
    sent = events(b"".join(data for data, _ in written))
    assert [event["sequence_number"] for event in sent] == list(range(len(sent)))
    assert sent[-1]["type"] == "response.completed" and sent[-1]["response"]["output"][-1]["content"][0]["text"] == (
        "Hello there."
    )
    assert exchange.status == 200 and exchange.error is None


def test_a_route_s_headers_go_where_the_client_sent_none_by_that_name() -> None:
    """The Responses route names a conversation's session for Dynamo's router (x-dynamo-session-id); a
    client that named the session itself keeps its own name."""

    async def run(client: list[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
        frontend = StandInFrontend()
        gateway = Gateway([await frontend.start()], None, GraphKey(b"g" * 32))
        own = ((b"x-dynamo-session-id", b"resp_1"),)
        upstream = Upstream(b"/v1/completions", b'{"prompt": [1]}', transform(), headers=own)
        exchange = Clientless(gateway, "responses", b"POST", client, upstream, lambda data, last: None)
        await asyncio.wait_for(exchange.forward(), DEADLINE_S)
        await gateway.close()
        await frontend.stop()
        return frontend.heads[0]

    head = asyncio.run(run([(b"x-tenant", b"t")]))
    assert head[b"x-dynamo-session-id"] == b"resp_1" and head[b"x-tenant"] == b"t"
    head = asyncio.run(run([(b"X-Dynamo-Session-Id", b"agent-7")]))
    assert head[b"x-dynamo-session-id"] == b"agent-7" and b"resp_1" not in head.values()


def test_leaving_an_exchange_drops_the_frontend_s_connection_mid_answer() -> None:
    async def run() -> tuple[bytes, StandInFrontend]:
        frontend = StandInFrontend(hold_after=4)
        gateway = Gateway([await frontend.start()], None, GraphKey(b"g" * 32))
        written: list[bytes] = []
        first = asyncio.Event()
        exchange = Clientless(
            gateway,
            "responses",
            b"POST",
            [],
            Upstream(b"/v1/completions", b"{}", transform()),
            lambda data, last: (written.append(data), first.set()),
        )
        forwarding = asyncio.ensure_future(exchange.forward())
        await asyncio.wait_for(first.wait(), DEADLINE_S)
        exchange.leave()
        await asyncio.wait_for(forwarding, DEADLINE_S)
        await asyncio.wait_for(frontend.dropped.wait(), DEADLINE_S)
        await gateway.close()
        await frontend.stop()
        return b"".join(written), frontend

    output, frontend = asyncio.run(run())
    assert frontend.dropped.is_set() and not frontend.release.is_set()
    sent = events(output)
    assert sent and all(event["type"] != "response.completed" for event in sent)


class DetachedWork:
    """A routes.Detached that answers at once and records what its exchange wrote."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.ended = asyncio.Event()

    def answer(self) -> tuple[int, dict]:
        return 200, {"status": "queued"}

    def output(self, data: bytes, last: bool) -> None:
        self.written.append(data)

    async def run(self, exchange: Exchange) -> None:
        await exchange.forward()
        self.ended.set()


class DetachingRoute:
    """A generation route whose requests run on without their client."""

    api = "responses"

    def __init__(self) -> None:
        self.work: list[DetachedWork] = []

    async def prepare(self, url: bytes, body: bytes, checks: object, caller: object) -> Upstream:
        self.work.append(DetachedWork())
        return Upstream(b"/v1/completions", b"{}", transform(), detached=self.work[-1])


class EventsRoute:
    """A local route answering events without end, a comment every few milliseconds after the first."""

    api = None

    def __init__(self) -> None:
        self.closed = asyncio.Event()

    async def answer(self, method: bytes, url: bytes, body: bytes, checks: object, caller: object) -> EventStreamAnswer:
        async def events() -> AsyncIterator[bytes]:
            try:
                yield b"event: first\ndata: {}\n\n"
                while True:
                    await asyncio.sleep(0.005)  # the pace of events, not a wait on anything
                    yield b": more\n\n"
            finally:
                self.closed.set()

        return EventStreamAnswer(events())


def test_a_detached_generation_answers_at_once_runs_to_its_end_and_holds_its_admission_until_then() -> None:
    async def run() -> None:
        frontend = StandInFrontend(hold_after=4)
        gateway = Gateway([await frontend.start()], None, GraphKey(b"g" * 32), max_in_flight=1)
        detaching, local = DetachingRoute(), EventsRoute()
        gateway.routes.exact[(b"POST", b"/v1/detached")] = detaching
        gateway.routes.exact[(b"GET", b"/v1/events")] = local
        stop, port = asyncio.Event(), free_ports(1)[0]
        serving = asyncio.ensure_future(serve(gateway, "127.0.0.1", port, 5, stop))
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=DEADLINE_S) as client:
            for _ in range(100):  # listening once a request is answered
                try:
                    await client.get("/health")
                    break
                except httpx.ConnectError:
                    await asyncio.sleep(0.05)
            answered = await client.post("/v1/detached", json={})
            assert answered.status_code == 200 and answered.json() == {"status": "queued"}
            work = detaching.work[0]
            assert not work.ended.is_set() and gateway.exchanges == 1
            refused = await client.post("/v1/detached", json={})  # max_in_flight 1: the detached one holds it
            assert refused.status_code == 503 and len(detaching.work) == 1
            frontend.release.set()
            await asyncio.wait_for(work.ended.wait(), DEADLINE_S)
            await asyncio.wait_for(_until(lambda: gateway.exchanges == 0), DEADLINE_S)
            assert events(b"".join(work.written))[-1]["type"] == "response.completed"
            assert (await client.post("/v1/detached", json={})).status_code == 200  # admitted again
            await asyncio.wait_for(detaching.work[1].ended.wait(), DEADLINE_S)

            async with client.stream("GET", "/v1/events") as streamed:
                assert streamed.headers["content-type"] == "text/event-stream"
                assert (await anext(streamed.aiter_lines())) == "event: first"
            await asyncio.wait_for(local.closed.wait(), DEADLINE_S)  # the client left: the events are closed
        stop.set()
        await asyncio.wait_for(serving, DEADLINE_S)
        await frontend.stop()

    asyncio.run(run())


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.01)
