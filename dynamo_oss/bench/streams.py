"""Closed-loop streaming users against an OpenAI endpoint, every request's outcome a JSON line.

Run where the endpoint is reachable (inside a node's namespace, for the multi-node test and
benchmark): `python -m dynamo_oss.bench.streams URL MODEL --out F --until F`. Each user sends a
streaming chat request of exactly `--tokens` output tokens, records when it started and ended, the
tokens it got and the error if any, and sends the next; it stops when the `--until` file exists.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

import openai
from pydantic import BaseModel


class Outcome(BaseModel):
    user: int
    started: float  # time.time() of the request
    ended: float
    tokens: int  # completion tokens in the usage of the last chunk; 0 when it failed first
    error: str | None = None


async def _user(client: openai.AsyncOpenAI, args: argparse.Namespace, user: int, out: Path) -> None:
    while not args.until.exists():
        started, tokens, error = time.time(), 0, None
        try:
            stream = await client.chat.completions.create(
                model=args.model,
                messages=[{"role": "user", "content": f"user {user} at {started}"}],
                max_tokens=args.tokens,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"ignore_eos": True, "min_tokens": args.tokens},
            )
            async for chunk in stream:
                if chunk.usage:
                    tokens = chunk.usage.completion_tokens
        except Exception as failure:  # noqa: BLE001 - every failure is an outcome to record
            error = repr(failure)[:300]
        outcome = Outcome(user=user, started=started, ended=time.time(), tokens=tokens, error=error)
        with out.open("a") as file:
            file.write(outcome.model_dump_json() + "\n")
        if error:
            await asyncio.sleep(args.pause_s)  # as a client backs off


async def _main(args: argparse.Namespace) -> None:
    client = openai.AsyncOpenAI(base_url=args.url, api_key="unused", max_retries=0, timeout=args.timeout_s)
    await asyncio.gather(*(_user(client, args, user, args.out) for user in range(args.users)))


def read_outcomes(path: Path) -> list[Outcome]:
    return [Outcome.model_validate_json(line) for line in path.read_text().splitlines()] if path.exists() else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url", help="the OpenAI base URL, with /v1")
    parser.add_argument("model")
    parser.add_argument("--out", type=Path, required=True, help="JSON lines, one per request")
    parser.add_argument("--until", type=Path, required=True, help="stop once this file exists")
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--timeout-s", type=float, default=60.0, help="a request's limit, as a client's")
    parser.add_argument("--pause-s", type=float, default=0.5, help="a user's pause after a failed request")
    args = parser.parse_args()
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
