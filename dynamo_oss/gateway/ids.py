"""Ids of what the gateway creates (responses, items, calls, messages): a prefix and 128 random bits.

A response's items (its input and output) carry the response's random part and their place in it,
`msg_<response>_<n>`, so an `item_reference` a client sends later names the record that holds the
item: any gateway of the graph finds it with one read of the store, and no index is kept beside it.
"""

from __future__ import annotations

import re
import secrets

_ITEM = re.compile(r"[a-z]+_([0-9a-f]{32})_\d+")


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


class ItemIds:
    """The ids of one response's items, in the order they are made."""

    def __init__(self, response_id: str) -> None:
        self.response_id = response_id
        self.made = 0

    def next(self, prefix: str) -> str:
        self.made += 1
        return f"{prefix}_{self.response_id.removeprefix('resp_')}_{self.made - 1}"


def response_of(item_id: str) -> str | None:
    """The id of the response whose item `item_id` is, or None for an id this gateway did not make."""
    match = _ITEM.fullmatch(item_id)
    return f"resp_{match.group(1)}" if match else None
