"""Which child log lines reach the terminal: warnings, errors and anything unrecognised.

Every line goes to the process's log file; the terminal gets what an operator acts on. Routine
lines (INFO, DEBUG and TRACE of Dynamo's Rust and Python logs, NATS's [INF] banner, the gateway's
INFO), the warnings printed on every healthy start, and what processes print while the launcher
stops them stay in the files. `dynamo serve --verbose` echoes everything.
"""

from __future__ import annotations

import re

_ROUTINE_LEVEL = re.compile(
    r"^\S+Z\s+(INFO|DEBUG|TRACE)\s"  # Dynamo (Rust tracing and Python), 2026-11-22T23:29:14.540970Z  INFO ...
    r"|\[(INF|DBG|TRC)\]"  # nats-server
    r"|^\S+ \S+ (INFO|DEBUG) "  # the gateway's logging: 2026-11-22 23:29:14,540 INFO name: ...
)
# Warnings printed on every healthy start: Dynamo 1.6's for a worker's attention-DP ranks joining the
# KV router and for a text-only model that multimodal routing cannot read; etcd's for its default
# auth token, which a loopback-only etcd does not use, and, under mutual TLS, for each of the
# launcher's reads through its JSON gateway (the certificate's name is not a user: auth is off). The planner's, for the pre-deployment
# profile its load-based scaling does not use and for its plugin registry, whose gateway is off.
# And those of every resize, which the launcher reports itself: the router dropping a worker that
# left, the planner seeing a new worker's load one look after its count. And a worker's for the last
# reply of a stream the frontend had already cancelled: Dynamo 1.6 cancels each stream as it
# completes, so the worker's final message races it (8 of the conformance suite's 20 requests).
# And the frontend's for every guided request (a structured output, a forced tool choice): it will
# not move one to another worker mid-stream, since the grammar's state cannot move with it. And the
# planner's for each quantity of traffic it reads while there is none: an idle graph printed seven
# every look (the frontend's series do not exist before its first request); `dynamo status` says
# "no traffic observed yet" instead.
_ROUTINE_WARNINGS = re.compile(
    r"WARN dynamo_kv_router::sequences::multi_worker: (Adding|Removing) worker|WARN mm_routing: "
    r'|"msg":"simple token is not cryptographically signed"'
    r'|"msg":"ignoring common name in gRPC-gateway proxy request"'
    r"|WARN (perf_metrics.fetch_pre_deployment_metrics|adapters._log_missing_pre_deployment_data): "
    r"|WARN base.__init__: AllowUnauthenticatedAuth enabled|WARN state_machine._reconcile_fpm_worker_count: "
    r"|WARN handle_payload: dynamo_runtime::pipeline::network::ingress::push_handler: Failed to publish response "
    r"|WARN http-request\S*: dynamo_llm::migration: Guided-decoding request: migration disabled "
    r"|WARN traffic_metrics\.\w+: No prometheus metric data available for "
)


def for_terminal(line: str) -> bool:
    """True when an operator watching the terminal should see `line`."""
    return not (_ROUTINE_LEVEL.search(line) or _ROUTINE_WARNINGS.search(line))
