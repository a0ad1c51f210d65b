"""Usage that can be billed: every API's answer says its input, cached, output and reasoning tokens in
its own fields, and the gateway's per-key counters move by exactly those figures, streams whose
client did not ask for usage included. (Cached tokens are the prefill worker's on a disaggregated
graph: tests/launch/test_serve.py's restarted decode worker tells the two apart.)"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import openai
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from dynamo_oss.gateway.text_completions import CompletionJson, CompletionStream
from dynamo_oss.gateway.usage import Usage, ask_for_usage
from tests.support.graphs import KEYS
from tests.support.served import ServedGraph
from tests.support.waiting import wait_for

MODEL = "openai/gpt-oss-20b"
KEY = "frank"  # a tenant of its own: no other test's prompt is in its cache, no other test moves its counters
LONG = " ".join(f"invoice line {i} settled" for i in range(300))  # about 1,500 prompt tokens
KINDS = ("input", "cached", "output", "reasoning")


def counted(graph: ServedGraph) -> dict[str, float]:
    """KEY's tokens by kind, from the gateway's loopback metrics port."""
    port = yaml.safe_load(graph.graph.read_text())["observability"]["gateway_port"]
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    # No family yet before the gateway's first answer with usage: every count is then 0.
    samples = next(
        (f.samples for f in text_string_to_metric_families(text) if f.name == "dynamo_oss_gateway_tokens"), []
    )
    found = {s.labels["kind"]: s.value for s in samples if s.name.endswith("_total") and s.labels["key"] == KEY}
    return {kind: found.get(kind, 0.0) for kind in KINDS}


def assert_counted(graph: ServedGraph, before: dict[str, float], answers: list[Usage]) -> None:
    """The counters moved by exactly the answers' figures (counted once each exchange is over, which
    may be a moment after its last byte reached the client)."""
    expected = {kind: float(sum(getattr(usage, kind) for usage in answers)) for kind in KINDS}

    def moved() -> dict[str, float]:
        return {kind: value - before[kind] for kind, value in counted(graph).items()}

    wait_for(lambda: all(moved()[kind] >= expected[kind] for kind in KINDS), 10, f"the counters to move by {expected}")
    assert moved() == expected


def openai_client(graph: ServedGraph) -> openai.OpenAI:
    return openai.OpenAI(base_url=graph.endpoint, api_key=KEYS[KEY], max_retries=0, timeout=60)


def chat(graph: ServedGraph, prompt: str, stream: bool) -> Usage:
    client, messages = openai_client(graph), [{"role": "user", "content": prompt}]
    if stream:
        chunks = list(
            client.chat.completions.create(
                model=MODEL, messages=messages, max_tokens=200, stream=True, stream_options={"include_usage": True}
            )
        )
        usage = chunks[-1].usage
    else:
        usage = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=200).usage
    assert usage is not None and usage.prompt_tokens_details is not None and usage.completion_tokens_details is not None
    return Usage(
        usage.prompt_tokens,
        usage.prompt_tokens_details.cached_tokens or 0,
        usage.completion_tokens,
        usage.completion_tokens_details.reasoning_tokens or 0,
    )


def harmony_prompt(text: str) -> str:
    """A prompt rendered in harmony by hand, ending where gpt-oss answers: its completion is harmony."""
    return f"<|start|>user<|message|>{text}<|end|><|start|>assistant"


def completions(graph: ServedGraph, prompt: str, stream: bool) -> Usage:
    client = openai_client(graph)
    if stream:
        chunks = list(
            client.completions.create(
                model=MODEL,
                prompt=harmony_prompt(prompt),
                max_tokens=200,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        usage = chunks[-1].usage
    else:
        usage = client.completions.create(model=MODEL, prompt=harmony_prompt(prompt), max_tokens=200).usage
    assert usage is not None and usage.prompt_tokens_details is not None and usage.completion_tokens_details is not None
    return Usage(
        usage.prompt_tokens,
        usage.prompt_tokens_details.cached_tokens or 0,
        usage.completion_tokens,
        usage.completion_tokens_details.reasoning_tokens or 0,
    )


def responses(graph: ServedGraph, prompt: str, stream: bool) -> Usage:
    client = openai_client(graph)
    if stream:
        events = list(client.responses.create(model=MODEL, input=prompt, max_output_tokens=200, stream=True))
        usage = events[-1].response.usage  # type: ignore[union-attr]
    else:
        usage = client.responses.create(model=MODEL, input=prompt, max_output_tokens=200).usage
    assert usage is not None
    return Usage(
        usage.input_tokens,
        usage.input_tokens_details.cached_tokens,
        usage.output_tokens,
        usage.output_tokens_details.reasoning_tokens,
    )


def messages(graph: ServedGraph, prompt: str, stream: bool) -> Usage:
    client = anthropic.Anthropic(
        base_url=graph.endpoint.removesuffix("/v1"), api_key=KEYS[KEY], max_retries=0, timeout=60
    )
    asked: dict[str, Any] = {"model": MODEL, "max_tokens": 200, "messages": [{"role": "user", "content": prompt}]}
    if stream:
        with client.messages.stream(**asked) as events:
            usage = events.get_final_message().usage
    else:
        usage = client.messages.create(**asked).usage
    assert usage.cache_read_input_tokens is not None and usage.output_tokens_details is not None
    # Anthropic's input_tokens leave out the tokens read from the cache; the gateway's input counts them.
    return Usage(
        usage.input_tokens + usage.cache_read_input_tokens,
        usage.cache_read_input_tokens,
        usage.output_tokens,
        usage.output_tokens_details.thinking_tokens,
    )


Api = Callable[[ServedGraph, str, bool], Usage]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("api", [chat, completions, responses, messages])
def test_each_api_reports_billable_usage_and_the_key_is_billed_exactly_that(
    keyed_graph: ServedGraph, api: Api, stream: bool
) -> None:
    """The same long prompt twice: the first answer finds none of it cached, the second most of it;
    both reason; the key's counters move by the two answers' figures."""
    prompt = f"{api.__name__} {stream}: {LONG}"
    before = counted(keyed_graph)
    first, second = api(keyed_graph, prompt, stream), api(keyed_graph, prompt, stream)
    for usage in (first, second):
        assert 0 <= usage.cached <= usage.input and 0 < usage.reasoning <= usage.output, usage
    assert first.cached < 0.1 * first.input and second.cached >= 0.9 * second.input, (first, second)
    assert_counted(keyed_graph, before, [first, second])


def raw_stream(graph: ServedGraph, path: str, body: dict) -> bytes:
    with httpx.stream(
        "POST", f"{graph.endpoint}/{path}", json=body, timeout=60, headers={"Authorization": f"Bearer {KEYS[KEY]}"}
    ) as reply:
        assert reply.status_code == 200
        return b"".join(reply.iter_bytes())


def without_ids(stream: bytes) -> bytes:
    """A stream with what differs between two runs of one request taken out: its id and creation time."""
    return re.sub(rb'"created":\d+', b"", re.sub(rb'"id":"[^"]+"', b"", stream))


def events_with_usage(stream: bytes) -> list[bytes]:
    return [event for event in stream.split(b"\n\n") if re.search(rb'"usage":\{', event)]


def read_out(stream: bytes) -> tuple[dict[str, str], list[bytes]]:
    """What a client reads of a stream, however its tokens were bunched into chunks (which depends on the
    reads): each text field joined across the chunks, and the events that end it, ids and times taken out."""
    said: dict[str, str] = {}
    events = [event for event in stream.split(b"\n\n") if event]
    for event in events:
        for choice in json.loads(event[6:]).get("choices") or [] if event.startswith(b"data: {") else []:
            for field, value in {**(choice.get("delta") or {}), "text": choice.get("text")}.items():
                if field in ("content", "reasoning", "reasoning_content", "text") and value:
                    said[field] = said.get(field, "") + value
    return said, [without_ids(event) for event in events[-2:]]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("chat/completions", {"messages": [{"role": "user", "content": f"chat without usage: {LONG}"}]}),
        ("completions", {"prompt": harmony_prompt(f"completions without usage: {LONG}")}),
    ],
    ids=["chat", "completions"],
)
def test_a_stream_that_asks_no_usage_carries_none_and_is_billed_all_the_same(
    keyed_graph: ServedGraph, path: str, body: dict
) -> None:
    """The same request streamed with and without `include_usage` (its prompt cached for both by a
    first run): the second says what the first does, less the usage chunk, and the key is billed for
    the second what the first's usage says."""
    asked = {"model": MODEL, "max_tokens": 120, "stream": True, **body}
    with_usage = {**asked, "stream_options": {"include_usage": True}}
    raw_stream(keyed_graph, path, with_usage)
    before = counted(keyed_graph)
    plain = raw_stream(keyed_graph, path, asked)
    shown = raw_stream(keyed_graph, path, with_usage)
    assert events_with_usage(plain) == [] and len(events_with_usage(shown)) == 1
    usage_chunk = events_with_usage(shown)[0] + b"\n\n"
    assert read_out(plain) == read_out(shown.replace(usage_chunk, b""))
    usage = openai.types.CompletionUsage.model_validate(json.loads(usage_chunk[6:])["usage"])
    assert usage.completion_tokens_details is not None and usage.prompt_tokens_details is not None
    billed = Usage(
        usage.prompt_tokens,
        usage.prompt_tokens_details.cached_tokens or 0,
        usage.completion_tokens,
        usage.completion_tokens_details.reasoning_tokens or 0,
    )
    assert_counted(keyed_graph, before, [billed, billed])


