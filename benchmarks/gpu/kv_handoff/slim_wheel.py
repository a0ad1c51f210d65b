"""Repack the nixl-cu13 wheel without its `nixl_ep_cu13` expert-parallel modules.

Why: a device call carries at most 64 MiB; the wheel is 59 MB, of which three prebuilt
`nixl_ep_cpp_torch21x` extensions (about 95 MB unpacked) serve only NIXL's MoE all-to-all,
which a KV handoff never imports. Dropping them (and their RECORD lines) leaves a wheel
that pip still installs and verifies.

    python benchmarks/gpu/kv_handoff/slim_wheel.py .whl/nixl_cu13-*.whl
"""

from __future__ import annotations

import argparse
import zipfile
from pathlib import Path

DROPPED_PACKAGE = "nixl_ep_cu13/"


def slim(wheel: Path) -> int:
    """Rewrite `wheel` in place without DROPPED_PACKAGE; return the bytes saved."""
    before = wheel.stat().st_size
    slimmed = wheel.with_suffix(".slim")
    with (
        zipfile.ZipFile(wheel) as source,
        zipfile.ZipFile(slimmed, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as target,
    ):
        for info in source.infolist():
            if info.filename.startswith(DROPPED_PACKAGE):
                continue
            data = source.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                kept = [line for line in data.decode().splitlines() if not line.startswith(DROPPED_PACKAGE)]
                data = ("\n".join(kept) + "\n").encode()
            target.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
    slimmed.replace(wheel)
    return before - wheel.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheels", nargs="+", type=Path)
    for wheel in parser.parse_args().wheels:
        saved = slim(wheel)
        print(f"{wheel}: {wheel.stat().st_size / 1e6:.1f} MB ({saved / 1e6:.1f} MB dropped)")


if __name__ == "__main__":
    main()
