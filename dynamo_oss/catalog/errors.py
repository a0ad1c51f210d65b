"""The one kind of error the `dynamo` command reports without a traceback.

A `UserError` is something the person at the terminal can fix: a graph that cannot run,
a missing binary, a port in use, a bad flag. The command prints its message and exits 2;
anything else that escapes is a bug and keeps its traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


class UserError(Exception):
    """A problem in what the user asked for, explained in the message."""


def read_json_file(model: type[M], path: Path, *, missing: str, kind: str) -> M:
    """A JSON file the project wrote, as `model`; a missing or foreign file is the user's error,
    said with `missing` (what to give instead) or `kind` (what the file should have been)."""
    try:
        return model.model_validate_json(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: not found; {missing}") from None
    except ValidationError as err:
        raise UserError(f"{path}: not {kind} ({err.error_count()} problem(s))") from None
