"""gpt-oss's checkpoint as openai/gpt-oss-120b and -20b ship it on Hugging Face, checked against the model
it claims before a byte of it is used, and read without a copy.

The format (the checkpoints' model.safetensors.index.json, and Hugging Face transformers' gpt_oss model
and its MXFP4 integration, transformers/integrations/mxfp4.py, which load them):
- safetensors shards named by `model.safetensors.index.json` ("weight_map": tensor -> file), or one
  `model.safetensors`; a shard is an 8-byte little-endian header length, a JSON header (name -> dtype,
  shape, data_offsets into the bytes after the header), then the bytes;
- attention, norms, router, embedding and output head in BF16, each attention layer with its `sinks`
  ([heads], one logit a head);
- the experts in MXFP4: a projection [experts, out, in] as `*_blocks` U8 [experts, out, in / 32, 16] (two
  FP4 E2M1 codes a byte, the even element in the low nibble) and `*_scales` U8 [experts, out, in / 32]
  (E8M0: a power of two, bias 127, one per 32 weights along `in`), with `*_bias` BF16 [experts, out];
  gate_up_proj's rows interleave the gate (even) and up (odd) projections;
- `config.json` with the shape and `quantization_config.quant_method: mxfp4`.

The expected tensors come from the model's shape (`expected_tensors`): 116.8B parameters for gpt-oss-120b,
20.9B for -20b, as published. A checkpoint whose config, names, dtypes or shapes differ is refused naming
the tensor (a dequantised BF16 checkpoint among them), and so is a header that is not safetensors'.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dynamo_oss.catalog.models import BUILTIN_MODELS, ModelShape

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
MXFP4_GROUP = 32  # weights per E8M0 scale
FP4_E2M1 = np.array(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], np.float32
)
STORAGE = {"BF16": np.dtype("<u2"), "U8": np.dtype("u1"), "F32": np.dtype("<f4")}  # numpy has no bfloat16
ITEM_BYTES = {
    **{name: 1 for name in ("U8", "I8", "BOOL", "F8_E4M3", "F8_E5M2")},
    **{name: 2 for name in ("BF16", "F16", "I16", "U16")},
    **{name: 4 for name in ("F32", "I32", "U32")},
    **{name: 8 for name in ("F64", "I64", "U64")},
}
MOST_HEADER_BYTES = 100 * 2**20  # safetensors' own limit
CONFIG_FIELDS = {  # config.json key -> ModelShape field
    "num_hidden_layers": "num_layers",
    "num_local_experts": "num_experts",
    "num_experts_per_tok": "experts_per_token",
    "hidden_size": "hidden_size",
    "intermediate_size": "intermediate_size",
    "num_attention_heads": "num_attention_heads",
    "num_key_value_heads": "num_key_value_heads",
    "head_dim": "head_dim",
    "vocab_size": "vocab_size",
    "sliding_window": "sliding_window",
}
EXPERT_PROJECTIONS = ("gate_up_proj", "down_proj")


class CheckpointError(ValueError):
    """A checkpoint the engine will not load; the message names the file or tensor and what was expected."""


@dataclass(frozen=True)
class TensorSpec:
    dtype: str
    shape: tuple[int, ...]

    def __str__(self) -> str:
        return f"{self.dtype} {list(self.shape)}"


@dataclass(frozen=True)
class StoredTensor:
    name: str
    spec: TensorSpec
    file: Path
    offset: int  # of its first byte in `file`


def expected_tensors(m: ModelShape) -> dict[str, TensorSpec]:
    """Every tensor of a checkpoint of shape `m`, with its dtype and shape."""
    h, e, i = m.hidden_size, m.num_experts, m.intermediate_size
    q, kv = m.num_attention_heads * m.head_dim, m.num_key_value_heads * m.head_dim
    tensors = {
        "model.embed_tokens.weight": TensorSpec("BF16", (m.vocab_size, h)),
        "model.norm.weight": TensorSpec("BF16", (h,)),
        "lm_head.weight": TensorSpec("BF16", (m.vocab_size, h)),
    }
    expert_dims = {"gate_up_proj": (2 * i, h), "down_proj": (h, i)}
    for layer in range(m.num_layers):
        prefix = f"model.layers.{layer}"
        tensors |= {
            f"{prefix}.input_layernorm.weight": TensorSpec("BF16", (h,)),
            f"{prefix}.post_attention_layernorm.weight": TensorSpec("BF16", (h,)),
            f"{prefix}.self_attn.sinks": TensorSpec("BF16", (m.num_attention_heads,)),
            f"{prefix}.mlp.router.weight": TensorSpec("BF16", (e, h)),
            f"{prefix}.mlp.router.bias": TensorSpec("BF16", (e,)),
        }
        for name, (rows, cols) in {"q_proj": (q, h), "k_proj": (kv, h), "v_proj": (kv, h), "o_proj": (h, q)}.items():
            tensors[f"{prefix}.self_attn.{name}.weight"] = TensorSpec("BF16", (rows, cols))
            tensors[f"{prefix}.self_attn.{name}.bias"] = TensorSpec("BF16", (rows,))
        for name, (rows, cols) in expert_dims.items():
            groups = cols // MXFP4_GROUP
            tensors[f"{prefix}.mlp.experts.{name}_blocks"] = TensorSpec("U8", (e, rows, groups, MXFP4_GROUP // 2))
            tensors[f"{prefix}.mlp.experts.{name}_scales"] = TensorSpec("U8", (e, rows, groups))
            tensors[f"{prefix}.mlp.experts.{name}_bias"] = TensorSpec("BF16", (e, rows))
    return tensors


def parameter_count(m: ModelShape) -> int:
    """Weights the checkpoint holds, an MXFP4 byte counting as its two weights and its scales as none."""
    count = 0
    for name, spec in expected_tensors(m).items():
        if name.endswith("_scales"):
            continue
        count += math.prod(spec.shape) * (2 if name.endswith("_blocks") else 1)
    return count


def shape_from_config(config: Mapping[str, Any], where: str = "config.json") -> ModelShape:
    """The built-in gpt-oss model a config.json describes; CheckpointError names the first field that
    matches none."""
    for shape in BUILTIN_MODELS.values():
        if all(config.get(key) == getattr(shape, field) for key, field in CONFIG_FIELDS.items()):
            return shape
    layers = config.get("num_hidden_layers")
    closest = next((s for s in BUILTIN_MODELS.values() if s.num_layers == layers), None)
    if closest is None:
        raise CheckpointError(f"{where}: num_hidden_layers is {layers!r}; gpt-oss has 24 (20b) or 36 (120b)")
    key, field = next((k, f) for k, f in CONFIG_FIELDS.items() if config.get(k) != getattr(closest, f))
    raise CheckpointError(f"{where}: {key} is {config.get(key)!r}, but {closest.name} has {getattr(closest, field)}")


def read_config(path: Path) -> dict[str, Any]:
    """A config.json, which must be a JSON object."""
    try:
        config = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path}: not a readable config.json ({err})") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: must hold a JSON object")
    return config


class Checkpoint:
    """A checked checkpoint folder: its tensors, read as numpy arrays over the mapped files."""

    def __init__(self, folder: Path, shape: ModelShape, tensors: Mapping[str, StoredTensor]) -> None:
        self.folder, self.shape, self.tensors = folder, shape, dict(tensors)

    def array(self, name: str) -> np.ndarray:
        """The tensor's bytes as stored (BF16 as uint16), mapped read-only, never copied."""
        stored = self.tensors[name]
        return np.memmap(stored.file, STORAGE[stored.spec.dtype], "r", stored.offset, stored.spec.shape)

    def float32(self, name: str) -> np.ndarray:
        """A BF16 tensor's values in float32, exactly."""
        return bf16_to_float32(self.array(name))

    def experts(self, layer: int, projection: str) -> np.ndarray:
        """One layer's expert projection [experts, out, in] in float32, exactly."""
        prefix = f"model.layers.{layer}.mlp.experts.{projection}"
        return dequantise_mxfp4(self.array(f"{prefix}_blocks"), self.array(f"{prefix}_scales"))


