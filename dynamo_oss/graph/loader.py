"""Reading a graph file: YAML -> validated GraphSpec, with every error named by its field path.

Engine configuration files are read by their engine (dynamo_oss.engines) when the deployment
is built, not here: only the engine knows what its file may say.
"""

from __future__ import annotations

import difflib
import typing
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from dynamo_oss.graph.errors import GraphError, Problem
from dynamo_oss.graph.schema import GraphSpec, PoolSection


class Graph(BaseModel):
    """A validated graph and the file it came from (relative paths resolve against its folder)."""

    spec: GraphSpec
    source: Path

    def resolve(self, relative: Path) -> Path:
        return relative if relative.is_absolute() else (self.source.parent / relative).resolve()

    def engine_args_file(self, pool: PoolSection) -> Path | None:
        return self.resolve(pool.engine_args) if pool.engine_args is not None else None


def load_graph(path: Path) -> Graph:
    """Read and validate a graph file; raise GraphError listing every problem found."""
    source = str(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise GraphError(source, [Problem(path="file", message="not found")]) from None
    except yaml.YAMLError as err:
        raise GraphError(source, [Problem(path="file", message=f"not valid YAML: {err}")]) from None
    if not isinstance(raw, dict):
        raise GraphError(source, [Problem(path="file", message="expected a mapping of sections at the top level")])
    try:
        spec = GraphSpec.model_validate(raw)
    except ValidationError as err:
        raise GraphError(source, [_problem(error) for error in err.errors()]) from None
    graph = Graph(spec=spec, source=path.resolve())
    problems = _missing_model_files(graph)
    if problems:
        raise GraphError(source, problems)
    return graph


def _missing_model_files(graph: Graph) -> list[Problem]:
    """A local model must be a checkout the frontend can read: config and tokenizer at least."""
    if graph.spec.model.path is None:
        return []
    folder = graph.resolve(graph.spec.model.path)
    if not folder.is_dir():
        return [Problem(path="model.path", message=f"folder not found: {folder}")]
    missing = [name for name in ("config.json", "tokenizer.json") if not (folder / name).is_file()]
    if missing:
        return [
            Problem(
                path="model.path",
                message=f"{folder} has no {' or '.join(missing)}: expected a Hugging Face checkout of the model",
            )
        ]
    return []


def _problem(error: dict) -> Problem:
    """Turn one pydantic error into 'field.path: what was wrong, what was expected'."""
    loc = [str(part) for part in error["loc"] if not _is_union_tag(part)]
    path = ".".join(loc) or "file"
    if error["type"] == "extra_forbidden":
        return Problem(path=path, message=_unknown_key_message(loc))
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] not in ("value_error", "missing"):
        message += f" (got {error['input']!r})"
    return Problem(path=path, message=message)


def _is_union_tag(part: object) -> bool:
    """Discriminated unions put the tag ('embedded', 'external') into the location; it is no field."""
    return part in ("embedded", "external")


def _unknown_key_message(loc: list[str]) -> str:
    allowed = _allowed_keys(loc[:-1])
    message = "unknown key"
    if allowed:
        close = difflib.get_close_matches(loc[-1], allowed, n=1)
        if close:
            message += f' (did you mean "{close[0]}"?)'
        message += f"; expected one of: {', '.join(allowed)}"
    return message


def _allowed_keys(parent: list[str]) -> list[str]:
    """The field names of the section at `parent`, found by walking the schema's annotations."""
    model: type[BaseModel] | None = GraphSpec
    for part in parent:
        field = model.model_fields.get(part) if model else None
        model = _section_type(field.annotation) if field else None
    return list(model.model_fields) if model else []


def _section_type(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    sections = [arg for arg in typing.get_args(annotation) if _section_type(arg)]
    return _section_type(sections[0]) if len(sections) == 1 else None
