"""The request that creates a batch (POST /v1/batches), as OpenAI's Batch API takes it, and the endpoints a batch
may run."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints


Endpoint = Literal["/v1/chat/completions", "/v1/responses", "/v1/completions"]
MetadataKey = Annotated[str, StringConstraints(max_length=64)]
MetadataValue = Annotated[str, StringConstraints(max_length=512)]


class BatchCreateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input_file_id: str = Field(max_length=100, description="a file uploaded with purpose `batch`")
    endpoint: Endpoint = Field(description="where every line of the file goes")
    completion_window: Literal["24h"] = Field(description="how long the batch may take (OpenAI takes only 24h)")
    metadata: dict[MetadataKey, MetadataValue] | None = Field(default=None, max_length=16)
