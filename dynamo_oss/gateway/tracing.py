"""The gateway's part of a request's trace: it continues a client's W3C traceparent or starts a trace,
decides once whether the request is sampled (a client's sampled flag, else the graph's sample_ratio),
and hands Dynamo's frontend a traceparent carrying that decision, so every process of the graph
records the request, or none does.

Its spans, under one `gateway.request` (the API, the tenant, the status and the token counts as
attributes; never a key or any content): `gateway.admission` (the key's share and the graph's
capacity), `gateway.render` (the request checked and rendered for Dynamo), `gateway.first_token`
(forwarded until the first bytes of Dynamo's answer) and `gateway.stream` (from them to the end).
Dynamo's `http-request` is a child of `gateway.request`.

What it costs: nothing where the graph does not trace (the shell's hooks see None). Where it does,
per request and never per token: the sampling decision, the traceparent, one wrapped call on the
answer's first bytes and the latency histograms (latency_histograms.py); a sampled request's spans are written
once it ends, from marks taken on the way, and exported in batches from a thread.

An endpoint that cannot be reached never fails a request: the batch that could not be sent is
dropped, counted (dynamo_oss_gateway_trace_spans_dropped_total) and said once in the log, and said
again once spans go through.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer, get_current_span, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from prometheus_client import Counter

from dynamo_oss.gateway.config import TracingConfig
from dynamo_oss.gateway.latency_histograms import ITL, TTFT, Exemplars, exemplars_dir
from dynamo_oss.gateway.routes import Transform

log = logging.getLogger("dynamo_oss.gateway")

SERVICE_NAME = "dynamo-oss-gateway"
EXPORT_TIMEOUT_S = 5.0  # an export that cannot reach the endpoint gives up after this, and its batch is dropped
TRACE_HEADERS = (b"traceparent", b"tracestate")
PROPAGATOR = TraceContextTextMapPropagator()

DROPPED = Counter(
    "dynamo_oss_gateway_trace_spans_dropped",
    "Spans the gateway could not export (the tracing endpoint unreachable or refusing, or its queue full).",
)


class RequestTrace:
    """One request's part of its trace: the marks of its phases, turned into spans once it ends."""

    __slots__ = (
        "span",
        "api",
        "sampled",
        "trace_id",
        "traceparent",
        "tracestate",
        "start",
        "admitted",
        "forwarded",
        "first",
        "transform",
    )

    def __init__(self, span: Span, api: str | None, tracestate: bytes | None, start: int) -> None:
        context = span.get_span_context()
        self.span, self.api, self.tracestate, self.start = span, api, tracestate, start
        self.sampled = context.trace_flags.sampled
        self.trace_id = f"{context.trace_id:032x}"
        flags = b"01" if self.sampled else b"00"
        self.traceparent = b"00-%s-%016x-%s" % (self.trace_id.encode(), context.span_id, flags)
        self.admitted = self.forwarded = self.first = 0
        self.transform: Transform | None = None  # the answer's, once the request is forwarded

    def mark_admitted(self) -> None:
        self.admitted = time.time_ns()

    def upstream_headers(self, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """The request's headers for Dynamo's frontend: the gateway's traceparent in place of the client's."""
        self.forwarded = time.time_ns()
        kept = [(name, value) for name, value in headers if name.lower() not in TRACE_HEADERS]
        kept.append((b"traceparent", self.traceparent))
        if self.tracestate is not None:
            kept.append((b"tracestate", self.tracestate))
        return kept

    def watch_first_bytes(self, transform: Transform) -> None:
        """Mark when the transform is first fed Dynamo's answer, then step aside: later pieces cost nothing."""
        self.transform = transform
        feed = transform.feed

        def first(body: bytes) -> bytes:
            self.first = time.time_ns()
            transform.feed = feed  # type: ignore[method-assign]
            return feed(body)

        transform.feed = first  # type: ignore[method-assign]


class Tracing:
    """The gateway's tracer: one per serving process, exporting to the graph's endpoint."""

    def __init__(self, config: TracingConfig, exemplars: Exemplars, exporter: SpanExporter | None = None) -> None:
        """`exporter`: where the spans go, the endpoint's OTLP exporter unless given."""
        provider = TracerProvider(
            sampler=ParentBased(TraceIdRatioBased(config.sample_ratio)),
            resource=Resource.create({"service.name": SERVICE_NAME}),
        )
        exporter = exporter or OTLPSpanExporter(endpoint=config.endpoint, insecure=True, timeout=EXPORT_TIMEOUT_S)
        provider.add_span_processor(CountingBatches(CountingExporter(exporter, config.endpoint)))
        self.provider = provider
        self.tracer: Tracer = provider.get_tracer("dynamo_oss.gateway")
        self.exemplars = exemplars
        # The SDK's own messages for each failed export or full queue: CountingExporter says it once instead.
        logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)

    @classmethod
    def of(cls, config: TracingConfig, state_dir: Path) -> Tracing:
        """A serving process's tracer, its exemplars left in the endpoint's state folder."""
        return cls(config, Exemplars(exemplars_dir(state_dir)))

    def begin(self, headers: list[tuple[bytes, bytes]], api: str | None) -> RequestTrace:
        """A request's trace, continuing the client's traceparent when it is well-formed (W3C's rules;
        anything else starts a new trace, as if there were none)."""
        start = time.time_ns()
        carrier, tracestate = {}, None
        for name, value in headers:
            lowered = name.lower()
            if lowered in TRACE_HEADERS:
                carrier[lowered.decode()] = value.decode("latin-1")
                tracestate = value if lowered == b"tracestate" else tracestate
        parent = PROPAGATOR.extract(carrier) if carrier else Context()
        if not get_current_span(parent).get_span_context().is_valid:
            tracestate = None  # W3C: a tracestate belongs to its traceparent
        span = self.tracer.start_span("gateway.request", context=parent, kind=SpanKind.SERVER, start_time=start)
        return RequestTrace(span, api, tracestate, start)

    def end(self, trace: RequestTrace, status: int, tenant: str) -> None:
        """The request is over: its latencies observed and, when it is sampled, its spans written."""
        end = time.time_ns()
        billed = trace.transform.billed if trace.transform is not None else None
        api = trace.api or "other"
        exemplar = trace.trace_id if trace.sampled else None
        if trace.first:
            self.exemplars.observe(TTFT, api, (trace.first - trace.start) / 1e9, exemplar)
            if billed is not None and billed.output > 1:
                self.exemplars.observe(ITL, api, (end - trace.first) / 1e9 / (billed.output - 1), exemplar)
        if not trace.sampled:
            return
        root = trace.span
        context = set_span_in_context(root)
        phases = [
            ("gateway.admission", trace.start, trace.admitted),
            ("gateway.render", trace.admitted, trace.forwarded),
            ("gateway.first_token", trace.forwarded, trace.first),
            ("gateway.stream", trace.first, end if trace.first else 0),
        ]
        for name, started, ended in phases:
            if started and ended:
                self.tracer.start_span(name, context=context, start_time=started).end(end_time=ended)
        attributes: dict[str, str | int] = {"http.response.status_code": status, "dynamo_oss.api": api}
        if tenant:  # a graph without keys has none
            attributes["dynamo_oss.tenant"] = tenant
        if billed is not None:
            attributes |= {
                "gen_ai.usage.input_tokens": billed.input,
                "gen_ai.usage.output_tokens": billed.output,
                "dynamo_oss.usage.cached_tokens": billed.cached,
                "dynamo_oss.usage.reasoning_tokens": billed.reasoning,
            }
        root.set_attributes(attributes)
        if status >= 500:
            root.set_status(Status(StatusCode.ERROR))
        root.end(end_time=end)

    def close(self) -> None:
        """Export what is queued (within the exporter's timeout) and stop."""
        self.provider.shutdown()


