"""The gateway's part of a trace, in this process against a stand-in frontend: what it hands Dynamo's
frontend (its own traceparent, carrying the sampling decision, in place of the client's), the spans it
writes once a request ends, and an endpoint that cannot be reached: the request is answered as ever,
the spans are dropped, counted, and said once in the log."""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
from pathlib import Path

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dynamo_oss.gateway.app import Gateway, serve
from dynamo_oss.gateway.config import TracingConfig
from dynamo_oss.gateway.graph_key import GraphKey
from dynamo_oss.gateway.latency_histograms import Exemplars
from dynamo_oss.gateway.routes import Upstream
from dynamo_oss.gateway.text_completions import CompletionStream
from dynamo_oss.gateway.tracing import DROPPED, Tracing
from tests.support.frontends import StandInFrontend
from tests.support.ports import free_ports

DEADLINE_S = 10
TRACEPARENT = re.compile(rb"^00-([0-9a-f]{32})-([0-9a-f]{16})-(0[01])$")


class StreamingRoute:
    """A generation route forwarding every request to the frontend as a completions stream."""

    api = "completions"

    async def prepare(self, url: bytes, body: bytes, checks: object, caller: object) -> Upstream:
        return Upstream(b"/v1/completions", body, CompletionStream(hide_usage=False))


async def exchange(tracing: Tracing, headers_each: list[dict[str, str]]) -> tuple[list[int], StandInFrontend]:
    """Each request through a gateway that traces with `tracing`; their statuses, and what the frontend saw."""
    frontend = StandInFrontend()
    gateway = Gateway([await frontend.start()], None, GraphKey(b"g" * 32), tracing=tracing)
    gateway.routes.exact[(b"POST", b"/v1/streamed")] = StreamingRoute()
    stop, port = asyncio.Event(), free_ports(1)[0]
    serving = asyncio.ensure_future(serve(gateway, "127.0.0.1", port, 5, stop))
    statuses = []
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=DEADLINE_S) as client:
        for _ in range(100):  # listening once a probe is answered
            try:
                await client.get("/health")
                break
            except (httpx.ConnectError, httpx.RemoteProtocolError):
                await asyncio.sleep(0.05)
        for headers in headers_each:
            reply = await client.post("/v1/streamed", json={"prompt": "hi", "stream": True}, headers=headers)
            statuses.append(reply.status_code)
    stop.set()
    await asyncio.wait_for(serving, DEADLINE_S)
    await frontend.stop()
    return statuses, frontend


def tracing(tmp_path: Path, ratio: float, exporter: object, endpoint: str = "http://127.0.0.1:1") -> Tracing:
    config = TracingConfig(endpoint=endpoint, sample_ratio=ratio)
    return Tracing(config, Exemplars(tmp_path / "exemplars"), exporter)  # type: ignore[arg-type]


def sent_traceparent(head: dict[bytes, bytes]) -> tuple[str, str, str]:
    match = TRACEPARENT.match(head[b"traceparent"])
    assert match, head[b"traceparent"]
    return tuple(group.decode() for group in match.groups())  # type: ignore[return-value]


def test_the_frontend_gets_the_gateway_s_traceparent_continuing_the_client_s_or_starting_one(tmp_path: Path) -> None:
    spans = InMemorySpanExporter()
    traced = tracing(tmp_path, 0.0, spans)  # nothing is sampled unless a client's traceparent says so
    client_trace, client_span = secrets.token_hex(16), secrets.token_hex(8)
    requests = [
        {"traceparent": f"00-{client_trace}-{client_span}-01", "tracestate": "vendor=1"},  # continued, sampled
        {"traceparent": f"00-{secrets.token_hex(16)}-{client_span}-00"},  # continued, sampled out
        {"traceparent": "00-zzzz-not-hex-01", "tracestate": "vendor=2"},  # malformed: a new trace
        {"traceparent": f"00-{'0' * 32}-{client_span}-01"},  # an all-zero trace id is invalid too
        {},
    ]
    statuses, frontend = asyncio.run(exchange(traced, requests))
    traced.provider.force_flush()
    assert statuses == [200] * len(requests)
    sent = [sent_traceparent(head) for head in frontend.heads]
    assert sent[0][0] == client_trace and sent[0][1] != client_span and sent[0][2] == "01"
    assert frontend.heads[0][b"tracestate"] == b"vendor=1"
    assert sent[1][2] == "00"  # the client's decision, which every Dynamo process follows
    for new in sent[2:]:
        assert new[0] not in (client_trace, "0" * 32) and new[2] == "00"  # ratio 0: a new trace, sampled out
    assert b"tracestate" not in frontend.heads[2]  # a malformed traceparent's tracestate is not passed on
    assert all(head.get(b"traceparent", b"").count(b"-") == 3 for head in frontend.heads)

    finished = spans.get_finished_spans()  # only the sampled request's
    assert {span.context.trace_id for span in finished} == {int(client_trace, 16)}
    (root,) = [span for span in finished if span.name == "gateway.request"]
    assert f"{root.context.span_id:016x}" == sent[0][1]  # the frontend's parent is the gateway's request span
    assert f"{root.parent.span_id:016x}" == client_span
    phases = sorted((span.start_time, span.name) for span in finished if span.parent.span_id == root.context.span_id)
    assert [name for _, name in phases] == [
        "gateway.admission",
        "gateway.render",
        "gateway.first_token",
        "gateway.stream",
    ]
    assert root.attributes["dynamo_oss.api"] == "completions" and root.attributes["gen_ai.usage.input_tokens"] == 10
    assert root.attributes["http.response.status_code"] == 200


def test_an_unreachable_endpoint_never_fails_a_request_and_its_dropped_spans_are_counted_and_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    closed = free_ports(1)[0]  # nothing listens there
    endpoint = f"http://127.0.0.1:{closed}"
    traced = tracing(tmp_path, 1.0, OTLPSpanExporter(endpoint=endpoint, insecure=True, timeout=1), endpoint)
    before = DROPPED._value.get()  # noqa: SLF001 - the counter's value in this process
    with caplog.at_level(logging.WARNING, logger="dynamo_oss.gateway"):
        statuses, _ = asyncio.run(exchange(traced, [{}, {}]))
        traced.provider.force_flush()
        statuses += asyncio.run(exchange(traced, [{}]))[0]
        traced.provider.force_flush()
    assert statuses == [200, 200, 200]
    assert DROPPED._value.get() - before == 3 * 5  # noqa: SLF001 - each request's five spans
    said = [r.getMessage() for r in caplog.records if "cannot be exported" in r.getMessage()]
    assert len(said) == 1 and f"127.0.0.1:{closed}" in said[0]
    traced.close()
