"""A request from Dynamo's frontend (its PreprocessedRequest: token ids, sampling options, stop conditions)
read into a `Sequence`, or refused with the field that is wrong.

Every byte of it is checked before the engine holds it: the token ids (within the vocabulary), the
budget (within max_seq_len), and the options, which the engine either honours or refuses by name, never
ignores: temperature and seed are honoured; top_p, top_k, min_p and the penalties only at their neutral
values; guided decoding (structured outputs, forced tool calls) and log-probabilities not at all.
Stop strings (`stop`) are Dynamo's: its backend matches them in the text and ends the stream.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dynamo_oss.assets.tokenizer import CALL, RETURN
from dynamo_oss.engines.cache_salt import cache_salt
from dynamo_oss.engines.gptoss.sampling import DEFAULT_TEMPERATURE, SamplingParams
from dynamo_oss.engines.gptoss.sequence import Sequence, StopRule

HARMONY_STOP_TOKENS = frozenset({RETURN, CALL})  # an assistant's turn ends at <|return|> or <|call|>
MAX_TEMPERATURE = 2.0  # OpenAI's API bound
NEUTRAL: dict[str, tuple[float, ...]] = {
    "top_p": (1.0,),
    "top_k": (0, -1),
    "min_p": (0.0,),
    "frequency_penalty": (0.0,),
    "presence_penalty": (0.0,),
    "repetition_penalty": (1.0,),
    "n": (1,),
    "best_of": (1,),
}
UNSUPPORTED = {
    "guided_decoding": "guided decoding (structured outputs and forced tool calls)",
    "logit_bias": "logit_bias",
    "use_beam_search": "beam search",
}


class RequestError(ValueError):
    """A request the engine cannot take; the message names the field and says what was expected."""


@dataclass(frozen=True)
class RequestLimits:
    vocab_size: int
    max_seq_len: int


def read_request(request: Mapping[str, Any], request_id: str, limits: RequestLimits) -> Sequence:
    """The request as a sequence to run; RequestError names what is wrong with it."""
    prompt = _token_ids(request.get("token_ids"), limits.vocab_size)
    room = limits.max_seq_len - len(prompt)
    if room < 1:
        raise RequestError(
            f"token_ids: a prompt of {len(prompt)} tokens leaves no room to generate within max_seq_len "
            f"{limits.max_seq_len}"
        )
    for key in ("logprobs", "prompt_logprobs"):
        if _mapping(request, "output_options").get(key) is not None:
            raise RequestError(f"output_options.{key}: the gptoss engine does not return log-probabilities")
    return Sequence(
        request_id=request_id,
        token_ids=list(prompt),
        prompt_len=len(prompt),
        sampling=_sampling(_mapping(request, "sampling_options")),
        stop=_stop_rule(_mapping(request, "stop_conditions"), request.get("eos_token_ids"), room, limits),
        max_seq_len=limits.max_seq_len,
        cache_salt=cache_salt(request),
    )


def _mapping(request: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = request.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RequestError(f"{key}: must be an object; got {type(value).__name__}")
    return value


def _token_ids(value: Any, vocab_size: int, field: str = "token_ids", empty: bool = False) -> list[int]:
    if not isinstance(value, list) or (not value and not empty):
        raise RequestError(f"{field}: must be a {'' if empty else 'non-empty '}list of token ids")
    for index, token in enumerate(value):
        if not _is_int(token) or not 0 <= token < vocab_size:
            raise RequestError(f"{field}[{index}]: {token!r} is not a token id (0 to {vocab_size - 1})")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _sampling(options: Mapping[str, Any]) -> SamplingParams:
    for key, what in UNSUPPORTED.items():
        if options.get(key) is not None:
            raise RequestError(f"sampling_options.{key}: the gptoss engine has no {what}")
    for key, neutral in NEUTRAL.items():
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or value not in neutral):
            raise RequestError(
                f"sampling_options.{key}: the gptoss engine samples with temperature alone, so {key} must be "
                f"{neutral[0]:g} or unset; got {value!r}"
            )
    temperature = options.get("temperature")
    if temperature is None:
        temperature = DEFAULT_TEMPERATURE
    if not isinstance(temperature, int | float) or isinstance(temperature, bool) or not math.isfinite(temperature):
        raise RequestError(f"sampling_options.temperature: must be a number; got {temperature!r}")
    if not 0 <= temperature <= MAX_TEMPERATURE:
        raise RequestError(f"sampling_options.temperature: must be from 0 to {MAX_TEMPERATURE:g}; got {temperature}")
    seed = options.get("seed")
    if seed is not None and (not _is_int(seed) or seed < 0):
        raise RequestError(f"sampling_options.seed: must be a non-negative integer; got {seed!r}")
    return SamplingParams(temperature=float(temperature), seed=seed)


def _stop_rule(stop: Mapping[str, Any], eos: Any, room: int, limits: RequestLimits) -> StopRule:
    max_tokens = stop.get("max_tokens")
    if max_tokens is None:
        max_tokens = room
    if not _is_int(max_tokens) or max_tokens < 1:
        raise RequestError(f"stop_conditions.max_tokens: must be a positive integer; got {max_tokens!r}")
    if max_tokens > room:
        raise RequestError(
            f"stop_conditions.max_tokens: {max_tokens} tokens after a prompt of {limits.max_seq_len - room} "
            f"go past max_seq_len {limits.max_seq_len}; at most {room}"
        )
    min_tokens = stop.get("min_tokens") or 0
    if not _is_int(min_tokens) or not 0 <= min_tokens <= max_tokens:
        raise RequestError(
            f"stop_conditions.min_tokens: must be from 0 to max_tokens ({max_tokens}); got {min_tokens!r}"
        )
    ignore_eos = stop.get("ignore_eos") or False
    if not isinstance(ignore_eos, bool):
        raise RequestError(f"stop_conditions.ignore_eos: must be true or false; got {ignore_eos!r}")
    hidden = _token_ids(stop.get("stop_token_ids_hidden") or [], limits.vocab_size, "stop_token_ids_hidden", True)
    ends = _token_ids(eos or [], limits.vocab_size, "eos_token_ids", True)
    return StopRule(
        max_tokens=max_tokens,
        stop_tokens=HARMONY_STOP_TOKENS | frozenset(hidden) | frozenset(ends),
        min_tokens=min_tokens,
        ignore_eos=ignore_eos,
    )
