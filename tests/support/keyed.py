"""The session's keyed mocker graph (tests/gateway/conftest.py `keyed_graph`) as its tenants meet it: the
model it serves, the weather tool each API's tests offer, each tenant's `openai` and `anthropic` client,
and its NATS, where a test may put a stored response or a batch straight into the graph's stores."""

from __future__ import annotations

import anthropic
import httpx
import openai
import yaml
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from dynamo_oss.gateway.batches.nats_batches import NatsBatchStore
from dynamo_oss.gateway.batches.records import BatchRecord
from dynamo_oss.gateway.config import NatsConnection
from dynamo_oss.gateway.nats_connection import GraphNats
from dynamo_oss.gateway.responses.nats_store import NatsResponseStore
from dynamo_oss.gateway.responses.store import StoredResponse
from tests.support.graphs import KEYS, RETENTION_S
from tests.support.served import ServedGraph

MODEL = "openai/gpt-oss-20b"
BUCKET = "responses-test-graph"  # commands.responses_bucket of write_graph's graph
BATCHES = "batches-test-graph"  # commands.batch_api's bucket of write_graph's graph
RESPONSES_WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
MESSAGES_WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def openai_client(served: ServedGraph, name: str, endpoint: str | None = None) -> openai.OpenAI:
    """Tenant `name`'s client of the OpenAI APIs, at the graph's endpoint (or `endpoint`)."""
    return openai.OpenAI(base_url=endpoint or served.endpoint, api_key=KEYS[name], max_retries=0, timeout=60)


def base_url(served: ServedGraph) -> str:
    """The endpoint as Anthropic's clients take it: without /v1."""
    return served.endpoint.removesuffix("/v1")


def anthropic_client(served: ServedGraph, name: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=base_url(served), api_key=KEYS[name], max_retries=0, timeout=60)


def nats_url(served: ServedGraph) -> str:
    return f"nats://127.0.0.1:{yaml.safe_load(served.graph.read_text())['infrastructure']['nats']['port']}"


async def put_record(url: str, record: StoredResponse) -> None:
    """`record` stored in the graph's response store at NATS `url`, as a gateway stores one."""
    nats = GraphNats(NatsConnection(url=url))
    try:
        await NatsResponseStore(BUCKET, RETENTION_S, 2**30, nats).put(record)
    finally:
        await nats.close()


async def put_batch(url: str, record: BatchRecord) -> None:
    """`record` kept in the graph's batch store at NATS `url`, as the batches route keeps a new one."""
    nats = GraphNats(NatsConnection(url=url))
    try:
        await NatsBatchStore(BATCHES, RETENTION_S, 2**30, nats).create(record)
    finally:
        await nats.close()


def gateway_samples(served: ServedGraph, family: str) -> list[Sample]:
    """The samples of one family of the gateway's metrics (summed over its processes), from its loopback port."""
    port = yaml.safe_load(served.graph.read_text())["observability"]["gateway_port"]
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return next((f.samples for f in text_string_to_metric_families(text) if f.name == family), [])
