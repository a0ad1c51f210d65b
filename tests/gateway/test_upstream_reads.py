"""How the gateway reads Dynamo's frontend, against stand-ins: it acknowledges at once, so a frontend writing
with Nagle's algorithm on is never held back by a delayed ACK, and a transformed answer is the same however
the frontend's bytes are cut into reads (many chunks in one, an event split across reads or across chunks, a
read ending inside a chunk's size line), with one write to the client a read at most; and with
`gateway.streaming.coalesce_ms`, a stream's next read waits, so that one read and one write carry what came
meanwhile, without undoing a client's backpressure."""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from dynamo_oss.gateway.app import Gateway, UpstreamConnection, serve
from dynamo_oss.gateway.chat.stream import ChatBuilder
from dynamo_oss.gateway.forwarding import Clientless
from dynamo_oss.gateway.graph_key import GraphKey
from dynamo_oss.gateway.harmony.completion import CompletionAnswer
from dynamo_oss.gateway.harmony.rendering import RenderCache, render
from dynamo_oss.gateway.chat.conversation import conversation
from dynamo_oss.gateway.protocol.chat import ChatRequest
from dynamo_oss.gateway.routes import PassThrough, Upstream
from dynamo_oss.graph.errors import GraphError
from dynamo_oss.graph.loader import load_graph
from tests.support.frontends import ANSWER
from tests.support.graphs import gateway_config_of, write_graph
from tests.support.harmony import completion_chunks, harmony_ids
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
    request, the frontend's first event of every answer, written after the answer's head, waits for a delayed
    ACK. What is timed is that wait alone, from the head's arrival to the first event's: a round trip through
    the gateway when it acknowledges at once, at least DELAYED_ACK_S when it does not, however slow the host
    runs the rest of the exchange."""

    async def run() -> list[float]:  # each answer's wait for its first event after its head
        frontend = NaglingFrontend()
        gateway = Gateway([await frontend.start()], None, GraphKey(b"g" * 32))
        gateway.routes.exact[(b"POST", b"/v1/paced")] = PassThrough(b"/v1/paced")
        stop, port = asyncio.Event(), free_ports(1)[0]
        serving = asyncio.ensure_future(serve(gateway, "127.0.0.1", port, 5, stop))
        first_waits = []
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=DEADLINE_S) as client:
            await _listening(port)
            for _ in range(EXCHANGES):
                arrivals = []  # when each event reached the client
                async with client.stream("POST", "/v1/paced", content=b"{}") as answer:
                    headed = time.monotonic()
                    async for piece in answer.aiter_raw():
                        for _ in range(piece.count(b"data: ")):
                            arrivals.append(time.monotonic())
                            frontend.read.put_nowait(None)
                assert len(arrivals) == PACED_EVENTS
                first_waits.append(arrivals[0] - headed)
        assert len(gateway.idle[gateway.frontends.all[0].base]) == 1  # every exchange on the one kept connection
        stop.set()
        await asyncio.wait_for(serving, DEADLINE_S)
        frontend.server.close()
        return first_waits

    waits = asyncio.run(run())
    assert statistics.median(waits) < DELAYED_ACK_S, f"first events waited {[round(s * 1e3) for s in waits]} ms"


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


class UnsentTransport:
    """A frontend connection's transport in a test that hands the gateway the frontend's reads itself."""

    def __init__(self) -> None:
        self.closing = False
        self.reading = True

    def write(self, data: bytes) -> None:
        return None

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str) -> None:
        return None

    def close(self) -> None:
        self.closing = True

    abort = close

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


def framed(events: list[bytes]) -> bytes:
    """The answer's bytes as Dynamo's frontend sends them: its head, then a chunk each of `events`."""
    return HEAD + b"".join(b"%x\r\n%b\r\n" % (len(event), event) for event in events) + b"0\r\n\r\n"


FAILED = b'data: {"error":{"message":"Service temporarily unavailable","type":"service_unavailable","code":503}}\n\n'


def answer_events(ending: str) -> list[bytes]:
    """The stand-in frontend's completion (tests/support/frontends.py), a token a chunk, ended as `ending` says:
    its usage ("answered"), or Dynamo's error for a worker that died four tokens in ("failed")."""
    tokens = completion_chunks(harmony_ids(ANSWER), 1)
    if ending == "failed":
        return [*tokens[:4], FAILED, b"data: [DONE]\n\n"]
    usage = {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 20}}
    return [*tokens, b"data: " + json.dumps(usage).encode() + b"\n\n", b"data: [DONE]\n\n"]


