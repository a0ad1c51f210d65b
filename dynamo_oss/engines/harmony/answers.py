"""The gpt-oss answer the mocker gives a request: reasoning, then a final answer or a tool call.

The prompt rendered by the gpt-oss chat template ends with `<|start|>assistant`, so a
completion is `<|channel|>analysis<|message|>REASONING<|end|>` followed by either
`<|start|>assistant<|channel|>final<|message|>ANSWER<|return|>` or
`<|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGS<|call|>`
(or `to=NAMESPACE.NAME` for a tool of a namespace group). A prompt whose last message is a
tool's output gets a final answer when the tool choice is "auto", as a model answers with what
the tool gave it before calling again; a tool the user's last message names is called.
(Dynamo's harmony tool parser wants the recipient after the channel, as gpt-oss writes it;
openai-harmony's renderer puts it before, which Dynamo 1.6 does not parse). A request guided by a
structured output's grammar (harmony/grammar.py) gets JSON its schema accepts as the final ANSWER,
and one guided by a forced tool choice's grammar a call to a tool it allows, with ARGS that tool's
schema accepts, as a worker enforcing that grammar would: the reasoning before it is words as ever.

Everything is seeded by the prompt (and the request's sampling seed), so a request always
gets the same answer. The length is the request's to decide: `ignore_eos` gets exactly
`max_tokens` tokens, `min_tokens` is honoured, and a `max_tokens` below the natural
length cuts the completion, as a model would be cut.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import dataclass
from functools import cache
from typing import Any

from openai_harmony import HarmonyEncoding, HarmonyEncodingName, load_harmony_encoding

from dynamo_oss.assets.tokenizer import CALL, RETURN
from dynamo_oss.assets.tokenizer import ENDOFTEXT as END_OF_TEXT  # an eos id in gpt-oss's generation_config
from dynamo_oss.engines.harmony.grammar import answer_schema
from dynamo_oss.engines.harmony.instances import instance_of
from dynamo_oss.engines.harmony.token_table import TokenTable, token_table
from dynamo_oss.engines.harmony.tool_args import ToolRequest, arguments_for, tool_request

ASSISTANT_TURN = [200006, 173781]  # <|start|>assistant: the chat template's generation prompt
AUTO_TOOL_SHARE_ENV = "DYNAMO_OSS_MOCKER_AUTO_TOOL_SHARE"  # share of tool_choice "auto" requests that call
DEFAULT_AUTO_TOOL_SHARE = 0.5
# Natural lengths in tokens, uniform between LOW and HIGH; set as "LOW-HIGH" where `dynamo serve` runs.
REASONING_TOKENS_ENV, REASONING_TOKENS = "DYNAMO_OSS_MOCKER_REASONING_TOKENS", (24, 96)
ANSWER_TOKENS_ENV, ANSWER_TOKENS = "DYNAMO_OSS_MOCKER_ANSWER_TOKENS", (16, 80)

_REASONING_WORDS = [
    "we",
    "need",
    "to",
    "answer",
    "the",
    "user",
    "question",
    "so",
    "first",
    "check",
    "what",
    "they",
    "ask",
    "then",
    "consider",
    "the",
    "context",
    "and",
    "the",
    "details",
    "keep",
    "it",
    "short",
    "but",
    "clear",
    "maybe",
    "give",
    "an",
    "example",
    "the",
    "answer",
    "should",
    "be",
    "correct",
    "and",
    "helpful",
    "also",
    "mention",
    "one",
    "more",
    "point",
    "then",
    "respond",
    "now",
]
_ANSWER_WORDS = [
    "here",
    "is",
    "a",
    "short",
    "answer",
    "the",
    "main",
    "point",
    "is",
    "simple",
    "you",
    "can",
    "try",
    "this",
    "first",
    "then",
    "check",
    "the",
    "result",
    "it",
    "works",
    "well",
    "in",
    "most",
    "cases",
    "and",
    "the",
    "details",
    "depend",
    "on",
    "your",
    "setup",
    "let",
    "me",
    "know",
    "if",
    "you",
    "want",
    "more",
    "help",
    "with",
    "the",
    "next",
    "step",
]


@dataclass(frozen=True)
class Completion:
    """The token ids to emit, and whether they end the message (`<|return|>` or `<|call|>`)."""

    tokens: list[int]

    @property
    def finished(self) -> bool:
        return bool(self.tokens) and self.tokens[-1] in (RETURN, CALL, END_OF_TEXT)


@cache
def encoding() -> HarmonyEncoding:
    """o200k_harmony; reads TIKTOKEN_ENCODINGS_BASE like Dynamo's own harmony parsers."""
    return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)


# The fixed pieces of every answer, found in the token table (harmony/token_table.py) without the ranks.
_FIXED_TEXTS = (
    "<|start|>developer",
    "<|end|><|start|>assistant<|channel|>final<|message|>",
    "Here",
    ".",
    "<|channel|>analysis<|message|>",
    "We",
)


@cache
def _table() -> TokenTable:
    """The fixed texts' ids, and each word as ' word' where that is one token: n of them are n whole words."""
    return token_table(_FIXED_TEXTS, (*_REASONING_WORDS, *_ANSWER_WORDS), _encoded_special, _text)


@cache
def _special(text: str) -> tuple[int, ...]:
    fixed = _table().texts.get(text)
    return fixed if fixed is not None else tuple(_encoded_special(text))


def _encoded_special(text: str) -> list[int]:
    return encoding().encode(text, allowed_special="all")


def _text(text: str) -> list[int]:
    """Plain text, special-token strings in it included, as a model writes them. openai_harmony's
    default refuses those, and to look for them builds a pattern of all its special tokens on every
    call: most of a mocker worker's CPU per request."""
    return encoding().encode(text, disallowed_special=())


