"""Decode attention straight over the paged KV pool, one query a row, with static shapes: the kernel a CUDA
graph of the runner's decode step captures (attention.paged_attention gathers each row's keys into a packed
K/V of data-dependent size first, and takes host ints: not capturable).

Exact gpt-oss attention: scores scaled by D**-0.5, softmax over the row's keys and one sink logit per head,
the 8 query heads of a KV head in one program (GQA: its K/V read once for all 8), the window layers' keys
those with pos_q - pos_k < 128. Flash-decoding: the grid is (rows, KV heads, splits), split s reading the
s-th stretch of the row's keys (each loop bound read from the row's context length inside the kernel),
then a second kernel combines the splits' partial outputs by their log-sum-exps, the sink's exp(s_h) in
the denominator. The number of splits is fixed when the graph is captured (graph_inputs.GraphLayout.splits)
so that one long row is not one program per KV head; a short row leaves its last splits empty. It is an
argument, not a compile-time constant (nor specialised on), so the graphs of every batch size share two
compiled split kernels (with and without the window).

A row reads only keys first_block * block_tokens .. context_len - 1 (within the window, if any): the
pool's unwritten slots hold NaN and masked loads never touch them. A padding row (context_len 0) reads
nothing and gives zeros.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from dynamo_oss.engines.gptoss.forward import attention

KEY_TILE = 64  # keys a program scores at once: two 32-token blocks
HEAD_TILE = 16  # tl.dot's smallest M: the 8 query heads of a KV head, padded
LOG2E = 1.4426950408889634


@triton.jit(do_not_specialize=["splits"])
def _split_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    tables_ptr,
    first_ptr,
    lens_ptr,
    part_out_ptr,
    part_lse_ptr,
    stride_q_row,
    stride_q_head,
    stride_block,
    stride_token,
    stride_kv_head,
    stride_table,
    scale_log2,
    splits,
    GROUP: tl.constexpr,
    HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_TOKENS: tl.constexpr,
    WINDOW: tl.constexpr,
    TILE_N: tl.constexpr,
    TILE_H: tl.constexpr,
):
    row = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    length = tl.load(lens_ptr + row)
    first = tl.load(first_ptr + row)
    start = first * BLOCK_TOKENS
    if WINDOW > 0:
        start = tl.maximum(start, length - WINDOW)
    count = tl.maximum(length - start, 0)
    chunk = tl.cdiv(tl.cdiv(count, splits), TILE_N) * TILE_N
    lo = start + split * chunk
    hi = tl.minimum(lo + chunk, length)

    h = tl.arange(0, TILE_H)
    heads = kv_head * GROUP + h
    live_head = h < GROUP
    d = tl.arange(0, HEAD_DIM)
    q = tl.load(
        q_ptr + row * stride_q_row + heads[:, None] * stride_q_head + d[None, :], mask=live_head[:, None], other=0.0
    )
    m = tl.full([TILE_H], float("-inf"), tl.float32)
    total = tl.zeros([TILE_H], tl.float32)
    acc = tl.zeros([TILE_H, HEAD_DIM], tl.float32)
    for n in range(lo, hi, TILE_N):
        pos = n + tl.arange(0, TILE_N)
        valid = pos < hi
        block = tl.load(tables_ptr + row * stride_table + pos // BLOCK_TOKENS - first, mask=valid, other=0)
        slot = block.to(tl.int64) * stride_block + (pos % BLOCK_TOKENS) * stride_token + kv_head * stride_kv_head
        k = tl.load(k_ptr + slot[:, None] + d[None, :], mask=valid[:, None], other=0.0)
        scores = tl.dot(q, tl.trans(k)) * scale_log2  # [heads, keys], log2 units
        scores = tl.where(valid[None, :], scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, 1))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(scores - m_new[:, None])
        total = total * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + slot[:, None] + d[None, :], mask=valid[:, None], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    seen = total > 0
    out = acc / tl.where(seen, total, 1.0)[:, None]
    lse = tl.where(seen, (m + tl.log2(tl.where(seen, total, 1.0))) * 0.6931471805599453, float("-inf"))  # natural
    part = (row * HEADS + heads) * splits + split
    tl.store(part_out_ptr + part[:, None] * HEAD_DIM + d[None, :], out, mask=live_head[:, None])
    tl.store(part_lse_ptr + part, lse, mask=live_head)


@triton.jit(do_not_specialize=["splits"])
def _combine_kernel(
    part_out_ptr,
    part_lse_ptr,
    sinks_ptr,
    out_ptr,
    stride_out_row,
    splits,
    HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    TILE_S: tl.constexpr,
):
    row = tl.program_id(0)
    head = tl.program_id(1)
    s = tl.arange(0, TILE_S)
    d = tl.arange(0, HEAD_DIM)
    used = s < splits
    part = (row * HEADS + head) * splits + s
    lse = tl.load(part_lse_ptr + part, mask=used, other=float("-inf"))
    sink = tl.load(sinks_ptr + head)
    top = tl.maximum(tl.max(lse, 0), sink)  # the sink in the max: finite even for a row with no keys
    weights = tl.exp(lse - top)
    parts = tl.load(part_out_ptr + part[:, None] * HEAD_DIM + d[None, :], mask=used[:, None], other=0.0)
    out = tl.sum(weights[:, None] * parts, 0) / (tl.sum(weights, 0) + tl.exp(sink - top))
    tl.store(out_ptr + row * stride_out_row + head * HEAD_DIM + d, out.to(out_ptr.dtype.element_ty))


def paged_decode(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    block_tables: torch.Tensor,
    first_block: torch.Tensor,
    context_lens: torch.Tensor,
    window: int | None,
    sinks: torch.Tensor,
    splits: int,
) -> torch.Tensor:
    """q [rows, Hq, D] (the query of each row at position context_len - 1); keys and values [blocks,
    block tokens, Hkv, D] (one layer's views of its pool, the last two dims contiguous); block_tables int32
    [rows, columns], first_block and context_lens int32 [rows]; sinks [Hq] float32. Returns [rows, Hq * D]."""
    rows, heads, dim = q.shape
    kv_heads = keys.shape[2]
    assert keys.stride() == values.stride() and keys.stride(3) == 1 and q.stride(2) == 1
    assert block_tables.stride(1) == 1 and heads % kv_heads == 0
    part_out = torch.empty(rows, heads, splits, dim, device=q.device, dtype=torch.float32)
    part_lse = torch.empty(rows, heads, splits, device=q.device, dtype=torch.float32)
    out = torch.empty(rows, heads * dim, device=q.device, dtype=q.dtype)
    group = heads // kv_heads
    _split_kernel[(rows, kv_heads, splits)](
        q,
        keys,
        values,
        block_tables,
        first_block,
        context_lens,
        part_out,
        part_lse,
        q.stride(0),
        q.stride(1),
        keys.stride(0),
        keys.stride(1),
        keys.stride(2),
        block_tables.stride(0),
        dim**-0.5 * LOG2E,
        splits,
        GROUP=group,
        HEADS=heads,
        HEAD_DIM=dim,
        BLOCK_TOKENS=keys.shape[1],
        WINDOW=window or 0,
        TILE_N=KEY_TILE,
        TILE_H=max(HEAD_TILE, triton.next_power_of_2(group)),
    )
    _combine_kernel[(rows, heads)](
        part_out,
        part_lse,
        sinks,
        out,
        out.stride(0),
        splits,
        HEADS=heads,
        HEAD_DIM=dim,
        TILE_S=triton.next_power_of_2(splits),
    )
    return out


def check_against_reference(
    heads: int,
    kv_heads: int,
    dim: int,
    block_tokens: int,
    window: int | None,
    contexts: Sequence[int],
    splits: int,
    device: str,
    seed: int = 0,
) -> dict[str, float]:
    """paged_decode against attention.masked_paged_attention (float32) on one batch: a row per context, then two
    padding rows, over a random pool (a layer's views of a block-major one) whose slots no row may read hold
    NaN, the rows' blocks scattered over it. Each row's relative error, and the padding rows' largest |output|
    (0: they read nothing); NaN counts as inf."""
    generator = torch.Generator(device).manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=generator, device=device).to(torch.bfloat16)

    spans = []  # each row's first key and first logical block
    for context in contexts:
        start = max(0, context - window) if window else 0
        spans.append((start, start // block_tokens))
    counts = [math.ceil(context / block_tokens) - first for context, (_, first) in zip(contexts, spans)]
    order = torch.randperm(sum(counts) + 1, generator=generator, device=device).to(torch.int32)
    never_written = order[-1]  # where padding rows' and short rows' table columns point
    pool = torch.full(
        (len(order), 3, 2, block_tokens, kv_heads, dim), float("nan"), device=device, dtype=torch.bfloat16
    )
    keys, values = pool[:, 1, 0], pool[:, 1, 1]
    rows = len(contexts) + 2
    tables = never_written.repeat(rows, max(counts)).contiguous()
    first_block = torch.zeros(rows, device=device, dtype=torch.int32)
    context_lens = torch.tensor([*contexts, 0, 0], device=device, dtype=torch.int32)
    written, at = [], 0
    for row, (context, (start, first), count) in enumerate(zip(contexts, spans, counts)):
        blocks = order[at : at + count]
        at += count
        tables[row, :count], first_block[row] = blocks, first
        positions = torch.arange(start, context, device=device)
        slots = (blocks[positions // block_tokens - first].long(), positions % block_tokens)
        k, v = randn(len(positions), kv_heads, dim), randn(len(positions), kv_heads, dim)
        keys[slots], values[slots] = k, v
        written.append((k, v))
    q = randn(rows, heads, dim)
    sinks = 2 + 2 * torch.randn(heads, generator=generator, device=device)
    got = paged_decode(q, keys, values, tables, first_block, context_lens, window, sinks, splits).float()
    errors = {}
    for row, (context, (k, v)) in enumerate(zip(contexts, written)):
        want = attention.masked_paged_attention(q[row : row + 1], k, v, [(0, 1, 0, len(k))], window, sinks).float()
        errors[f"context {context}"] = float((got[row] - want[0]).norm() / want.norm())
    errors["padding rows: largest |out|"] = float(got[len(contexts) :].abs().max())
    return {name: error if error == error else float("inf") for name, error in errors.items()}
