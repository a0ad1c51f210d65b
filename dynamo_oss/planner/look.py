"""The SLA planner's latest look at the load, as a file in the run folder on one host.

The planner process writes it on every look; the actuator sends its reason with the decision it
relays, and `dynamo status` prints it, so an operator sees why the pools have the size they have.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, Field

from dynamo_oss.catalog.names import PoolRole
from dynamo_oss.launch.state import write_atomically

LOOK_FILE = "planner-look.json"
LOOK_FILE_ENV = "DYNAMO_OSS_PLANNER_LOOK"  # where the planner process writes it; unset on Kubernetes


class Look(BaseModel):
    at: datetime = Field(description="when the planner looked")
    current: dict[PoolRole, int] = Field(description="the pools' sizes it found")
    wanted: dict[PoolRole, int] = Field(description="the sizes it proposed")
    reason: str = Field(description="the load it sized for and what the model predicts at that size")

    def write(self, path: Path) -> None:
        write_atomically(path, self.model_dump_json(indent=2))

    @classmethod
    def read(cls, run_dir: Path) -> Look | None:
        """The latest look in `run_dir`, None when the graph has no SLA planner or it has not looked yet."""
        path = run_dir / LOOK_FILE
        try:
            return cls.model_validate_json(path.read_text())
        except (FileNotFoundError, ValueError):
            return None
