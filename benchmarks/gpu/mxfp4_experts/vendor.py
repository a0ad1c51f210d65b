"""Copy the MXFP4 kernel sources out of their PyPI wheels into one folder the device call can carry.

    python -m benchmarks.gpu.mxfp4_experts.vendor WHEEL_DIR OUT_DIR

Why: triton_kernels is not a package of its own on PyPI and the triton repository is too large to
fetch; vLLM 0.33.0's wheel (336 MB, far over a device call's 64 MiB) vendors it as
`vllm/third_party/triton_kernels` (about 360 KB of Python), which runs under the device image's
Triton 3.6. OpenAI's `gpt_oss` 0.0.9 wheel holds the reference Triton model and its attention with
sinks. OUT_DIR gets `triton_kernels/` and `gpt_oss/`; put OUT_DIR on PYTHONPATH there.
Fetch the wheels here with `pip download --no-deps vllm==0.33.0 gpt-oss==0.0.9` (README's platforms).
"""

from __future__ import annotations

import argparse
import zipfile
from pathlib import Path

SOURCES = {
    "vllm-0.33.0-*.whl": ("vllm/third_party/triton_kernels/", "triton_kernels/"),
    "gpt_oss-0.0.9-*.whl": ("gpt_oss/", "gpt_oss/"),
}


def extract(wheel_dir: Path, out: Path) -> list[Path]:
    """Each source folder's .py files under OUT with its new prefix; returns what was written."""
    written = []
    for pattern, (prefix, target) in SOURCES.items():
        (wheel,) = wheel_dir.glob(pattern)
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if name.startswith(prefix) and name.endswith(".py"):
                    path = out / (target + name.removeprefix(prefix))
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(archive.read(name))
                    written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel_dir", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    written = extract(args.wheel_dir, args.out)
    print(f"{len(written)} files, {sum(p.stat().st_size for p in written) / 1e3:.0f} KB under {args.out}")


if __name__ == "__main__":
    main()
