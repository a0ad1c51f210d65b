"""Stop sequences on the answer's text (stops.py): where the answer ends and which sequence ended it do
not depend on how the text was cut into pieces, which a read of many tokens makes larger."""

from __future__ import annotations

import pytest

from dynamo_oss.gateway.stops import StopSequences

TEXT = "xyabcdz"


def run(stops: list[str], pieces: list[str]) -> tuple[str, str | None]:
    sequences = StopSequences(stops)
    sent = []
    for piece in pieces:
        out, stop = sequences.push(piece)
        sent.append(out)
        if stop is not None:
            return "".join(sent), stop
    return "".join(sent) + sequences.flush(), None


@pytest.mark.parametrize("size", [1, 2, 3, 4, len(TEXT)])
def test_overlapping_stops_end_the_answer_at_the_one_that_ends_first_however_the_text_is_cut(size: int) -> None:
    pieces = [TEXT[start : start + size] for start in range(0, len(TEXT), size)]
    assert run(["abcd", "bc"], pieces) == ("xya", "bc")  # "bc" is whole before "abcd" is
    assert run(["bcd", "abcd"], pieces) == ("xy", "abcd")  # both end at d: the one that starts first
    assert run(["q"], pieces) == (TEXT, None)
