"""Ids of what the gateway creates (responses, items, calls, messages): a prefix and 128 random bits."""

from __future__ import annotations

import secrets


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"
