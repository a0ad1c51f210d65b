"""An engine configuration file read into its typed model, with an error that names the key."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from dynamo_oss.engines import EngineArgsError

Args = TypeVar("Args", bound=BaseModel)


def read_args_file(path: Path, model: type[Args], what: str) -> Args:
    """`path` (YAML) as `model`; EngineArgsError names the file, the key, the rule and the value given.
    `what` says what the file should hold ("gptoss engine arguments")."""
    if not path.is_file():
        raise EngineArgsError(f"file not found: {path}")
    try:
        loaded = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise EngineArgsError(f"{path} is not valid YAML: {err}") from None
    if not isinstance(loaded, dict):
        raise EngineArgsError(f"{path} must hold a mapping of {what}")
    try:
        return model.model_validate(loaded)
    except ValidationError as err:
        first = err.errors()[0]
        if not first["loc"]:  # a rule between keys: its message names them, the input is the whole file
            raise EngineArgsError(f"{path.name}: {first['msg']}") from None
        where = ".".join(str(part) for part in first["loc"])
        raise EngineArgsError(f"{path.name}: {where}: {first['msg']} (got {first['input']!r})") from None
