"""gptoss: the project's own gpt-oss engine, served behind Dynamo's worker interface.

One concept per module, in nano-vllm's shape:
- `config`: the engine arguments file (batch, token budget, KV cache, handoff), read into a typed model;
- `engine`: the engine as the tree sees it (`ENGINE`): its shape, whether a host can run it, a worker's
  command line;
- `request`: a request from Dynamo's frontend read into a `sequence` (its tokens, blocks, stop rule), or
  refused naming the field;
- `sampling`: greedy and temperature sampling, one rule for numpy and torch;
- `kv_layout`, `block_pool`, `block_manager`: the paged KV cache, one pool per attention window, with
  prefix reuse and the KV events Dynamo's router reads;
- `scheduler`: continuous batching with chunked prefill within a token budget, and preemption;
- `checkpoint`: the published checkpoint format (safetensors, MXFP4 experts), checked against the model it
  claims and read without a copy;
- `handoff`: the disaggregated handoff's bookkeeping: which blocks of which pool go to the decode worker,
  the descriptor Dynamo's frontend carries between them, and how long the prefill worker keeps them;
- `kv_transfer`: the handoff's bytes: a NIXL agent over the worker's pools, a READ a request, deadlines;
- `metrics`: forward-pass metrics, KV events and the KV snapshot, in Dynamo's formats;
- `capacity`: the KV pools' blocks from the memory the GPU has left, refused with the numbers when too few;
- `model_runner`: what the engine asks of the GPU model runner (the forward pass, sampling on the device,
  the KV's transfers), and the one place that opens it;
- `kv_index`: where a step's tokens write their K/V and which keys each row reads, from the block tables;
- `graph_inputs`: a decode step's inputs padded to the CUDA graph it replays (sizes, scratch block, tables);
- `forward` (torch): the forward pass, shared with benchmarks/gpu; `gpu_runner` (torch): the runner on
  it, its pools offered and read through `kv_transfer` in the prefill and decode roles, its decode steps
  replayed from CUDA graphs by `decode_graphs` (torch);
- `engine_core`: the step loop on a thread of its own;
- `worker`: `python -m dynamo_oss.engines.gptoss.worker`, the engine behind Dynamo's worker interface
  (dynamo.common.backend), in the aggregated, prefill and decode roles.

A pool names it as `engine: gptoss` with `engine_args:` one of these files.
"""

from dynamo_oss.engines.gptoss.engine import ENGINE

__all__ = ["ENGINE"]
