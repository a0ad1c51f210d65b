"""Talking to a running launcher's control API, as `dynamo scale`, `dynamo status` and the planner's
actuator do: the URL and the token come from the run folder."""

from __future__ import annotations

from pathlib import Path

import httpx

from dynamo_oss.catalog.errors import UserError
from dynamo_oss.catalog.names import PoolRole
from dynamo_oss.launch.scaling import ScaleOutcome
from dynamo_oss.launch.state import RunState

CONNECT_TIMEOUT_S = 5.0


class ControlClient:
    def __init__(self, url: str, token: str) -> None:
        # A resize returns when its workers serve or have drained, which can take minutes.
        self.http = httpx.Client(
            base_url=url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(CONNECT_TIMEOUT_S, read=None),
        )

    @classmethod
    def for_run(cls, run_dir: Path) -> ControlClient:
        """The control API of the launcher serving `run_dir`; UserError when none is running there."""
        state = RunState.read(run_dir)
        if state.stopped or not state.supervisor_alive or not state.control_url or not state.control_token_file:
            raise UserError(f"no launcher is running in {run_dir}: start the graph with `dynamo serve`")
        return cls(state.control_url, state.control_token_file.read_text().strip())

    def status(self) -> RunState:
        return RunState.model_validate(self._call("GET", "/v1/status"))

    def scale(self, role: PoolRole | str, workers: int) -> ScaleOutcome:
        return ScaleOutcome.model_validate(self._call("POST", f"/v1/pools/{role}/scale", {"workers": workers}))

    def decide(self, decision_id: int, workers: dict[PoolRole, int], why: str | None = None) -> ScaleOutcome:
        body = {"decision_id": decision_id, "workers": workers, "why": why}
        return ScaleOutcome.model_validate(self._call("POST", "/v1/decisions", body))

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        try:
            response = self.http.request(method, path, json=body)
        except httpx.HTTPError as error:
            raise UserError(
                f"the launcher's control API at {self.http.base_url} did not answer ({error}); is its "
                "`dynamo serve` still running? `dynamo status` shows what it last recorded"
            ) from error
        if response.status_code >= 400:
            try:
                message = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text
            raise UserError(message)
        return response.json()
