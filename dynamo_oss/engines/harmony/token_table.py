"""The token ids of the fixed text the mocker's answers are made of, built once per content version
into the assets cache, as the model folder is.

Why: encoding anything loads gpt-oss's o200k ranks, half a CPU-second in each worker process, and a
plain answer is only fixed pieces (headers, stops) and words. With the table a worker answers those
without the ranks; tool calls and JSON answers still encode their own text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

from dynamo_oss.assets.cache import build_once, content_version, resolve_cache_root

TABLE_FILE = "token-table.json"

Encode = Callable[[str], list[int]]


class TokenTable:
    """Each fixed text's ids (special tokens as such), and which words are one token after a space."""

    def __init__(self, texts: dict[str, list[int]], words: dict[str, int]) -> None:
        self.texts = {text: tuple(ids) for text, ids in texts.items()}
        self.words = words

    def single_token_words(self, words: Iterable[str]) -> tuple[int, ...]:
        """The ids of ' word' for each word that is one token, in order."""
        return tuple(self.words[word] for word in words if word in self.words)


def token_table(texts: tuple[str, ...], words: tuple[str, ...], special: Encode, plain: Encode) -> TokenTable:
    """The table for `texts` (encoded by `special`) and `words` (' word' encoded by `plain`), built on
    first use by whichever process comes first and read by the others."""
    version = content_version(*texts, "\0", *words)
    folder = build_once(
        resolve_cache_root() / f"token-table-{version}",
        lambda tmp: _write(tmp / TABLE_FILE, texts, words, special, plain),
    )
    table = json.loads((folder / TABLE_FILE).read_text())
    return TokenTable(table["texts"], table["words"])


def _write(path: Path, texts: tuple[str, ...], words: tuple[str, ...], special: Encode, plain: Encode) -> None:
    single = {word: ids[0] for word in words if len(ids := plain(" " + word)) == 1}
    path.write_text(json.dumps({"texts": {text: special(text) for text in texts}, "words": single}))
