"""TensorRT-LLM workers (`python -m dynamo.trtllm`), for hosts with NVIDIA GPUs and TensorRT-LLM."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from typing import Literal

from dynamo_oss.engines import WorkerContext

GPT_OSS_PARSER_FLAGS = ["--dyn-reasoning-parser", "gpt_oss", "--dyn-tool-call-parser", "harmony"]


def visible_gpu_count() -> int:
    """NVIDIA GPUs this host shows through nvidia-smi (0 when there is no driver)."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=True)
    except (subprocess.SubprocessError, OSError):
        return 0
    return sum(1 for line in listing.stdout.splitlines() if line.startswith("GPU "))


class TrtllmEngine:
    name: Literal["trtllm"] = "trtllm"

    def unavailable_reason(self, gpus_needed: int) -> str | None:
        reasons = []
        gpus = visible_gpu_count()
        if gpus < gpus_needed:
            reasons.append(f"the graph needs {gpus_needed} NVIDIA GPUs and this host has {gpus}")
        if importlib.util.find_spec("tensorrt_llm") is None:
            reasons.append("TensorRT-LLM is not installed (import tensorrt_llm fails)")
        return "; ".join(reasons) or None

    def worker_argv(self, ctx: WorkerContext) -> list[str]:
        assert ctx.engine_args_file is not None, "the schema requires engine_args for trtllm"
        return [
            "-m", "dynamo.trtllm",
            "--model-path", ctx.model_path,
            "--served-model-name", ctx.served_name,
            "--extra-engine-args", str(ctx.engine_args_file),
            "--disaggregation-mode", ctx.role,
            "--endpoint", ctx.endpoint,
            # The frontend renders prompts with our harmony template, identical for every checkout.
            "--custom-jinja-template", str(ctx.model_folder / "chat_template.jinja"),
            *GPT_OSS_PARSER_FLAGS,
        ]  # fmt: skip

    def worker_env(self, ctx: WorkerContext) -> dict[str, str]:
        # Programmatic dependent launch: used by every published gpt-oss TensorRT-LLM recipe.
        return {"TRTLLM_ENABLE_PDL": "1"}
