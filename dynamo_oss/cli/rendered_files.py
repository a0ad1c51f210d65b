"""Files a command renders from code into the repository (dashboards, manifests): written, or
compared with what is there, so a test or CI can say they are stale."""

from __future__ import annotations

from pathlib import Path

from dynamo_oss.catalog.errors import UserError


def write_or_check(rendered: dict[str, str], out: Path, *, check: bool, regenerate: str) -> int:
    """Write each {file name: text} into `out`; with `check`, write nothing and exit 1 when any
    file there differs, naming it and the `regenerate` command."""
    if check:
        stale = [name for name, text in rendered.items() if _read(out / name) != text]
        for name in stale:
            print(f"{out / name}: out of date; run `{regenerate}`")
        return 1 if stale else 0
    if not out.parent.is_dir():
        raise UserError(f"--out: folder not found: {out.parent}")
    out.mkdir(exist_ok=True)
    for name, text in rendered.items():
        (out / name).write_text(text)
        print(f"wrote {out / name}")
    return 0


def _read(path: Path) -> str | None:
    return path.read_text() if path.is_file() else None
