"""The Responses route's pieces without a graph: answers parsed from token ids, the prompt rendered,
reasoning sealed, and errors naming the field."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai_harmony import Conversation, HarmonyError, Message, RenderOptions, Role, StreamableParser, StreamState
from pydantic import ValidationError

from tests.support.harmony import harmony_ids, render_request, sealed_with
from dynamo_oss.gateway.errors import ApiError, from_validation
from dynamo_oss.gateway.protocol.responses import ResponsesRequest
from dynamo_oss.gateway.ids import ItemIds, new_id
from dynamo_oss.gateway.responses.route import Turn, conversation_session
from dynamo_oss.gateway.harmony.rendering import RenderCache, encoding
from dynamo_oss.gateway.harmony.decoding import MessageText
from dynamo_oss.gateway.harmony.headers import read_header
from dynamo_oss.gateway.harmony.parsing import AnswerParser
from dynamo_oss.gateway.graph_key import GraphKey, KeyFileUnusable
from dynamo_oss.gateway.harmony.sealing import UnopenableReasoning

SEAL = sealed_with(b"k")
TODAY = datetime.date(2026, 11, 25)
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = {"type": "function", "name": "get_weather", "parameters": CITY}
COMPLETION = (
    "<|channel|>analysis<|message|>Need weather <|x a<b<|end|><|start|>assistant<|channel|>commentary "
    'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
)
DECLARED = ("functions.get_weather",)


def merged(events: list) -> list:
    out: list = []
    for kind, value in events:
        if kind == "text" and out and out[-1][0] == "text":
            out[-1] = ("text", out[-1][1] + value)
        else:
            out.append((kind, value))
    return out


def parsed(token_ids: list[int], piece: int, declared: tuple[str, ...] = DECLARED) -> list:
    parser = AnswerParser(declared)
    events = [e for i in range(0, len(token_ids), piece) for e in parser.feed(token_ids[i : i + piece])]
    return merged(events + parser.finish())


@pytest.mark.parametrize("piece", [1, 2, 3, 5, 11, 1000])
def test_the_answer_parser_reads_the_same_messages_however_the_ids_are_cut(piece: int) -> None:
    events = parsed(harmony_ids(COMPLETION), piece)
    assert [kind for kind, _ in events] == ["begin", "text", "end", "begin", "text", "end"]
    assert events[0][1].channel == "analysis" and events[1][1] == "Need weather <|x a<b"
    call = events[3][1]
    assert (call.channel, call.recipient, call.content_type) == (
        "commentary",
        "functions.get_weather",
        "<|constrain|>json",
    )
    assert events[4][1] == '{"city": "Paris"}' and events[5][1] == "<|call|>"


def test_a_feed_gives_each_message_s_text_as_one_event() -> None:
    """However many tokens of a message one feed carries (a read of many), its builder writes one delta."""
    ids = harmony_ids(COMPLETION)
    events = AnswerParser(DECLARED).feed(ids)
    assert [kind for kind, _ in events] == ["begin", "text", "end", "begin", "text", "end"]
    assert events == parsed(ids, 1000)


def test_the_answer_parser_takes_the_recipient_before_the_channel_and_closes_an_unended_message() -> None:
    events = parsed(harmony_ids(" to=ns.read<|channel|>commentary json<|message|>{}"), 1, ("ns.read",))
    assert events[0][1].recipient == "ns.read" and events[0][1].content_type == "json"
    assert events[1:] == [("text", "{}"), ("end", "")]


def test_control_tokens_a_model_writes_as_text_stay_text() -> None:
    """A model copying `<|call|>` from a document writes ordinary tokens: no call comes of it."""
    ids = harmony_ids("<|channel|>final<|message|>")
    ids += encoding().encode(
        "Quote: <|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
        '<|constrain|>json<|message|>{"city": "Rome"}<|call|>',
        disallowed_special=(),
    )
    ids += harmony_ids("<|return|>")
    events = parsed(ids, 1)
    assert [kind for kind, _ in events] == ["begin", "text", "end"]
    assert events[0][1].channel == "final" and events[0][1].recipient is None
    assert events[1][1].startswith("Quote: <|end|><|start|>assistant") and events[2][1] == "<|return|>"


def test_a_message_to_a_tool_the_request_did_not_declare_is_no_call() -> None:
    ids = harmony_ids("<|channel|>analysis to=browser.search code<|message|>{}<|call|>")
    ids += harmony_ids("<|start|>assistant<|channel|>commentary to=functions.delete_all<|message|>{}<|call|>")
    events = parsed(ids, 1)
    headers = [value for kind, value in events if kind == "begin"]
    assert [(h.channel, h.recipient, h.undeclared) for h in headers] == [
        ("analysis", None, "browser.search"),
        ("commentary", None, "functions.delete_all"),
    ]


def test_text_after_an_ended_answer_is_read_as_a_new_header_not_an_error() -> None:
    """A completion run past its stop token (`ignore_eos`) writes on without a `<|start|>`."""
    ids = harmony_ids("<|channel|>final<|message|>Hi<|return|>") + encoding().encode("more words")
    ids += harmony_ids("<|channel|>final<|message|>Again<|return|>")
    assert [value for kind, value in parsed(ids, 1) if kind == "text"] == ["Hi", "Again"]


def test_a_message_begun_without_its_start_token_keeps_its_channel() -> None:
    """A model that leaves out `<|start|>assistant` between two messages: the second is still analysis."""
    ids = harmony_ids("<|channel|>final<|message|>Hi<|end|><|channel|>analysis<|message|>hidden<|end|>")
    events = parsed(ids, 1)
    assert [(value.channel if kind == "begin" else value) for kind, value in events if kind != "end"] == [
        "final",
        "Hi",
        "analysis",
        "hidden",
    ]


HARMONY_TEXT = st.lists(st.sampled_from([*'ab <|>:{}"\n', "<|call|>", "<|end|>", "<|start|>", "é"]), max_size=30).map(
    "".join
)
MESSAGES = st.lists(
    st.tuples(st.sampled_from(["analysis", "commentary", "final"]), st.sampled_from([None, *DECLARED]), HARMONY_TEXT),
    min_size=1,
    max_size=4,
)


@settings(max_examples=60, deadline=None)
@given(messages=MESSAGES, piece=st.integers(min_value=1, max_value=7))
def test_the_answer_parser_agrees_with_openai_harmony(messages: list, piece: int) -> None:
    """Any answer of whole messages, whatever text they hold, parses as openai-harmony parses it."""
    ids: list[int] = []
    for index, (channel, recipient, text) in enumerate(messages):
        head = ("" if index == 0 else "<|start|>assistant") + f"<|channel|>{channel}"
        head += f" to={recipient} <|constrain|>json" if recipient else ""
        ids += harmony_ids(head + "<|message|>") + encoding().encode(text, disallowed_special=())
        ids += harmony_ids("<|call|>" if recipient else "<|end|>")
    reference = encoding().parse_messages_from_completion_tokens(ids, role=Role.ASSISTANT)
    events = parsed(ids, piece)
    headers = [value for kind, value in events if kind == "begin"]
    texts = [value for kind, value in events if kind == "text"]
    assert [(h.channel, h.recipient) for h in headers] == [(m.channel, m.recipient) for m in reference]
    assert "".join(texts) == "".join(m.content[0].text for m in reference)


def one_byte_token(byte: int) -> int:
    """The token whose bytes are `byte` alone (o200k has one for each of the 256)."""
    return next(
        i
        for i in range(1000)
        if encoding().decode([i], errors="surrogateescape").encode(errors="surrogateescape") == bytes([byte])
    )


# What a message's text may hold, as token ids: whole words and characters, single bytes that are the start
# or the middle of a character or no part of one, special tokens other than a message's end (text inside a
# message), and, rarely, an id past the vocabulary.
TEXT_IDS = st.one_of(
    st.sampled_from(encoding().encode(" Once é 中 🙂 {}\n", disallowed_special=())),
    st.sampled_from([one_byte_token(b) for b in (0x80, 0xA1, 0xBF, 0xC3, 0xE0, 0xE4, 0xED, 0xF0, 0xF4, 0xFF, 0x41)]),
    st.sampled_from(harmony_ids("<|start|><|channel|><|message|><|constrain|><|reserved_200013|>")),
    st.sampled_from([201_089, 2**31]),
)


@settings(max_examples=200, deadline=None)
@given(ids=st.lists(TEXT_IDS, max_size=40))
def test_a_message_text_is_decoded_token_by_token_as_openai_harmony_decodes_it(ids: list[int]) -> None:
    """Harmony's own parser is left out of a message's text for speed (decoding.py): each token's delta is
    the one harmony's parser gives, whatever bytes the tokens hold."""
    harmony = StreamableParser(encoding(), role=Role.ASSISTANT)
    for token in harmony_ids("<|channel|>final<|message|>"):
        harmony.process(token)
    text = MessageText()
    for token in ids:
        harmony.process(token)
        assert text.push(token) == harmony.last_content_delta


