"""The gptoss engine's checkpoint loader, on a small checkpoint this test writes in the format openai/gpt-oss
ships (safetensors shards and their index, BF16 attention, MXFP4 expert blocks and scales, config.json),
with safetensors' own writer: it loads with its exact values, and a checkpoint that is not the model it
claims is refused naming the tensor."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from safetensors import TensorSpec as SafetensorsSpec
from safetensors import serialize_file

from dynamo_oss.assets.config import model_config
from dynamo_oss.catalog.models import GPT_OSS_20B, GPT_OSS_120B
from dynamo_oss.engines.gptoss.checkpoint import (
    FP4_E2M1,
    INDEX,
    CheckpointError,
    expected_tensors,
    open_checkpoint,
    parameter_count,
    shape_from_config,
)

# gpt-oss's layout (window and full layers, MXFP4 experts, sinks) at a size a test writes in milliseconds.
TINY = GPT_OSS_20B.model_copy(
    update={
        "num_layers": 2,
        "num_experts": 4,
        "experts_per_token": 2,
        "hidden_size": 64,
        "intermediate_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 96,
    }
)
SAFETENSORS_DTYPE = {"BF16": "bfloat16", "U8": "uint8", "F32": "float32"}
Tensors = dict[str, tuple[str, np.ndarray]]  # name -> (safetensors dtype, stored bytes as numpy)


def tiny_tensors(seed: int = 0) -> Tensors:
    """Every tensor of TINY: BF16 values (normal, stored as their top 16 bits), random FP4 codes, scales
    2^-9..2^-5."""
    rng = np.random.default_rng(seed)
    tensors: Tensors = {}
    for name, spec in expected_tensors(TINY).items():
        if spec.dtype == "BF16":
            values = rng.normal(size=spec.shape).astype(np.float32)
            tensors[name] = ("BF16", (values.view(np.uint32) >> 16).astype(np.uint16))
        elif name.endswith("_scales"):
            tensors[name] = ("U8", rng.integers(118, 124, size=spec.shape, dtype=np.uint8))
        else:
            tensors[name] = ("U8", rng.integers(0, 256, size=spec.shape, dtype=np.uint8))
    return tensors


def write_checkpoint(folder: Path, tensors: Tensors, config: dict | None = None) -> Path:
    """Two shards split by layer, their index and config.json, as the published checkpoints are laid out."""
    folder.mkdir(parents=True, exist_ok=True)
    shards: dict[str, dict[str, tuple[str, np.ndarray]]] = {}
    for name, entry in tensors.items():
        second = name.startswith("model.layers.1.") or name == "lm_head.weight"
        shards.setdefault(f"model-0000{int(second) + 1}-of-00002.safetensors", {})[name] = entry
    for file, entries in shards.items():
        arrays = {name: np.ascontiguousarray(array) for name, (_, array) in entries.items()}
        specs = {
            name: SafetensorsSpec(
                dtype=SAFETENSORS_DTYPE[dtype],
                shape=arrays[name].shape,
                data_ptr=arrays[name].ctypes.data,
                data_len=arrays[name].nbytes,
            )
            for name, (dtype, _) in entries.items()
        }
        serialize_file(specs, str(folder / file))
    weight_map = {name: file for file, entries in shards.items() for name in entries}
    (folder / INDEX).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (folder / "config.json").write_text(json.dumps(config or model_config(TINY)))
    return folder


def test_the_published_checkpoints_hold_their_published_parameter_counts() -> None:
    """116.8B and 20.9B, as OpenAI's model card says: the tensor table is the real checkpoints'."""
    assert round(parameter_count(GPT_OSS_120B) / 1e9, 1) == 116.8
    assert round(parameter_count(GPT_OSS_20B) / 1e9, 1) == 20.9
    assert len(expected_tensors(GPT_OSS_120B)) == 3 + 36 * 19


def test_a_model_folder_s_config_names_its_built_in_model_or_the_field_that_differs() -> None:
    assert shape_from_config(model_config(GPT_OSS_120B)) is GPT_OSS_120B
    with pytest.raises(CheckpointError, match="num_local_experts is 64, but gpt-oss-120b has 128"):
        shape_from_config({**model_config(GPT_OSS_120B), "num_local_experts": 64})


def test_a_checkpoint_in_the_published_format_loads_with_its_exact_values(tmp_path: Path) -> None:
    tensors = tiny_tensors()
    checkpoint = open_checkpoint(write_checkpoint(tmp_path / "ckpt", tensors), TINY)
    assert set(checkpoint.tensors) == set(expected_tensors(TINY))
    sinks = checkpoint.array("model.layers.0.self_attn.sinks")
    assert isinstance(sinks, np.memmap) and sinks.dtype == np.uint16 and sinks.shape == (4,)  # mapped, not copied
    stored = tensors["model.layers.1.self_attn.o_proj.weight"][1]
    assert np.array_equal(
        checkpoint.float32("model.layers.1.self_attn.o_proj.weight"), (stored.astype(np.uint32) << 16).view(np.float32)
    )
    experts = checkpoint.experts(1, "gate_up_proj")
    assert experts.shape == (4, 128, 64) and experts.dtype == np.float32
    blocks = tensors["model.layers.1.mlp.experts.gate_up_proj_blocks"][1]
    scales = tensors["model.layers.1.mlp.experts.gate_up_proj_scales"][1]
    for expert, row in [(0, 0), (2, 77), (3, 127)]:  # element by element, as the format defines it
        for column in range(64):
            byte = int(blocks[expert, row, column // 32, (column % 32) // 2])
            code = byte & 0x0F if column % 2 == 0 else byte >> 4
            weight = FP4_E2M1[code] * 2.0 ** (int(scales[expert, row, column // 32]) - 127)
            assert experts[expert, row, column] == weight, (expert, row, column)


def _retype(name: str, dtype: str, array: np.ndarray) -> Callable[[Tensors], None]:
    def change(tensors: Tensors) -> None:
        tensors[name] = (dtype, array)

    return change


def _dequantised(tensors: Tensors) -> None:
    for suffix in ("_blocks", "_scales"):
        del tensors[f"model.layers.0.mlp.experts.gate_up_proj{suffix}"]
    tensors["model.layers.0.mlp.experts.gate_up_proj"] = ("BF16", np.zeros((4, 128, 64), np.uint16))


@pytest.mark.parametrize(
    ("change", "refused"),
    [
        (
            _retype("model.layers.1.mlp.router.weight", "BF16", np.zeros((5, 64), np.uint16)),
            "tensor model.layers.1.mlp.router.weight in model-00002-of-00002.safetensors: BF16 [4, 64] expected for "
            "gpt-oss-20b, found BF16 [5, 64]",
        ),
        (
            _retype("model.layers.0.self_attn.sinks", "F32", np.zeros(4, np.float32)),
            "tensor model.layers.0.self_attn.sinks in model-00001-of-00002.safetensors: BF16 [4] expected for "
            "gpt-oss-20b, found F32 [4]",
        ),
        (
            _retype("model.layers.0.mlp.experts.down_proj_scales", "U8", np.zeros((4, 64, 1), np.uint8)),
            "down_proj_scales in model-00001-of-00002.safetensors: U8 [4, 64, 2] expected",
        ),
        (lambda tensors: tensors.pop("model.norm.weight"), "tensor model.norm.weight missing"),
        (
            _dequantised,
            "tensor model.layers.0.mlp.experts.gate_up_proj_blocks missing: the checkpoint holds "
            "model.layers.0.mlp.experts.gate_up_proj (BF16 [4, 128, 64]), its experts not in MXFP4",
        ),
        (
            _retype("model.layers.0.mlp.experts.gate_up_proj_zeros", "U8", np.zeros(3, np.uint8)),
            "tensor model.layers.0.mlp.experts.gate_up_proj_zeros in model-00001-of-00002.safetensors: not part of",
        ),
    ],
)
def test_a_checkpoint_that_is_not_the_model_it_claims_is_refused_naming_the_tensor(
    change: Callable[[Tensors], None], refused: str, tmp_path: Path
) -> None:
    tensors = tiny_tensors()
    change(tensors)
    with pytest.raises(CheckpointError) as error:
        open_checkpoint(write_checkpoint(tmp_path / "ckpt", tensors), TINY)
    assert refused in str(error.value)


@pytest.mark.parametrize(
    ("config", "refused"),
    [
        ({"num_local_experts": 128}, "config.json: num_local_experts is 128, but gpt-oss-20b has 4"),
        ({"quantization_config": {"quant_method": "bf16"}}, "quant_method is 'bf16'; the engine loads mxfp4"),
    ],
)
def test_a_config_that_is_not_the_model_claimed_is_refused_naming_the_field(
    config: dict, refused: str, tmp_path: Path
) -> None:
    folder = write_checkpoint(tmp_path / "ckpt", tiny_tensors(), {**model_config(TINY), **config})
    with pytest.raises(CheckpointError, match=refused):
        open_checkpoint(folder, TINY)
    with pytest.raises(CheckpointError, match="num_hidden_layers is 2, but gpt-oss-120b has 36"):
        open_checkpoint(write_checkpoint(tmp_path / "other", tiny_tensors()), GPT_OSS_120B)


def test_a_file_that_is_not_safetensors_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "ckpt", tiny_tensors())
    shard = folder / "model-00001-of-00002.safetensors"
    data = shard.read_bytes()
    shard.write_bytes((10**9).to_bytes(8, "little") + data[8:])
    with pytest.raises(CheckpointError, match="a header of 1000000000 bytes in a file of"):
        open_checkpoint(folder, TINY)
    header_length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + header_length])
    name = next(key for key in header if key != "__metadata__")
    header[name]["data_offsets"][1] += 10**6
    forged = json.dumps(header).encode()
    shard.write_bytes(len(forged).to_bytes(8, "little") + forged + data[8 + header_length :])
    with pytest.raises(CheckpointError, match=f"tensor {name} in {shard.name}: bytes"):
        open_checkpoint(folder, TINY)
    index = json.loads((folder / INDEX).read_text())
    index["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors"
    (folder / INDEX).write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="'../elsewhere.safetensors' is not a .safetensors file of the folder"):
        open_checkpoint(folder, TINY)
