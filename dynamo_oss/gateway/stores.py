"""What every store the gateway keeps raises, whatever it keeps (responses, files, batches) and wherever."""

from __future__ import annotations


class StoreUnavailable(Exception):
    """The store cannot be reached (NATS down or restarting), or refused the write: retryable."""


class Conflict(Exception):
    """A conditional write found the record changed (or gone) since the revision it was given."""
