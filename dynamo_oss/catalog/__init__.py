"""Leaf facts every layer shares: gpt-oss shapes, GPUs, and the names of roles and engines.

Nothing here imports from the rest of dynamo_oss; everything else may import from here.
"""
