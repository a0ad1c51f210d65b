"""Dynamo's mocker worker with the gpt-oss parsers on its model card.

The frontend takes its reasoning and tool-call parsers from the worker's model card, and
Dynamo's mocker registers none; a TensorRT-LLM worker gets them from its
`--dyn-reasoning-parser` and `--dyn-tool-call-parser` flags. This module gives the mocker the
same card, so harmony output is parsed the same way on both engines.
Run as `python -m dynamo_oss.engines.mocker_worker <dynamo.mocker arguments>`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dynamo.mocker.main as mocker_main

from dynamo_oss.catalog.models import REASONING_PARSER, TOOL_CALL_PARSER

_build_runtime_config = mocker_main.build_runtime_config


def build_runtime_config_for_gpt_oss(engine_args: Mapping[str, Any]) -> tuple[int, Any]:
    block_size, runtime_config = _build_runtime_config(engine_args)
    runtime_config.reasoning_parser = REASONING_PARSER
    runtime_config.tool_call_parser = TOOL_CALL_PARSER
    return block_size, runtime_config


if __name__ == "__main__":
    mocker_main.build_runtime_config = build_runtime_config_for_gpt_oss
    mocker_main.main()