def open_checkpoint(folder: Path, claimed: ModelShape) -> Checkpoint:
    """The checkpoint in `folder`, checked against the model it claims (its config.json, which must be
    `claimed`'s) tensor by tensor; CheckpointError names what differs."""
    config_path = folder / "config.json"
    config = read_config(config_path)
    for key, field in CONFIG_FIELDS.items():
        if config.get(key) != getattr(claimed, field):
            raise CheckpointError(
                f"{config_path}: {key} is {config.get(key)!r}, but {claimed.name} has {getattr(claimed, field)}"
            )
    method = (config.get("quantization_config") or {}).get("quant_method")
    if method != "mxfp4":
        raise CheckpointError(f"{config_path}: quantization_config.quant_method is {method!r}; the engine loads mxfp4")
    stored = read_tensors(folder)
    expected = expected_tensors(claimed)
    for name, spec in expected.items():
        found = stored.get(name)
        if found is None:
            raise CheckpointError(_missing(name, stored))
        if found.spec != spec:
            where = f"tensor {name} in {found.file.name}"
            raise CheckpointError(f"{where}: {spec} expected for {claimed.name}, found {found.spec}")
    unexpected = sorted(set(stored) - set(expected))
    if unexpected:
        more = f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else ""
        where = f"tensor {unexpected[0]} in {stored[unexpected[0]].file.name}"
        raise CheckpointError(f"{where}: not part of {claimed.name}{more}")
    return Checkpoint(folder, claimed, stored)


def _missing(name: str, stored: Mapping[str, StoredTensor]) -> str:
    for projection in EXPERT_PROJECTIONS:
        dense = name.removesuffix("_blocks").removesuffix("_scales")
        if dense.endswith(projection) and dense in stored:
            return (
                f"tensor {name} missing: the checkpoint holds {dense} ({stored[dense].spec}), its experts not in "
                "MXFP4; the engine loads MXFP4 expert blocks and scales, as openai/gpt-oss-120b and -20b ship them"
            )
    return f"tensor {name} missing"


