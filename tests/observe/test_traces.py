"""One trace per request across the disaggregated mocker graph (observability.tracing: embedded, Arize
Phoenix on loopback): a request's spans cover the gateway, Dynamo's frontend, its router, the prefill
worker and the decode worker, each under the right parent, in one trace and no other; a client's
traceparent is continued, a malformed one starts a new trace, one sampled out is recorded by no
process; the gateway's latency buckets carry traced requests' ids; `dynamo trace` prints the tree.

This graph test is also what tests Dynamo issue 7030 (the trace context lost between prefill and
decode), closed upstream: on Dynamo 1.6 the chain holds."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator

import httpx
import openai
import pytest

from dynamo_oss.observe.traces import Trace, TraceBackend, TraceSpan
from tests.support.commands import dynamo
from tests.support.graphs import write_graph
from tests.support.ports import free_ports
from tests.support.served import FAST_MOCKER, ServedGraph, serving
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.graph, pytest.mark.long]

MODEL = "openai/gpt-oss-20b"
ARRIVAL_S = 60  # spans reach Phoenix in batches, every few seconds from each process


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServedGraph, TraceBackend, int]]:
    folder = tmp_path_factory.mktemp("traced")
    launcher, gateway_metrics, ui, otlp = free_ports(4)
    observability = {
        "prometheus": {"mode": "external", "url": "http://127.0.0.1:1"},  # none: the test reads the gateway itself
        "launcher_port": launcher,
        "gateway_port": gateway_metrics,
        "tracing": {"mode": "embedded", "port": ui, "otlp_port": otlp, "sample_ratio": 1.0},
    }
    with serving(write_graph(folder, observability=observability), folder / "run", *FAST_MOCKER) as graph:
        yield graph, TraceBackend(graph.state()["traces_url"]), gateway_metrics


def chat(graph: ServedGraph, headers: dict[str, str]) -> None:
    client = openai.OpenAI(base_url=graph.endpoint, api_key="none", max_retries=0)
    messages = [{"role": "user", "content": "Where does the time go?"}]
    stream = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=24, stream=True, extra_headers=headers
    )
    assert "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices) is not None


def whole(backend: TraceBackend, trace_id: str) -> Trace:
    """The trace once both workers' spans and the gateway's have arrived, and every span between them: each process
    exports in batches of its own, so a child may arrive before its parent (it reads as a root until then)."""

    def arrived() -> Trace | None:
        spans = backend.spans(trace_id=trace_id)
        names = {(s["name"], (s.get("attributes") or {}).get("component")) for s in spans}
        wanted = {("gateway.request", None), ("handle_payload", "prefill"), ("handle_payload", "backend")}
        if not wanted <= names:
            return None
        trace = backend.trace(trace_id)
        return trace if len(trace.roots) == 1 else None

    return wait_for(arrived, ARRIVAL_S, f"trace {trace_id}'s spans", every_s=1.0)  # type: ignore[return-value]


def under(span: TraceSpan, name: str, **attributes: str) -> list[TraceSpan]:
    """The spans named `name` (with `attributes`) at any depth below `span`."""
    found = []
    for child in span.children:
        if child.name == name and all(child.attributes.get(k) == v for k, v in attributes.items()):
            found.append(child)
        found += under(child, name, **attributes)
    return found


def test_one_request_is_one_trace_from_the_gateway_to_both_workers(traced: tuple) -> None:
    graph, backend, _ = traced
    trace_id, client_span = secrets.token_hex(16), secrets.token_hex(8)
    chat(graph, {"traceparent": f"00-{trace_id}-{client_span}-01", "x-request-id": f"one-trace-{uuid.uuid4()}"})
    trace = whole(backend, trace_id)

    assert len(trace.roots) == 1, [root.name for root in trace.roots]  # every span's parent is in the trace
    root = trace.roots[0]
    assert root.name == "gateway.request" and root.parent_id == client_span  # the client's trace, continued
    assert root.attributes["dynamo_oss.api"] == "chat" and root.attributes["gen_ai.usage.output_tokens"] > 0
    assert not any("key" in name or "content" in name for name in root.attributes)
    phases = [child.name for child in root.children if child.name.startswith("gateway.")]
    assert phases == ["gateway.admission", "gateway.render", "gateway.first_token", "gateway.stream"]
    (frontend,) = [child for child in root.children if child.name == "http-request"]  # Dynamo's frontend
    (prefill_route,) = under(frontend, "kv_router.route_request", phase="Prefill")  # its router
    (decode_route,) = under(frontend, "kv_router.route_request", phase="Decode")
    assert under(prefill_route, "handle_payload", component="prefill")  # the prefill worker, under its route
    assert under(decode_route, "handle_payload", component="backend")  # the decode worker, under its own
    assert not under(prefill_route, "handle_payload", component="backend")

    # No span of this request started a trace of its own (the harmony mocker's engine once did).
    request_id = frontend.attributes["request_id"]
    elsewhere = {s["context"]["trace_id"] for s in backend.spans(attribute=f'request_id:"{request_id}"')}
    assert elsewhere == {trace_id}

    code, out, err = dynamo("trace", str(graph.run_dir), "--trace-id", trace_id)
    assert code == 0, err
    assert out.startswith(f"trace {trace_id}: {len(trace.spans)} spans")
    for shown in ("gateway.request api=chat", "gateway.first_token", "phase=Prefill", "component=prefill"):
        assert shown in out


def test_a_malformed_traceparent_starts_a_new_trace(traced: tuple) -> None:
    graph, backend, _ = traced
    request_id = f"malformed-{uuid.uuid4()}"
    bogus = "00-not-a-trace-01"
    chat(graph, {"traceparent": bogus, "x-request-id": request_id})
    trace = wait_for(lambda: _found(backend, request_id), ARRIVAL_S, "the malformed request's trace", every_s=1.0)
    trace = whole(backend, trace.trace_id)
    assert len(trace.roots) == 1 and trace.roots[0].name == "gateway.request"
    assert trace.roots[0].parent_id is None  # a trace of its own, not a broken one


def _found(backend: TraceBackend, request_id: str) -> Trace | None:
    spans = backend.spans(attribute=f'x_request_id:"{request_id}"')
    return backend.trace(spans[0]["context"]["trace_id"]) if spans else None


def test_a_request_sampled_out_is_recorded_by_no_process_and_traced_ones_are_exemplars(traced: tuple) -> None:
    graph, backend, metrics_port = traced
    unsampled, sampled = secrets.token_hex(16), secrets.token_hex(16)
    chat(graph, {"traceparent": f"00-{unsampled}-{secrets.token_hex(8)}-00"})
    chat(graph, {"traceparent": f"00-{sampled}-{secrets.token_hex(8)}-01"})
    whole(backend, sampled)  # sent after the other: every process has exported past it by now
    assert backend.spans(trace_id=unsampled) == []

    def exemplars() -> str | None:
        accept = {"Accept": "application/openmetrics-text; version=1.0.0"}
        text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", headers=accept, timeout=10).text
        lines = [line for line in text.splitlines() if "time_to_first_token_seconds_bucket" in line and "#" in line]
        return "\n".join(lines) if sampled in "\n".join(lines) else None

    lines = wait_for(exemplars, 30, "the sampled request's trace id as an exemplar")
    assert unsampled not in lines  # type: ignore[operator]


def test_dynamo_trace_prints_the_slowest_request_of_the_last_minute(traced: tuple) -> None:
    graph, backend, _ = traced
    trace_id = secrets.token_hex(16)
    chat(graph, {"traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"})
    whole(backend, trace_id)
    code, out, err = dynamo("trace", str(graph.run_dir))
    assert code == 0, err
    assert out.startswith("trace ") and "gateway.request" in out and "handle_payload" in out
