"""`dynamo scale` and the launcher's control API against a real served graph: a worker that leaves
is drained (its streams finish, nothing new reaches it), one that joins serves, and a resize the
pools cannot take is refused with nothing changed."""

from __future__ import annotations

import json
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import yaml

from tests.support.commands import DYNAMO, REPO, run_dynamo
from tests.support.graphs import exact_stream, observed, write_graph
from tests.support.ports import free_port_run, free_ports
from tests.support.served import ServedGraph, serving
from tests.support.waiting import wait_for

pytestmark = pytest.mark.long

SLOW = 10  # the mocker runs 10x slower than modelled, so a stream lasts seconds
STREAM_TOKENS = 600  # long enough to outlast `dynamo scale` starting on a busy 2-core machine


@pytest.fixture(scope="module")
def two_decoders(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedGraph]:
    folder = tmp_path_factory.mktemp("scale")
    path = write_graph(folder)
    graph = yaml.safe_load(path.read_text())
    graph["hardware"]["gpus"] = 3
    graph["pools"]["decode"]["workers"] = 2
    decode_port, (prometheus, launcher) = free_port_run(2), free_ports(2)  # decode workers take decode_port + 0..1
    graph["pools"]["decode"]["system_port"] = decode_port
    graph["observability"] = observed(prometheus, launcher)
    path.write_text(yaml.safe_dump(graph))
    with serving(path, folder / "run", "--mocker-time-scale", str(SLOW)) as served:
        yield served


def streams_in_flight(served: ServedGraph, process: str) -> float:
    port = next(p["ports"][0] for p in served.state()["processes"] if p["name"] == process)
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return 0.0
    namespace = 'dynamo_namespace="test_graph"'
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("dynamo_component_inflight_requests{") and namespace in line
    )


def stream_tokens(served: ServedGraph, results: list, index: int, tokens: int = STREAM_TOKENS) -> None:
    """One streaming chat request of exactly `tokens` tokens; its token count or its error lands in results."""
    client = openai.OpenAI(base_url=served.endpoint, api_key="unused", max_retries=0)
    try:
        stream = client.chat.completions.create(**exact_stream(f"question {index}", tokens))
        results[index] = next(chunk.usage.completion_tokens for chunk in stream if chunk.usage)
    except Exception as error:  # noqa: BLE001 - the test reports every failure it saw
        results[index] = repr(error)


def said(served: ServedGraph, process: str) -> str:
    """What the launcher said about one process on the terminal."""
    lines = served.output.read_text().splitlines()
    return "\n".join(line for line in lines if re.match(rf"{process} +\| \[dynamo-oss\] ", line))


def control(served: ServedGraph) -> tuple[str, str]:
    state = served.state()
    return state["control_url"], Path(state["control_token_file"]).read_text().strip()


def test_a_pool_shrinks_by_draining_and_grows_again(two_decoders: ServedGraph) -> None:
    # openai's models build on first use (the SDK defers pydantic's build), and six threads building
    # them at once race in pydantic ("BaseModel cannot be instantiated directly", seen under the full
    # suite): one short stream in this thread first.
    warm: list = [None]
    stream_tokens(two_decoders, warm, 0, tokens=1)
    assert warm == [1]
    results: list = [None] * 6
    streams = [threading.Thread(target=stream_tokens, args=(two_decoders, results, i)) for i in range(6)]
    for stream in streams:
        stream.start()
    wait_for(lambda: streams_in_flight(two_decoders, "decode-1") > 0, 30, "streams on decode-1")
    leaving_pid = two_decoders.pid_of("decode-1")
    scale = subprocess.Popen(
        [*DYNAMO, "scale", "decode", "1", str(two_decoders.run_dir)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:  # draining is a passing state, so its trace is the launcher's log, read below, not a poll
        output, _ = scale.communicate(timeout=180)
    finally:
        scale.kill()
    decode = next(p for p in two_decoders.state()["pools"] if p["role"] == "decode")
    assert (decode["target"], decode["live"], decode["draining"]) == (1, 1, 0)
    for stream in streams:
        stream.join(120)
    assert scale.returncode == 0, output
    assert "decode: 2 -> 1 worker(s)" in output
    assert results == [STREAM_TOKENS] * 6  # every stream, drained worker's included, ran to its full length
    log = said(two_decoders, "decode-1")
    assert re.search(r"draining: out of discovery, [1-9]\d* stream\(s\) in flight", log), log
    assert "stopped after a " in log and "exited" not in log  # stopped on purpose, not restarted
    processes = {p["name"]: p for p in two_decoders.state()["processes"]}
    assert processes["decode-1"]["pid"] is None and processes["decode-0"]["pid"] is not None
    assert leaving_pid != processes["decode-0"]["pid"]

    grown = run_dynamo("scale", "decode", "2", str(two_decoders.run_dir), timeout_s=180)
    assert grown.returncode == 0, grown.stdout + grown.stderr
    assert "decode: 1 -> 2 worker(s)" in grown.stdout
    assert "serving: registered " in said(two_decoders, "decode-1")
    state = json.loads(run_dynamo("status", str(two_decoders.run_dir), "--json").stdout)
    assert [(p["role"], p["target"], p["live"], p["draining"]) for p in state["pools"]] == [
        ("prefill", 1, 1, 0),
        ("decode", 2, 2, 0),
    ]
    prometheus = two_decoders.state()["prometheus_url"]

    def scraped_workers() -> list[str] | None:
        query = httpx.get(f"{prometheus}/api/v1/query", params={"query": 'up{job="dynamo-workers"} == 1'}).json()
        names = sorted(row["metric"]["process"] for row in query["data"]["result"])
        return names if names == ["decode-0", "decode-1", "prefill-0"] else None

    wait_for(scraped_workers, 30, "Prometheus to scrape the grown pool's new worker")


def test_a_resize_past_the_pool_is_refused_and_changes_nothing(two_decoders: ServedGraph) -> None:
    result = run_dynamo("scale", "decode", "3", str(two_decoders.run_dir))
    assert result.returncode == 2
    assert "pool decode runs 1 to 2 workers, not 3" in result.stderr and "Traceback" not in result.stderr
    unknown = run_dynamo("scale", "embed", "1", str(two_decoders.run_dir))
    assert unknown.returncode == 2 and "the graph has no pool 'embed' (its pools: prefill, decode)" in unknown.stderr
    assert [p["live"] for p in two_decoders.state()["pools"]] == [1, 2]


def test_the_control_api_listens_on_loopback_and_wants_its_token(two_decoders: ServedGraph) -> None:
    url, token = control(two_decoders)
    assert url.startswith("http://127.0.0.1:")
    assert oct((two_decoders.run_dir / "control-token").stat().st_mode & 0o777) == "0o600"
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        denied = httpx.get(f"{url}/v1/status", headers=headers)
        assert denied.status_code == 401 and denied.json()["error"]["code"] == "invalid_token"
    auth = {"Authorization": f"Bearer {token}"}
    assert httpx.get(f"{url}/v1/status", headers=auth).json()["graph"] == "test-graph"
    bad = httpx.post(f"{url}/v1/pools/decode/scale", headers=auth, json={"workers": "two"})
    assert bad.status_code == 422 and bad.json()["error"]["message"].startswith("body.workers: ")
    assert bad.json()["error"] | {"message": ""} == {
        "message": "",
        "type": "invalid_request_error",
        "param": "workers",
        "code": "invalid_value",
    }  # the gateway's shape
    nothing = httpx.get(f"{url}/v1/nothing", headers=auth)
    assert nothing.status_code == 404 and "error" in nothing.json()
