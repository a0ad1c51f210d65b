"""The gpt-oss models this project serves, with their published shapes.

One table used by everything that needs a shape: the model folder written for the
frontend (assets), KV sizing for the mocker, and the performance model (perf).

Source: OpenAI's gpt-oss model card (arXiv 2508.10925, "gpt-oss-120b & gpt-oss-20b Model
Card", Aug 2025) and the checkpoints' config.json on Hugging Face (openai/gpt-oss-20b,
openai/gpt-oss-120b): 24 / 36 layers; 20.9B / 116.8B parameters, 3.6B / 5.1B active;
32 / 128 experts, 4 active per token; hidden and expert size 2880; 64 query heads, 8 KV
heads of 64; vocabulary 201,088; context 131,072; layers alternate a 128-token sliding
window and full attention; MXFP4 experts make checkpoints of about 13 GB and 61 GB.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

BuiltinModelName = Literal["gpt-oss-20b", "gpt-oss-120b"]


class ModelShape(BaseModel):
    """Architecture constants of one gpt-oss checkpoint."""

    model_config = ConfigDict(frozen=True)

    name: BuiltinModelName
    served_name: str  # the name clients send, as published on Hugging Face
    num_layers: int
    total_params: float
    active_params: float
    num_experts: int
    experts_per_token: int
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    max_context: int
    sliding_window: int
    checkpoint_bytes: float

    @property
    def full_attention_layers(self) -> int:
        """Layers alternate sliding-window and full attention, starting with a window layer."""
        return self.num_layers // 2

    @property
    def window_layers(self) -> int:
        return self.num_layers - self.full_attention_layers

    def kv_bytes_per_layer_token(self, bytes_per_element: float = 2.0) -> float:
        """K and V for one token in one layer."""
        return 2 * self.num_key_value_heads * self.head_dim * bytes_per_element

    def kv_bytes_per_context_token(self, bytes_per_element: float = 2.0) -> float:
        """KV bytes that grow with context: only the full-attention layers keep every token."""
        return self.full_attention_layers * self.kv_bytes_per_layer_token(bytes_per_element)

    def kv_bytes(self, context: int, bytes_per_element: float = 2.0) -> float:
        """KV bytes of one sequence of `context` tokens, honouring the 128-token window, token for token:
        what a contiguous cache holds. TensorRT-LLM holds blocks, in one pool per window: perf.kv_cache."""
        window = min(context, self.sliding_window)
        per_layer = self.kv_bytes_per_layer_token(bytes_per_element)
        return per_layer * (self.full_attention_layers * context + self.window_layers * window)


GPT_OSS_20B = ModelShape(
    name="gpt-oss-20b",
    served_name="openai/gpt-oss-20b",
    num_layers=24,
    total_params=20.9e9,
    active_params=3.6e9,
    num_experts=32,
    experts_per_token=4,
    hidden_size=2880,
    intermediate_size=2880,
    num_attention_heads=64,
    num_key_value_heads=8,
    head_dim=64,
    vocab_size=201_088,
    max_context=131_072,
    sliding_window=128,
    checkpoint_bytes=13e9,
)

GPT_OSS_120B = GPT_OSS_20B.model_copy(
    update=dict(
        name="gpt-oss-120b",
        served_name="openai/gpt-oss-120b",
        num_layers=36,
        total_params=116.8e9,
        active_params=5.1e9,
        num_experts=128,
        checkpoint_bytes=61e9,
    )
)

BUILTIN_MODELS: dict[str, ModelShape] = {m.name: m for m in (GPT_OSS_20B, GPT_OSS_120B)}


class DraftHead(BaseModel):
    """An EAGLE3 draft head: one decoder layer over the model's own hidden states, and an output head.

    EAGLE-3's design (Li et al., 2025): the layer's attention takes the token's embedding beside a
    fused hidden state (2 x hidden wide) and a projection fuses three of the model's hidden states
    (3 x hidden to hidden). Its widths here are gpt-oss's (attention 64 x 64, KV 8 x 64), its MLP as
    wide as gpt-oss's four active experts, and its output head EAGLE-3's reduced draft vocabulary of
    32,000 tokens: about 0.26B parameters, 0.5 GB in BF16, near the 0.6 GB of published gpt-oss-120b
    EAGLE3 checkpoints (an assumption: NVIDIA's head's config was not read). Its KV is one
    full-attention layer's.
    """

    model_config = ConfigDict(frozen=True)

    target: ModelShape
    layers: int = 1
    draft_vocab_size: int = 32_000

    @property
    def layer_params(self) -> float:
        t = self.target
        q, kv = t.num_attention_heads * t.head_dim, 2 * t.num_key_value_heads * t.head_dim
        attention = 2 * t.hidden_size * (q + kv) + q * t.hidden_size
        fuse = 3 * t.hidden_size * t.hidden_size
        mlp = 3 * t.hidden_size * t.intermediate_size * t.experts_per_token
        return attention + fuse + mlp

    @property
    def head_params(self) -> float:
        return self.draft_vocab_size * self.target.hidden_size


# The EAGLE3 heads published for TensorRT-LLM, by the model they draft for (speculative_model): NVIDIA's
# for gpt-oss-120b (Hugging Face nvidia/gpt-oss-120b-Eagle3-v3, May 2026). NVIDIA publishes none for 20b.
PUBLISHED_DRAFT_HEADS: dict[str, str] = {"gpt-oss-120b": "nvidia/gpt-oss-120b-Eagle3-v3"}

# Dynamo's parsers for gpt-oss's harmony format (dynamo.llm's reasoning and tool-call parser
# names): every engine puts them on its model card, so the frontend splits channels alike.
REASONING_PARSER = "gpt_oss"
TOOL_CALL_PARSER = "harmony"
