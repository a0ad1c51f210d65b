"""Streaming users for the autoscaling tests: load that rises and falls while a test watches the pools."""

from __future__ import annotations

import asyncio
import threading
import time

import openai

from tests.support.graphs import exact_stream


class Load:
    """Streaming users in a thread of their own: `users` closed-loop ones, and open-loop arrivals at
    `per_second`; both can change while it runs."""

    def __init__(self, endpoint: str, tokens: int, prompt_words: int = 0, api_key: str = "unused") -> None:
        self.endpoint, self.tokens, self.api_key, self.users, self.per_second = endpoint, tokens, api_key, 0, 0.0
        self.padding = " hello" * prompt_words
        self.completed: list[int] = []
        self.failures: list[str] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()))

    async def _run(self) -> None:
        client = openai.AsyncOpenAI(base_url=self.endpoint, api_key=self.api_key, max_retries=0, timeout=120)
        running: set[asyncio.Task] = set()
        users: set[asyncio.Task] = set()
        next_arrival = time.monotonic()
        while not self.stopping.is_set():
            while len(users) < self.users:
                self._start(client, users)
            while self.per_second and time.monotonic() >= next_arrival:
                self._start(client, running)
                next_arrival += 1 / self.per_second
            if not self.per_second:
                next_arrival = time.monotonic()
            await asyncio.sleep(0.05)  # how often arrivals and the user count are looked at
        await asyncio.gather(*running, *users)

    def _start(self, client: openai.AsyncOpenAI, tasks: set[asyncio.Task]) -> None:
        task = asyncio.create_task(self._request(client, len(tasks)))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def _request(self, client: openai.AsyncOpenAI, index: int) -> None:
        try:
            content = f"user {index} at {time.monotonic()}{self.padding}"
            stream = await client.chat.completions.create(**exact_stream(content, self.tokens))
            usage = [chunk.usage.completion_tokens async for chunk in stream if chunk.usage]
            self.completed += usage
        except Exception as error:  # noqa: BLE001 - every failure is the test's business
            self.failures.append(repr(error))
