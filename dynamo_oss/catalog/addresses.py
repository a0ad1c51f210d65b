"""Which addresses stay on the host: the graph schema refuses open infrastructure on any other, and
`dynamo check` warns about every listener there."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """True for an address only this host reaches: 127.0.0.0/8, ::1 or localhost (any other name may
    resolve to anything)."""
    try:
        return host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
