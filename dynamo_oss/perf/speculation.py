"""How many drafted tokens a workload accepts: acceptance profiles of gpt-oss-120b's EAGLE3 heads.

Speculation pays in accepted tokens per step, which the workload sets, not the hardware: a step
drafts N tokens and verifies them with the model in one pass; the model keeps the drafts up to the
first it disagrees with, plus one token of its own. A profile holds, for each draft position, the
chance that draft is accepted when every draft before it was (what Dynamo's mocker takes as
--aic-nextn-accept-rates), so that

    tokens per step = 1 + sum over i <= N of (r_1 x ... x r_i).

Sources (per-position acceptance, gpt-oss-120b with an EAGLE3 head, vLLM, TP1, greedy, K = 8 drafts;
vllm-project/vllm pull request 32628, "Vanilla EAGLE3 Results", 2026-01): MT-Bench accepted 63, 38,
23, 14, 9, 5, 3 and 2% of positions 1-8, HumanEval 71, 49, 32, 21, 14, 9, 5 and 3%. Other published
chat figures bracket the chat profile's 2.24 tokens a step at 3 drafts and 2.56 at 7: 2.41 at 3
drafts (SGLang, MT-Bench, Dogacel/specdrift-gpt-oss-120b-eagle3's model card), 2.36 at 5 (vLLM pull
request 42764), 2.76 at 7 (Nebius, temperature 0).
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field


class AcceptanceProfile(BaseModel):
    """The conditional acceptance of each draft position for one kind of traffic."""

    model_config = ConfigDict(frozen=True)

    name: str
    rates: tuple[float, ...] = Field(description="r_i: draft i accepted, given drafts 1..i-1 were")
    source: str

    def accept_rates(self, draft_tokens: int) -> tuple[float, ...]:
        """The first `draft_tokens` conditional rates (the mocker's --aic-nextn-accept-rates)."""
        if not 1 <= draft_tokens <= len(self.rates):
            raise ValueError(f"the {self.name} profile has rates for 1 to {len(self.rates)} drafts, not {draft_tokens}")
        return self.rates[:draft_tokens]

    def tokens_per_step(self, draft_tokens: int) -> float:
        """Expected tokens a sequence gains in one step with `draft_tokens` drafts (1 with none)."""
        if draft_tokens == 0:
            return 1.0
        rates = self.accept_rates(draft_tokens)
        return 1.0 + sum(math.prod(rates[: i + 1]) for i in range(len(rates)))


def _conditional(cumulative: tuple[float, ...]) -> tuple[float, ...]:
    """Per-position conditional rates from the share of steps that accepted each position."""
    previous = (1.0, *cumulative[:-1])
    return tuple(round(now / before, 4) for now, before in zip(cumulative, previous, strict=True))


_PR_32628 = "vLLM pull request 32628 (gpt-oss-120b, EAGLE3, K=8, per-position acceptance)"
CHAT = AcceptanceProfile(
    name="chat",
    rates=_conditional((0.63, 0.38, 0.23, 0.14, 0.09, 0.05, 0.03, 0.02)),
    source=f"MT-Bench, {_PR_32628}",
)
# Agentic traffic is coding agents' (Codex, Claude Code) tool calls and code: HumanEval's profile stands
# in for it; no published per-position acceptance of gpt-oss on agent trajectories was found.
AGENTIC = AcceptanceProfile(
    name="agentic",
    rates=_conditional((0.71, 0.49, 0.32, 0.21, 0.14, 0.09, 0.05, 0.03)),
    source=f"HumanEval, {_PR_32628}; stands in for coding agents' traffic",
)
PROFILES: dict[str, AcceptanceProfile] = {profile.name: profile for profile in (CHAT, AGENTIC)}
