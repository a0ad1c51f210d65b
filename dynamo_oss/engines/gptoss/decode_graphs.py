"""Decode steps replayed from CUDA graphs: the whole step (embedding, every layer with its K/V writes and the
paged decode kernel, final norm, output head) captured once per batch size of graph_inputs.GraphLayout, over
static input buffers, after the KV pools are allocated (a graph holds their addresses).

Why: an eager step is bound by Python and kernel launches (served on an H200: 81-108 ms a token, against
10.4 ms for the same decode step replayed from a graph in benchmarks/gpu/forward_step). A replay copies
the step's padded inputs into the buffers, replays the graph of its size and hands back the live rows'
logits; sampling stays outside (gpu_runner.sample), and steps that are not decode-only run eagerly.
The graphs share one memory pool, captured largest first so the smaller ones reuse its blocks;
`held_bytes` measures what they and the scratch blocks keep, so the KV pools are sized without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from dynamo_oss.catalog.models import ModelShape
from dynamo_oss.engines.gptoss.forward import layer
from dynamo_oss.engines.gptoss.forward.model import Model
from dynamo_oss.engines.gptoss.forward.paged_decode import check_against_reference, paged_decode
from dynamo_oss.engines.gptoss.graph_inputs import DecodeInputs, GraphLayout, decode_inputs, graph_layout
from dynamo_oss.engines.gptoss.kv_layout import PoolName
from dynamo_oss.engines.gptoss.model_runner import BatchRow, RunnerSetup

DEVICE = "cuda"
TOLERANCE = 2e-2  # the runner's kernel checks'

PoolTensor = Callable[[PoolName, int], torch.Tensor]  # a pool's name and blocks -> its NaN-filled tensor


def check_kernel(m: ModelShape, block_tokens: int) -> dict[str, float]:
    """The paged decode kernel against the float32 reference on rows of every kind (one key, across blocks,
    past the window; one split and several), and padding rows: the graphs are captured only if it passes
    (a kernel that fails to compile or run here counts as failing, and every step runs eagerly)."""
    errors = {}
    heads = (m.num_attention_heads, m.num_key_value_heads, m.head_dim)
    for window in (None, m.sliding_window):
        for splits in (1, 4):
            case = f"paged decode, window {window}, {splits} splits"
            try:
                found = check_against_reference(*heads, block_tokens, window, (1, 33, 300), splits, DEVICE)
            except Exception as error:  # noqa: BLE001 - any failure of the kernel leaves the eager path
                first_line = str(error).partition("\n")[0]
                found = {f"raised {type(error).__name__}: {first_line}": float("inf")}
            errors |= {f"{case}, {name}": e for name, e in found.items()}
    return errors


def kernel_passes(errors: Mapping[str, float]) -> bool:
    return all(error < TOLERANCE for error in errors.values())


def layout(setup: RunnerSetup, blocks: Mapping[PoolName, int], max_seq_len: int) -> GraphLayout:
    """The graphs' layout for the runner's pools of `blocks` blocks each (the block manager's)."""
    return graph_layout(setup.args, setup.pools, blocks, max_seq_len, setup.shape.num_key_value_heads)


@dataclass(frozen=True)
class _PoolBuffers:
    write_blocks: torch.Tensor
    write_offsets: torch.Tensor
    first_blocks: torch.Tensor
    tables: torch.Tensor


class _StaticInputs:
    """The graphs' input buffers at the largest size, all padding to begin with; a graph of n rows reads
    the first n of each."""

    def __init__(self, layout: GraphLayout) -> None:
        largest = layout.sizes[-1]

        def zeros(dtype: torch.dtype, *shape: int) -> torch.Tensor:
            return torch.zeros(shape or (largest,), device=DEVICE, dtype=dtype)

        self.tokens, self.positions, self.context_lens = zeros(torch.int64), zeros(torch.int64), zeros(torch.int32)
        self.pools = {
            name: _PoolBuffers(
                zeros(torch.int64) + layout.scratch[name],
                zeros(torch.int64),
                zeros(torch.int32),
                zeros(torch.int32, largest, layout.widths[name]) + layout.scratch[name],
            )
            for name in layout.pools
        }

    def load(self, inputs: DecodeInputs) -> None:
        n = inputs.size
        for buffer, array in (
            (self.tokens, inputs.tokens),
            (self.positions, inputs.positions),
            (self.context_lens, inputs.context_lens),
        ):
            buffer[:n].copy_(torch.from_numpy(array))
        for name, pool in inputs.pools.items():
            buffers = self.pools[name]
            buffers.write_blocks[:n].copy_(torch.from_numpy(pool.write_blocks))
            buffers.write_offsets[:n].copy_(torch.from_numpy(pool.write_offsets))
            buffers.first_blocks[:n].copy_(torch.from_numpy(pool.first_blocks))
            buffers.tables[:n, : pool.tables.shape[1]].copy_(torch.from_numpy(pool.tables))


class DecodeGraphs:
    """One CUDA graph of the decode step per captured size, over the pools `kv` (each with its scratch block)."""

    def __init__(self, model: Model, kv: Mapping[PoolName, torch.Tensor], layout: GraphLayout) -> None:
        self.model, self.kv, self.layout = model, dict(kv), layout
        self.slot_of_layer = {
            index: (name, pool.layers.index(index)) for name, pool in layout.pools.items() for index in pool.layers
        }
        self.inputs = _StaticInputs(layout)
        self.logits_out = torch.empty(layout.sizes[-1], model.m.vocab_size, device=DEVICE, dtype=torch.float32)
        self.memory = torch.cuda.graph_pool_handle()
        self.graphs = {size: self._capture(size) for size in reversed(layout.sizes)}

    def logits(self, rows: Sequence[BatchRow], sampling_rows: Sequence[int]) -> torch.Tensor | None:
        """The step replayed: its K/V written, float32 logits [len(sampling_rows), vocab]; None when it cannot
        be (not decode-only, more rows than the largest graph, a table too wide): run it eagerly."""
        inputs = decode_inputs(rows, self.layout)
        if inputs is None:
            return None
        self.inputs.load(inputs)
        self.graphs[inputs.size].replay()
        return self.logits_out[list(sampling_rows)]  # a copy: the next replay overwrites the buffer

    def _capture(self, size: int) -> torch.cuda.CUDAGraph:
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.no_grad(), torch.cuda.stream(stream):
            self._step(size)  # off the graph: compiles and tunes the kernels, over padding rows only
            with torch.cuda.graph(graph, pool=self.memory, stream=stream):
                self._step(size)
        torch.cuda.current_stream().wait_stream(stream)
        return graph

    def _step(self, size: int) -> None:
        inputs = self.inputs
        logits = self.model.forward(
            inputs.tokens[:size], inputs.positions[:size], lambda index: self._attend(index, size), slice(None)
        )
        self.logits_out[:size].copy_(logits)

    def _attend(self, layer_index: int, size: int) -> layer.Attend:
        name, slot = self.slot_of_layer[layer_index]
        pool, buffers = self.kv[name], self.inputs.pools[name]
        keys, values = pool[:, slot, 0], pool[:, slot, 1]  # [blocks, block tokens, KV heads, head dim]
        written = (buffers.write_blocks[:size], buffers.write_offsets[:size])
        tables, first_blocks = buffers.tables[:size], buffers.first_blocks[:size]
        context_lens = self.inputs.context_lens[:size]
        window, sinks = self.model.window(layer_index), self.model.layers[layer_index].sinks
        splits = self.layout.splits(name, size)

        def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            keys[written] = k
            values[written] = v
            return paged_decode(q, keys, values, tables, first_blocks, context_lens, window, sinks, splits)

        return attend


def held_bytes(model: Model, pool_tensor: PoolTensor, layout: GraphLayout) -> int:
    """Device memory the graphs keep once captured (their pool, buffers and logits, the capture stream's
    workspaces) and the scratch blocks: measured by capturing them over pools that hold up to the scratch
    block (the scratch block alone for a layout made for pools of 0 blocks), then released."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    before, _ = torch.cuda.mem_get_info()
    kv = {name: pool_tensor(name, scratch + 1) for name, scratch in layout.scratch.items()}
    graphs = DecodeGraphs(model, kv, layout)
    torch.cuda.synchronize()
    after, _ = torch.cuda.mem_get_info()
    del graphs, kv
    torch.cuda.empty_cache()
    return before - after
