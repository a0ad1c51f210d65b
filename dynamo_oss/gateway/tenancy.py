"""Per-tenant cache isolation: tenants never reuse each other's cached prefixes.

A prefix cache shared between tenants is a timing side channel: a request whose prompt begins as
another tenant's did is prefilled faster, which tells its sender what that tenant asked (Dynamo
8197, vLLM 17045). Dynamo 1.6 keys its KV blocks, and the KV router's view of them, by a cache
salt; its frontend takes a request's salt from the `x-tenant-id` header, over any `cache_salt`
the body carries (tried against the installed 1.6.0: the header wins over `nvext.cache_salt` and
the top-level `cache_salt`, on chat and completions alike). So with API keys on, the gateway
sets that header on every request it forwards, from the key's tenant, and a client cannot choose
another tenant's salt: a client's own `x-tenant-id` becomes a salt within its tenant
(`TENANT/VALUE`; tenant names have no `/`), so a client may still separate its own users.
Within a tenant, prefixes are reused as before.
"""

from __future__ import annotations

TENANT_HEADER = b"x-tenant-id"


def salted(headers: list[tuple[bytes, bytes]], tenant: str) -> list[tuple[bytes, bytes]]:
    """The headers to forward: the client's, with the salt header set for `tenant`."""
    own = [value.strip() for name, value in headers if name.lower() == TENANT_HEADER and value.strip()]
    salt = tenant.encode() + (b"/" + own[0] if own else b"")
    return [(name, value) for name, value in headers if name.lower() != TENANT_HEADER] + [(TENANT_HEADER, salt)]
