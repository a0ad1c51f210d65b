"""One run's results on disk: results.json (header, rows, extra tables, failures) and a CSV per table.

Why: a device call can be cut short at its limit, so everything is rewritten after each case and a
run keeps what it measured; one failing case (out of memory, a kernel refused) is recorded with its
traceback and the run goes on. `markdown_table` renders the tables RESULTS.md holds.
"""

from __future__ import annotations

import csv
import json
import traceback
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class Results:
    """Rows (results.csv), named extra tables (NAME.csv) and failures, all in results.json too."""

    def __init__(self, out: Path, header: dict, tables: Sequence[str] = (), lead: Sequence[str] = ()) -> None:
        self.out, self.header, self.lead = out, header, tuple(lead)
        self.rows: list[dict] = []
        self.tables: dict[str, list[dict]] = {name: [] for name in tables}
        self.failures: list[str] = []

    def add(self, row: dict) -> None:
        self.rows.append(row)
        self.save()

    def attempt(self, label: str, work: Callable[[], T], after_failure: Callable[[], None] | None = None) -> T | None:
        """`work()`, or None with the failure recorded (and `after_failure()` run, e.g. to free memory)."""
        try:
            return work()
        except Exception:  # noqa: BLE001 - one bad case must not lose the rest of a one-shot run
            self.failures.append(f"{label}: {traceback.format_exc(limit=4)}")
            print("FAILED", self.failures[-1], flush=True)
            if after_failure is not None:
                after_failure()
            self.save()
            return None

    def save(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        document = {**self.header, "rows": self.rows, **self.tables, "failures": self.failures}
        (self.out / "results.json").write_text(json.dumps(document, indent=1, default=str))
        write_csv(self.out / "results.csv", self.rows, self.lead)
        for name, rows in self.tables.items():
            write_csv(self.out / f"{name}.csv", rows)


def write_csv(path: Path, rows: list[dict], lead: Sequence[str] = ()) -> None:
    """Columns: `lead` first, then every other key in the order rows first show it; dicts and lists as JSON."""
    if not rows:
        return
    fields = list(dict.fromkeys([*lead, *(key for row in rows for key in row)]))
    with path.open("w", newline="") as sink:
        writer = csv.DictWriter(sink, fields)
        writer.writeheader()
        writer.writerows(
            {k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in row.items()} for row in rows
        )


def markdown_table(headers: Sequence[str], cells: Iterable[Sequence[object]], left: int = 1) -> str:
    """A markdown table: the first `left` columns left-aligned (labels), the rest right-aligned (numbers)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * left + "---:|" * (len(headers) - left)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in cells]
    return "\n".join(lines)
