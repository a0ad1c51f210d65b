"""How many tokens a raw completion prompt is: the model's own tokenizer, as Dynamo's frontend
tokenizes it (the other APIs' prompts are rendered into token ids by the gateway: harmony/)."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from tokenizers import Tokenizer


class PromptCounter:
    def __init__(self, model_folder: Path) -> None:
        self.model_folder = model_folder

    @cached_property
    def tokenizer(self) -> Tokenizer:
        """Loaded at the first prompt long enough to count (1.3 CPU-seconds for gpt-oss's): most
        gateways never see one, and each graph start would pay it."""
        return Tokenizer.from_file(str(self.model_folder / "tokenizer.json"))

    def count_text(self, text: str) -> int:
        """Tokens of a raw completion prompt."""
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)
