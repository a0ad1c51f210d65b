"""One request's trace read back from the graph's trace backend (Phoenix's REST API) and drawn as a
tree in the terminal: each span with its service, its start after the trace's first span and its
duration, and the attributes that say where the time went (the phase, the pool, the worker, the
token counts). A trace is found by its trace id, by a request id (the `x-request-id` a client sent,
or Dynamo's request id, as its frontend logs it), or as the slowest request of the last minutes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx

from dynamo_oss.catalog.errors import UserError

PROJECT = "default"  # Phoenix's project for spans that name none, as Dynamo's and the gateway's do
PAGE = 1000  # the most spans Phoenix returns at once
ROOT = "gateway.request"  # the span every request's trace starts with (gateway/tracing.py)
# What a span's line shows of its attributes, in this order, under a short name.
SHOWN = {
    "dynamo_oss.api": "api",
    "dynamo_oss.tenant": "tenant",
    "http.response.status_code": "status",
    "gen_ai.usage.input_tokens": "in",
    "gen_ai.usage.output_tokens": "out",
    "dynamo_oss.usage.cached_tokens": "cached",
    "phase": "phase",
    "component": "component",
    "worker_id": "worker",
    "instance_id": "instance",
    "ttft_ms": "ttft_ms",
    "x_request_id": "x-request-id",
}


@dataclass
class TraceSpan:
    name: str
    span_id: str
    parent_id: str | None
    start: datetime
    end: datetime
    service: str
    attributes: dict
    children: list[TraceSpan] = field(default_factory=list)

    @property
    def duration_ms(self) -> float:
        return (self.end - self.start).total_seconds() * 1000


@dataclass
class Trace:
    trace_id: str
    roots: list[TraceSpan]  # one for a whole trace; more where a span's parent never arrived

    @property
    def spans(self) -> list[TraceSpan]:
        found, todo = [], list(self.roots)
        while todo:
            span = todo.pop()
            found.append(span)
            todo += span.children
        return found


class TraceBackend:
    """The graph's Phoenix, at `url` (what `dynamo serve` printed)."""

    def __init__(self, url: str, client: httpx.Client | None = None) -> None:
        self.url = url.rstrip("/")
        self.client = client or httpx.Client(timeout=30)

    def spans(self, **filters: object) -> list[dict]:
        """Every span matching Phoenix's `filters` (its query parameters), page after page."""
        found: list[dict] = []
        params = {"limit": PAGE, **filters}
        while True:
            try:
                reply = self.client.get(f"{self.url}/v1/projects/{PROJECT}/spans", params=params)
            except httpx.HTTPError as error:
                raise UserError(f"the trace backend at {self.url} does not answer ({error}): is the graph served?")
            if reply.status_code == 404:
                return found  # no span has arrived yet, so Phoenix has no project
            reply.raise_for_status()
            body = reply.json()
            found += body["data"]
            if not body.get("next_cursor"):
                return found
            params["cursor"] = body["next_cursor"]

    def trace(self, trace_id: str) -> Trace:
        spans = self.spans(trace_id=trace_id)
        if not spans:
            raise UserError(f"no trace {trace_id} in {self.url}: not sampled, not finished, or not of this graph")
        return build_trace(trace_id, spans)

    def trace_of_request(self, request_id: str, minutes: float) -> Trace:
        """The trace holding a span whose x_request_id or request_id is `request_id`, within `minutes`."""
        since = _ago(minutes)
        for attribute in ("x_request_id", "request_id"):
            spans = self.spans(attribute=f"{attribute}:{_quoted(request_id)}", start_time=since)
            if spans:
                return self.trace(spans[0]["context"]["trace_id"])
        raise UserError(
            f"no span with request id {request_id} in the last {minutes:g} minutes at {self.url}: "
            "give the x-request-id the client sent, or Dynamo's request id (its frontend's log has it)"
        )

    def slowest(self, minutes: float) -> Trace:
        """The trace of the slowest request that started in the last `minutes`."""
        roots = self.spans(name=ROOT, start_time=_ago(minutes))
        if not roots:
            raise UserError(f"no traced request in the last {minutes:g} minutes at {self.url}")
        slowest = max(roots, key=lambda span: _time(span["end_time"]) - _time(span["start_time"]))
        return self.trace(slowest["context"]["trace_id"])


def build_trace(trace_id: str, spans: list[dict]) -> Trace:
    """Phoenix's spans of one trace as a tree, children in the order they started."""
    nodes = {
        span["context"]["span_id"]: TraceSpan(
            name=span["name"],
            span_id=span["context"]["span_id"],
            parent_id=span.get("parent_id"),
            start=_time(span["start_time"]),
            end=_time(span["end_time"]),
            service=(span.get("attributes") or {}).get("service.name", ""),
            attributes=span.get("attributes") or {},
        )
        for span in spans
    }
    roots = []
    for node in nodes.values():
        parent = nodes.get(node.parent_id or "")
        (parent.children if parent else roots).append(node)
    for node in nodes.values():
        node.children.sort(key=lambda child: child.start)
    return Trace(trace_id=trace_id, roots=sorted(roots, key=lambda root: root.start))


def render_tree(trace: Trace) -> str:
    """The trace as an indented tree: offset from its start and duration in ms, then what the span did."""
    if not trace.roots:
        return f"trace {trace.trace_id}: no spans"
    origin = min(root.start for root in trace.roots)
    total = max(root.end for root in trace.roots) - origin
    lines = [
        f"trace {trace.trace_id}: {len(trace.spans)} spans, {total.total_seconds() * 1000:.1f} ms",
        f"{'start ms':>9} {'took ms':>9}  span",
    ]

    def draw(span: TraceSpan, prefix: str, last: bool, depth: int) -> None:
        branch = "" if depth == 0 else ("└─ " if last else "├─ ")
        offset = (span.start - origin).total_seconds() * 1000
        details = " ".join(f"{short}={span.attributes[key]}" for key, short in SHOWN.items() if key in span.attributes)
        where = f" [{span.service}]" if span.service else ""
        lines.append(f"{offset:9.1f} {span.duration_ms:9.1f}  {prefix}{branch}{span.name}{where} {details}".rstrip())
        deeper = prefix + ("" if depth == 0 else ("   " if last else "│  "))
        for index, child in enumerate(span.children):
            draw(child, deeper, index == len(span.children) - 1, depth + 1)

    for root in trace.roots:
        if root.parent_id:
            lines.append(f"{'':>9} {'':>9}  (parent {root.parent_id}: not in this backend, e.g. the client's span)")
        draw(root, "", True, 0)
    return "\n".join(lines)


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _ago(minutes: float) -> str:
    return (datetime.now(UTC) - timedelta(minutes=minutes)).isoformat()


def _quoted(value: str) -> str:
    """A request id as Phoenix's attribute filter reads a string, whatever it looks like."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
