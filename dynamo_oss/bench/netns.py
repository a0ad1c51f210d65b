"""Several nodes on one machine: a network namespace per node, joined through a bridge.

Each node gets its own namespace with an address on a private /24 and a veth pair into a switch
namespace holding a bridge, so the nodes reach each other and nothing else: no route leads out,
and the root namespace's own interfaces are not on the bridge. A node's network is cut by taking
its port on the bridge down, as pulling its cable would. Everything is removed on exit, processes
still running in the namespaces included. Needs root (`ip netns`).
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from types import TracebackType

SUBNET = "10.77.0"  # private to the namespaces: nothing outside them has these addresses


def ip(*args: str) -> str:
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True).stdout


class Nodes:
    """`with Nodes(["head", "gpu-a"]) as nodes:` namespaces and addresses for those nodes."""

    def __init__(self, names: list[str]) -> None:
        tag = f"{os.getpid() % 100_000}"
        self.names = names
        self.switch = f"dyno{tag}-switch"
        self.namespaces = {name: f"dyno{tag}-{name}" for name in names}
        self.addresses = {name: f"{SUBNET}.{index + 1}" for index, name in enumerate(names)}
        self.ports = {name: f"d{tag}s{index}" for index, name in enumerate(names)}  # veth names: 15 bytes at most

    def __enter__(self) -> Nodes:
        try:
            ip("netns", "add", self.switch)
            ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            ip("-n", self.switch, "link", "set", "br0", "up")
            for name, namespace in self.namespaces.items():
                ip("netns", "add", namespace)
                inside, port = f"d{self.ports[name][1:]}n", self.ports[name]
                ip("link", "add", inside, "type", "veth", "peer", "name", port)
                ip("link", "set", inside, "netns", namespace)
                ip("link", "set", port, "netns", self.switch)
                ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
                ip("-n", namespace, "addr", "add", f"{self.addresses[name]}/24", "dev", inside)
                ip("-n", namespace, "link", "set", inside, "up")
                ip("-n", namespace, "link", "set", "lo", "up")
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.remove()

    def command(self, node: str, argv: list[str]) -> list[str]:
        """`argv` run inside the node's namespace (`ip netns exec` execs it: the PID is the command's)."""
        return ["ip", "netns", "exec", self.namespaces[node], *argv]

    def start(self, node: str, argv: list[str], log: Path) -> subprocess.Popen:
        with log.open("w") as output:
            return subprocess.Popen(
                self.command(node, argv), stdout=output, stderr=subprocess.STDOUT, start_new_session=True
            )

    def cut(self, node: str) -> None:
        """The node's cable pulled: its port on the bridge goes down."""
        ip("-n", self.switch, "link", "set", self.ports[node], "down")

    def reconnect(self, node: str) -> None:
        ip("-n", self.switch, "link", "set", self.ports[node], "up")

    def pids(self, node: str) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", self.namespaces[node]], capture_output=True, text=True).stdout
        return [int(pid) for pid in out.split()]

    def remove(self) -> None:
        """Kill whatever still runs in the namespaces, then delete them (the veth pairs go with them)."""
        existing = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
        for node, namespace in self.namespaces.items():
            if namespace in existing:
                for pid in self.pids(node):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        for namespace in [*self.namespaces.values(), self.switch]:
            if namespace in existing:
                subprocess.run(["ip", "netns", "del", namespace], capture_output=True)

    def left_behind(self) -> list[str]:
        """Namespaces of these nodes that still exist."""
        existing = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
        return sorted(existing & {*self.namespaces.values(), self.switch})
