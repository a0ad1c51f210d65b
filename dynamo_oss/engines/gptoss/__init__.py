"""gptoss: the project's own gpt-oss engine, served behind Dynamo's worker interface.

One concept per module, in nano-vllm's shape:
- `config`: the engine arguments file (batch, token budget, KV cache, handoff), read into a typed model;
- `engine`: the engine as the tree sees it (`ENGINE`): its shape, whether a host can run it, a worker's
  command line.

A pool names it as `engine: gptoss` with `engine_args:` one of these files.
"""

from dynamo_oss.engines.gptoss.engine import ENGINE

__all__ = ["ENGINE"]