def chat_read_in(
    reads: list[bytes], coalesce_s: float = 0.0, paused: list[tuple[bool, bool]] | None = None, **fields: object
) -> tuple[list[dict], int, str]:
    """A streamed chat answer (the request's `fields` added) to the frontend's bytes, handed to the gateway as
    `reads`: the chunks the client reads (less their id and time, which each answer draws afresh), how many
    writes carried them, and the stream they came in. `paused` gets, for each read before the last, whether
    it wrote to the client and whether reading was paused after it."""

    async def run() -> list[tuple[bytes, bool]]:
        request = ChatRequest.model_validate(
            {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True, **fields}
        )
        transform = CompletionAnswer(ChatBuilder(request, render(conversation(request), RenderCache()), True), True)
        gateway = Gateway(["http://127.0.0.1:1"], None, GraphKey(b"g" * 32), coalesce_s=coalesce_s)
        written: list[tuple[bytes, bool]] = []
        client = Clientless(
            gateway,
            "chat",
            b"POST",
            [],
            Upstream(b"/v1/completions", b"{}", transform),
            lambda *out: written.append(out),
        )
        connection = UpstreamConnection(gateway, gateway.frontends.all[0])
        transport = UnsentTransport()
        connection.connection_made(transport)  # type: ignore[arg-type]
        exchange = asyncio.ensure_future(connection.exchange(client, b"", False, transform))
        await asyncio.sleep(0)  # the exchange has sent its request and waits for the answer
        for read in reads:
            writes = sum(1 for data, _ in written if data)
            connection.data_received(read)  # once the answer has ended early, the rest closes the connection
            if paused is not None and read is not reads[-1]:
                paused.append((sum(1 for data, _ in written if data) > writes, not transport.reading))
            transport.reading = True  # the test hands over the next read itself, wait or none
        await asyncio.wait_for(exchange, DEADLINE_S)
        return written

    written = asyncio.run(run())
    assert [last for _, last in written] == [False] * (len(written) - 1) + [True]
    stream = b"".join(data for data, _ in written).decode()
    chunks = [json.loads(line[6:]) for line in stream.splitlines() if line.startswith("data: {")]
    return [{k: v for k, v in chunk.items() if k not in ("id", "created")} for chunk in chunks], len(written), stream


def cut(data: bytes, size: int) -> list[bytes]:
    return [data[start : start + size] for start in range(0, len(data), size)]


def said(chunks: list[dict], field: str) -> str:
    return "".join(chunk["choices"][0]["delta"].get(field) or "" for chunk in chunks if chunk.get("choices"))


