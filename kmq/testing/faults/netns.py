"""Network namespaces and veth pairs for partitions: ``Lab`` makes them and always removes them.

Topology: each namespace ``<prefix>-<name>`` is joined to this host's namespace by one veth pair, a /30 of its own
in 10.201.<n>.0: the host side ``.1``, the namespace side ``.2``, the namespace's default route via the host side.
A process in the namespace reaches any address of the host's namespace (a broker listening on the host side
address of its pair); the host reaches the namespace side. ``cut()`` takes the pair down: no packet either way
until ``heal()``. No forwarding is enabled, no rule is added outside these namespaces: traffic stays between a
namespace and the host's own sockets.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

#: Namespaces, links and addresses are named from this prefix (and the run's pid), so a sweep finds leftovers.
PREFIX = "kmqf"
SUBNET = "10.201"


class NetnsError(RuntimeError):
    """Raised when a namespace or link cannot be made (not root, no iproute2); the message says what failed."""


def ip(*args: str, namespace: str | None = None, check: bool = True) -> str:
    """Runs ``ip ARGS`` (in ``namespace``); its stdout, or NetnsError with its stderr."""
    command = ["ip", *(("netns", "exec", namespace, "ip") if namespace else ()), *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    except FileNotFoundError as err:
        raise NetnsError("`ip` (iproute2) is not installed: network partitions need it") from err
    if check and done.returncode != 0:
        raise NetnsError(f"{' '.join(command)} failed: {done.stderr.strip() or done.returncode}")
    return done.stdout


@dataclass
class Namespace:
    """One namespace and its veth pair to the host."""

    name: str
    index: int
    host_link: str
    ns_link: str

    @property
    def host_address(self) -> str:
        """The host side of the pair: what a process in the namespace connects to."""
        return f"{SUBNET}.{self.index}.1"

    @property
    def address(self) -> str:
        """The namespace side: where the host reaches a process in the namespace."""
        return f"{SUBNET}.{self.index}.2"

    def exec_prefix(self) -> list[str]:
        """The command prefix that runs a program in this namespace."""
        return ["ip", "netns", "exec", self.name]

    def cut(self) -> None:
        """A partition: the pair goes down, nothing passes either way."""
        ip("link", "set", self.host_link, "down")

    def heal(self) -> None:
        ip("link", "set", self.host_link, "up")
        # The namespace keeps its default route through a link that went down and up again only if re-added.
        ip("route", "replace", "default", "via", self.host_address, namespace=self.name, check=False)


@dataclass
class Lab:
    """Makes namespaces for one run and removes every one of them on ``close()`` (a context manager)."""

    #: ``kmqf<pid>x``: the x ends the pid, so one run's names never start with another's prefix.
    prefix: str = field(default_factory=lambda: f"{PREFIX}{os.getpid()}x")
    namespaces: dict[str, Namespace] = field(default_factory=dict)
    _flaps: list[tuple[threading.Event, threading.Thread]] = field(default_factory=list)

    def namespace(self, name: str) -> Namespace:
        """A new namespace joined to the host (names are short: Linux allows 15 characters per link)."""
        index = len(self.namespaces) + 1
        ns = Namespace(f"{self.prefix}-{name}", index, f"{self.prefix}h{index}", f"{self.prefix}n{index}")
        self.namespaces[name] = ns
        ip("netns", "add", ns.name)
        ip("link", "add", ns.host_link, "type", "veth", "peer", "name", ns.ns_link)
        ip("link", "set", ns.ns_link, "netns", ns.name)
        ip("addr", "add", f"{ns.host_address}/30", "dev", ns.host_link)
        ip("link", "set", ns.host_link, "up")
        ip("addr", "add", f"{ns.address}/30", "dev", ns.ns_link, namespace=ns.name)
        ip("link", "set", ns.ns_link, "up", namespace=ns.name)
        ip("link", "set", "lo", "up", namespace=ns.name)
        ip("route", "add", "default", "via", ns.host_address, namespace=ns.name)
        return ns

    def flap(self, ns: Namespace, down_s: float, up_s: float, cycles: int) -> threading.Thread:
        """Takes the link down for ``down_s`` and up for ``up_s``, ``cycles`` times, on a thread (joined by
        ``close()``; stopped early there too)."""
        stop = threading.Event()

        def run() -> None:
            for _ in range(cycles):
                ns.cut()
                if stop.wait(down_s):
                    break
                ns.heal()
                if stop.wait(up_s):
                    return
            ns.heal()

        thread = threading.Thread(target=run, name=f"flap-{ns.name}", daemon=True)
        self._flaps.append((stop, thread))
        thread.start()
        return thread

    @contextlib.contextmanager
    def partitioned(self, ns: Namespace) -> Iterator[None]:
        """The namespace cut off for the body of the ``with``, healed after it whatever happens."""
        ns.cut()
        try:
            yield
        finally:
            ns.heal()

    def close(self) -> None:
        for stop, thread in self._flaps:
            stop.set()
            thread.join(10)
        for ns in self.namespaces.values():
            ip("link", "del", ns.host_link, check=False)
            ip("netns", "del", ns.name, check=False)
        self.namespaces.clear()

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def sweep(prefix: str = PREFIX) -> list[str]:
    """Removes the namespaces and links of runs that died without cleaning up (named ``<prefix><pid>x…``, pid no
    longer alive); returns what it removed. A live run's are left alone."""
    removed = []
    for name in _named(prefix):
        owner = name[len(prefix):].split("x")[0]
        if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
            ip("link", "del", name, check=False)
            ip("netns", "del", name, check=False)
            removed.append(name)
    return removed


def _named(prefix: str) -> list[str]:
    names = [line.split()[0] for line in ip("netns", "list", check=False).splitlines() if line.strip()]
    links = [line.split(":")[1].strip().split("@")[0] for line in ip("-o", "link", "show", check=False).splitlines()
             if len(line.split(":")) > 1]
    return [n for n in names + links if n.startswith(prefix)]


def leftovers(prefix: str) -> list[str]:
    """Namespaces and links named from ``prefix`` that still exist (a clean run leaves none)."""
    deadline = time.monotonic() + 5.0
    while _named(prefix) and time.monotonic() < deadline:
        time.sleep(0.2)  # a namespace's links go away a moment after the namespace
    return _named(prefix)
