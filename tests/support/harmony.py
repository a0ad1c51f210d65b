"""Harmony for unit tests: a Responses request rendered as the gateway renders it, and a completion
streamed as Dynamo's frontend streams it to the gateway (text and token ids in each chunk)."""

from __future__ import annotations

import datetime
import json

from dynamo_oss.gateway.harmony.conversation import conversation
from dynamo_oss.gateway.graph_key import GraphKey
from dynamo_oss.gateway.harmony.rendering import Prompt, RenderCache, encoding, render
from dynamo_oss.gateway.harmony.sealing import BoundSeal, ReasoningSeal
from dynamo_oss.gateway.protocol.responses import ResponsesRequest


def sealed_with(key: bytes, tenant: str = "", model: str = "m") -> BoundSeal:
    """The seal a request of `tenant` for `model` gets on a graph whose key is 32 bytes of `key`."""
    return ReasoningSeal(GraphKey(key * (32 // len(key)))).bound(tenant, model)


def render_request(request: ResponsesRequest, seal: BoundSeal, today: datetime.date) -> Prompt:
    return render(conversation(request, seal, today), RenderCache())


def harmony_ids(completion: str) -> list[int]:
    """A completion written in harmony's text, as the token ids a model generates for it."""
    return encoding().encode(completion, allowed_special="all")


def completion_chunks(token_ids: list[int], per_chunk: int) -> list[bytes]:
    """The completion's SSE chunks, `per_chunk` tokens each, as Dynamo's frontend writes them with
    `nvext.extra_fields: ["completion_token_ids"]`."""
    chunks = []
    for start in range(0, len(token_ids), per_chunk):
        ids = token_ids[start : start + per_chunk]
        chunk = {
            "choices": [{"index": 0, "text": encoding().decode(ids), "finish_reason": None}],
            "nvext": {"completion_token_ids": ids},
        }
        chunks.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    return chunks