class CountingExporter(SpanExporter):
    """The OTLP exporter, counting the spans of every batch it could not send and saying so once, until
    a batch goes through again."""

    def __init__(self, exporter: SpanExporter, endpoint: str) -> None:
        self.exporter, self.endpoint = exporter, endpoint
        self.failing = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.exporter.export(spans)
        except Exception:  # noqa: BLE001 - whatever the exporter raises, the spans are lost, never the request
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            if self.failing:
                log.warning("tracing: spans reach %s again", self.endpoint)
            self.failing = False
            return result
        DROPPED.inc(len(spans))
        if not self.failing:
            log.warning(
                "tracing: spans cannot be exported to %s; requests are served as before, their spans dropped and "
                "counted in dynamo_oss_gateway_trace_spans_dropped_total (said once until they go through again)",
                self.endpoint,
            )
        self.failing = True
        return result

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.exporter.force_flush(timeout_millis)


class CountingBatches(BatchSpanProcessor):
    """The SDK's batching, counting the spans it drops when its queue is full (an endpoint slower than
    the traffic): the SDK drops the oldest and only logs it."""

    def on_end(self, span: ReadableSpan) -> None:
        batches = self._batch_processor  # noqa: SLF001 - the SDK keeps its queue there (pinned: 1.45)
        if len(batches._queue) >= batches._max_queue_size:  # noqa: SLF001
            DROPPED.inc()
        super().on_end(span)
