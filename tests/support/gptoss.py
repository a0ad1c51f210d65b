"""Plain sequences and a small KV cache for the gptoss engine's CPU-side tests (no model runs: a test
says which token each step samples)."""

from __future__ import annotations

from dynamo_oss.catalog.models import GPT_OSS_20B, ModelShape
from dynamo_oss.engines.gptoss.block_manager import KvCacheManager
from dynamo_oss.engines.gptoss.kv_layout import kv_pools
from dynamo_oss.engines.gptoss.request import RequestLimits, read_request
from dynamo_oss.engines.gptoss.sequence import Sequence

# gpt-oss-20b's layer layout with an 8-token window, so a few 4-token blocks show what 128 and 32 do.
SMALL = GPT_OSS_20B.model_copy(update={"sliding_window": 8})
BLOCK = 4
LIMITS = RequestLimits(vocab_size=SMALL.vocab_size, max_seq_len=1024)


def sequence(request_id: str, prompt: list[int], salt: str | None = None, **stop: object) -> Sequence:
    """A request as Dynamo's frontend sends it, read by the engine; `stop` are its stop conditions."""
    request: dict = {"token_ids": prompt, "stop_conditions": {"max_tokens": 16, **stop}}
    if salt is not None:
        request["routing"] = {"cache_salt": salt}
    return read_request(request, request_id, LIMITS)


def kv_cache(full: int, window: int, reuse: bool = True, shape: ModelShape = SMALL) -> KvCacheManager:
    return KvCacheManager(kv_pools(shape, BLOCK), {"full": full, "window": window}, reuse)
