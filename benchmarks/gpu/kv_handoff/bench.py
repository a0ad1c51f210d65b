"""KV handoff through NIXL between two GPUs, one worker process on each, against a plain peer copy.

    python -m benchmarks.gpu.kv_handoff.bench --out DIR

For each setting (UCX environment, NIXL UCX backend parameters, who initiates, how blocks are
described and allocated, block size and element type, requests in flight) a prefill worker on
cuda:0 and a decode worker on cuda:1 move gpt-oss-120b's KV for prompts of 1k to 32k tokens,
and PyTorch's peer copy of the same bytes is measured as the yardstick. Writes DIR/results.json, DIR/results.csv and DIR/logs.txt (the workers' logs,
with UCX's protocol choices), and prints the markdown table RESULTS.md holds.
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.gpu.common.device import device_header
from benchmarks.gpu.common.results import Results, markdown_table
from benchmarks.gpu.kv_handoff import peer_copy
from benchmarks.gpu.kv_handoff.layout import BF16, FP8, BlockLayout
from benchmarks.gpu.kv_handoff.pair import WorkerFailed, run_pair
from benchmarks.gpu.kv_handoff.plan import make_plan
from dynamo_oss.catalog.models import GPT_OSS_120B

TOKENS = [1024, 2048, 4096, 8192, 16384, 32768]
DEVICES = ("cuda:0", "cuda:1")
PAIR_TIMEOUT_S = 120.0
IPC = {"UCX_TLS": "cuda_ipc,cuda_copy,tcp"}


@dataclass(frozen=True)
class Setting:
    name: str
    op: str = "READ"
    mode: str = "per_block"
    allocation: str = "scattered"
    env: dict[str, str] = field(default_factory=dict)
    backend_params: dict[str, str] = field(default_factory=dict)
    parts: int = 1
    block_tokens: int = 32
    element_bytes: int = BF16
    max_tokens: int = TOKENS[-1]  # a slow path is timed on short prompts only, to fit the device call

    def layout(self) -> BlockLayout:
        return BlockLayout.for_model(GPT_OSS_120B, self.block_tokens, self.element_bytes)

    def label(self) -> str:
        dtype = "bf16" if self.element_bytes == BF16 else "fp8"
        extra = f", {self.parts} requests in flight" if self.parts > 1 else ""
        return f"{self.name} | {self.op} | {self.mode} | {self.allocation} | {self.block_tokens} tok {dtype}{extra}"


SETTINGS = [
    Setting("UCX defaults"),
    Setting("UCX defaults", mode="coalesced", allocation="contiguous"),
    Setting("UCX defaults", op="WRITE"),
    Setting("UCX defaults", op="WRITE", mode="coalesced", allocation="contiguous"),
    Setting("UCX defaults", block_tokens=16),
    Setting("UCX defaults", block_tokens=64),
    Setting("UCX defaults", block_tokens=128),
    Setting("UCX defaults", element_bytes=FP8),
    Setting("UCX defaults", parts=4),
    Setting("UCX defaults, 4 NIXL UCX workers", parts=4, backend_params={"num_workers": "4"}),
    Setting("cuda_ipc,cuda_copy,tcp", env=IPC),
    Setting("cuda_ipc,cuda_copy,tcp", env=IPC, allocation="contiguous"),
    Setting("cuda_ipc,cuda_copy,tcp", env=IPC, mode="coalesced", allocation="contiguous"),
    Setting("cuda_ipc + get_zcopy forced on", env={**IPC, "UCX_CUDA_IPC_ENABLE_GET_ZCOPY": "y"}),
    Setting("cuda_ipc + 4 NIXL UCX workers", env=IPC, backend_params={"num_workers": "4"}),
    Setting("cuda_ipc + RNDV get_zcopy from 0 B", env={**IPC, "UCX_RNDV_THRESH": "0", "UCX_RNDV_SCHEME": "get_zcopy"}),
    Setting("no cuda_ipc: tcp,cuda_copy", env={"UCX_TLS": "tcp,cuda_copy"}, max_tokens=4096),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    header = {
        "model": GPT_OSS_120B.name,
        "kv_layers": GPT_OSS_120B.full_attention_layers,
        **device_header(topology=True),
        "peer_copy": {},
    }
    baselines: dict[str, dict[str, float]] = header["peer_copy"]
    results = Results(args.out, header)
    logs: list[str] = []
    for index, setting in enumerate(SETTINGS):
        layout = setting.layout()
        tokens = [t for t in TOKENS if t <= setting.max_tokens]
        for t in tokens:
            key = baseline_key(layout.blocks_for(t), layout.block_bytes)
            if key not in baselines:
                baselines[key] = peer_copy.measure(layout.blocks_for(t), layout.block_bytes)
        plan = make_plan(
            layout,
            tokens,
            setting.allocation,
            setting.mode,
            op=setting.op,
            parts=setting.parts,
            backend_params=setting.backend_params,
        )
        folder = Path(tempfile.mkdtemp(prefix=f"handoff-{index}-"))
        try:
            results = run_pair(plan, folder, DEVICES, {**setting.env, "UCX_PROTO_INFO": "y"}, PAIR_TIMEOUT_S)
        except WorkerFailed as failure:
            results.failures.append(f"{setting}: {failure}")
            results = []
        for result in results:
            peer = baselines[baseline_key(result["blocks"], layout.block_bytes)]
            results.rows.append(
                {
                    "setting": setting.label(),
                    **asdict(setting),
                    "block_bytes": layout.block_bytes,
                    **result,
                    "peer_copy_gbps": peer["contiguous_gbps"],
                    "of_peer_copy": result["gbps"] / peer["contiguous_gbps"],
                }
            )
        for role in ("prefill", "decode"):
            logs.append(f"===== {setting} {role} =====\n" + (folder / f"{role}.log").read_text()[-20000:])
        print(f"{setting.label()}: " + " ".join(f"{r['tokens']}:{r['gbps']:.1f}" for r in results), flush=True)
        results.save()  # after each setting, so a run cut short keeps what it measured
        (args.out / "logs.txt").write_text("\n".join(logs))
    print(table(results.rows, baselines))
    if results.failures:
        print("FAILURES:\n" + "\n".join(results.failures))


def baseline_key(blocks: int, block_bytes: int) -> str:
    return f"{blocks}x{block_bytes}"


def table(rows: list[dict], baselines: dict[str, dict[str, float]]) -> str:
    """GB/s per setting and prompt length, each with its share of a contiguous peer copy of the same bytes."""
    standard = BlockLayout.for_model(GPT_OSS_120B)
    cells = []
    for copy in ("contiguous_gbps", "per_block_gbps"):
        measured = [
            baselines.get(baseline_key(standard.blocks_for(t), standard.block_bytes), {}).get(copy) for t in TOKENS
        ]
        cells.append(
            ["torch peer copy", "-", copy.removesuffix("_gbps"), "-", "32 tok bf16"]
            + ["-" if c is None else f"{c:.0f}" for c in measured]
        )
    for label in dict.fromkeys(r["setting"] for r in rows):
        by_tokens = {r["tokens"]: r for r in rows if r["setting"] == label}
        cells.append(
            label.split(" | ")
            + [
                "-"
                if t not in by_tokens
                else f"{by_tokens[t]['gbps']:.0f} ({by_tokens[t]['of_peer_copy']:.0%})"
                + ("" if by_tokens[t]["intact"] else " CORRUPT")
                for t in TOKENS
            ]
        )
    headers = ["setting", "op", "descriptors", "blocks", "block", *(f"{t // 1024}k" for t in TOKENS)]
    return markdown_table(headers, cells, left=5)


if __name__ == "__main__":
    main()
