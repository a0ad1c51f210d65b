"""Reasoning a stateless client can hand back: `encrypted_content` only this deployment opens, for the
tenant and model it was sealed for.

A client that keeps no server-side state (Codex sends `store: false`) still has to give gpt-oss
its chain of thought back between tool calls. With `include: ["reasoning.encrypted_content"]`
each reasoning item carries its text sealed with AES-256-GCM under a key derived from the graph's
key (graph_key.py): the client cannot read or alter it, and another deployment cannot open it.
The tenant and the model are authenticated with every token (its associated data), so a token
handed to another tenant's key, or to another model of the graph, opens nothing: one tenant never
gets another's reasoning rendered into its prompt. Every gateway of one graph reads the same key
file, so any of them opens what another sealed.
"""

from __future__ import annotations

import base64
import secrets

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from dynamo_oss.gateway.graph_key import GraphKey

NONCE_BYTES = 12
PURPOSE = b"dynamo-oss reasoning v2"  # the key's label; and what every token authenticates first


class UnopenableReasoning(ValueError):
    """A token this deployment did not seal for this tenant and model, or one that was altered."""


class ReasoningSeal:
    """The graph's seal; `bound` gives what one request seals and opens with."""

    def __init__(self, key: GraphKey) -> None:
        self._aead = AESGCM(key.derived(PURPOSE))

    def bound(self, tenant: str, model: str) -> BoundSeal:
        return BoundSeal(self._aead, _bound_to(tenant, model))


class BoundSeal:
    """The seal for one tenant (its name; "" without keys) and one model."""

    def __init__(self, aead: AESGCM, associated: bytes) -> None:
        self._aead, self._associated = aead, associated

    def seal(self, text: str) -> str:
        nonce = secrets.token_bytes(NONCE_BYTES)
        return base64.urlsafe_b64encode(nonce + self._aead.encrypt(nonce, text.encode(), self._associated)).decode()

    def open(self, token: str) -> str:
        try:
            raw = base64.urlsafe_b64decode(token.encode())
            return self._aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], self._associated).decode()
        except (ValueError, InvalidTag) as err:
            raise UnopenableReasoning(str(err) or "authentication failed") from None


def _bound_to(tenant: str, model: str) -> bytes:
    """The associated data: the purpose, the tenant and the model, each length-prefixed, so no two
    (tenant, model) pairs give the same bytes."""
    parts = [PURPOSE, tenant.encode(), model.encode()]
    return b"".join(len(part).to_bytes(4, "big") + part for part in parts)
