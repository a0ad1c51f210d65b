"""A stand-in for Dynamo's frontend that the gateway's in-process tests forward to: it answers every
completion with ANSWER's harmony token ids, one per chunk, and its usage, as Dynamo's frontend streams
`nvext.extra_fields: ["completion_token_ids"]`, and records what it was sent."""

from __future__ import annotations

import asyncio
import json

import orjson

from tests.support.harmony import completion_chunks, harmony_ids

ANSWER = "<|channel|>analysis<|message|>Think first.<|end|><|start|>assistant<|channel|>final<|message|>Hello there.<|return|>"


class StandInFrontend:
    """Answers each completion with ANSWER's chunks, one token each; after `hold_after` chunks it waits
    for `release` (or for the gateway to drop the connection, which it records)."""

    def __init__(self, hold_after: int | None = None) -> None:
        self.hold_after = hold_after
        self.release = asyncio.Event()
        self.requests: list[dict] = []
        self.heads: list[dict[bytes, bytes]] = []  # each completion request's headers, names lowercased
        self.dropped = asyncio.Event()
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Each request on the connection in turn, kept alive as Dynamo's frontend keeps it."""
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:  # the gateway closed the connection
                break
            lines = head.split(b"\r\n")
            length = next((int(line.split(b":")[1]) for line in lines if line.lower().startswith(b"content-length")), 0)
            body = await reader.readexactly(length)
            if not lines[0].startswith(b"POST"):  # health
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                continue
            self.requests.append(json.loads(body))
            self.heads.append({n.lower(): v for n, _, v in (line.partition(b": ") for line in lines[1:]) if v})
            if not await self._answer(reader, writer):
                return
        writer.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """The completion's chunks; False when the gateway dropped the connection while it was held."""
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        chunks = completion_chunks(harmony_ids(ANSWER), 1)
        usage = {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": len(chunks)}}
        chunks += [b"data: " + orjson.dumps(usage) + b"\n\n", b"data: [DONE]\n\n"]
        for index, chunk in enumerate(chunks):
            if index == self.hold_after and not self.release.is_set():
                await writer.drain()
                dropped = asyncio.ensure_future(reader.read())
                await asyncio.wait(
                    [asyncio.ensure_future(self.release.wait()), dropped], return_when=asyncio.FIRST_COMPLETED
                )
                if dropped.done():
                    self.dropped.set()
                    writer.close()
                    return False
                dropped.cancel()
                await asyncio.wait([dropped])
            writer.write(b"%x\r\n%b\r\n" % (len(chunk), chunk))
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
