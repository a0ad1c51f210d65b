"""The forward pass's rotary table (forward/layer.py: rope_table, on engines/gptoss/rope.py) against OpenAI's
reference (gpt_oss 0.0.9's gpt_oss/torch/model.py: RotaryEmbedding, with gpt-oss's config: base 150,000,
YaRN factor 32 over 4,096 tokens, ntk_alpha 1, ntk_beta 32), over the whole 131,072-token context.

    python -m benchmarks.gpu.serving.rope_check --out DIR

(gpt_oss on PYTHONPATH: .whl/vendor, as benchmarks/gpu/serving/RESULTS.md carries it.) Writes DIR/rope_check.json:
the relative error of cos and sin, the table being BF16 (about 4e-3 is its rounding).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from gpt_oss.torch.model import RotaryEmbedding

from benchmarks.gpu.common.checks import relative_error
from benchmarks.gpu.common.device import device_header
from dynamo_oss.catalog.models import GPT_OSS_120B
from dynamo_oss.engines.gptoss.forward.layer import rope_table
from dynamo_oss.engines.gptoss.rope import GPT_OSS_YARN

TOLERANCE = 1e-2  # BF16 against float32


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    m, yarn = GPT_OSS_120B, GPT_OSS_YARN
    reference = RotaryEmbedding(
        m.head_dim,
        int(yarn.theta),
        torch.float32,
        initial_context_length=yarn.original_context,
        scaling_factor=yarn.factor,
        ntk_alpha=yarn.beta_slow,
        ntk_beta=yarn.beta_fast,
        device=torch.device("cuda"),
    )
    want_cos, want_sin = reference._compute_cos_sin(m.max_context)
    cos, sin = rope_table(m, m.max_context, "cuda")
    errors = {"cos": relative_error(cos, want_cos), "sin": relative_error(sin, want_sin)}
    report = {
        **device_header(),
        "positions": m.max_context,
        "errors": errors,
        "pass": all(error < TOLERANCE for error in errors.values()),
    }
    print(json.dumps(report, indent=1), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rope_check.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
