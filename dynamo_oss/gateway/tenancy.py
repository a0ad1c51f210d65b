"""Tenants kept apart: who a request is from, the cache salt its tenant's prefixes are keyed by, and
the render cache its messages are remembered in.

A prefix cache shared between tenants is a timing side channel: a request whose prompt begins as
another tenant's did is prefilled faster, which tells its sender what that tenant asked (Dynamo
8197, vLLM 17045). Dynamo 1.6 keys its KV blocks, and the KV router's view of them, by a cache
salt; its frontend takes a request's salt from the `x-tenant-id` header, over any `cache_salt`
the body carries (tried against the installed 1.6.0: the header wins over `nvext.cache_salt` and
the top-level `cache_salt`, on chat and completions alike). So with API keys on, the gateway sets
that header on every request it forwards, and a client cannot choose another tenant's salt: a
client's own `x-tenant-id` becomes a salt within its tenant (`SALT/VALUE`), so a client may still
separate its own users. The salt is an HMAC of the tenant's name under a key derived from the
graph's key (graph_key.py), not the name itself: whoever reaches Dynamo's frontend directly, past
the gateway, cannot name a tenant's salt and so cannot aim at its cache. Within a tenant, prefixes
are reused as before.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from dynamo_oss.gateway.graph_key import GraphKey
from dynamo_oss.gateway.harmony.rendering import RenderCache

TENANT_HEADER = b"x-tenant-id"
SALT_PURPOSE = b"dynamo-oss cache salt v1"  # the label of the salts' key, derived from the graph's key
NO_TENANT = ""  # every request's tenant on a gateway without keys


@dataclass(frozen=True)
class Caller:
    """Who sent a request: its API key's name (None without keys), its tenant, and the tenant's render cache."""

    key: str | None
    tenant: str
    renders: RenderCache


class Tenants:
    """Each tenant's salt and render cache. `isolated` False (`cache_isolation: shared`, or no keys):
    one cache for all, and requests forwarded unsalted."""

    def __init__(self, graph_key: GraphKey, isolated: bool) -> None:
        self.isolated = isolated
        self._salt_key = graph_key.derived(SALT_PURPOSE)
        self._renders: dict[str, RenderCache] = {}

    def caller(self, key: str | None, tenant: str) -> Caller:
        shared = tenant if self.isolated else NO_TENANT
        renders = self._renders.get(shared)
        if renders is None:
            renders = self._renders[shared] = RenderCache()
        return Caller(key=key, tenant=tenant, renders=renders)

    def salt(self, tenant: str) -> bytes:
        """The tenant's cache salt: 32 hex digits no one without the graph's key can compute."""
        return hmac.new(self._salt_key, tenant.encode(), hashlib.sha256).hexdigest()[:32].encode()

    def salted(self, headers: list[tuple[bytes, bytes]], caller: Caller) -> list[tuple[bytes, bytes]]:
        """The headers to forward: the client's, with the salt header set for the caller's tenant."""
        if not self.isolated:
            return headers
        own = [value.strip() for name, value in headers if name.lower() == TENANT_HEADER and value.strip()]
        salt = self.salt(caller.tenant) + (b"/" + own[0] if own else b"")
        return [(name, value) for name, value in headers if name.lower() != TENANT_HEADER] + [(TENANT_HEADER, salt)]
