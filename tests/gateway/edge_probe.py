"""What a client on another host meets at a gateway with API keys and tight connection limits.

Run by tests/gateway/test_keys.py inside the client's network namespace: `python edge_probe.py
HOST PORT KEY`. Prints one JSON object of observations; the test judges them. The limits it expects:
headers and body within 2 s, keep-alive idle 3 s, 8 connections, bodies of 1 MiB.
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
        seen["empty bearer"] = status_and_code(client.post("/v1/chat/completions", json=CHAT,
                                                           headers={"authorization": "Bearer"}))  # fmt: skip
        seen["wrong key"] = status_and_code(client.get("/v1/models", headers={"authorization": "Bearer sk-wrong"}))
        seen["metrics without a key"] = client.get("/metrics").status_code
        seen["health without a key"] = client.get("/health").status_code
        answer = client.post("/v1/chat/completions", json=CHAT, headers={"authorization": f"Bearer {key}"})
        seen["with the key"] = [answer.status_code, answer.json().get("usage", {}).get("completion_tokens")]
    # A body declared past 1 MiB is refused before a byte of it is sent.
    head = f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n" \
           "content-type: application/json\r\ncontent-length: 99999999999\r\n\r\n"  # fmt: skip
    said, took = raw(host, port, head.encode(), 10)
    seen["declared too large"] = [said.split(b"\r\n", 1)[0].decode(), b"request_too_large" in said, round(took, 2)]
    # Headers that never finish, and a body that stops: 408 after 2 s, and closed.
    said, took = raw(host, port, b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n", 10)
    seen["slow headers"] = [said.split(b"\r\n", 1)[0].decode(), round(took, 2)]
    slow_body = f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n" \
                "content-length: 100\r\n\r\n{"  # fmt: skip
    said, took = raw(host, port, slow_body.encode(), 10)
    seen["slow body"] = [said.split(b"\r\n", 1)[0].decode(), round(took, 2)]
    # An idle keep-alive connection is closed after 3 s, quietly.
    request = f"GET /v1/models HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n\r\n"
    said, took = raw(host, port, request.encode(), 10)
    seen["idle keep-alive"] = [said.split(b"\r\n", 1)[0].decode(), round(took, 2)]
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