@pytest.mark.parametrize(
    ("ending", "fields", "reasoning", "content", "last"),
    [
        ("answered", {}, "Think first.", "Hello there.", "data: [DONE]"),
        ("answered", {"stop": [" there"]}, "Think first.", "Hello", "data: [DONE]"),  # ended early, mid-read
        ("failed", {}, "Think", "", '"code":503}}'),  # Dynamo's error, then more, in one read
    ],
)
def test_a_chat_answer_is_the_same_however_the_frontend_s_bytes_are_cut_into_reads(
    ending: str, fields: dict, reasoning: str, content: str, last: str
) -> None:
    events = answer_events(ending)
    whole = framed(events)
    one_chunk_a_read = [HEAD] + [b"%x\r\n%b\r\n" % (len(event), event) for event in events] + [b"0\r\n\r\n"]
    expected, writes, stream = chat_read_in(one_chunk_a_read, **fields)
    assert said(expected, "reasoning") == reasoning and said(expected, "content") == content
    assert stream.rstrip().endswith(last)
    split_event = events[3]
    in_two_chunks = [*events[:3], split_event[:20], split_event[20:], *events[4:]]  # an event across two chunks
    for reads in ([whole], cut(whole, 1), cut(whole, 7), cut(whole, 64), cut(whole, 300), [framed(in_two_chunks)]):
        answered, writes, _ = chat_read_in(reads, **fields)
        assert said(answered, "reasoning") == reasoning and said(answered, "content") == content
        assert answered[0] == expected[0] and answered[-1] == expected[-1]  # its role first; its end
        assert writes <= len(reads) + 1  # a write a read at most, and the answer's end
    answered, writes, _ = chat_read_in([whole], **fields)
    assert writes <= 2  # many chunks in one read: one write for all of them, the end
    deltas = [chunk["choices"][0]["delta"] for chunk in answered[1:] if chunk.get("choices")]
    assert [delta for delta in deltas if delta.get("content")] == ([{"content": content}] if content else [])
    assert len([delta for delta in deltas if delta.get("reasoning")]) == 1  # a message's text a read: one delta


class BurstFrontend:
    """Answers a POST with its head and a first event; once the client has that event, writes BURST events
    more, each on its own write (Nagle off), then the answer's end."""

    BURST = 9

    def __init__(self) -> None:
        self.first_read = asyncio.Event()

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.lower().split(b"\r\n")
        await reader.readexactly(next((int(line[15:]) for line in lines if line.startswith(b"content-length:")), 0))
        writer.write(HEAD + self._chunk(0))
        await self.first_read.wait()
        for index in range(1, self.BURST + 1):
            writer.write(self._chunk(index))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    @staticmethod
    def _chunk(index: int) -> bytes:
        event = b"data: %d\n\n" % index
        return b"%x\r\n%b\r\n" % (len(event), event)


COALESCE_S = 1.0  # long against the frontend's burst, which follows the client's first read on loopback


def test_with_coalescing_a_stream_s_events_that_come_while_its_reads_wait_go_out_in_one_write() -> None:
    """The burst's events reach the frontend's socket while the gateway's read of that stream waits, so its
    next read takes them all and the client gets them in one piece, no earlier than the wait."""

    async def run() -> tuple[list[bytes], float]:
        frontend = BurstFrontend()
        gateway = Gateway([await frontend.start()], None, GraphKey(b"g" * 32), coalesce_s=COALESCE_S)
        gateway.routes.exact[(b"POST", b"/v1/burst")] = PassThrough(b"/v1/burst")
        stop, port = asyncio.Event(), free_ports(1)[0]
        serving = asyncio.ensure_future(serve(gateway, "127.0.0.1", port, 5, stop))
        pieces: list[bytes] = []  # the client's socket reads, framing and all
        await _listening(port)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /v1/burst HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
        while not b"".join(pieces).endswith(b"0\r\n\r\n"):
            piece = await asyncio.wait_for(reader.read(65536), DEADLINE_S)
            assert piece, f"the gateway closed the stream early: {pieces}"
            if b"data: 0" in piece:
                first_at = time.monotonic()
                frontend.first_read.set()
            pieces.append(piece)
        waited = time.monotonic() - first_at
        writer.close()
        stop.set()
        await asyncio.wait_for(serving, DEADLINE_S)
        frontend.server.close()
        return pieces, waited

    pieces, waited = asyncio.run(run())
    events = [line for piece in pieces for line in piece.split(b"\n") if line.startswith(b"data: ")]
    assert events == [b"data: %d" % index for index in range(BurstFrontend.BURST + 1)]
    burst = [piece for piece in pieces if b"data: 1\n" in piece]
    assert burst and all(b"data: %d" % index in burst[0] for index in range(1, BurstFrontend.BURST + 1)), pieces
    assert waited >= COALESCE_S * 0.9  # the burst waited for the gathering read, not its own reads


