"""The launcher's control API: read a running graph's state and resize its pools.

`dynamo scale`, `dynamo status` and the planner's actuator all come through here, so a resize by
hand and one the planner decided take the same path. It listens on loopback only, on a port the
kernel picks, and answers only requests that carry the bearer token the launcher wrote into the
run folder (readable by its owner alone). Errors are JSON in OpenAI's shape.
"""

from __future__ import annotations

import contextlib
import secrets
import socket
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException

from dynamo_oss.catalog.names import PoolRole
from dynamo_oss.deployment.processes import LOOPBACK
from dynamo_oss.gateway.errors import openai_error
from dynamo_oss.launch.scaling import ScaleFailed, ScaleOutcome, ScaleRefused, Scaler
from dynamo_oss.launch.state import DecisionRecord, RunState

TOKEN_FILE = "control-token"


class ScaleRequest(BaseModel):
    workers: int = Field(ge=0, le=64, description="the pool's new size")


class DecisionRequest(BaseModel):
    """A planner decision as the actuator relays it: the pools it sizes."""

    decision_id: int
    workers: dict[PoolRole, int] = Field(description="new size of each pool the decision sets")
    why: str | None = Field(default=None, description="the planner's reason, where it gives one (sla mode)")


def write_token(run_dir: Path) -> str:
    """A fresh bearer token in RUN_DIR/control-token, readable by its owner only."""
    token = secrets.token_urlsafe(32)
    path = run_dir / TOKEN_FILE
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(token)
    return token


def control_app(
    scaler: Scaler,
    state: Callable[[], RunState],
    decided: Callable[[DecisionRecord], None],
    token: str,
) -> FastAPI:
    app = FastAPI(title="dynamo-oss launcher", docs_url=None, redoc_url=None, openapi_url=None)

    @app.middleware("http")
    async def bearer_token(request: Request, call_next: Callable[[Request], Awaitable[object]]) -> object:
        given = request.headers.get("authorization", "")
        if not secrets.compare_digest(given.encode(), f"Bearer {token}".encode()):
            why = f"missing or wrong bearer token (see the run folder's {TOKEN_FILE})"
            return _error(401, why, code="invalid_token")
        return await call_next(request)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        first = error.errors()[0]["loc"] if error.errors() else ()
        return _error(422, problems, code="invalid_value", param=".".join(map(str, first[1:])) or None)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        what = f"{error.detail}: {request.method} {request.url.path}"
        return _error(error.status_code, what)

    @app.exception_handler(Exception)
    async def bug(request: Request, error: Exception) -> JSONResponse:
        return _error(500, f"the launcher failed on {request.method} {request.url.path}: {error!r}")

    @app.get("/v1/status")
    async def status() -> RunState:
        return state()

    @app.post("/v1/pools/{role}/scale", response_model=None)
    async def scale(role: str, body: ScaleRequest) -> ScaleOutcome | JSONResponse:
        if scaler.plan.pool(role) is None:  # type: ignore[arg-type]
            known = ", ".join(pool.role for pool in scaler.plan.pools)
            return _error(404, f"the graph has no pool {role!r} (its pools: {known})", param="role")
        try:
            return await scaler.resize({role: body.workers}, "dynamo scale")  # type: ignore[dict-item]
        except ScaleRefused as refused:
            return _error(409, str(refused), code="scale_refused")
        except ScaleFailed as failed:
            return _error(503, str(failed), code="scale_failed")

    @app.post("/v1/decisions", response_model=None)
    async def decision(body: DecisionRequest) -> ScaleOutcome | JSONResponse:
        reason = f"planner decision {body.decision_id}"
        if body.why:
            scaler.say(f"{reason}: {body.why}")
        record = DecisionRecord(
            decision_id=body.decision_id, workers=body.workers, at=datetime.now(timezone.utc), why=body.why
        )
        try:
            outcome = await scaler.resize(body.workers, reason)
        except ScaleRefused as refused:
            scaler.say(f"{reason} refused: {refused}")
            decided(record.model_copy(update={"outcome": f"refused: {refused}"}))
            return _error(409, str(refused), code="scale_refused")
        except ScaleFailed as failed:
            scaler.say(f"{reason} failed: {failed}")
            decided(record.model_copy(update={"outcome": f"failed: {failed}"}))
            return _error(503, str(failed), code="scale_failed")
        decided(record.model_copy(update={"outcome": "carried out", "seconds": outcome.seconds}))
        return outcome

    return app


class ControlServer(uvicorn.Server):
    """uvicorn inside the supervisor's event loop; signals stay the supervisor's, which drains in order."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    @classmethod
    def on_loopback(cls, app: FastAPI) -> tuple[ControlServer, socket.socket]:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind((LOOPBACK, 0))
        # A resize still waiting when the graph stops gets a few seconds, not the engine's ready timeout.
        config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False, timeout_graceful_shutdown=5)
        return cls(config), listener


def _error(status: int, message: str, code: str | None = None, param: str | None = None) -> JSONResponse:
    """The gateway's error shape (OpenAI's): message, type from the status, param and code."""
    return JSONResponse(openai_error(status, message, param, code), status_code=status)
