"""gpt-oss's MXFP4 expert GEMMs on Hopper, as the checkpoint stores them and a serving engine runs them.

The kernel is Triton's `triton_kernels.matmul_ogs` (OpenAI's reference implementation and vLLM's
default on Hopper), carried as source from vLLM 0.33.0's wheel (vendor.py); RESULTS.md says why not
FlashInfer's.
"""