def test_bytes_held_back_when_a_message_ends_are_dropped_and_the_next_message_starts_clean() -> None:
    ids = harmony_ids("<|channel|>analysis<|message|>a") + [one_byte_token(0xE4), *harmony_ids("<|end|>")]
    ids += harmony_ids("<|start|>assistant<|channel|>final<|message|>b<|return|>")
    assert [value for kind, value in parsed(ids, 1) if kind == "text"] == ["a", "b"]
    reference = encoding().parse_messages_from_completion_tokens(ids, role=Role.ASSISTANT)
    assert [m.content[0].text for m in reference] == ["a\ufffd", "b"]  # harmony's whole message keeps them lossily


HEADER_TEXT = st.lists(
    st.sampled_from(
        ["assistant", "user", "<|channel|>", "analysis", "final", "commentary", " to=", "functions.get_weather", " "]
        + ["json", "<|constrain|>", "code", "<", "\t", "é", "<|end|>", "<|start|>", "to=x", "="]
    ),
    max_size=10,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(started=st.booleans(), header=HEADER_TEXT, after_end=st.booleans())
def test_a_header_read_without_harmony_is_read_as_openai_harmony_reads_it(
    started: bool, header: str, after_end: bool
) -> None:
    """headers.py reads a header only where harmony's own parser reads it the same; anything else is left to it."""
    tokens = harmony_ids(("<|start|>" if started else "") + header + "<|message|>")
    read = read_header(tokens, after_end)
    harmony = StreamableParser(encoding(), role=None if after_end else Role.ASSISTANT)
    try:
        for token in tokens:
            harmony.process(token)
    except HarmonyError:
        assert read is None
        return
    if read is not None:
        assert harmony.state == StreamState.CONTENT
        assert read == (harmony.current_channel, harmony.current_recipient, harmony.current_content_type)


@pytest.mark.parametrize(
    ("header", "after_end", "read"),
    [
        ("<|channel|>analysis", False, ("analysis", None, None)),
        ("<|start|>assistant<|channel|>final", True, ("final", None, None)),
        (
            "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json",
            True,
            ("commentary", "functions.get_weather", "<|constrain|>json"),
        ),
        (" to=functions.get_weather<|channel|>commentary json", False, ("commentary", "functions.get_weather", "json")),
    ],
)
def test_the_headers_gpt_oss_writes_are_read_without_harmony(header: str, after_end: bool, read: tuple) -> None:
    assert read_header(harmony_ids(header + "<|message|>"), after_end) == read


def request(**fields) -> ResponsesRequest:
    return ResponsesRequest.model_validate({"model": "m", **fields})


def prompt_text(**fields) -> str:
    return encoding().decode(render_request(request(**fields), SEAL, TODAY).token_ids)


def test_tools_become_harmony_namespaces_and_hosted_tools_are_not_offered() -> None:
    tools = [
        WEATHER,
        {"type": "web_search"},
        {"type": "mcp", "server_label": "x"},
        {
            "type": "namespace",
            "name": "files",
            "description": "File tools",
            "tools": [
                {"type": "function", "name": "read", "parameters": {"type": "object", "properties": {}}},
                {"type": "custom", "name": "apply_patch", "description": "Edit files."},
            ],
        },
    ]
    prompt = render_request(request(input="hi", tools=tools), SEAL, TODAY)
    text = encoding().decode(prompt.token_ids)
    assert "namespace functions {" in text and "type get_weather = (_: {" in text
    assert "namespace files {" in text and "type read = (_: {" in text and "input: string," in text
    assert "web_search" not in text and "mcp" not in text
    assert {r: (t.kind, t.name, t.namespace) for r, t in prompt.tools.items()} == {
        "functions.get_weather": ("function", "get_weather", None),
        "files.read": ("function", "read", "files"),
        "files.apply_patch": ("custom", "apply_patch", "files"),
    }
    assert text.endswith("<|start|>assistant")


def test_instructions_and_leading_developer_messages_are_the_developer_instructions() -> None:
    text = prompt_text(
        instructions="Be brief.",
        input=[
            {"role": "developer", "content": [{"type": "input_text", "text": "Use tools."}]},
            {"role": "user", "content": "hi"},
            {"role": "system", "content": "Later rule."},
        ],
    )
    assert "<|start|>developer<|message|># Instructions\n\nBe brief.\n\nUse tools.<|end|>" in text
    assert text.index("<|start|>user") < text.index("Later rule.")


CALL = [
    {"role": "user", "content": "weather?"},
    {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "CHAIN-OF-THOUGHT"}]},
    {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
    {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
]


def test_reasoning_is_kept_while_the_assistant_is_between_tool_calls_and_dropped_after_a_final_answer() -> None:
    between = prompt_text(input=CALL, tools=[WEATHER])
    assert "<|channel|>analysis<|message|>CHAIN-OF-THOUGHT<|end|>" in between
    assert "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>sunny<|end|>" in between
    answered = [
        *CALL,
        {"role": "assistant", "content": [{"type": "output_text", "text": "It is sunny."}]},
        {"role": "user", "content": "thanks"},
    ]
    assert "CHAIN-OF-THOUGHT" not in prompt_text(input=answered, tools=[WEATHER])


def test_sealed_reasoning_opens_here_for_its_tenant_and_model_and_nowhere_else() -> None:
    token = SEAL.seal("secret thought")
    assert SEAL.open(token) == "secret thought" and "secret" not in token
    sealed = [{**CALL[1], "content": None, "encrypted_content": token}, *CALL[2:]]
    assert "secret thought" in prompt_text(input=[CALL[0], *sealed], tools=[WEATHER])
    for elsewhere in (sealed_with(b"o"), sealed_with(b"k", tenant="mallory"), sealed_with(b"k", model="other")):
        with pytest.raises(UnopenableReasoning):  # another graph, another tenant, another model
            elsewhere.open(token)
    altered = token[:-6] + ("AAAAAA" if not token.endswith("AAAAAA") else "BBBBBB")
    with pytest.raises(ApiError) as refused:
        render_request(request(input=[CALL[0], {**sealed[0], "encrypted_content": altered}]), SEAL, TODAY)
    assert refused.value.status == 400 and refused.value.param == "input[1].encrypted_content"


def test_a_key_file_is_made_once_owner_only_and_read_back(tmp_path: Path) -> None:
    key = tmp_path / "keys" / "graph.key"
    first = GraphKey.from_file(key, make=True)
    assert key.stat().st_mode & 0o777 == 0o600 and [p.name for p in key.parent.iterdir()] == ["graph.key"]
    assert GraphKey.from_file(key).derived(b"x") == first.derived(b"x") != first.derived(b"y")


def test_a_key_file_the_graph_names_is_never_made_in_its_place(tmp_path: Path) -> None:
    """A frontend node the graph's key was not copied to must not seal with a key of its own."""
    key = tmp_path / "graph.key"
    with pytest.raises(KeyFileUnusable, match="copy the graph's key file"):
        GraphKey.from_file(key)
    assert not key.exists()


def test_a_key_file_others_can_read_is_refused(tmp_path: Path) -> None:
    key = tmp_path / "graph.key"
    GraphKey.from_file(key, make=True)
    key.chmod(0o644)
    with pytest.raises(KeyFileUnusable, match="chmod 600"):
        GraphKey.from_file(key)


def test_a_link_planted_where_the_key_s_draft_goes_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The draft is made with O_EXCL and O_NOFOLLOW under a random name: a planted link fails the open,
    and the file it points at is left as it was."""
    target = tmp_path / "victim"
    target.write_text("untouched")
    monkeypatch.setattr("dynamo_oss.gateway.graph_key.secrets.token_hex", lambda _: "planted")
    (tmp_path / ".graph.key.planted").symlink_to(target)
    with pytest.raises(FileExistsError):
        GraphKey.from_file(tmp_path / "graph.key", make=True)
    assert target.read_text() == "untouched" and not (tmp_path / "graph.key").exists()


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": [{"type": "banana"}]}, "input[0].type"),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
        ({"input": "hi", "tools": [{"type": "function"}]}, "tools[0].name"),
        ({"input": "hi", "tools": [{"type": "namespace", "name": "n"}]}, "tools[0].tools"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ],
)
def test_malformed_requests_name_the_field(body: dict, param: str) -> None:
    raw = {"model": "m", **body}
    with pytest.raises(ValidationError) as err:
        ResponsesRequest.model_validate(raw)
    refusal = from_validation(err.value, raw)
    assert (refusal.status, refusal.param) == (400, param), refusal.message
    assert param in refusal.message


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"input": [{"type": "function_call_output", "call_id": "nope", "output": "x"}]}, "input[0].call_id"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0].type",
        ),
        ({"input": "hi", "tools": [{**WEATHER, "parameters": {"type": "array"}}]}, "tools[0].parameters"),
        ({"input": "hi", "tools": [WEATHER, WEATHER]}, "tools[1].name"),
    ],
)
def test_requests_that_cannot_be_rendered_are_refused_by_field(fields: dict, param: str) -> None:
    with pytest.raises(ApiError) as refused:
        render_request(request(**fields), SEAL, TODAY)
    assert (refused.value.status, refused.value.param) == (400, param)


PATH = {"type": "object", "properties": {"path": {"type": "string"}}}
READ = {"type": "function", "name": "read", "parameters": PATH}
NAMESPACED = {"type": "namespace", "name": "files", "description": "File tools", "tools": [READ]}
FINAL_ANSWER = {"role": "assistant", "content": [{"type": "output_text", "text": "It is sunny."}]}


@settings(max_examples=100, deadline=None)
@given(
    text=st.lists(st.sampled_from([*"ab \n\t<|>é中🙂\x00", "<|start|>", "<|end|>", "<|message|>"])).map("".join),
    functions=st.booleans(),
)
def test_a_user_s_text_is_rendered_as_openai_harmony_renders_it(text: str, functions: bool) -> None:
    """rendering.py puts a user's plain text together itself (harmony's formatting tokens cost 0.1 ms)."""
    message = Message.from_role_and_content(Role.USER, text)
    options = RenderOptions(conversation_has_function_tools=functions)
    assert RenderCache().tokens(message, functions) == tuple(encoding().render(message, options))


@pytest.mark.parametrize(
    "fields",
    [
        {"input": "hi"},
        {"input": "hi", "instructions": "Be brief.", "reasoning": {"effort": "high"}},
        {"input": CALL, "tools": [WEATHER]},
        {"input": [*CALL, FINAL_ANSWER, {"role": "user", "content": "and tomorrow?"}], "tools": [WEATHER]},
        {
            "input": [*CALL, FINAL_ANSWER, {"role": "user", "content": "again"}, *CALL[1:]],
            "tools": [WEATHER, NAMESPACED],
        },
        {
            "input": [{"role": "user", "content": "hi"}, {"role": "developer", "content": "Later."}],
            "tools": [NAMESPACED],
        },
    ],
)
def test_the_prompt_rendered_piece_by_piece_is_harmony_s_rendering_of_the_whole(
    fields: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dynamo_oss.gateway.harmony import rendering

    captured: list = []
    kept = rendering._kept
    monkeypatch.setattr(rendering, "_kept", lambda messages: captured.append(messages) or kept(messages))
    prompt = render_request(request(**fields), SEAL, TODAY)
    whole = Conversation.from_messages(captured[0])
    assert prompt.token_ids == encoding().render_conversation_for_completion(whole, Role.ASSISTANT)


def _turn(inherited: list[dict], own: list[dict], response_id: str = "resp_new", **extra: object) -> Turn:
    request = ResponsesRequest.model_validate({"model": "m", "input": "hi", **extra})
    return Turn(request, 0, None, bool(own), ItemIds(response_id), inherited, own, None)  # type: ignore[arg-type]


def test_a_conversation_is_one_session_from_its_first_response_on() -> None:
    """The router keeps a session on one worker; a Responses conversation is named after the response that
    began it, which every continuation's stored items lead back to."""
    root, second, third = (ItemIds(new_id("resp")) for _ in range(3))
    first = _turn([], [{"id": root.next("msg")}], root.response_id)
    assert conversation_session(first, "t") == root.response_id
    stored = [*first.own, {"id": root.next("msg")}, {"id": second.next("msg")}]
    later = _turn(stored, [{"id": third.next("msg")}], third.response_id)
    assert conversation_session(later, "t") == root.response_id
    assert conversation_session(_turn([{"id": "msg_mine"}], [{"id": third.next("msg")}]), "t") == "t/msg_mine"
    assert conversation_session(_turn([], []), "t") is None  # store: false and no previous response: nothing to name
    # Codex names its conversation in prompt_cache_key; a tenant's keys never meet another's.
    assert conversation_session(_turn([], [], prompt_cache_key="c-1"), "a") == "a/c-1"
    assert conversation_session(_turn([], [], prompt_cache_key="c-1"), "b") == "b/c-1"
    assert conversation_session(_turn([], [], prompt_cache_key="c-1"), "") == "c-1"  # no tenants
    # A name a header cannot carry goes as its digest.
    unfit = conversation_session(_turn([], [], prompt_cache_key="c\r\nx-evil: 1"), "a")
    assert unfit is not None and unfit.startswith("sha256-") and len(unfit) == 71