def test_a_gathering_read_never_resumes_a_stream_its_client_has_paused() -> None:
    """A client whose socket is full holds its stream; the end of a gathering wait must not read on for it,
    and the client's drain resumes the stream only once no wait is left."""

    async def run() -> list[bool]:
        gateway = Gateway(["http://127.0.0.1:1"], None, GraphKey(b"g" * 32), coalesce_s=0.01)
        connection = UpstreamConnection(gateway, gateway.frontends.all[0])
        transport = UnsentTransport()
        connection.connection_made(transport)  # type: ignore[arg-type]
        reading = []
        connection.reading_since = asyncio.get_running_loop().time()  # a quick stream: its last read just now
        connection._gather_if_quick()
        connection.hold()  # the client's socket fills during the wait
        await _until(lambda: not connection.gathering)
        reading.append(transport.reading)  # still held
        connection.release()
        reading.append(transport.reading)  # drained, no wait left: reading again
        connection._gather_if_quick()  # quick again: the wait just ended
        connection.hold()
        connection.release()  # drained during a wait: the wait's end resumes it
        reading.append(transport.reading)
        await _until(lambda: not connection.gathering)
        reading.append(transport.reading)
        return reading

    assert asyncio.run(run()) == [False, True, False, True]


def test_a_stream_slower_than_the_wait_is_read_as_it_comes() -> None:
    async def run() -> tuple[bool, bool]:
        gateway = Gateway(["http://127.0.0.1:1"], None, GraphKey(b"g" * 32), coalesce_s=0.05)
        connection = UpstreamConnection(gateway, gateway.frontends.all[0])
        transport = UnsentTransport()
        connection.connection_made(transport)  # type: ignore[arg-type]
        connection.reading_since = asyncio.get_running_loop().time() - 0.2  # its last read 200 ms ago
        connection._gather_if_quick()
        return connection.gathering, transport.reading

    assert asyncio.run(run()) == (False, True)


async def _until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold before the deadline"
        await asyncio.sleep(0.005)  # polling the condition against the deadline above


def test_with_coalescing_a_transformed_stream_waits_after_a_read_that_gave_its_client_something() -> None:
    """The chat transform's reads: one that writes to the client pauses the stream for the wait; the answer
    is the same as without coalescing."""
    events = answer_events("answered")
    reads = [HEAD] + [b"%x\r\n%b\r\n" % (len(event), event) for event in events] + [b"0\r\n\r\n"]
    plain, _, _ = chat_read_in(reads, paused=(unpaced := []))
    gathered, _, _ = chat_read_in(reads, coalesce_s=0.01, paused=(paced := []))
    assert gathered == plain
    assert not any(was_paused for _, was_paused in unpaced)
    assert any(wrote for wrote, _ in paced) and paced == [(wrote, wrote) for wrote, _ in paced]


@pytest.mark.parametrize("coalesce_ms", [None, 0, 12.5])
def test_the_graph_s_coalesce_ms_reaches_the_gateway_s_configuration(tmp_path: Path, coalesce_ms: float | None) -> None:
    config = gateway_config_of(tmp_path, {} if coalesce_ms is None else {"streaming": {"coalesce_ms": coalesce_ms}})
    assert config.streaming.coalesce_ms == (coalesce_ms or 0)


@pytest.mark.parametrize("coalesce_ms", [-1, 250, "soon"])
def test_a_coalesce_ms_out_of_range_is_refused_naming_the_field(tmp_path: Path, coalesce_ms: object) -> None:
    with pytest.raises(GraphError, match=r"gateway\.streaming\.coalesce_ms"):
        load_graph(write_graph(tmp_path, gateway={"streaming": {"coalesce_ms": coalesce_ms}}))
