"""The graph's own secret: one key file that every gateway of a graph reads, from which the key that
seals reasoning (harmony/sealing.py) and the key that salts each tenant's cache (tenancy.py) are
derived with HKDF, each under its own label, so that neither can stand in for the other.

On one host the gateway makes the file on first start, owner-only, and keeps it across runs, so
reasoning a client holds from yesterday's run still opens after a restart; on Kubernetes it comes
from a Secret. It is created with O_EXCL and O_NOFOLLOW under a random draft name and linked into
place, which fails if it is there already: of two gateways starting at once, one key wins, and a
link planted where the draft goes is never followed. A key file that others can read is refused:
whoever reads it can open every tenant's sealed reasoning and aim at every tenant's cache.
"""

from __future__ import annotations

import base64
import os
import secrets
import stat
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

KEY_BYTES = 32


class KeyFileUnusable(ValueError):
    """The key file cannot be read, is malformed, or others can read it: the gateway refuses to start."""


class GraphKey:
    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise KeyFileUnusable(f"a graph key is {KEY_BYTES} bytes; got {len(key)}")
        self._key = key

    @classmethod
    def from_file(cls, path: Path, make: bool = False) -> GraphKey:
        """The key in `path` (raw bytes, or base64 text as a Kubernetes Secret holds it), made there first
        if there is none yet and `make` says so (a key of this host's cache); a key file the graph names
        must be there, or this gateway would seal with a key no other one has."""
        if not path.exists():
            if not make:
                raise KeyFileUnusable(
                    f"{path} not found: copy the graph's key file (the same one on every frontend node) here"
                )
            _make_key_file(path)
        _check_private(path)
        raw = path.read_bytes()
        try:
            return cls(raw if len(raw) == KEY_BYTES else base64.b64decode(raw.strip(), validate=True))
        except ValueError as error:
            raise KeyFileUnusable(f"{path}: not {KEY_BYTES} bytes or their base64 ({error})") from None

    def derived(self, purpose: bytes) -> bytes:
        """A key of its own for `purpose` (HKDF-SHA256 with the purpose as its label)."""
        return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=purpose).derive(self._key)


def _make_key_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as sink:
            sink.write(secrets.token_bytes(KEY_BYTES))
        os.link(draft, path)
    except FileExistsError:
        pass  # another gateway made it first: its key is the graph's
    finally:
        draft.unlink()


def _check_private(path: Path) -> None:
    """A regular file of this user's that only its owner can read or write (`dynamo deploy` mounts the
    Secret with mode 0400; a Secret's file is a link to the kubelet's, which is followed)."""
    status = path.stat()
    mode = status.st_mode
    if not stat.S_ISREG(mode):
        raise KeyFileUnusable(f"{path} is not a regular file; point the gateway at the key file itself")
    if status.st_uid != os.geteuid():
        raise KeyFileUnusable(
            f"{path} belongs to another user (uid {status.st_uid}); the gateway runs as uid {os.geteuid()}: chown "
            "the file to that user, or run the gateway as its owner"
        )
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileUnusable(
            f"{path} is open to other users (mode {stat.filemode(mode)}); make it owner-only: chmod 600 {path}"
        )
