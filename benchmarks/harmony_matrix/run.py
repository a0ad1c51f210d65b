"""The harmony correctness matrix on the README's graph: what held in every combination of API,
streaming, tool choice, structured output and reasoning effort, several runs each.

Why: `dynamo conformance URL --matrix` runs against any gpt-oss endpoint; this serves the README's
graph (graphs/disagg.yaml on Dynamo's mocker, on free ports) and commits what it printed, so the
table the README points to is reproducible. Against a real gpt-oss endpoint (vLLM, SGLang,
TensorRT-LLM, a hosted one) run the command itself:

    uv run dynamo conformance https://HOST/v1 --model openai/gpt-oss-120b --api-key KEY --matrix

Writes results.md beside this file; about a minute here:

    uv run python benchmarks/harmony_matrix/run.py
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import yaml

from dynamo_oss.bench.ports import shipped_on_free_ports
from dynamo_oss.bench.served import served_graph

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
COMMAND = "uv run python benchmarks/harmony_matrix/run.py"
REPEAT = 3


def run_matrix(endpoint: str, model: str, repeat: int) -> str:
    """`dynamo conformance ENDPOINT --matrix`'s table."""
    matrix = subprocess.run(
        [
            sys.executable,
            "-m",
            "dynamo_oss.cli",
            "conformance",
            endpoint,
            "--model",
            model,
            "--matrix",
            "--repeat",
            str(repeat),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if not matrix.stdout.startswith("|"):
        sys.exit(f"the matrix did not run against {endpoint}:\n{matrix.stderr[-3000:]}")
    return matrix.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=REPEAT, help=f"runs of each combination ({REPEAT})")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="harmony-matrix-") as tmp:
        folder = Path(tmp)
        spec = shipped_on_free_ports(REPO / "graphs/disagg.yaml")
        graph = folder / "disagg.yaml"
        graph.write_text(yaml.safe_dump(spec))
        with served_graph(graph, folder / "run", engine="mocker", time_scale=1.0) as state:
            gateway = run_matrix(state.endpoint, state.served_name, args.repeat)
            frontend = run_matrix(
                f"http://127.0.0.1:{spec['frontend']['dynamo_port']}/v1", state.served_name, args.repeat
            )
    header = (
        "# The harmony correctness matrix on the README's graph\n\n"
        f"Command: `{COMMAND}` (it serves graphs/disagg.yaml on Dynamo's mocker and runs `dynamo conformance "
        f"URL --matrix --repeat {args.repeat}` against it). Run {datetime.now(timezone.utc):%Y-%m-%d} on "
        f"{platform.machine()} with {args.repeat} runs of each combination.\n\n"
        "Each cell is the runs in which the property held over the runs it was asked in (`-`: not asked, "
        "`✗`: failed at least once). What each column checks (dynamo_oss/conformance/matrix/properties.py):\n\n"
        "- *API shape*: every object on the wire validates against the official client's own types "
        "(openai's `ChatCompletion`, `ChatCompletionChunk`, `Response` and `ResponseStreamEvent`; anthropic's "
        "`Message` and `RawMessageStreamEvent`), and a stream is framed as its API frames it (`[DONE]` and one "
        "finish_reason; response.created first, response.completed last, sequence numbers from 0 without gaps; "
        "message_start first, message_stop last, every content block opened and closed in order).\n"
        "- *tool call*: `none` calls nothing; `required` and a named tool call one that was offered (the named one), "
        "with JSON arguments valid against its schema, and the answer ends as its API ends a call; `auto` may "
        "answer or call, and a call is judged as above.\n"
        "- *no harmony leak*: no harmony token or stripped channel header in any text the client sees.\n"
        "- *JSON valid*: where a JSON schema was asked and the model answered in text, the text is JSON valid "
        "against the schema.\n"
        "- *reasoning placed*: the chain of thought arrives where the API puts it (chat's `reasoning`, a reasoning "
        "item, a thinking block) and not in the answer's text.\n\n"
        "The mocker's words are random and its answers follow the request's tools and schema, so this shows what "
        "the serving path (Dynamo's frontend, the gateway, the harmony parsers) does with gpt-oss's output; a "
        "real model's own mistakes would show in the same table run against it.\n\n"
    )
    behind = (
        "\n## Dynamo's frontend without the gateway\n\n"
        "The same graph, asked at the port of Dynamo 1.6's own frontend behind the gateway (the same workers, "
        "the same parsers), as a deployment of Dynamo alone would answer. Its JSON-schema rows show the mocker, "
        "not a model: Dynamo passes `response_format` on as a guide of the whole completion, which the mocker "
        "does not apply to an answer (and reads as a tool's schema beside `tool_choice: auto`); a TensorRT-LLM "
        "worker would apply it from the first token, and lose the reasoning and harmony's framing instead "
        "(Dynamo 2220, 7831). Its forced tool choices on chat likewise show the mocker: Dynamo guides them with the "
        "arguments' schema alone, which the mocker does not follow; on TensorRT-LLM that guide would forbid harmony's "
        "call header, and Dynamo's parser would find no call there either. The other failures are Dynamo's own.\n\n"
    )
    (HERE / "results.md").write_text(
        header + "## Through the gateway (the graph's endpoint)\n\n" + gateway + behind + frontend
    )
    print(gateway + behind + frontend)


if __name__ == "__main__":
    main()
