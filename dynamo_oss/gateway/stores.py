"""What every store the gateway keeps shares, whatever it keeps (responses, files, batches) and wherever: the
errors it raises, and how an object's name says whose it is."""

from __future__ import annotations

import hashlib

from dynamo_oss.gateway.errors import RETRY_AFTER_S, ApiError


class StoreUnavailable(Exception):
    """The store cannot be reached (NATS down or restarting), or refused the write: retryable."""


class Conflict(Exception):
    """A conditional write found the record changed (or gone) since the revision it was given."""


def unavailable(store: str, error: StoreUnavailable) -> ApiError:
    """A client's answer while `store` (the response store, the file store, ...) cannot answer: retryable."""
    return ApiError(
        503,
        f"The {store} is unavailable ({error}); retry shortly.",
        code="store_unavailable",
        retry_after=RETRY_AFTER_S,
    )


def owner_tag(owner: str | None) -> str:
    """The part of a kept object's name that says whose it is: a digest of the API key's name, so a key's
    objects are found under its tag alone and another key's lookup of the same id finds nothing."""
    return hashlib.sha256(f"key:{owner}".encode() if owner is not None else b"no key").hexdigest()[:24]
