"""What every store the gateway keeps shares, whatever it keeps (responses, files, batches) and wherever: the
errors it raises, and how an object's name says whose it is."""

from __future__ import annotations

import hashlib


class StoreUnavailable(Exception):
    """The store cannot be reached (NATS down or restarting), or refused the write: retryable."""


class Conflict(Exception):
    """A conditional write found the record changed (or gone) since the revision it was given."""


def owner_tag(owner: str | None) -> str:
    """The part of a kept object's name that says whose it is: a digest of the API key's name, so a key's
    objects are found under its tag alone and another key's lookup of the same id finds nothing."""
    return hashlib.sha256(f"key:{owner}".encode() if owner is not None else b"no key").hexdigest()[:24]