@pytest.mark.parametrize(
    ("options", "sent", "hidden"),
    [
        (None, {"include_usage": True}, True),
        ({"include_usage": False, "continuous_usage_stats": True}, {"include_usage": True}, True),
        (
            {"include_usage": True, "continuous_usage_stats": True},
            {"include_usage": True, "continuous_usage_stats": True},
            False,
        ),
        ("usage please", "usage please", False),
    ],
)
def test_a_stream_asks_dynamo_for_its_usage_unless_it_did_or_its_options_are_not_options(
    options: object, sent: object, hidden: bool
) -> None:
    request: dict[str, Any] = {"stream": True} | ({} if options is None else {"stream_options": options})
    assert ask_for_usage(request) is hidden
    assert request["stream_options"] == sent


HARMONY_PIECES = [
    "<|channel|>",
    "analysis",
    "<|message|>",
    "We",
    " need",
    " to",
    " think",
    ".",
    "<|end|>",
    "<|start|>",
    "assistant",
    "<|channel|>",
    "final",
    "<|message|>",
    "Hi",
    "<|return|>",
]


@pytest.mark.parametrize(
    ("pieces", "reasoning"), [(HARMONY_PIECES, 5), (["Once", " upon", " a", " time"], 0)], ids=["harmony", "plain text"]
)
def test_a_completion_is_billed_its_analysis_channel_as_reasoning_streamed_or_not(
    pieces: list[str], reasoning: int
) -> None:
    """Read a byte at a time (a read may end anywhere) or whole: the same usage, whose reasoning is the
    analysis channel's tokens; the stream's other chunks pass as they came."""
    usage = {"prompt_tokens": 9, "completion_tokens": len(pieces), "prompt_tokens_details": {"cached_tokens": 8}}
    chunks = b"".join(
        b'data: {"choices":[{"text":%b,"index":0}],"usage":null}\n\n' % json.dumps(p).encode() for p in pieces
    )
    body = chunks + b'data: {"choices":[],"usage":' + json.dumps(usage).encode() + b"}\n\ndata: [DONE]\n\n"
    stream = CompletionStream(hide_usage=True)
    out = b"".join(stream.feed(body[at : at + 1]) for at in range(len(body))) + stream.end()
    whole = CompletionJson()
    whole.feed(json.dumps({"choices": [{"text": "".join(pieces), "index": 0}], "usage": usage}).encode())
    answer = json.loads(whole.end())
    assert out == chunks + b"data: [DONE]\n\n"
    assert answer["usage"]["completion_tokens_details"] == {"reasoning_tokens": reasoning}
    assert stream.billed == whole.billed == Usage(input=9, cached=8, output=len(pieces), reasoning=reasoning)


def test_the_metrics_port_serves_dynamo_s_frontend_and_the_endpoint_serves_no_metrics(keyed_graph: ServedGraph) -> None:
    """On Kubernetes Dynamo's frontend is on the pod's loopback: Prometheus reads it through this port."""
    port = yaml.safe_load(keyed_graph.graph.read_text())["observability"]["gateway_port"]
    frontend = httpx.get(f"http://127.0.0.1:{port}/metrics/frontend", timeout=10)
    assert frontend.status_code == 200 and "dynamo_frontend_requests_total" in frontend.text
    public = httpx.get(
        f"{keyed_graph.endpoint.removesuffix('/v1')}/metrics",
        timeout=10,
        headers={"authorization": f"Bearer {KEYS[KEY]}"},
    )
    assert public.status_code == 404
