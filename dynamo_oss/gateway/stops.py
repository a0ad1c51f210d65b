"""Stop sequences on the answer's text, never on the reasoning (gpt-oss reasons before it answers),
for the APIs whose answers the gateway builds: text that may begin a stop sequence is held back
until it cannot; a match ends the answer before the stop sequence, which the client never sees."""

from __future__ import annotations


class StopSequences:
    def __init__(self, stops: list[str]) -> None:
        self.stops = [stop for stop in stops if stop]
        self.hold = max((len(stop) for stop in self.stops), default=1) - 1
        self.held = ""  # answer text that may begin a stop sequence

    def push(self, text: str) -> tuple[str, str | None]:
        """The answer's next text: (what may go out now, the stop sequence it met, if any)."""
        if not self.stops:
            return text, None
        held = self.held + text
        found = [(held.find(stop), stop) for stop in self.stops if stop in held]
        if found:  # the match that ends first, as if the text came a character at a time: however it was cut
            at, stop = min(found, key=lambda match: (match[0] + len(match[1]), match[0]))
            self.held = ""
            return held[:at], stop
        keep = min(self.hold, len(held))
        self.held = held[len(held) - keep :] if keep else ""
        return held[: len(held) - keep], None

    def flush(self) -> str:
        """What was held back, once the answer's text ends without a stop sequence."""
        held, self.held = self.held, ""
        return held
