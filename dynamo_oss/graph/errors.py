"""One error type for everything wrong with a graph, each problem tied to its field path."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel

from dynamo_oss.catalog.errors import UserError


class Problem(BaseModel):
    """One thing wrong with a graph: where (a dotted field path, or the file) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class GraphError(UserError):
    """A graph that cannot run as written. Raised before any process starts."""

    def __init__(self, source: str, problems: Iterable[Problem]) -> None:
        self.source = source
        self.problems = list(problems)
        super().__init__(str(self))

    def __str__(self) -> str:
        lines = [f"{self.source}: {len(self.problems)} problem(s), nothing was started or written:"]
        lines += [f"  - {problem}" for problem in self.problems]
        return "\n".join(lines)
