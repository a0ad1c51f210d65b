"""Runs the suite against an endpoint with the official openai client and judges each case."""

from __future__ import annotations

import datetime
import uuid
from collections import Counter
from typing import Any, Literal

import httpx
import openai
from pydantic import BaseModel

from dynamo_oss.conformance import outcome as outcomes
from dynamo_oss.conformance.cases import CASES, Case, Inconclusive
from dynamo_oss.conformance.reference import reference_prompt
from dynamo_oss.conformance.sequences import SEQUENCES, Sequence
from dynamo_oss.conformance.replay import replay_annotation


class CaseResult(BaseModel):
    case: str
    why: str
    verdict: Literal["pass", "fail", "skip"]
    reasons: list[str]  # why it failed, or why it could not be judged


def run_suite(base_url: str, model: str, api_key: str = "not-needed", timeout_s: float = 120) -> list[CaseResult]:
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout_s)
    return [run_case(client, model, case) for case in CASES] + [run_sequence(client, model, s) for s in SEQUENCES]


def run_sequence(client: openai.OpenAI, model: str, sequence: Sequence) -> CaseResult:
    try:
        failures = sequence.run(client, model)
    except (openai.APIError, httpx.HTTPError) as err:
        failures = [f"request failed: {err}"]
    return CaseResult(case=sequence.name, why=sequence.why, verdict="fail" if failures else "pass", reasons=failures)


def run_case(client: openai.OpenAI, model: str, case: Case) -> CaseResult:
    body, warmup = _fresh(case.body), case.warmup and _fresh(case.warmup)
    try:
        outcome = _ask(client, model, case, body, warmup)
    except openai.APIError as err:
        return CaseResult(case=case.name, why=case.why, verdict="fail", reasons=[f"request failed: {err}"])
    outcome.reference_prompt_tokens = _reference_counts(case, body)
    try:
        failures = [failure for check in case.checks if (failure := check(outcome))]
    except Inconclusive as why:
        return CaseResult(case=case.name, why=case.why, verdict="skip", reasons=[str(why)])
    return CaseResult(case=case.name, why=case.why, verdict="fail" if failures else "pass", reasons=failures)


def _fresh(body: dict[str, Any]) -> dict[str, Any]:
    """Mark {run} in a case's user messages with this run's id, so no earlier run's prefix cache
    answers for it (the reasoning-effort check reads the cache)."""
    run = _RUN_ID
    messages = [
        {**m, "content": m["content"].replace("{run}", run)} if isinstance(m.get("content"), str) else m
        for m in body.get("messages", [])
    ]
    return {**body, "messages": messages} if "messages" in body else body


_RUN_ID = uuid.uuid4().hex[:12]


def _ask(
    client: openai.OpenAI, model: str, case: Case, body: dict[str, Any], warmup: dict[str, Any] | None
) -> outcomes.Outcome:
    extra = {**case.extra_body, **(replay_annotation(case.name) if case.replay else {})}
    if warmup:
        client.chat.completions.create(model=model, max_tokens=case.max_tokens, extra_body=extra, **warmup)
    if case.api == "responses":
        response = client.responses.create(model=model, max_output_tokens=case.max_tokens, extra_body=extra, **body)
        return outcomes.from_response_stream(response) if case.stream else outcomes.from_response(response)
    body = {**body, "max_tokens": case.max_tokens}
    if case.stream:
        body["stream_options"] = {"include_usage": True}
        return outcomes.from_chat_stream(client.chat.completions.create(model=model, extra_body=extra, **body))
    return outcomes.from_chat(client.chat.completions.create(model=model, extra_body=extra, **body))


def _reference_counts(case: Case, body: dict[str, Any]) -> set[int]:
    """Harmony's prompt length for the request sent, dated today (as servers date prompts) and undated."""
    if "messages" not in body:
        return set()
    today = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    return {
        len(reference_prompt(body["messages"], case.prompt.get("tools"), case.prompt.get("reasoning_effort"), date))
        for date in (today, None)
    }


def format_table(results: list[CaseResult]) -> str:
    width = max(len(r.case) for r in results)
    lines = [f"{'case':<{width}}  result  reason", f"{'-' * width}  ------  ------"]
    for result in results:
        reason = "; ".join(result.reasons) or result.why
        lines.append(
            f"{result.case:<{width}}  {result.verdict.upper() if result.verdict == 'fail' else result.verdict:<6}  {reason}"
        )
    counts = Counter(r.verdict for r in results)
    lines.append(f"{counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped")
    return "\n".join(lines)
