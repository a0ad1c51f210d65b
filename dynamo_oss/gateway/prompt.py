"""How many tokens a chat request's prompt is: the model's own chat template, rendered with
minijinja (the engine inside Dynamo's frontend), and its tokenizer."""

from __future__ import annotations

import datetime
import json
from functools import cached_property
from pathlib import Path
from typing import Any

import minijinja
from tokenizers import Tokenizer

# Template text around the messages (system and developer headers, tool namespace framing).
TEMPLATE_OVERHEAD_TOKENS = 2048


class PromptCounter:
    def __init__(self, model_folder: Path) -> None:
        self.model_folder = model_folder
        self.environment = minijinja.Environment()
        self.environment.add_function("strftime_now", lambda fmt: datetime.datetime.now().strftime(fmt))
        self.environment.add_template("chat", _template_text(model_folder))

    @cached_property
    def tokenizer(self) -> Tokenizer:
        """Loaded at the first prompt long enough to count (1.3 CPU-seconds for gpt-oss's): most
        gateways never see one, and each graph start would pay it."""
        return Tokenizer.from_file(str(self.model_folder / "tokenizer.json"))

    def count(self, body: dict[str, Any]) -> int:
        """Prompt tokens of a chat request, as the frontend renders and tokenizes it."""
        variables = {key: body[key] for key in ("reasoning_effort",) if key in body}
        variables.update(body.get("chat_template_args") or body.get("chat_template_kwargs") or {})
        prompt = self.environment.render_template(
            "chat", messages=body["messages"], tools=body.get("tools"), add_generation_prompt=True, **variables
        )
        return len(self.tokenizer.encode(prompt, add_special_tokens=False).ids)

    def count_text(self, text: str) -> int:
        """Tokens of a raw completion prompt."""
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def upper_bound(self, body: dict[str, Any]) -> int:
        """A cheap bound (a token is at least one byte) that spares counting short prompts."""
        text = json.dumps(body.get("messages")) + json.dumps(body.get("tools"))
        return len(text.encode()) + TEMPLATE_OVERHEAD_TOKENS


def _template_text(model_folder: Path) -> str:
    template = model_folder / "chat_template.jinja"
    if template.is_file():
        return template.read_text()
    return json.loads((model_folder / "tokenizer_config.json").read_text())["chat_template"]
