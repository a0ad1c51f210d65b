"""A request from Dynamo's frontend, as the gptoss engine reads it: what it honours, and what it refuses
by name instead of ignoring."""

from __future__ import annotations

import pytest

from dynamo_oss.assets.tokenizer import CALL, ENDOFTEXT, RETURN
from dynamo_oss.engines.gptoss.request import RequestError, RequestLimits, read_request

LIMITS = RequestLimits(vocab_size=201_088, max_seq_len=100)


def read(**request: object):  # noqa: ANN201
    return read_request({"token_ids": [1, 2, 3], **request}, "r", LIMITS)


def test_a_request_becomes_a_sequence_with_its_budget_stop_tokens_sampling_and_tenant() -> None:
    seq = read(
        stop_conditions={"max_tokens": 20, "min_tokens": 2, "stop_token_ids_hidden": [7]},
        sampling_options={"temperature": 0.6, "seed": 9, "top_p": 1.0, "top_k": -1},
        eos_token_ids=[ENDOFTEXT],
        routing={"cache_salt": "alice"},
    )
    assert seq.prompt_len == 3 and seq.stop.max_tokens == 20 and seq.stop.min_tokens == 2
    assert seq.stop.stop_tokens == {RETURN, CALL, 7, ENDOFTEXT}
    assert seq.sampling.temperature == 0.6 and seq.sampling.seed == 9 and seq.cache_salt == "alice"
    unbounded = read()
    assert unbounded.stop.max_tokens == 97 and unbounded.sampling.temperature == 1.0  # the room left, OpenAI's default


@pytest.mark.parametrize(
    ("request_", "names"),
    [
        ({"token_ids": []}, "token_ids: must be a non-empty list"),
        ({"token_ids": [1, 201_088]}, "token_ids[1]: 201088 is not a token id"),
        ({"token_ids": [1, True]}, "token_ids[1]: True is not a token id"),
        ({"token_ids": "abc"}, "token_ids: must be a non-empty list"),
        ({"token_ids": list(range(100))}, "a prompt of 100 tokens leaves no room to generate within max_seq_len 100"),
        ({"stop_conditions": {"max_tokens": 98}}, "stop_conditions.max_tokens: 98 tokens after a prompt of 3"),
        ({"stop_conditions": {"max_tokens": 0}}, "stop_conditions.max_tokens: must be a positive integer"),
        ({"stop_conditions": {"min_tokens": 50, "max_tokens": 10}}, "stop_conditions.min_tokens: must be from 0 to"),
        ({"stop_conditions": {"ignore_eos": "yes"}}, "stop_conditions.ignore_eos: must be true or false"),
        ({"stop_conditions": {"stop_token_ids_hidden": [-1]}}, "stop_token_ids_hidden[0]: -1 is not a token id"),
        ({"stop_conditions": []}, "stop_conditions: must be an object"),
        ({"sampling_options": {"temperature": 3}}, "sampling_options.temperature: must be from 0 to 2"),
        ({"sampling_options": {"temperature": float("nan")}}, "sampling_options.temperature: must be a number"),
        ({"sampling_options": {"seed": -4}}, "sampling_options.seed: must be a non-negative integer"),
        ({"sampling_options": {"top_p": 0.9}}, "sampling_options.top_p: the gptoss engine samples with temperature"),
        ({"sampling_options": {"top_k": 40}}, "sampling_options.top_k: the gptoss engine samples with temperature"),
        (
            {"sampling_options": {"n": 2}},
            "sampling_options.n: the gptoss engine samples with temperature alone, so n must",
        ),
        (
            {"sampling_options": {"guided_decoding": {"json": {}}}},
            "sampling_options.guided_decoding: the gptoss engine has no",
        ),
        ({"output_options": {"logprobs": 2}}, "output_options.logprobs: the gptoss engine does not return"),
        ({"eos_token_ids": [None]}, "eos_token_ids[0]: None is not a token id"),
    ],
)
def test_a_request_the_engine_cannot_serve_is_refused_naming_the_field(request_: dict, names: str) -> None:
    with pytest.raises(RequestError) as refused:
        read(**request_)
    assert names in str(refused.value)
