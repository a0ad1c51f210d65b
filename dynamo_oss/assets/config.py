"""`config.json` and `generation_config.json` of a gpt-oss checkpoint, from its shape.

The frontend and the mocker read the context length, vocabulary, stop tokens and
attention layout from these files; they are written from `ModelShape` with the
remaining constants of the published gpt-oss configs, so no download is needed.
"""

from __future__ import annotations

from typing import Any

from dynamo_oss.assets.tokenizer import CALL, ENDOFTEXT, RETURN, STARTOFTEXT
from dynamo_oss.catalog.models import ModelShape

# Constants shared by both published configs (RoPE with YaRN, clamped SwiGLU experts).
ROPE_THETA = 150_000
YARN_FACTOR = 32.0
YARN_ORIGINAL_CONTEXT = 4096
YARN_BETA_FAST, YARN_BETA_SLOW = 32.0, 1.0
SWIGLU_LIMIT = 7.0
RMS_NORM_EPS = 1e-5


def layer_types(shape: ModelShape) -> list[str]:
    """Layers alternate sliding-window and full attention, starting with a window layer."""
    return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(shape.num_layers)]


def model_config(shape: ModelShape) -> dict[str, Any]:
    """`config.json` with the fields of the official gpt-oss release."""
    return {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "num_hidden_layers": shape.num_layers,
        "num_local_experts": shape.num_experts,
        "num_experts_per_tok": shape.experts_per_token,
        "experts_per_token": shape.experts_per_token,
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "head_dim": shape.head_dim,
        "num_attention_heads": shape.num_attention_heads,
        "num_key_value_heads": shape.num_key_value_heads,
        "sliding_window": shape.sliding_window,
        "layer_types": layer_types(shape),
        "max_position_embeddings": shape.max_context,
        "initial_context_length": YARN_ORIGINAL_CONTEXT,
        "rope_theta": ROPE_THETA,
        "rope_scaling": {
            "rope_type": "yarn",
            "factor": YARN_FACTOR,
            "original_max_position_embeddings": YARN_ORIGINAL_CONTEXT,
            "beta_fast": YARN_BETA_FAST,
            "beta_slow": YARN_BETA_SLOW,
            "truncate": False,
        },
        "vocab_size": shape.vocab_size,
        "eos_token_id": RETURN,
        "pad_token_id": ENDOFTEXT,
        "hidden_act": "silu",
        "swiglu_limit": SWIGLU_LIMIT,
        "rms_norm_eps": RMS_NORM_EPS,
        "attention_bias": True,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "router_aux_loss_coef": 0.9,
        "output_router_logits": False,
        "tie_word_embeddings": False,
        "use_cache": True,
        "torch_dtype": "bfloat16",
        "quantization_config": {
            "quant_method": "mxfp4",
            "modules_to_not_convert": [
                "model.layers.*.self_attn",
                "model.layers.*.mlp.router",
                "model.embed_tokens",
                "lm_head",
            ],
        },
    }


def generation_config() -> dict[str, Any]:
    """`generation_config.json`: the assistant stops on <|return|>, <|endoftext|> or <|call|>."""
    return {
        "bos_token_id": STARTOFTEXT,
        "eos_token_id": [RETURN, ENDOFTEXT, CALL],
        "pad_token_id": ENDOFTEXT,
        "do_sample": True,
    }
