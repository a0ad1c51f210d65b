"""Versioned cache folders that are built once and appear atomically.

Every asset (the tiktoken ranks, the tokenizer, a model folder) is written into a
folder whose name carries `content_version()`: a digest of this package's sources.
Editing the chat template or a generator therefore lands in a fresh folder instead of
serving a stale one. `build_once` builds a folder in a temporary sibling and renames
it into place under a file lock, so concurrent callers (threads or processes) build it
once and never see it half-written.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path

CACHE_ENV = "DYNAMO_OSS_CACHE"
_PACKAGE_DIR = Path(__file__).parent


def resolve_cache_root(cache_root: Path | None = None) -> Path:
    """Where assets live: `cache_root`, else `$DYNAMO_OSS_CACHE`, else `~/.cache/dynamo-oss`."""
    if cache_root is not None:
        return cache_root
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path.home() / ".cache" / "dynamo-oss"


def content_version(*inputs: str) -> str:
    """Digest of this package's sources and `inputs`: changes whenever the asset could."""
    digest = hashlib.sha256(_sources_digest().encode())
    for text in inputs:
        digest.update(b"\0" + text.encode())
    return digest.hexdigest()[:12]


@cache
def _sources_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(_PACKAGE_DIR.iterdir()):
        if path.suffix in (".py", ".jinja"):
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def build_once(target: Path, build: Callable[[Path], None]) -> Path:
    """Return `target`, first running `build(tmp_dir)` and renaming it to `target` if absent.

    The lock makes concurrent callers wait for the one builder instead of racing it;
    the rename makes the folder appear complete or not at all, so readers need no lock.
    """
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_dir():  # built by whoever held the lock before us
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            tmp.chmod(0o755)  # mkdtemp makes it private; the cache may be shared
            build(tmp)
            tmp.rename(target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return target
