"""gpt-oss's forward pass on one GPU, in torch: the one copy the engine's GPU model runner and the
benchmarks under benchmarks/gpu (forward_step, mixed_step, mxfp4_experts, kernels) both run.

- `attention`: attention with sinks: FlexAttention for prompt chunks over contiguous K/V, PyTorch's flash
  kernel for decode, and the paged form the runner uses (K/V gathered from the pools through the block
  tables, one varlen flash call for every row of a step); `paged_decode`: the Triton kernel a CUDA graph
  of the decode step captures, reading the pool through the tables with static shapes;
- `dense`: the bf16 projections with bias (QKV, output, router);
- `mxfp4`, `experts`: the checkpoint's MXFP4 expert storage and its run through triton_kernels' `matmul_ogs`;
- `layer`: one decoder layer over a step's packed tokens, its attention and MoE passed in;
- `model`: embedding, the 36 (or 24) layers, final norm and output head, from random weights or a checkpoint.

torch (and triton_kernels, for the experts) is imported here and in `gpu_runner` only: nothing on the
CPU side of the engine, and nothing the test suite imports, imports this package.
"""
