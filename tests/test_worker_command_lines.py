"""Every `python -m dynamo.trtllm` command line a shipped graph's plan produces is accepted by Dynamo
1.6's own TensorRT-LLM argument parser (dynamo/trtllm/args.py), and means what the graph says.

The parser imports `tensorrt_llm.llmapi.llm_args` at module level only to read four defaults of
BaseLlmArgs for its --help; TensorRT-LLM cannot be installed here, so a stand-in provides those
four fields, at TensorRT-LLM's defaults. (ai-dynamo's pytest plugin skips modules named test_trtllm_* when
TensorRT-LLM is missing, hence this module's name.)"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
from pydantic import BaseModel

from dynamo_oss.launch.prepare import prepare

REPO = Path(__file__).resolve().parent.parent
SHIPPED = sorted((REPO / "graphs").glob("*.yaml"))


class BaseLlmArgs(BaseModel):
    """The fields dynamo.trtllm.backend_args reads defaults from."""

    max_batch_size: int = 2048
    max_num_tokens: int = 8192
    max_seq_len: int | None = None
    max_beam_width: int = 1


@pytest.fixture(scope="module")
def parse_args():  # noqa: ANN201 - Dynamo's parse_args
    llm_args = types.ModuleType("tensorrt_llm.llmapi.llm_args")
    llm_args.BaseLlmArgs = BaseLlmArgs
    llmapi = types.ModuleType("tensorrt_llm.llmapi")  # no BuildConfig: TensorRT-LLM >= 1.3.0rc21
    llmapi.llm_args = llm_args
    package = types.ModuleType("tensorrt_llm")
    package.llmapi = llmapi
    stand_ins = {"tensorrt_llm": package, "tensorrt_llm.llmapi": llmapi, "tensorrt_llm.llmapi.llm_args": llm_args}
    with pytest.MonkeyPatch.context() as patch:
        for name, module in stand_ins.items():
            patch.setitem(sys.modules, name, module)
        from dynamo.trtllm.args import parse_args

        yield parse_args


@pytest.mark.parametrize("graph", SHIPPED, ids=lambda path: path.name)
def test_dynamo_trtllm_parses_every_worker_command_line(graph: Path, parse_args, tmp_path: Path) -> None:  # noqa: ANN001
    deployment, plan = prepare(graph, run_dir=tmp_path)
    workers = plan.workers()
    assert workers and all(worker.engine == "trtllm" for worker in workers)
    for worker in workers:
        assert worker.argv[1:3] == ["-m", "dynamo.trtllm"]
        config = parse_args(worker.argv[3:])
        pool = next(pool for pool in deployment.pools if pool.role == worker.role)
        assert config.namespace == deployment.namespace and config.component == pool.component
        assert config.endpoint == "generate"
        # Dynamo spells an aggregated worker's mode prefill_and_decode once parsed.
        expected_mode = {"agg": "prefill_and_decode", "prefill": "prefill", "decode": "decode"}[pool.role]
        assert config.disaggregation_mode.value == expected_mode
        assert Path(config.extra_engine_args) == pool.engine_args
        assert config.served_model_name == deployment.model.served_name
        assert config.dyn_reasoning_parser == "gpt_oss" and config.dyn_tool_call_parser == "harmony"
