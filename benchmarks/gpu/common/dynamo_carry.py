"""Pack Dynamo's runtime wheel small enough to travel with a device call, and unpack it there.

    python -m benchmarks.gpu.common.dynamo_carry pack WHEEL OUT.tar.xz    # here
    python3 -m benchmarks.gpu.common.dynamo_carry unpack OUT.tar.xz SITE  # there, SITE then on PYTHONPATH

Why: ai-dynamo-runtime 1.6.0's wheel is 71 MiB, over the 64 MiB a call carries; its extension
`dynamo/_core.abi3.so` keeps its symbol tables. Stripped (`strip --strip-unneeded`) and the unpacked
wheel compressed with xz it is about 38 MB (../shared/facts/performance.md, the last section). The
other wheels Dynamo's Python side needs on the device image (ai-dynamo, pydantic and pydantic-core,
annotated-types, typing-inspection, msgspec, pyzmq) travel as they are and install with pip there.
"""

from __future__ import annotations

import argparse
import subprocess
import tarfile
import tempfile
import zipfile
from pathlib import Path

EXTENSION_SUFFIX = ".so"


def pack(wheel: Path, out: Path) -> int:
    """The wheel's files, its extensions stripped, as one .tar.xz; its size in bytes."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(root)
        for extension in root.rglob(f"*{EXTENSION_SUFFIX}"):
            subprocess.run(["strip", "--strip-unneeded", str(extension)], check=True)
        with tarfile.open(out, "w:xz", preset=9) as tar:
            for path in sorted(root.iterdir()):
                tar.add(path, arcname=path.name)
    return out.stat().st_size


def unpack(archive: Path, site: Path) -> None:
    site.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "r:xz") as tar:
        tar.extractall(site, filter="data")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    packing = verbs.add_parser("pack", help="strip and compress the runtime wheel (here)")
    packing.add_argument("wheel", type=Path)
    packing.add_argument("out", type=Path)
    unpacking = verbs.add_parser("unpack", help="unpack it into a folder for PYTHONPATH (on the device)")
    unpacking.add_argument("archive", type=Path)
    unpacking.add_argument("site", type=Path)
    args = parser.parse_args()
    if args.verb == "pack":
        print(f"{args.out}: {pack(args.wheel, args.out) / 1e6:.1f} MB")
    else:
        unpack(args.archive, args.site)


if __name__ == "__main__":
    main()
