"""How the gateway reads Dynamo's frontend, against stand-ins: it acknowledges at once, so a frontend writing
with Nagle's algorithm on is never held back by a delayed ACK."""

from __future__ import annotations

import asyncio
import socket
import statistics
import time

import httpx
import pytest

from dynamo_oss.gateway.app import Gateway, serve
from dynamo_oss.gateway.graph_key import GraphKey
from dynamo_oss.gateway.routes import PassThrough
from tests.support.ports import free_ports

DEADLINE_S = 10
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
DELAYED_ACK_S = 0.040  # Linux's least delayed ACK (TCP_DELACK_MIN): what a held event would wait at least
PACED_EVENTS = 20
EXCHANGES = 5


class NaglingFrontend:
    """Answers each POST with PACED_EVENTS events, each written once the client has read the one before, on a
    socket with Nagle's algorithm on, as Dynamo's frontend writes: an event written while the one before is
    unacknowledged waits for its ACK."""

    def __init__(self) -> None:
        self.read = asyncio.Queue[None]()  # one item each event the client has read

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0)
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:  # the gateway closed the connection
                break
            lines = head.lower().split(b"\r\n")
            await reader.readexactly(next((int(line[15:]) for line in lines if line.startswith(b"content-length:")), 0))
            writer.write(HEAD)
            for index in range(PACED_EVENTS):
                event = b"data: %d\n\n" % index
                writer.write(b"%x\r\n%b\r\n" % (len(event), event))
                await self.read.get()
            writer.write(b"0\r\n\r\n")
        writer.close()


@pytest.mark.skipif(not hasattr(socket, "TCP_QUICKACK"), reason="quick-ACK is Linux's")
def test_a_frontend_writing_with_nagle_s_algorithm_on_is_acknowledged_at_once_on_a_kept_connection() -> None:
    """Sending the request turns delayed ACKs on (the kernel takes the connection for request and answer), and a
    kept connection's next request follows an answer at once: unless the gateway asks for quick ACKs after each
    request, the frontend's second event of every answer waits for a delayed ACK."""

    async def run() -> list[float]:
        frontend = NaglingFrontend()
        gateway = Gateway([await frontend.start()], None, GraphKey(b"g" * 32))
        gateway.routes.exact[(b"POST", b"/v1/paced")] = PassThrough(b"/v1/paced")
        stop, port = asyncio.Event(), free_ports(1)[0]
        serving = asyncio.ensure_future(serve(gateway, "127.0.0.1", port, 5, stop))
        took = []
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=DEADLINE_S) as client:
            await _listening(port)
            for _ in range(EXCHANGES):
                started, events = time.monotonic(), 0
                async with client.stream("POST", "/v1/paced", content=b"{}") as answer:
                    async for piece in answer.aiter_raw():
                        for _ in range(piece.count(b"data: ")):
                            events += 1
                            frontend.read.put_nowait(None)
                took.append(time.monotonic() - started)
                assert events == PACED_EVENTS
        assert len(gateway.idle[gateway.frontends.all[0].base]) == 1  # every exchange on the one kept connection
        stop.set()
        await asyncio.wait_for(serving, DEADLINE_S)
        frontend.server.close()
        return took

    took = asyncio.run(run())
    assert statistics.median(took) < DELAYED_ACK_S, f"exchanges took {[round(s * 1e3) for s in took]} ms"


async def _listening(port: int) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.02)  # polling the port against the deadline above
