"""The Batch API of one serving process, as its gateway mounts it: where files and batches are kept, the routes
that answer /v1/files and /v1/batches, and the runner that runs batches in the graph's spare capacity."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dynamo_oss.gateway.batches import route as batches_route
from dynamo_oss.gateway.batches.pacing import Pacer
from dynamo_oss.gateway.batches.route import BatchesRoute
from dynamo_oss.gateway.batches.runner import BatchRunner
from dynamo_oss.gateway.batches.sending import GatewayLine
from dynamo_oss.gateway.batches.store import BatchStore
from dynamo_oss.gateway.files import route as files_route
from dynamo_oss.gateway.files.route import FilesRoute
from dynamo_oss.gateway.files.store import FileStore
from dynamo_oss.graph.schema import BatchTargetsSection, GatewayBatchesSection

if TYPE_CHECKING:
    from dynamo_oss.gateway.app import Gateway
    from dynamo_oss.gateway.routes import LocalRoute


@dataclass
class BatchApi:
    files: FileStore
    batches: BatchStore
    settings: GatewayBatchesSection
    targets: BatchTargetsSection | None  # the latency batch work must not push interactive traffic past

    def routes(
        self, max_body_bytes: int
    ) -> tuple[dict[tuple[bytes, bytes], LocalRoute], dict[bytes, tuple[frozenset[bytes], LocalRoute]]]:
        """The routes' entries in the gateway's allow-list: exact (method, path) pairs, and path prefixes."""
        files = FilesRoute(self.files, self.settings, max_body_bytes)
        batches = BatchesRoute(self.batches, self.files, self.settings)
        exact = {
            (b"POST", files_route.PATH): files,
            (b"GET", files_route.PATH): files,
            (b"POST", batches_route.PATH): batches,
            (b"GET", batches_route.PATH): batches,
        }
        under = {
            files_route.PREFIX: (files_route.METHODS, files),
            batches_route.PREFIX: (batches_route.METHODS, batches),
        }
        return exact, under  # type: ignore[return-value]

    def runner(self, gateway: Gateway) -> BatchRunner:
        """The runner of this process's batches, sending their lines through `gateway`, paced on its latency: at
        most max_share of the graph's max_in_flight in flight as batch requests."""
        max_in_flight = gateway.fair_share.max_in_flight
        assert max_in_flight is not None  # GatewayConfig requires it with batches
        share = max(1, int(max_in_flight * self.settings.max_share))
        pacer = Pacer(gateway.fair_share, share, self.targets, gateway.latency)
        return BatchRunner(self.batches, self.files, lambda *line: GatewayLine(gateway, *line), pacer)
