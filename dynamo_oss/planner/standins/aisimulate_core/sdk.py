"""The two names Dynamo's planner imports at start-up; neither can be used here."""

from __future__ import annotations

UNAVAILABLE = (
    "aisimulate is not installed (its PyPI release cannot be installed offline), so the planner's "
    "AISimulate performance model is unavailable; dynamo-oss runs the planner's load-based scaling"
)


class ForwardPassPerfModelConfig:
    def __init__(self, *args: object, **kwargs: object) -> None:
        raise ImportError(UNAVAILABLE)


class RustForwardPassPerfModel:
    def __init__(self, *args: object, **kwargs: object) -> None:
        raise ImportError(UNAVAILABLE)

    @staticmethod
    def normalize_config(*args: object) -> None:
        raise ImportError(UNAVAILABLE)
