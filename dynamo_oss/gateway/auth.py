"""API keys at the gateway: who may call the endpoint, the name their usage is counted under, and
the tenant whose cached prefixes they share.

Keys come from a file of `NAME KEY [TENANT] [LIMIT=N ...]` lines or from one environment variable;
the graph says which, never the keys. A key without a TENANT is a tenant of its own name: only keys
that name the same tenant share cached prefixes (tenancy.py). A line's limits (`concurrent_requests`,
`requests_per_minute`, `tokens_per_minute`) are that key's share of the graph in place of the
graph's `limits_per_key` (fair_share.py). A request shows a key as
`Authorization: Bearer KEY`, as OpenAI's clients do, or as `x-api-key: KEY`, as Anthropic's do.
The key shown is compared with every key, always all of them, through digests of equal length
(hmac.compare_digest), so the time a refusal takes says nothing about how close a guess came.
No key reaches a log line.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

from pydantic import ValidationError

from dynamo_oss.gateway.errors import ApiError
from dynamo_oss.gateway.usage import NO_KEY, REFUSED
from dynamo_oss.graph.schema import KeyLimitsSection

RESERVED_NAMES = (NO_KEY, REFUSED)
OPEN_PATHS = (b"/health", b"/live")  # probes of a load balancer or Kubernetes, which carry no key
NAME_CHARACTERS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


class KeysUnusable(ValueError):
    """The keys' source cannot be read or is malformed: the gateway refuses to start."""


class ApiKeys:
    """The keys a gateway accepts, by name."""

    def __init__(
        self,
        keys: dict[str, str],
        tenants: dict[str, str] | None = None,
        limits: dict[str, KeyLimitsSection] | None = None,
    ) -> None:
        if not keys:
            raise KeysUnusable("no keys: give at least one")
        self._digests = [(name, _digest(key.encode())) for name, key in keys.items()]
        self._tenants = {name: (tenants or {}).get(name, name) for name in keys}
        self.limits = limits or {}  # the keys whose lines give their own share of the graph

    @classmethod
    def from_file(cls, path: Path) -> ApiKeys:
        """`NAME KEY [TENANT] [LIMIT=N ...]` a line; blank lines and lines starting with # are skipped."""
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as error:
            raise KeysUnusable(
                f"{path}: cannot be read ({error}); give gateway.auth.keys_file a readable file of `NAME KEY` lines"
            ) from None
        keys: dict[str, str] = {}
        tenants: dict[str, str] = {}
        limits: dict[str, KeyLimitsSection] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            words = line.split()
            parts = words[:2] + [word for word in words[2:] if "=" not in word]  # a key may hold "="
            options = [word for word in words[2:] if "=" in word]
            names = [parts[0], *parts[2:]]  # the key's name and its tenant, if given
            if len(parts) not in (2, 3) or any(not set(name) <= NAME_CHARACTERS for name in names):
                raise KeysUnusable(
                    f"{path}, line {number}: expected `NAME KEY` or `NAME KEY TENANT` (a name and a "
                    "tenant of letters, digits, - _ .)"
                )
            name, key = parts[:2]
            if len(parts) == 3:
                tenants[name] = parts[2]
            if name in RESERVED_NAMES:
                raise KeysUnusable(
                    f"{path}, line {number}: the name {name} is the metrics' label for requests "
                    "without a key or refused; give the key another name"
                )
            if name in keys:
                raise KeysUnusable(f"{path}, line {number}: the name {name} is given twice")
            keys[name] = key
            if options:
                limits[name] = _limits(options, f"{path}, line {number}")
        return cls(keys, tenants, limits)

    @classmethod
    def configured(cls, keys_file: Path | None, keys_env: str | None) -> ApiKeys | None:
        """The keys a gateway's configuration names: its keys file's, its variable's, or none."""
        if keys_file:
            return cls.from_file(keys_file)
        return cls.from_env(keys_env) if keys_env else None

    @classmethod
    def from_env(cls, variable: str) -> ApiKeys:
        """One key, named after the variable that holds it."""
        key = os.environ.get(variable, "").strip()
        if not key:
            raise KeysUnusable(f"the environment variable {variable} is not set or empty")
        return cls({variable: key})

    def name_of(self, path: bytes, authorization: bytes | None, api_key: bytes | None = None) -> str | None:
        """The name of the key a request shows, as a bearer token or in `x-api-key` (None for a path
        that needs none); ApiError 401 otherwise."""
        if path.split(b"?", 1)[0] in OPEN_PATHS:
            return None
        scheme, _, shown = (authorization or b"").strip().partition(b" ")
        if api_key is not None and api_key.strip():
            shown = api_key
        elif scheme.lower() != b"bearer" or not shown.strip():
            raise ApiError(
                401,
                "You didn't provide an API key. Send it as `Authorization: Bearer KEY` (or `x-api-key: KEY`).",
                code="invalid_api_key",
            )
        digest = _digest(shown.strip())
        found = None
        for name, known in self._digests:  # all of them, whichever matches
            if hmac.compare_digest(digest, known):
                found = name
        if found is None:
            raise ApiError(401, "Incorrect API key provided.", code="invalid_api_key")
        return found

    @property
    def names(self) -> list[str]:
        """Every key's name, in one order for every process that reads the same keys."""
        return sorted(self._tenants)

    def tenant_of(self, name: str) -> str:
        """The tenant of the key named `name`: its own name unless the keys file names one."""
        return self._tenants[name]


def _limits(options: list[str], where: str) -> KeyLimitsSection:
    """`concurrent_requests=4 tokens_per_minute=100000` as the key's limits; KeysUnusable naming what is wrong."""
    fields = dict(option.split("=", 1) for option in options)
    try:
        return KeyLimitsSection.model_validate({name: int(value) for name, value in fields.items()})
    except (ValueError, ValidationError) as error:
        known = ", ".join(KeyLimitsSection.model_fields)
        raise KeysUnusable(
            f"{where}: limits are NAME=N, NAME one of {known}; got {' '.join(options)} ({str(error).splitlines()[0]})"
        ) from None


def _digest(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()
