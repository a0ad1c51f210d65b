"""The GPU study's CPU-side pieces (benchmarks/gpu/serving/study.py): the event-stream lines its client
reads, the handoff log it summarises point by point, its prompts, and the predictions it sets beside the
served points, tables and plots alike."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

from benchmarks.gpu.serving import study


def test_event_lines_split_at_newlines_only_even_across_reads() -> None:
    async def pieces() -> AsyncIterator[bytes]:
        for piece in (b'data: {"text": "a\xe2\x80\xa8b"}\n', b"\ndata: [DO", b"NE]\r\n\r\n"):
            yield piece

    async def read() -> list[bytes]:
        return [line async for line in study.sse_lines(pieces())]

    lines = asyncio.run(read())
    assert lines[0] == 'data: {"text": "a\u2028b"}'.encode() and json.loads(lines[0][6:])["text"] == "a\u2028b"
    assert [line for line in lines if line] == [lines[0], b"data: [DONE]"]


def test_each_point_reports_only_the_handoffs_logged_since_the_last(tmp_path: Path) -> None:
    log = tmp_path / "decode-handoffs.jsonl"

    def write(ms: float) -> None:
        with log.open("a") as file:
            file.write(json.dumps({"request_id": "r", "bytes": 2**30, "descriptors": 2, "ms": ms}) + "\n")

    seen: dict[str, int] = {}
    for ms in (4.0, 5.0, 6.0):
        write(ms)
    first = study.handoffs_since({"decode": str(log)}, seen)
    assert first["count"] == 3 and first["ms_p50"] == 5.0 and first["mib_p50"] == 1024
    assert first["gb_s_p50"] == 2**30 / 5.0 / 1e6
    assert study.handoffs_since({"decode": str(log)}, seen) == {"count": 0}
    write(10.0)
    assert study.handoffs_since({"decode": str(log)}, seen)["ms_p50"] == 10.0


def test_no_two_prompts_share_a_first_block() -> None:
    prompts = [study.prompt(index, 4096) for index in range(50)]
    assert len({text[:12] for text in prompts}) == 50


def test_a_prediction_alone_writes_its_table_and_plot_for_each_layout(tmp_path: Path) -> None:
    args = type("Args", (), {})()
    args.layout, args.isl, args.osl, args.concurrency = ["agg-2", "disagg-1p1d"], 2048, [32], [1, 2]
    args.trace, args.steps, args.out = None, study.STEPS, tmp_path
    study.predict(args)
    made = json.loads((tmp_path / "predicted-agg-2-vs-disagg-1p1d-2048-32.json").read_text())
    assert [point["concurrency"] for point in made["disagg-1p1d"]["points"]] == [1, 2]
    assert all(point["tok_s_user"] > 0 for point in made["agg-2"]["points"])
    table = (tmp_path / "predicted-agg-2-vs-disagg-1p1d-2048-32.md").read_text()
    assert "Predicted, not measured" in table and "| 2 |" in table
    assert (tmp_path / "predicted-agg-2-vs-disagg-1p1d-2048-32.png").stat().st_size > 10_000
