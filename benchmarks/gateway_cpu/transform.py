"""CPU the gateway's chat transform spends per token, by how many tokens one read from Dynamo's frontend
carries; and what decoding one of Dynamo's completion chunks costs.

Why: run.py measures whole processes under load, where the tokens a read carries depend on how the
host's processes happen to be scheduled. This isolates the transform (gateway/harmony/completion.py's
CompletionAnswer over chat's ChatBuilder): the same answer, its chunks bunched 1, 2, 4, 8 and 16 to a
read, fed in one process, so each figure is the transform's own and the bunching is fixed.

How: an answer of a reasoning message and a final one (about 600 tokens), written as Dynamo 1.6's
frontend streams a completion with `nvext.extra_fields: ["completion_token_ids"]` (a chunk a token,
its fields as a captured stream has them), is fed to a fresh transform ROUNDS times per bunching; the
least CPU time of a round over its tokens is the figure, beside the bytes the client gets per token.
Then one chunk decoded DECODES times with the decoder the transform uses. Writes transform.json and
transform.md beside this file (or STEM.* with --stem); a few seconds:

    uv run python benchmarks/gateway_cpu/transform.py

To measure another commit's transform with this script: `git worktree add /tmp/old COMMIT`, then
`PYTHONPATH=/tmp/old uv run python benchmarks/gateway_cpu/transform.py --stem transform-COMMIT`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as gateway_cpu  # noqa: E402 - run.py beside this file: the host's and the code's description

import dynamo_oss  # noqa: E402
from dynamo_oss.assets import ENCODINGS_ENV, tiktoken_encodings_dir  # noqa: E402

os.environ.setdefault(ENCODINGS_ENV, str(tiktoken_encodings_dir()))

from dynamo_oss.gateway.chat.conversation import conversation  # noqa: E402
from dynamo_oss.gateway.chat.stream import ChatBuilder  # noqa: E402
from dynamo_oss.gateway.harmony.completion import CHUNK, CompletionAnswer  # noqa: E402
from dynamo_oss.gateway.harmony.rendering import RenderCache, encoding, render  # noqa: E402
from dynamo_oss.gateway.protocol.chat import ChatRequest  # noqa: E402

HERE = gateway_cpu.HERE
COMMAND = "uv run python benchmarks/gateway_cpu/transform.py"
TOKENS_PER_READ = (1, 2, 4, 8, 16)
ROUNDS = 200
DECODES = 200_000
ANSWER = (
    "<|channel|>analysis<|message|>"
    + "Let me think about this carefully. " * 20
    + "<|end|><|start|>assistant<|channel|>final<|message|>"
    + "The answer is forty two, and here is why it is so. " * 30
)


def dynamo_chunk(token: int) -> bytes:
    """One event of Dynamo's completion stream for `token`, as its frontend writes it."""
    chunk = {
        "id": "cmpl-5e775fc1-4bb3-4f3e-8c5b-840d5c3f2c5f",
        "choices": [{"text": encoding().decode([token]), "index": 0}],
        "created": 1796199633,
        "model": "openai/gpt-oss-120b",
        "system_fingerprint": None,
        "object": "text_completion",
        "usage": None,
        "nvext": {"completion_token_ids": [token]},
    }
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


def per_token(events: list[bytes], per_read: int) -> tuple[float, float]:
    """(the least CPU us a token over ROUNDS answers, bytes the client gets a token) at `per_read` events a read."""
    request = ChatRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    )
    prompt = render(conversation(request), RenderCache())
    reads = [b"".join(events[start : start + per_read]) for start in range(0, len(events), per_read)]
    least, written = float("inf"), 0
    for _ in range(ROUNDS):
        answer = CompletionAnswer(ChatBuilder(request, prompt, streaming=True), True)
        started = time.process_time()
        written = sum(len(answer.feed(read)) for read in reads) + len(answer.end())
        least = min(least, time.process_time() - started)
    return 1e6 * least / len(events), written / len(events)


def decode_us(event: bytes) -> float:
    payload = event[6:].rstrip()
    started = time.process_time()
    for _ in range(DECODES):
        CHUNK.decode(payload)
    return 1e6 * (time.process_time() - started) / DECODES


def source() -> Path:
    """The checkout whose dynamo_oss this process imported (PYTHONPATH may name another than this one)."""
    return Path(dynamo_oss.__file__).resolve().parents[1]


def elsewhere() -> str:
    """What the command line needs to measure the code it measured: `PYTHONPATH=CHECKOUT ` for another one."""
    return "" if source() == HERE.parents[1] else f"PYTHONPATH={source()} "


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stem", type=gateway_cpu.stem_name, help="write STEM.md and STEM.json instead")
    args = parser.parse_args()
    tokens = encoding().encode(ANSWER, allowed_special="all")
    events = [dynamo_chunk(token) for token in tokens]
    rows = []
    for per_read in TOKENS_PER_READ:
        us, written = per_token(events, per_read)
        rows.append({"tokens_per_read": per_read, "us_per_token": round(us, 2), "bytes_per_token": round(written)})
        print(f"  {per_read:2d} tokens a read: {us:5.2f} us a token, {written:4.0f} bytes a token", flush=True)
    settings = {
        "command": elsewhere() + COMMAND + (f" --stem {args.stem}" if args.stem else ""),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host_cpu": gateway_cpu.host_cpu(),
        "python": platform.python_version(),
        "code": gateway_cpu.code_version(source()),
        "answer_tokens": len(tokens),
        "rounds": ROUNDS,
        "decode_us_per_chunk": round(decode_us(events[len(events) // 2]), 3),
    }
    table = "\n".join(f"| {r['tokens_per_read']} | {r['us_per_token']:.2f} | {r['bytes_per_token']} |" for r in rows)
    report = (
        f"Command: `{settings['command']}`\n\n# The chat transform's CPU per token, by tokens a read\n\n"
        f"{settings['host_cpu']}, Python {settings['python']}, {settings['date']}, code {settings['code']}. "
        f"One answer of {len(tokens)} tokens (a reasoning message, then "
        "the final one) as Dynamo's frontend streams a completion, a chunk a token, fed to CompletionAnswer over "
        f"ChatBuilder in one process; the least CPU time of {ROUNDS} rounds over the answer's tokens.\n\n"
        "| tokens a read | transform us/token | bytes to the client a token |\n|---:|---:|---:|\n"
        f"{table}\n\nDecoding one of Dynamo's completion chunks with the transform's decoder (msgspec, the four "
        f"fields the answer reads): {settings['decode_us_per_chunk']} us.\n"
    )
    stem = args.stem or "transform"
    (HERE / f"{stem}.json").write_text(json.dumps({"settings": settings, "rows": rows}, indent=2))
    (HERE / f"{stem}.md").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