def read_tensors(folder: Path) -> dict[str, StoredTensor]:
    """Every tensor's dtype, shape and place in the folder's shards, from their headers, each checked."""
    index_path = folder / INDEX
    if index_path.is_file():
        try:
            weight_map = json.loads(index_path.read_text())["weight_map"]
        except (OSError, json.JSONDecodeError, KeyError, TypeError) as err:
            raise CheckpointError(f"{index_path}: not a safetensors index with a weight_map ({err!r})") from None
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{index_path}: weight_map must map tensors to files")
        shards = sorted(set(weight_map.values()))
    elif (folder / SINGLE).is_file():
        weight_map, shards = None, [SINGLE]
    else:
        raise CheckpointError(f"{folder}: neither {INDEX} nor {SINGLE}")
    tensors: dict[str, StoredTensor] = {}
    for shard in shards:
        if not isinstance(shard, str) or Path(shard).name != shard or not shard.endswith(".safetensors"):
            raise CheckpointError(f"{index_path}: {shard!r} is not a .safetensors file of the folder")
        for tensor in _shard_tensors(folder / shard):
            if tensor.name in tensors:
                raise CheckpointError(f"tensor {tensor.name}: in both {tensors[tensor.name].file.name} and {shard}")
            if weight_map is not None and weight_map.get(tensor.name) != shard:
                listed = weight_map.get(tensor.name)
                raise CheckpointError(f"tensor {tensor.name}: in {shard}, but {INDEX} puts it in {listed!r}")
            tensors[tensor.name] = tensor
    if weight_map is not None and set(weight_map) - set(tensors):
        absent = sorted(set(weight_map) - set(tensors))[0]
        raise CheckpointError(f"tensor {absent}: {INDEX} puts it in {weight_map[absent]}, which does not hold it")
    return tensors


def _shard_tensors(path: Path) -> list[StoredTensor]:
    """The tensors of one safetensors file, their byte ranges checked against the file."""
    try:
        size = path.stat().st_size
        with path.open("rb") as shard:
            (length,) = struct.unpack("<Q", shard.read(8).ljust(8, b"\0"))
            if not 0 < length <= min(MOST_HEADER_BYTES, size - 8):
                raise CheckpointError(f"{path.name}: a header of {length} bytes in a file of {size}: not safetensors")
            header = json.loads(shard.read(length))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path.name}: not a readable safetensors file ({err})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path.name}: the header must be a JSON object")
    data_start, data_bytes = 8 + length, size - 8 - length
    tensors, ranges = [], []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        spec, (begin, end) = _entry(path, name, entry)
        if end - begin != math.prod(spec.shape) * ITEM_BYTES[spec.dtype] or end > data_bytes:
            raise CheckpointError(f"tensor {name} in {path.name}: bytes {begin}..{end} do not hold {spec} in its file")
        tensors.append(StoredTensor(name, spec, path, data_start + begin))
        ranges.append((begin, end, name))
    ranges.sort()
    for (_, end, first), (begin, _, second) in zip(ranges, ranges[1:]):
        if begin < end:
            raise CheckpointError(f"tensors {first} and {second} in {path.name}: their bytes overlap")
    return tensors


def _entry(path: Path, name: str, entry: Any) -> tuple[TensorSpec, tuple[int, int]]:
    where = f"tensor {name} in {path.name}"
    if not isinstance(entry, dict):
        raise CheckpointError(f"{where}: its header entry must be an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in ITEM_BYTES:
        raise CheckpointError(f"{where}: unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(_is_size(d) for d in shape):
        raise CheckpointError(f"{where}: shape must be a list of sizes; got {shape!r}")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_size(o) for o in offsets):
        raise CheckpointError(f"{where}: data_offsets must be [begin, end]; got {offsets!r}")
    if offsets[0] > offsets[1]:
        raise CheckpointError(f"{where}: data_offsets {offsets} end before they begin")
    return TensorSpec(dtype, tuple(shape)), (offsets[0], offsets[1])


def _is_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def bf16_to_float32(stored: np.ndarray) -> np.ndarray:
    """BF16 values stored as uint16 (their top 16 bits of float32), as float32."""
    return (stored.astype(np.uint32) << 16).view(np.float32)


def dequantise_mxfp4(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """MXFP4 `blocks` [..., groups, 16] and E8M0 `scales` [..., groups] as float32 [..., groups * 32]."""
    if blocks.shape[:-1] != scales.shape or blocks.shape[-1] != MXFP4_GROUP // 2:
        raise ValueError(f"blocks {blocks.shape} and scales {scales.shape} are not one MXFP4 tensor")
    codes = np.stack([blocks & 0x0F, blocks >> 4], axis=-1).reshape(*scales.shape, MXFP4_GROUP)
    values = FP4_E2M1[codes] * np.exp2(scales.astype(np.float32) - 127)[..., None]
    return values.reshape(*scales.shape[:-1], scales.shape[-1] * MXFP4_GROUP)
