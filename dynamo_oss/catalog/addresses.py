"""Addresses of the host: which stay on it (the graph schema refuses open infrastructure on any
other, and `dynamo check` warns about every listener there), and which interface holds one."""

from __future__ import annotations

import ipaddress
import socket

import psutil

WILDCARDS = ("0.0.0.0", "::")  # a listener on these listens on every address of its host


def is_loopback(host: str) -> bool:
    """True for an address only this host reaches: 127.0.0.0/8, ::1 or localhost (any other name may
    resolve to anything)."""
    try:
        return host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def interface_of(address: str) -> str | None:
    """The network interface of this machine that holds `address` (an IP, or a name resolved here),
    or None when no interface here has it: the graph names another machine, or this one wrongly."""
    try:
        wanted = {info[4][0] for info in socket.getaddrinfo(address, None)}
    except (socket.gaierror, UnicodeError):
        return None
    for name, addresses in psutil.net_if_addrs().items():
        if any(entry.address.split("%")[0] in wanted for entry in addresses):
            return name
    return None
