"""Tests for dynamo_oss.assets: the offline model folder, its tokenizer and its chat template.

The chat template is checked token for token against openai-harmony, rendered three ways:
Python Jinja2 (transformers' apply_chat_template on the built folder), minijinja (the
engine inside Dynamo's frontend), and Dynamo 1.6's frontend itself, which this file runs
in a subprocess (see `_record_frontend_prompts` at the end) with a worker that records
the token ids it is sent.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tiktoken
import tiktoken.load
import tiktoken_ext.openai_public
from openai_harmony import HarmonyEncoding, HarmonyEncodingName, load_harmony_encoding
from tokenizers import Tokenizer

from dynamo_oss.assets import ENCODINGS_ENV, chat_template, model_folder, tiktoken_encodings_dir
from dynamo_oss.assets import folder as folder_module
from dynamo_oss.assets.cache import build_once
from dynamo_oss.assets.encodings import O200K_FILE, O200K_PATTERN
from dynamo_oss.assets.tokenizer import tokenizer_file
from dynamo_oss.catalog.models import GPT_OSS_20B, GPT_OSS_120B, ModelShape
from dynamo_oss.conformance.reference import reference_prompt

# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache of its own for the model folders these tests build, holding the tokenizer of the default
    cache (built there first if need be, as a graph's start does): converting o200k's ranks takes
    9 CPU-seconds, and the default cache's build is the one every graph uses and these tests check."""
    root = tmp_path_factory.mktemp("dynamo-oss-cache")
    built = tokenizer_file(GPT_OSS_20B.vocab_size).parent
    shutil.copytree(built, root / built.name)
    return root


@pytest.fixture(scope="session")
def folder(cache_dir: Path) -> Path:
    return model_folder(GPT_OSS_20B, cache_dir)


@pytest.fixture(scope="session")
def tokenizer(folder: Path) -> Tokenizer:
    return Tokenizer.from_file(str(folder / "tokenizer.json"))


@pytest.fixture(scope="session")
def harmony(cache_dir: Path) -> HarmonyEncoding:
    """openai-harmony, loading the ranks from our folder as Dynamo's processes do."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ENCODINGS_ENV, str(tiktoken_encodings_dir(cache_dir)))
        return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)


@pytest.fixture(scope="session")
def reference_tiktoken(cache_dir: Path) -> tiktoken.Encoding:
    """tiktoken's own o200k_harmony definition (pattern and specials), fed our ranks file."""
    ranks = str(tiktoken_encodings_dir(cache_dir) / O200K_FILE)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            tiktoken_ext.openai_public,
            "load_tiktoken_bpe",
            lambda _url, expected_hash: tiktoken.load.load_tiktoken_bpe(ranks, expected_hash),
        )
        return tiktoken.Encoding(**tiktoken_ext.openai_public.o200k_harmony())


# ---------------------------------------------------------------- tokenizer

SAMPLES = [
    "Hello, world! I'm sure you'll see they've DONE it.",
    "def f(x: int) -> list[str]:\n    return [str(i) for i in range(x)]  # 12345678\n",
    "    \n\n\t\t  trailing spaces   \r\n  ",
    "Grüße aus Zürich — naïve façade; Ελληνικά, русский, العربية, עברית, हिन्दी",
    "日本語のテキストと中文文本，한국어 텍스트。",
    "emoji 😀👍🏽 family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 and ∑∫√∞ ≠ ≤",
    '{"a": [1, 2.5e-3, null, true], "b": {"c": "d\\n"}}',
    "<|start|>user<|message|>hi<|end|><|start|>assistant<|channel|>final<|message|>ok<|return|>",
    "<|startoftext|><|endoftext|><|constrain|><|call|><|reserved_200000|><|reserved_201087|>",
    Path(__file__).read_text(encoding="utf-8"),
]


@pytest.mark.parametrize("text", SAMPLES, ids=range(len(SAMPLES)))
def test_tokenizer_encodes_like_tiktoken(
    tokenizer: Tokenizer, reference_tiktoken: tiktoken.Encoding, text: str
) -> None:
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    assert ids == reference_tiktoken.encode(text, allowed_special="all")
    assert tokenizer.decode(ids, skip_special_tokens=False) == text


def test_pre_tokenizer_pattern_is_tiktokens(reference_tiktoken: tiktoken.Encoding) -> None:
    assert O200K_PATTERN == reference_tiktoken._pat_str


