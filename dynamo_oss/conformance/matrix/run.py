"""Every cell asked several times, side by side, and what held tabulated.

Each run of a cell gets its own nonce in the prompt, so a repeat is a new question (a model's
answers, and the mocker's, are seeded by the prompt): a property that holds 2 times in 3 is a
flaky parser, which one run would hide.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from pydantic import BaseModel

from dynamo_oss.conformance.matrix.cells import Cell, every_cell
from dynamo_oss.conformance.matrix.exchange import Answer, clients, exchange
from dynamo_oss.conformance.matrix.properties import NOT_ASKED, PROPERTIES


QUOTED = re.compile(r"'[^']*'")  # the text a reason quotes, which differs run by run


class Tally(BaseModel):
    held: int = 0
    asked: int = 0
    reasons: list[str] = []  # each distinct reason it failed

    def count(self, judgement: str | None) -> None:
        if judgement == NOT_ASKED:
            return
        self.asked += 1
        if judgement is None:
            self.held += 1
        elif judgement not in self.reasons:
            self.reasons.append(judgement)


class CellResult(BaseModel):
    cell: Cell
    runs: int
    tallies: dict[str, Tally]

    @property
    def failed(self) -> bool:
        return any(tally.held < tally.asked for tally in self.tallies.values())


def run_matrix(
    base_url: str,
    model: str,
    api_key: str,
    repeat: int,
    concurrency: int,
    timeout_s: float = 300,
    progress: Callable[[int, int], None] | None = None,
) -> list[CellResult]:
    both = clients(base_url, api_key, timeout_s)
    cells = every_cell()
    runs = [(cell, f"{uuid.uuid4().hex[:10]}-{n}") for n in range(repeat) for cell in cells]
    results = {
        cell: CellResult(cell=cell, runs=repeat, tallies={name: Tally() for name in PROPERTIES}) for cell in cells
    }
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        answers = pool.map(lambda run: (run[0], exchange(both, run[0], model, run[1])), runs)
        for done, (cell, answer) in enumerate(answers, 1):
            _judge(results[cell], answer)
            if progress:
                progress(done, len(runs))
    return list(results.values())


def _judge(result: CellResult, answer: Answer) -> None:
    for name, judge in PROPERTIES.items():
        judgement = judge(result.cell, answer)
        if answer.refused and judgement != NOT_ASKED:
            judgement = f"request failed: {answer.refused}"
        result.tallies[name].count(judgement)


def markdown_table(results: list[CellResult]) -> str:
    """One row per cell: `3/3` held, `2/3 ✗` failed in some runs, `-` not asked; then the reasons."""
    names = list(PROPERTIES)
    lines = [
        "| API | stream | tool choice | output | effort | " + " | ".join(names) + " |",
        "|---|---|---|---|---|" + "---|" * len(names),
    ]
    for result in results:
        cell = result.cell
        marks = [_mark(result.tallies[name]) for name in names]
        lines.append(
            f"| {cell.api} | {'yes' if cell.stream else 'no'} | {cell.tool_choice} | {cell.output} | "
            f"{cell.effort} | " + " | ".join(marks) + " |"
        )
    failed = [result for result in results if result.failed]
    lines.append("")
    lines.append(f"{len(results) - len(failed)} of {len(results)} combinations held every property in every run.")
    lines.extend(_reasons(failed))
    return "\n".join(lines)


def _reasons(failed: list[CellResult]) -> list[str]:
    """Each distinct reason once, with how many combinations gave it and a few of them: a refused
    request fails every property of its cell for one reason."""
    where: dict[str, tuple[str, list[str]]] = {}  # reason with its quotes elided -> (an example, cells)
    for result in failed:
        for name, tally in result.tallies.items():
            for reason in tally.reasons:
                reason = reason if reason.startswith("request failed") else f"{name}: {reason}"
                example, cells = where.setdefault(QUOTED.sub("'…'", reason), (reason, []))
                if result.cell.label() not in cells:
                    cells.append(result.cell.label())
    return [
        f"- {example} ({len(cells)} combination{'s' * (len(cells) > 1)}: {', '.join(cells[:3])}"
        f"{', ...' if len(cells) > 3 else ''})"
        for example, cells in where.values()
    ]


def _mark(tally: Tally) -> str:
    if not tally.asked:
        return "-"
    return f"{tally.held}/{tally.asked}" + ("" if tally.held == tally.asked else " ✗")
