"""Repack the nixl-cu13 wheel with only what a KV handoff over UCX loads.

Why: a device call carries at most 64 MiB; the wheel is 59 MB. Dropped: the `nixl_ep_cu13`
expert-parallel extensions (about 95 MB unpacked, NIXL's MoE all-to-all, which a KV handoff never
imports); every NIXL backend plugin but UCX (object stores, GDS, libfabric, ...) and the telemetry
exporters, which NIXL loads only when asked for; UCX's InfiniBand transports and perftest modules
(a handoff on one host goes over CUDA IPC and shared memory); then every bundled library that nothing
kept needs (ELF NEEDED entries, followed through). The RECORD lines go with them, so pip still installs
and verifies the wheel.

    python benchmarks/gpu/kv_handoff/slim_wheel.py .whl/nixl_cu13-*.whl
"""

from __future__ import annotations

import argparse
import re
import subprocess
import tempfile
import zipfile
from pathlib import Path

DROPPED_PACKAGE = "nixl_ep_cu13/"
PACKAGE = "nixl_cu13/"  # its Python modules and extensions: kept, and followed
LIBS = "nixl_cu13.libs/"
PLUGIN = re.compile(r"(^nixl_cu13\.libs/nixl/|/plugins/)lib(plugin|telemetry|trace)_")  # both copies of each
KEPT_PLUGINS = ("libplugin_UCX.so",)
DROPPED_UCX_MODULES = re.compile(r"libuct_ib|libucx_perftest")


def needed(elf: bytes) -> set[str]:
    """The shared libraries an ELF file names as NEEDED."""
    with tempfile.NamedTemporaryFile() as file:
        file.write(elf)
        file.flush()
        dynamic = subprocess.run(["readelf", "-d", file.name], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic))


def kept_names(archive: zipfile.ZipFile) -> set[str]:
    """The wheel's files a UCX handoff needs: its package and every file that is no library, the UCX plugin
    and modules, and the bundled libraries those need, followed through."""
    names = [info.filename for info in archive.infolist() if not info.filename.startswith(DROPPED_PACKAGE)]
    libraries = [name for name in names if name.endswith(".so") or ".so." in name]
    bundled = {Path(name).name: name for name in libraries if name.count("/") == 1 and not name.startswith(PACKAGE)}
    roots = [name for name in names if name not in libraries or name.startswith(PACKAGE)]
    roots += [name for name in libraries if PLUGIN.search(name) and Path(name).name in KEPT_PLUGINS]
    roots += [name for name in libraries if name.startswith(LIBS + "ucx/") and not DROPPED_UCX_MODULES.search(name)]
    kept, queue = set(roots), [name for name in roots if ".so" in name]
    while queue:
        for library in needed(archive.read(queue.pop())):
            if library in bundled and bundled[library] not in kept:
                kept.add(bundled[library])
                queue.append(bundled[library])
    return kept


def slim(wheel: Path) -> int:
    """Rewrite `wheel` in place with only `kept_names`; return the bytes saved."""
    before = wheel.stat().st_size
    slimmed = wheel.with_suffix(".slim")
    with (
        zipfile.ZipFile(wheel) as source,
        zipfile.ZipFile(slimmed, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as target,
    ):
        kept = kept_names(source)
        for info in source.infolist():
            if info.filename not in kept:
                continue
            data = source.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines()
                data = ("\n".join(line for line in lines if line.split(",")[0] in kept) + "\n").encode()
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
