"""An exchange with Dynamo's frontend that no client reads (app.Clientless), against a stand-in frontend:
the transform's output is what a client's stream would have carried, and leaving it drops the frontend's
connection mid-answer, as a client that leaves does (which stops the generation)."""

from __future__ import annotations

import asyncio
import datetime
import json

import orjson

from dynamo_oss.gateway.app import Clientless, Gateway
from dynamo_oss.gateway.graph_key import GraphKey
from dynamo_oss.gateway.ids import ItemIds, new_id
from dynamo_oss.gateway.protocol.responses import ResponsesRequest
from dynamo_oss.gateway.responses.route import ResponsesAnswer
from dynamo_oss.gateway.routes import Upstream
from tests.support.harmony import completion_chunks, harmony_ids, render_request, sealed_with

SEAL = sealed_with(b"c")
ANSWER = "<|channel|>analysis<|message|>Think first.<|end|><|start|>assistant<|channel|>final<|message|>Hello there.<|return|>"
DEADLINE_S = 10


class StandInFrontend:
    """Answers each completion with ANSWER's chunks, one token each; after `hold_after` chunks it waits
    for `release` (or for the gateway to drop the connection, which it records)."""

    def __init__(self, hold_after: int | None = None) -> None:
        self.hold_after = hold_after
        self.release = asyncio.Event()
        self.requests: list[dict] = []
        self.dropped = asyncio.Event()
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
        )
        self.requests.append(json.loads(await reader.readexactly(length)))
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        chunks = completion_chunks(harmony_ids(ANSWER), 1)
        usage = {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": len(chunks)}}
        chunks += [b"data: " + orjson.dumps(usage) + b"\n\n", b"data: [DONE]\n\n"]
        for index, chunk in enumerate(chunks):
            if index == self.hold_after:
                await writer.drain()
                await asyncio.wait(
                    [asyncio.ensure_future(self.release.wait()), asyncio.ensure_future(reader.read())],
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if reader.at_eof():
                    self.dropped.set()
                    writer.close()
                    return
            writer.write(b"%x\r\n%b\r\n" % (len(chunk), chunk))
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()


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
