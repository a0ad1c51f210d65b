"""The mocker's side of the suite: each case's harmony completion as a response-replay trace row.

`dynamo serve GRAPH --engine mocker --mocker-responses TRACE` then answers each case's
request (it carries `output_replay_id:<case>`) with exactly these tokens, as a gpt-oss
model would emit them.
"""

from __future__ import annotations

import json
from pathlib import Path

from dynamo_oss.assets.cache import build_once, content_version, resolve_cache_root
from dynamo_oss.conformance.cases import CASES, Case
from dynamo_oss.conformance.reference import harmony_encoding

TRACE_FILE = "conformance.jsonl"


def replay_annotation(case_name: str) -> dict:
    """The nvext field that makes Dynamo's mocker replay a case's completion (ignored elsewhere)."""
    return {"nvext": {"annotations": [f"output_replay_id:{case_name}"]}}


def replay_trace() -> str:
    """One JSONL row per replayed case: request_id, output_length, output_token_ids. Built once per
    content version of the cases, as the model folder is: encoding them loads harmony's encoding, a
    third of a CPU-second that every `dynamo serve --engine mocker` would pay."""
    replayed = [case for case in CASES if case.replay is not None]
    version = content_version(*(f"{case.name}\0{case.replay}" for case in replayed))
    folder = build_once(
        resolve_cache_root() / f"replay-{version}", lambda tmp: _write_trace(tmp / TRACE_FILE, replayed)
    )
    return (folder / TRACE_FILE).read_text()


def _write_trace(path: Path, replayed: list[Case]) -> None:
    encoding = harmony_encoding()
    rows = []
    for case in replayed:
        tokens = encoding.encode(case.replay, allowed_special="all")
        rows.append(json.dumps({"request_id": case.name, "output_length": len(tokens), "output_token_ids": tokens}))
    path.write_text("".join(row + "\n" for row in rows))


def write_replay_trace(path: Path) -> Path:
    path.write_text(replay_trace())
    return path
