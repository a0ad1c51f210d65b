"""What a client on another host meets at a gateway with API keys and tight connection limits.

Run by tests/gateway/test_keys.py inside the client's network namespace: `python edge_probe.py
HOST PORT KEY`. Prints one JSON object of observations; the test judges them. The limits it expects:
headers and body within 2 s, keep-alive idle 3 s, answers taken within 2 s, 8 connections, bodies
of 1 MiB and 1 MiB of them held at once, one generation request in flight.
"""

from __future__ import annotations

import json
import socket
import sys
import time

import httpx

MODEL = "openai/gpt-oss-20b"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


def raw(host: str, port: int, data: bytes, wait_s: float) -> tuple[bytes, float]:
    """Send `data`, then read until the gateway closes the connection: (what it said, seconds it took)."""
    with socket.create_connection((host, port), timeout=wait_s) as sock:
        started = time.monotonic()
        sock.sendall(data)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except TimeoutError:
            received += b"<still open>"
        except ConnectionResetError:  # closed with the request unread: the kernel resets
            pass
        return received, time.monotonic() - started


def status_and_code(response: httpx.Response) -> list:
    body = response.json()
    return [response.status_code, body.get("error", {}).get("code") if isinstance(body, dict) else None]


def main() -> None:
    host, port, key = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    base = f"http://{host}:{port}"
    seen: dict[str, object] = {}
    with httpx.Client(base_url=base, timeout=30) as client:
        seen["no key"] = status_and_code(client.post("/v1/chat/completions", json=CHAT))
        seen["empty bearer"] = status_and_code(
            client.post("/v1/chat/completions", json=CHAT, headers={"authorization": "Bearer"})
        )
        seen["wrong key"] = status_and_code(client.get("/v1/models", headers={"authorization": "Bearer sk-wrong"}))
        seen["metrics without a key"] = client.get("/metrics").status_code
        seen["health without a key"] = client.get("/health").status_code
        answer = client.post("/v1/chat/completions", json=CHAT, headers={"authorization": f"Bearer {key}"})
        seen["with the key"] = [answer.status_code, answer.json().get("usage", {}).get("completion_tokens")]
    # A body declared past 1 MiB is refused before a byte of it is sent.
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n"
        "content-type: application/json\r\ncontent-length: 99999999999\r\n\r\n"
    )
    said, took = raw(host, port, head.encode(), 10)
    seen["declared too large"] = [said.split(b"\r\n", 1)[0].decode(), b"request_too_large" in said, round(took, 2)]
    # Headers that never finish, and a body that stops: 408 after 2 s, and closed.
    said, took = raw(host, port, b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n", 10)
    seen["slow headers"] = [said.split(b"\r\n", 1)[0].decode(), round(took, 2)]
    slow_body = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\ncontent-length: 100\r\n\r\n{{"
    )
    said, took = raw(host, port, slow_body.encode(), 10)
    seen["slow body"] = [said.split(b"\r\n", 1)[0].decode(), round(took, 2)]
    # An idle keep-alive connection is closed after 3 s, quietly.
    request = f"GET /v1/models HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n\r\n"
    said, took = raw(host, port, request.encode(), 10)
    seen["idle keep-alive"] = [said.split(b"\r\n", 1)[0].decode(), round(took, 2)]
    # 700 KiB of a body on its way hold most of the 1 MiB budget: another body of 800 KiB gets a 503 once
    # the budget is spent, and is taken once the first is gone. Bodies count as their bytes arrive.
    big = (
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + key + "\r\n"
        "content-type: application/json\r\ncontent-length: 819200\r\n\r\n"
    ).encode()
    with socket.create_connection((host, port), timeout=10) as holding:
        holding.sendall(big + b"{" + b" " * 700_000)
        deadline = time.monotonic() + 10
        while True:  # until the gateway has read the first's bytes: then the second's spend the rest
            said, _ = raw(host, port, big + b"{" + b" " * 819199, 10)
            if said.startswith(b"HTTP/1.1 503") or time.monotonic() > deadline:
                break
        seen["second body past the budget"] = said.split(b"\r\n", 1)[0].decode()
    deadline = time.monotonic() + 10
    while True:  # the first leaves the budget as the gateway notices it has gone
        said, _ = raw(host, port, big + b"{" + b" " * 819199, 10)
        if not said.startswith(b"HTTP/1.1 503") or time.monotonic() > deadline:
            break
    seen["body once the budget is free"] = said.split(b"\r\n", 1)[0].decode()
    # A client that stops reading its stream holds the one place in the graph until its writes stall for
    # 2 s; then it is dropped, and a request is served again.
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect((host, port))
    stream = json.dumps({**CHAT, "max_tokens": 6000, "min_tokens": 6000, "ignore_eos": True, "stream": True})
    stalled.sendall(
        (
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + key + "\r\n"
            f"content-type: application/json\r\ncontent-length: {len(stream)}\r\n\r\n" + stream
        ).encode()
    )
    stalled.recv(1, socket.MSG_PEEK)  # its answer has begun: it holds the place; from here on it reads nothing
    with httpx.Client(base_url=base, timeout=30, headers={"authorization": f"Bearer {key}"}) as client:
        seen["while a stream is unread"] = status_and_code(client.post("/v1/chat/completions", json=CHAT))
        started, served = time.monotonic(), None
        while served != 200 and time.monotonic() - started < 30:
            served = client.post("/v1/chat/completions", json=CHAT).status_code
        seen["once the unread stream is dropped"] = [served, round(time.monotonic() - started, 1)]
    stalled.close()
    # Eight half-open connections fill the cap: a ninth is closed as it opens, and requests are served
    # again once the eight time out.
    hung = [socket.create_connection((host, port), timeout=10) for _ in range(8)]
    for sock in hung:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\n")
    deadline = time.monotonic() + 1.5  # before the eight time out (2 s)
    closing = request.replace("\r\n\r\n", "\r\nconnection: close\r\n\r\n")
    while True:  # until the gateway has counted the eight in: then a new connection is closed unanswered
        said, took = raw(host, port, closing.encode(), 5)
        if not said or time.monotonic() > deadline:
            break
    seen["past the cap"] = [said.decode(errors="replace"), round(took, 2)]
    for sock in hung:
        sock.close()
    with httpx.Client(base_url=base, timeout=30, headers={"authorization": f"Bearer {key}"}) as client:
        deadline = time.monotonic() + 10
        while True:  # the closed ones leave the count as the gateway notices
            try:
                seen["after the cap"] = client.get("/v1/models").status_code
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    seen["after the cap"] = "refused"
                    break
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