def test_special_tokens_have_harmony_ids(tokenizer: Tokenizer, harmony: HarmonyEncoding, folder: Path) -> None:
    vocab_size = GPT_OSS_20B.vocab_size
    assert tokenizer.get_vocab_size(with_added_tokens=True) == vocab_size
    checked = 0
    for name in harmony.special_tokens_set:
        [token_id] = harmony.encode(name, allowed_special="all")
        if token_id < vocab_size:  # harmony also names one id past the vocabulary
            assert tokenizer.token_to_id(name) == token_id, name
            checked += 1
    assert checked == vocab_size - 199_998
    added = json.loads((folder / "tokenizer_config.json").read_text())["added_tokens_decoder"]
    assert {int(i): token["content"] for i, token in added.items()} == {
        i: tokenizer.id_to_token(i) for i in range(199_998, vocab_size)
    }
    eos = json.loads((folder / "generation_config.json").read_text())["eos_token_id"]
    assert set(harmony.stop_tokens_for_assistant_actions()) <= set(eos)


# ---------------------------------------------------------------- model folder


@pytest.mark.parametrize("shape", [GPT_OSS_20B, GPT_OSS_120B], ids=lambda s: s.name)
def test_model_folder_describes_the_model(cache_dir: Path, shape: ModelShape) -> None:
    from transformers import AutoConfig

    path = model_folder(shape, cache_dir)
    config = AutoConfig.from_pretrained(path)
    assert (config.model_type, config.architectures) == ("gpt_oss", ["GptOssForCausalLM"])
    assert config.num_hidden_layers == shape.num_layers
    assert config.num_local_experts == shape.num_experts
    assert config.num_experts_per_tok == shape.experts_per_token
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (
        shape.num_attention_heads,
        shape.num_key_value_heads,
        shape.head_dim,
    )
    assert config.layer_types.count("full_attention") == shape.full_attention_layers
    assert config.layer_types[0] == "sliding_attention"
    assert config.sliding_window == shape.sliding_window
    assert config.max_position_embeddings == shape.max_context
    assert config.vocab_size == shape.vocab_size
    rope = config.rope_parameters
    assert (rope["rope_type"], rope["factor"], rope["rope_theta"]) == ("yarn", 32.0, 150_000)
    assert rope["original_max_position_embeddings"] * rope["factor"] == shape.max_context
    generation = json.loads((path / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [200_002, 199_999, 200_012]
    tokenizer_config = json.loads((path / "tokenizer_config.json").read_text())
    assert tokenizer_config["chat_template"] == (path / "chat_template.jinja").read_text()
    assert tokenizer_config["chat_template"] == chat_template()


def test_model_folder_is_built_once_per_shape(cache_dir: Path, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    builds: list[str] = []
    write = folder_module._write_model_folder

    def counting_write(path: Path, shape: ModelShape, root: Path | None) -> None:
        builds.append(shape.name)
        write(path, shape, root)

    monkeypatch.setattr(folder_module, "_write_model_folder", counting_write)
    assert model_folder(GPT_OSS_20B, cache_dir) == folder  # the session already built it
    assert builds == []

    longer = GPT_OSS_20B.model_copy(update={"max_context": 2 * GPT_OSS_20B.max_context})
    first = model_folder(longer, cache_dir)
    config_written = (first / "config.json").stat().st_mtime_ns
    assert model_folder(longer, cache_dir) == first
    assert builds == ["gpt-oss-20b"]
    assert (first / "config.json").stat().st_mtime_ns == config_written
    assert first != folder and first.name.startswith("gpt-oss-20b-")


def test_build_once_under_concurrency(tmp_path: Path) -> None:
    target = tmp_path / "asset"
    callers = 8
    barrier = threading.Barrier(callers)
    builds: list[bool] = []
    results: list[Path] = []

    def build(tmp: Path) -> None:
        builds.append(target.exists())  # must stay invisible until complete
        for i in range(100):
            (tmp / f"part-{i}").write_text(str(i))

    def call() -> None:
        barrier.wait()
        result = build_once(target, build)
        results.append(result)
        assert len(list(result.iterdir())) == 100  # never half-written

    threads = [threading.Thread(target=call) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert builds == [False]
    assert results == [target] * callers


def test_build_once_failure_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "asset"

    def failing(tmp: Path) -> None:
        (tmp / "half").write_text("x")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        build_once(target, failing)
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []
    assert build_once(target, lambda tmp: (tmp / "ok").write_text("y")) == target
    assert (target / "ok").read_text() == "y"


# ---------------------------------------------------------------- chat template cases

DATE = "2025-06-28"

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.\nUse metric units unless asked.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                "days": {"type": "integer", "description": "Forecast days", "default": 1},
                "include": {"type": "array", "items": {"type": "string", "enum": ["wind", "rain"]}},
                "where": {
                    "type": "object",
                    "description": "Coordinates",
                    "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                    "required": ["lat", "lon"],
                },
                "stations": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"id": {"type": "string"}, "weight": {"type": "number"}},
                        "required": ["id"],
                    },
                },
            },
            "required": ["city"],
        },
    },
}
CLOCK = {"type": "function", "function": {"name": "get_time", "description": "Current UTC time."}}
SEARCH = {  # the rarer schema features harmony renders: oneOf, nullable, title, examples
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {
            "type": "object",
            "description": "Search request",
            "properties": {
                "query": {"type": "string", "title": "Query", "examples": ["gpt-oss", "dynamo"]},
                "limit": {"type": ["integer", "null"], "description": "Max results"},
                "safe": {"type": "boolean", "nullable": True, "default": True},
                "since": {
                    "description": "Start date or days back",
                    "oneOf": [
                        {"type": "string", "description": "ISO date"},
                        {"type": "integer", "description": "Days back", "default": 7},
                    ],
                },
                "filters": {"type": "object"},
                "extra": {},
            },
            "required": ["query"],
        },
    },
}


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def assistant(content: str | None, reasoning: str, tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    message = {"role": "assistant", "content": content, "reasoning_content": reasoning}
    return message | ({"tool_calls": tool_calls} if tool_calls else {})


USER = user("What is the weather in Paris?")
RESPONSE_FORMATS = '# Response Formats\n\n## Weather\n\n// The forecast\n{"type": "object", "properties": {}}'
CALLS = [call("call_1", "get_weather", '{"city": "Paris"}'), call("call_2", "get_time", "{}")]
RESULTS = [  # answered in the other order: the template must name functions by id
    {"role": "tool", "tool_call_id": "call_2", "content": "12:00"},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
]


@dataclass(frozen=True)
class Case:
    """One chat request. `reasoning_effort` None leaves it to the template's default."""

    name: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    reasoning_effort: str | None = None
    current_date: str | None = DATE
    response_formats: str | None = None  # the section the gateway passes for a response_format


CASES = [
    Case("user", [USER]),
    Case("system_prompt", [{"role": "system", "content": "You are terse.\nNo emoji."}, USER]),
    Case("developer_prompt", [{"role": "developer", "content": "Answer in French."}, USER]),
    Case(
        "system_and_developer",
        [
            {"role": "system", "content": "Be kind."},
            {"role": "developer", "content": "Be brief."},
            USER,
        ],
    ),
    Case("effort_low", [USER], reasoning_effort="low"),
    Case("effort_medium", [USER], reasoning_effort="medium"),
    Case("effort_high", [USER], reasoning_effort="high"),
    Case("effort_minimal_is_low", [USER], reasoning_effort="minimal"),
    Case("no_date", [USER], current_date=None),
    Case("content_parts", [user([{"type": "text", "text": "Hi there"}])]),
    Case(
        "tools",
        [{"role": "system", "content": "Use tools."}, USER],
        tools=[WEATHER, CLOCK, SEARCH],
        reasoning_effort="high",
    ),
    Case(  # mid tool chain: the reasoning that led to the calls stays
        "tool_results",
        [USER, assistant(None, "Need data.", CALLS), *RESULTS],
        tools=[WEATHER, CLOCK],
    ),
    Case(  # text beside a tool call is a commentary preamble
        "preamble",
        [USER, assistant("Let me check.", "Call the tool.", CALLS[:1]), RESULTS[1]],
        tools=[WEATHER],
    ),
    Case(  # harmony 0.0.8 drops analysis only up to the FIRST final answer
        "multi_turn",
        [
            USER,
            assistant("Sunny.", "Guess."),
            user("And tomorrow?"),
            assistant("Rain.", "Guess again."),
            user("Thanks!"),
        ],
    ),
    Case(
        "final_after_tools",
        [
            USER,
            assistant(None, "Need data.", CALLS),
            *RESULTS,
            assistant("21 degrees.", "Got it."),
            user("Thanks!"),
        ],
        tools=[WEATHER, CLOCK],
    ),
    Case("response_format", [USER], response_formats=RESPONSE_FORMATS),
    Case(  # after the instructions, before the tools, as the Responses API renders it
        "response_format_after_instructions",
        [{"role": "system", "content": "Use tools."}, USER],
        tools=[WEATHER],
        response_formats=RESPONSE_FORMATS,
    ),
    Case(  # the last assistant message calls a tool: nothing is dropped
        "tools_after_final",
        [
            user("Hi"),
            assistant("Hello!", "Greet."),
            USER,
            assistant(None, "Look up.", CALLS[:1]),
            RESULTS[1],
        ],
        tools=[WEATHER],
    ),
]


# ---------------------------------------------------------------- harmony, the reference


def harmony_tokens(harmony: HarmonyEncoding, case: Case, date: str | None = None) -> list[int]:
    """What openai-harmony renders for `case`, mapping messages as template.py describes; a response
    format's section is the last part of the developer message's instructions."""
    messages = case.messages
    if case.response_formats:
        leading = messages[0]["role"] in ("system", "developer")
        instructions = [messages[0]["content"]] if leading else []
        developer = {"role": "developer", "content": "\n\n".join([*instructions, case.response_formats])}
        messages = [developer, *messages[1 if leading else 0 :]]
    return reference_prompt(messages, case.tools, case.reasoning_effort, date or case.current_date)


def test_cases_exercise_reasoning_drop(harmony: HarmonyEncoding) -> None:
    """Guard for the cases themselves: the drop rule must show in what harmony renders."""
    text = {case.name: harmony.decode_utf8(harmony_tokens(harmony, case)) for case in CASES}
    assert "Guess." not in text["multi_turn"] and "Guess again." in text["multi_turn"]
    assert "Need data." not in text["final_after_tools"] and "Got it." not in text["final_after_tools"]
    assert "Greet." in text["tools_after_final"] and "Need data." in text["tool_results"]


# ---------------------------------------------------------------- the template, three ways


def template_variables(case: Case) -> dict[str, Any]:
    variables: dict[str, Any] = {"current_date": case.current_date}
    if case.reasoning_effort is not None:
        variables["reasoning_effort"] = case.reasoning_effort
    if case.response_formats is not None:
        variables["response_formats"] = case.response_formats
    return variables


def frontend_request(case: Case) -> dict[str, Any]:
    """The request a client sends: effort as a request field, the date as a template arg."""
    request: dict[str, Any] = {
        "messages": case.messages,
        "chat_template_args": {"current_date": case.current_date},
    }
    if case.response_formats is not None:
        request["chat_template_args"]["response_formats"] = case.response_formats
    if case.tools:
        request["tools"] = case.tools
    if case.reasoning_effort is not None:
        request["reasoning_effort"] = case.reasoning_effort
    return request


# How requests reach the template's variables through the frontend: request -> same as case.
FRONTEND_VARIABLES = {
    "effort_field_over_args": (
        {
            "messages": [USER],
            "reasoning_effort": "low",
            "chat_template_args": {"reasoning_effort": "high", "current_date": DATE},
        },
        Case("effort_field_over_args", [USER], reasoning_effort="low"),
    ),
    "chat_template_kwargs_alias": (
        {
            "messages": [USER],
            "chat_template_kwargs": {"reasoning_effort": "high", "current_date": DATE},
        },
        Case("chat_template_kwargs_alias", [USER], reasoning_effort="high"),
    ),
}


@pytest.fixture(scope="module")
def frontend_prompts(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Token ids Dynamo's frontend sends its worker for every case, plus one without a date."""
    work = tmp_path_factory.mktemp("frontend")
    requests = {case.name: frontend_request(case) for case in CASES}
    requests |= {name: request for name, (request, _) in FRONTEND_VARIABLES.items()}
    requests["default_date"] = {"messages": [USER]}
    (work / "requests.json").write_text(json.dumps(requests))
    before = datetime.date.today().isoformat()
    subprocess.run(
        [
            sys.executable,
            __file__,
            str(folder),
            str(work / "requests.json"),
            str(work / "prompts.json"),
        ],
        check=True,
        timeout=180,
        env={**os.environ, "DYN_LOG": "error"},
    )
    prompts = json.loads((work / "prompts.json").read_text())
    prompts["dates"] = [before, datetime.date.today().isoformat()]
    return prompts


@pytest.fixture(scope="module", params=["jinja2", "minijinja", "dynamo"])
def render(request: pytest.FixtureRequest, folder: Path, tokenizer: Tokenizer):
    """A function from a case to the prompt's token ids, for one engine."""
    if request.param == "jinja2":
        pytest.importorskip("jinja2")
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(folder)
        return lambda case: hf.apply_chat_template(
            case.messages,
            tools=case.tools,
            add_generation_prompt=True,
            return_dict=True,
            **template_variables(case),
        )["input_ids"]
    if request.param == "minijinja":
        minijinja = pytest.importorskip("minijinja")
        environment = minijinja.Environment()
        environment.add_template("chat", chat_template())
        return lambda case: (
            tokenizer.encode(
                environment.render_template(
                    "chat",
                    messages=case.messages,
                    tools=case.tools,
                    add_generation_prompt=True,
                    **template_variables(case),
                ),
                add_special_tokens=False,
            ).ids
        )
    prompts = request.getfixturevalue("frontend_prompts")
    return lambda case: prompts[case.name]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_template_renders_like_harmony(render, harmony: HarmonyEncoding, case: Case) -> None:
    expected = harmony_tokens(harmony, case)
    actual = render(case)
    assert harmony.decode_utf8(actual) == harmony.decode_utf8(expected)  # readable diff first
    assert actual == expected


@pytest.mark.parametrize("name", FRONTEND_VARIABLES)
def test_frontend_passes_template_variables(
    frontend_prompts: dict[str, Any], harmony: HarmonyEncoding, name: str
) -> None:
    _, same_as = FRONTEND_VARIABLES[name]
    assert frontend_prompts[name] == harmony_tokens(harmony, same_as)


def test_frontend_dates_prompts_today(frontend_prompts: dict[str, Any], harmony: HarmonyEncoding) -> None:
    before, after = frontend_prompts["dates"]
    if before != after:
        pytest.skip("the date changed while the frontend ran")
    expected = harmony_tokens(harmony, Case("default_date", [USER], current_date=None), date=before)
    assert frontend_prompts["default_date"] == expected


# ---------------------------------------------------------------- the frontend recorder


async def _record_frontend_prompts(folder: Path, requests: dict[str, Any]) -> dict[str, list[int]]:
    """Serve `folder` through Dynamo's frontend to a worker that records its token ids."""
    import httpx
    from dynamo.llm import (
        EngineType,
        EntrypointArgs,
        ModelInput,
        ModelType,
        WorkerType,
        make_engine,
        register_model,
        run_input,
    )
    from dynamo.runtime import DistributedRuntime

    received: list[list[int]] = []

    async def generate(request: dict[str, Any], context: Any = None):
        received.append(request["token_ids"])
        yield {"token_ids": [], "finish_reason": "stop", "index": 0}

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    runtime = DistributedRuntime(asyncio.get_running_loop(), "mem", "tcp")
    endpoint = runtime.endpoint("dynamo.recorder.generate")
    await register_model(
        ModelInput.Tokens,
        ModelType.Chat,
        endpoint,
        str(folder),
        model_name="gpt-oss",
        worker_type=WorkerType.Aggregated,
    )
    engine = await make_engine(runtime, EntrypointArgs(EngineType.Dynamic, http_port=port))
    serving = [  # held, so that the serving futures stay referenced
        asyncio.ensure_future(endpoint.serve_endpoint(generate)),
        asyncio.ensure_future(run_input(runtime, "http", engine)),
    ]

    prompts: dict[str, list[int]] = {}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        deadline = asyncio.get_running_loop().time() + 60
        await _wait_until_serving(client, deadline)
        for name, body in requests.items():
            response = await _chat_when_routable(client, {"model": "gpt-oss", "max_tokens": 1, **body}, deadline)
            response.raise_for_status()
            prompts[name] = received.pop()
    assert all(not future.done() for future in serving)
    return prompts


async def _chat_when_routable(client: Any, body: dict[str, Any], deadline: float) -> Any:
    """The chat request's answer. The frontend can list the model a moment before its chat route has the
    worker (a 404, which no worker saw): until the deadline, such a request is sent again."""
    while True:
        response = await client.post("/v1/chat/completions", json=body)
        if response.status_code != 404 or asyncio.get_running_loop().time() > deadline:
            return response
        await asyncio.sleep(0.05)  # polling the frontend's route against the deadline above


async def _wait_until_serving(client: Any, deadline: float) -> None:
    """Readiness poll: the frontend binds its port and lists the model a moment after start."""
    import httpx

    while asyncio.get_running_loop().time() < deadline:
        try:
            if (await client.get("/v1/models")).json()["data"]:
                return
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.05)
    raise TimeoutError("the frontend did not list the model")


if __name__ == "__main__":
    model_dir, requests_file, prompts_file = map(Path, sys.argv[1:4])
    result = asyncio.run(_record_frontend_prompts(model_dir, json.loads(requests_file.read_text())))
    prompts_file.write_text(json.dumps(result))
    os._exit(0)  # the runtime's threads would keep the process alive