def completion_for(request: dict[str, Any], context_length: int | None = None) -> Completion:
    """The completion a request gets, with the length its stop conditions ask for."""
    prompt = request.get("token_ids") or []
    stop = request.get("stop_conditions") or {}
    sampling = request.get("sampling_options") or {}
    rng = random.Random(_seed(prompt, sampling.get("seed")))

    max_tokens = stop.get("max_tokens")
    if context_length:
        room = max(context_length - len(prompt), 1)
        max_tokens = room if max_tokens is None else min(max_tokens, room)
    chat = prompt[-2:] == ASSISTANT_TURN
    tools = tool_request(_prompt_text(prompt), sampling.get("guided_decoding")) if chat else None
    body = _body(rng, tools, answer_schema(sampling.get("guided_decoding"))) if chat else _plain_text_body(rng)

    reasoning = rng.randint(*token_range(REASONING_TOKENS_ENV, REASONING_TOKENS))
    natural = len(_assemble(_rng_copy(rng), reasoning, body))
    if stop.get("ignore_eos"):
        length = max_tokens if max_tokens is not None else natural
    else:
        length = max(natural, stop.get("min_tokens") or 0)
    if length >= natural or (stop.get("ignore_eos") and reasoning > natural - length):
        # The reasoning stretches or shrinks to the length asked for; the answer stays whole.
        tokens = _assemble(rng, reasoning + length - natural, body)
    else:  # shorter than the natural completion: cut, as max_tokens cuts a model
        tokens = _assemble(rng, reasoning, body)[:length]
    if max_tokens is not None:
        tokens = tokens[:max_tokens]
    return Completion(tokens=tokens)


def _rng_copy(rng: random.Random) -> random.Random:
    copy = random.Random()
    copy.setstate(rng.getstate())
    return copy


def _seed(prompt: list[int], seed: int | None) -> int:
    digest = hashlib.sha256(json.dumps([prompt, seed]).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _prompt_text(prompt: list[int]) -> str:
    """The developer message holds the tool definitions; only decode prompts that have one."""
    developer = _special("<|start|>developer")
    if not any(prompt[i : i + 2] == list(developer) for i in range(len(prompt) - 1)):
        return ""
    return encoding().decode(prompt)


def _body(rng: random.Random, tools: ToolRequest | None, schema: dict[str, Any] | None) -> tuple[int, ...]:
    """What follows the reasoning: a tool call, or a final answer ending <|return|>: words, or JSON
    that `schema` accepts when the request's guide constrains the final channel to it."""
    calls = tools is not None and (
        tools.choice == "forced"
        or (
            tools.choice == "auto" and not tools.answered and (tools.named_by_user or rng.random() < _auto_tool_share())
        )
    )
    if calls:
        assert tools is not None
        tool = rng.choice(tools.named_by_user or tools.tools)
        args = json.dumps(arguments_for(tool, rng))
        header = f"<|end|><|start|>assistant<|channel|>commentary to={tool.recipient} <|constrain|>json<|message|>"
        return (*_special(header), *_text(args), CALL)
    header = _special("<|end|><|start|>assistant<|channel|>final<|message|>")
    if schema is not None:
        return (*header, *_text(json.dumps(instance_of(schema, rng))), RETURN)
    answer = _words(rng, _ANSWER_WORDS, rng.randint(*token_range(ANSWER_TOKENS_ENV, ANSWER_TOKENS)))
    return (*header, *_special("Here"), *answer, *_special("."), RETURN)


def _plain_text_body(rng: random.Random) -> tuple[int, ...]:
    """A raw (/v1/completions) prompt is not a harmony turn: it gets plain text, ended by an eos id."""
    return (
        *_words(rng, _ANSWER_WORDS, rng.randint(*token_range(ANSWER_TOKENS_ENV, ANSWER_TOKENS))),
        *_special("."),
        END_OF_TEXT,
    )


def _assemble(rng: random.Random, reasoning_tokens: int, body: tuple[int, ...]) -> list[int]:
    """Reasoning of `reasoning_tokens` words before the body; a plain text body (no <|end|>) gets
    the words as its first sentence instead, so lengths still stretch the same way."""
    words = _words(rng, _REASONING_WORDS, max(reasoning_tokens, 1))
    if body[-1] == END_OF_TEXT:
        return [*words, *body]
    head = (*_special("<|channel|>analysis<|message|>"), *_special("We"))
    return [*head, *words, *body]


def _words(rng: random.Random, vocabulary: list[str], count: int) -> list[int]:
    """`count` tokens of sentences: single-token words, a full stop every 6 to 14 words."""
    words = _table().single_token_words(vocabulary)
    (full_stop,) = _special(".")
    tokens: list[int] = []
    until_stop = rng.randint(6, 14)
    while len(tokens) < count:
        if until_stop == 0 and len(tokens) < count - 1:
            tokens.append(full_stop)
            until_stop = rng.randint(6, 14)
        else:
            tokens.append(rng.choice(words))
            until_stop -= 1
    return tokens


def _auto_tool_share() -> float:
    return float(os.environ.get(AUTO_TOOL_SHARE_ENV, DEFAULT_AUTO_TOOL_SHARE))


def token_range(env: str, default: tuple[int, int]) -> tuple[int, int]:
    """The LOW-HIGH length range set in `env`, else `default`; a malformed value says what was expected."""
    text = os.environ.get(env)
    if not text:
        return default
    try:
        low, high = (int(part) for part in text.split("-"))
    except ValueError:
        raise ValueError(f'{env}: got "{text}"; expected LOW-HIGH in tokens, e.g. "16-80"') from None
    if not 1 <= low <= high:
        raise ValueError(f'{env}: got "{text}"; expected 1 <= LOW <= HIGH')
    return low, high
