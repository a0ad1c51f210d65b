"""Reasoning a stateless client can hand back: `encrypted_content` only this deployment opens.

A client that keeps no server-side state (Codex sends `store: false`) still has to give gpt-oss
its chain of thought back between tool calls. With `include: ["reasoning.encrypted_content"]`
each reasoning item carries its text sealed with AES-256-GCM under the graph's key: the client
cannot read or alter it, and another deployment cannot open it. Every gateway of one graph
reads the same key file, so any of them opens what another sealed.
"""

from __future__ import annotations

import base64
import os
import secrets
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_BYTES = 32
NONCE_BYTES = 12
PURPOSE = b"dynamo-oss reasoning v1"  # authenticated with every token: a key used elsewhere opens none


class UnopenableReasoning(ValueError):
    """A token this deployment did not seal, or one that was altered."""


class ReasoningSeal:
    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError(f"a reasoning key is {KEY_BYTES} bytes; got {len(key)}")
        self._aead = AESGCM(key)

    @classmethod
    def from_file(cls, path: Path) -> ReasoningSeal:
        """The key in `path` (raw bytes, or base64 text as a Kubernetes Secret holds it), made
        there first if there is none yet."""
        raw = _ensure_key_file(path).read_bytes()
        key = raw if len(raw) == KEY_BYTES else base64.b64decode(raw.strip(), validate=True)
        return cls(key)

    def seal(self, text: str) -> str:
        nonce = secrets.token_bytes(NONCE_BYTES)
        return base64.urlsafe_b64encode(nonce + self._aead.encrypt(nonce, text.encode(), PURPOSE)).decode()

    def open(self, token: str) -> str:
        try:
            raw = base64.urlsafe_b64decode(token.encode())
            return self._aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], PURPOSE).decode()
        except (ValueError, InvalidTag) as err:
            raise UnopenableReasoning(str(err) or "authentication failed") from None


def _ensure_key_file(path: Path) -> Path:
    """The graph's key file, made once (owner-only) and kept across runs, so reasoning a client
    holds from yesterday's run still opens after a restart. It is written aside and linked into
    place, which fails if it is there already: of two gateways starting at once, one key wins."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as sink:
        sink.write(secrets.token_bytes(KEY_BYTES))
    try:
        os.link(draft, path)
    except FileExistsError:
        pass
    finally:
        draft.unlink()
    return path
