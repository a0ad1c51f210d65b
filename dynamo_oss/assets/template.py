"""The harmony chat template that Dynamo's frontend renders for gpt-oss requests.

`chat_template.jinja` turns OpenAI chat messages into the tokens openai-harmony's
`render_conversation_for_completion(conversation, Role.ASSISTANT)` produces for the
harmony conversation below; tests/assets/test_assets.py checks this token for token, with
Jinja2 and with minijinja (the engine inside Dynamo's frontend).

How OpenAI messages become harmony messages:
- A system message: model identity, knowledge cutoff 2024-06, `Current date:` from
  the `current_date` variable (default: today, via `strftime_now`; none or "" leaves the
  line out, which keeps the prompt stable for prefix caching and tests),
  `Reasoning:` from `reasoning_effort` (default medium), and the valid channels.
- A developer message when the first OpenAI message is `system` or `developer` (its text
  becomes `# Instructions`) or when tools are given (`namespace functions {...}`).
  Later system/developer messages become developer messages with `# Instructions`.
- user -> user. assistant -> its `reasoning_content` on `analysis`, then either its
  tool calls (`to=functions.NAME`, `commentary`, `<|constrain|>json`, ending `<|call|>`;
  text beside them is a `commentary` preamble) or its text on `final`.
- tool -> `functions.NAME to=assistant` on `commentary`, NAME being the function of the
  call with the message's `tool_call_id`.
- Earlier reasoning is dropped as openai-harmony 0.0.8's `auto_drop_analysis` does: only
  when the last assistant message is a final answer, and then only up to the first final
  answer of the conversation.

In Dynamo 1.6 the frontend reads `chat_template.jinja`, falling back to
`tokenizer_config.json`'s `chat_template`; a request's `reasoning_effort` field and its
`chat_template_args` (alias `chat_template_kwargs`) become template variables, the field
winning over the args (the tests check the latter against the frontend itself).
"""

from __future__ import annotations

from importlib import resources

TEMPLATE_FILE = "chat_template.jinja"


def chat_template() -> str:
    """The template's text, as written into model folders."""
    return resources.files(__package__).joinpath(TEMPLATE_FILE).read_text(encoding="utf-8")
