"""The GPUs the performance model knows: memory, bandwidths and dense tensor rates.

Every number is a published datasheet figure, dense tensor rates without sparsity:
NVIDIA's H100 SXM datasheet (80 GB at 3.35 TB/s; 989 BF16 / 1,979 FP8 TFLOP/s; NVLink
900 GB/s), H200 datasheet (141 GB at 4.8 TB/s; same rates and NVLink), DGX B200 and
B200 datasheets (180 GB at 8 TB/s; 2,250 / 4,500 / 9,000 BF16 / FP8 / FP4 TFLOP/s;
NVLink 5 at 1.8 TB/s) and GB200 NVL72 datasheet (about 186 GB at 8 TB/s per GPU;
2,500 / 5,000 / 10,000 TFLOP/s; 72 GPUs in one NVLink domain). The exponential units' rate, which bounds
attention's softmax, is 16 results per SM and clock on Hopper and Blackwell alike (CUDA C++ Programming
Guide, arithmetic instruction throughput; FlashAttention-4, Together AI, 2026: "the SFU count ... remains
unchanged" from H100 to B200), where the dense BF16 tensor cores do 4,096 FLOPs per SM and clock on Hopper
and 8,192 on Blackwell: so it is the BF16 peak times 16 / 4,096 or 16 / 8,192. How much
of these peaks an engine reaches is not a hardware fact: it lives in the efficiency
factors of `costs.Factors` (measured ones for the H200 in hopper_measured.json).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

HardwareName = Literal["h100", "h200", "b200", "gb200"]
ComputeDtype = Literal["bf16", "fp8", "fp4"]


class Hardware(BaseModel):
    """One GPU as the cost model sees it."""

    model_config = ConfigDict(frozen=True)

    name: HardwareName
    label: str
    hbm_bytes: float = Field(description="HBM capacity per GPU, bytes")
    hbm_bandwidth: float = Field(description="HBM bandwidth per GPU, bytes/s")
    tensor_flops: dict[ComputeDtype, float] = Field(
        description="dense tensor-core peak per GPU, FLOP/s, per input precision"
    )
    nvlink_bandwidth: float = Field(
        description="NVLink bandwidth per GPU and direction, bytes/s (half the datasheet's bidirectional figure)"
    )
    nvlink_domain: int = Field(description="GPUs that reach each other over NVLink")
    nic_bandwidth: float = Field(description="network bandwidth per GPU, bytes/s")
    exp_rate: float = Field(
        description="exponentials per second per GPU (the SFUs' exp2), which softmax needs one of per score"
    )

    def flops(self, dtype: ComputeDtype) -> float:
        if dtype not in self.tensor_flops:
            raise ValueError(f"{self.label} has no {dtype} tensor cores")
        return self.tensor_flops[dtype]

    @property
    def has_fp4(self) -> bool:
        return "fp4" in self.tensor_flops


_TB = 1e12
_NIC_400G = 400e9 / 8  # one 400 Gb/s ConnectX-7 NIC per GPU, as in DGX H100/H200/B200 systems
_EXP_PER_SM_CLOCK = 16  # the SFUs' exp2 results per SM and clock (module docstring)
_HOPPER_BF16_PER_SM_CLOCK, _BLACKWELL_BF16_PER_SM_CLOCK = 4096, 8192  # dense BF16 tensor FLOPs per SM and clock

H100 = Hardware(
    name="h100",
    label="H100 SXM",
    hbm_bytes=80e9,
    hbm_bandwidth=3.35 * _TB,
    tensor_flops={"bf16": 989e12, "fp8": 1979e12},
    nvlink_bandwidth=450e9,
    nvlink_domain=8,
    nic_bandwidth=_NIC_400G,
    exp_rate=989e12 * _EXP_PER_SM_CLOCK / _HOPPER_BF16_PER_SM_CLOCK,
)
H200 = H100.model_copy(update={"name": "h200", "label": "H200", "hbm_bytes": 141e9, "hbm_bandwidth": 4.8 * _TB})
B200 = Hardware(
    name="b200",
    label="B200",
    hbm_bytes=180e9,
    hbm_bandwidth=8 * _TB,
    tensor_flops={"bf16": 2250e12, "fp8": 4500e12, "fp4": 9000e12},
    nvlink_bandwidth=900e9,
    nvlink_domain=8,
    nic_bandwidth=_NIC_400G,
    exp_rate=2250e12 * _EXP_PER_SM_CLOCK / _BLACKWELL_BF16_PER_SM_CLOCK,
)
GB200 = B200.model_copy(
    update={
        "name": "gb200",
        "label": "GB200 NVL72",
        "hbm_bytes": 186e9,
        "tensor_flops": {"bf16": 2500e12, "fp8": 5000e12, "fp4": 10000e12},
        "nvlink_domain": 72,
        "exp_rate": 2500e12 * _EXP_PER_SM_CLOCK / _BLACKWELL_BF16_PER_SM_CLOCK,
    }
)

HARDWARE: dict[str, Hardware] = {h.name: h for h in (H100, H200, B200, GB200)}
