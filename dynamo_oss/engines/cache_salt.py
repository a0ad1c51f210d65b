"""A request's cache salt, as Dynamo's frontend hands it to a worker: the tenant whose prefix blocks a
worker keeps apart from every other tenant's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def cache_salt(request: Mapping[str, Any]) -> str | None:
    """Where Dynamo's frontend puts a request's salt, and TensorRT-LLM's worker reads it (dynamo.trtllm's
    request_cache_salt): the routing hints, else the request's nvext."""
    routing = request.get("routing")
    if isinstance(routing, Mapping) and routing.get("cache_salt"):
        return str(routing["cache_salt"])
    nvext = (request.get("extra_args") or {}).get("nvext")
    return str(nvext["cache_salt"]) if isinstance(nvext, Mapping) and nvext.get("cache_salt") else None
