"""The endpoint's sizing in the commands: applied to the deployment a command starts or renders, and printed."""

from __future__ import annotations

import os

from dynamo_oss.deployment.model import Deployment
from dynamo_oss.perf.endpoint import EndpointSizing, PeakOutput, api_needs, dearest, size_endpoint, sized


def sized_deployment(
    deployment: Deployment, mocker_time_scale: float = 1.0, *, on_cluster: bool | None = None
) -> tuple[Deployment, EndpointSizing]:
    """`deployment` with the endpoint sized for its pools' peak, and the sizing: on a cluster (a graph of
    `nodes: N`, or `on_cluster` for what `dynamo deploy` renders) in frontend pods, else on this host's cores."""
    cluster = deployment.placement.on_cluster if on_cluster is None else on_cluster
    sizing = size_endpoint(deployment, None if cluster else os.cpu_count() or 1, mocker_time_scale)
    return sized(deployment, sizing), sizing


def describe_peak(peak: PeakOutput) -> list[str]:
    """The peak output and, a line each, the decoding pools that make it."""
    context = peak.context
    lines = [
        f"{peak.tok_s:,.0f} output tok/s = {peak.tok_s_per_gpu:,.0f} per GPU x {peak.gpus} decoding GPUs, "
        f"decode steps modelled at {context.isl:,} input + {context.osl:,} output tokens"
    ]
    for pool in peak.pools:
        slower = f", as a mocker {pool.slowdown:g}x slower than modelled" if pool.slowdown != 1 else ""
        lines.append(
            f"{pool.role}: {pool.workers} workers at most, each attention rank {pool.batch} sequences at "
            f"{pool.tok_s_user:,.0f} tok/s/user{slower}"
        )
    return lines


def describe_endpoint(sizing: EndpointSizing) -> list[str]:
    """The check's endpoint section: the peak, the measured CPU per token, what each field gets and why."""
    lines = ["  endpoint sizing (gateway processes and frontends for the pools' peak output):"]
    if sizing.peak is None:
        lines.append(f"    peak       unknown: {sizing.not_timed}")
    else:
        measured = sizing.measured
        first, *pools = describe_peak(sizing.peak)
        lines += [
            f"    peak       {first}",
            *(f"               {line}" for line in pools),
            f"    CPU/token  measured on {measured.machine}, {measured.date}, code {measured.code} "
            f"({measured.source}); one core per process:",
            f"      {'API':<12} {'gateway us/token':>16} {'processes':>10} {'frontend us/token':>18} {'frontends':>10}",
            *(
                f"      {need.api:<12} {need.gateway_us_per_token:>16.1f} {need.gateway_processes:>10} "
                f"{need.frontend_us_per_token:>18.1f} {need.frontends:>10}"
                for need in sizing.needs
            ),
        ]
    where = " a pod" if sizing.on_cluster else (" on each frontend node" if sizing.frontend_nodes > 1 else "")
    replicas = sizing.frontend_replicas
    pods = (" pod" if replicas.value == 1 else " pods") if sizing.on_cluster else where
    lines.append(f"    {replicas.field:<18} {replicas.value}{pods}  ({replicas.why})")
    if sizing.gateway_processes is not None:
        processes = sizing.gateway_processes
        lines.append(f"    {processes.field:<18} {processes.value}{where}  ({processes.why})")
    if sizing.frontend_cores_per_pod is not None:
        lines.append(
            f"    each pod's one Dynamo frontend needs about {sizing.frontend_cores_per_pod} cores at the peak "
            "(measured as one process; `dynamo deploy` has its container request them)"
        )
    lines += [f"    warning: {problem}" for problem in sizing.warnings]
    return lines


def describe_chosen(sizing: EndpointSizing) -> str:
    """One line: what the endpoint gets, for the commands that start or render it."""
    replicas, processes = sizing.frontend_replicas, sizing.gateway_processes
    pods = "frontend pod" if sizing.on_cluster else "frontend"
    text = f"{counted(replicas.value, pods)} ({'sized' if replicas.sized else 'given by the graph'})"
    if processes is not None:
        where = " each" if sizing.on_cluster else ""
        chosen = "sized" if processes.sized else "given by the graph"
        text += f", {counted(processes.value, 'gateway process', 'es')}{where} ({chosen})"
    if sizing.peak is not None:
        text += f" for a peak of {sizing.peak.tok_s:,.0f} output tok/s"
    return text


def counted(count: int, noun: str, plural: str = "s") -> str:
    """`1 frontend`, `2 frontends`."""
    return f"{count} {noun}{'' if count == 1 else plural}"


def describe_needs(tok_s: float) -> str:
    """One line: the endpoint that streams `tok_s`, on the dearest API for each part."""
    gateway, frontend = dearest(api_needs(tok_s))
    return (
        f"{gateway.gateway_processes} gateway processes ({gateway.api}), "
        f"{frontend.frontends} frontends ({frontend.api}), one core each"
    )
