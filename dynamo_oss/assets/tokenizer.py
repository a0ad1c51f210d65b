"""The o200k_harmony tokenizer as a Hugging Face fast tokenizer, made without a download.

Dynamo's frontend tokenizes with a `tokenizer.json`; gpt-oss's is o200k_base's BPE plus
the harmony special tokens. We convert the ranks shipped in bpe-openai with transformers'
tiktoken converter and add the specials at the ids openai-harmony uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dynamo_oss.assets.cache import build_once, content_version, resolve_cache_root
from dynamo_oss.assets.encodings import O200K_FILE, O200K_PATTERN, tiktoken_encodings_dir

TOKENIZER_FILE = "tokenizer.json"

# Named harmony tokens; every other id from the end of the BPE ranks to the vocabulary's
# end is reserved and named `<|reserved_{id}|>`, as in openai-harmony's o200k_harmony.
STARTOFTEXT, ENDOFTEXT, RETURN, CALL = 199998, 199999, 200002, 200012
HARMONY_TOKENS: dict[int, str] = {
    STARTOFTEXT: "<|startoftext|>",
    ENDOFTEXT: "<|endoftext|>",
    RETURN: "<|return|>",
    200003: "<|constrain|>",
    200005: "<|channel|>",
    200006: "<|start|>",
    200007: "<|end|>",
    200008: "<|message|>",
    CALL: "<|call|>",
}


def special_tokens(vocab_size: int) -> dict[int, str]:
    """Every special token by id: the harmony ones, then reserved names up to `vocab_size`."""
    return {i: HARMONY_TOKENS.get(i, f"<|reserved_{i}|>") for i in range(STARTOFTEXT, vocab_size)}


def tokenizer_file(vocab_size: int, cache_root: Path | None = None) -> Path:
    """`tokenizer.json` for o200k_harmony, built once (a few seconds) and shared by all models."""
    target = resolve_cache_root(cache_root) / f"tokenizer-{content_version(str(vocab_size))}"
    ranks = tiktoken_encodings_dir(cache_root) / O200K_FILE
    folder = build_once(target, lambda tmp: _write_tokenizer(tmp, ranks, vocab_size))
    return folder / TOKENIZER_FILE


def tokenizer_config(max_length: int, vocab_size: int, chat_template: str) -> dict[str, Any]:
    """`tokenizer_config.json`: which special token is bos, eos and pad, every special token by id
    (`added_tokens_decoder`, as Hugging Face saves it), and the template.

    Dynamo's frontend resolves the eos token's id from `added_tokens_decoder`; without it, it parses
    the whole `tokenizer.json` again for each lookup (about 1.7 CPU-seconds of every start)."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": HARMONY_TOKENS[STARTOFTEXT],
        "eos_token": HARMONY_TOKENS[RETURN],
        "pad_token": HARMONY_TOKENS[ENDOFTEXT],
        "model_max_length": max_length,
        "model_input_names": ["input_ids", "attention_mask"],
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {
            str(i): {
                "content": name,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for i, name in special_tokens(vocab_size).items()
        },
        "chat_template": chat_template,
    }


def _write_tokenizer(folder: Path, ranks: Path, vocab_size: int) -> None:
    from transformers.convert_slow_tokenizer import TikTokenConverter  # slow import, build only

    specials = special_tokens(vocab_size)
    # Added tokens take the next free ids, so adding them in id order pins each id.
    tokenizer = TikTokenConverter(
        vocab_file=str(ranks), pattern=O200K_PATTERN, extra_special_tokens=list(specials.values())
    ).converted()
    if any(tokenizer.token_to_id(name) != i for i, name in specials.items()):
        raise ValueError("the harmony special tokens did not land at their ids")
    tokenizer.save(str(folder / TOKENIZER_FILE))
