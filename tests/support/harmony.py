"""Rendering a Responses request into harmony token ids, as the gateway does, for unit tests."""

from __future__ import annotations

import datetime

from dynamo_oss.gateway.harmony.conversation import conversation
from dynamo_oss.gateway.harmony.rendering import Prompt, render
from dynamo_oss.gateway.harmony.sealing import ReasoningSeal
from dynamo_oss.gateway.protocol.responses import ResponsesRequest


def render_request(request: ResponsesRequest, seal: ReasoningSeal, today: datetime.date) -> Prompt:
    return render(conversation(request, seal, today))
