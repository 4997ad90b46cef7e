"""One node of a LocalCluster: its process (our child, or a detached JVM found again by its command line)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from kmq.testing.broker import BrokerError, alive, die_with_parent


@dataclass
class ClusterNode:
    """One node's process. ``pid`` alone (no ``process``) when it was started by another command (cluster-up)."""

    node_id: int
    port: int
    controller_port: int
    work_dir: Path
    command: list[str]
    detached: bool = False
    pid: int | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    #: The address it listens on and advertises.
    host: str = "127.0.0.1"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        if self.pid is None or not self._runs_here(self.pid):
            self.pid = self._find_pid()  # a stale state file, or a restart by another command
        return self.pid is not None

    def _runs_here(self, pid: int) -> bool:
        """True when ``pid`` is a live JVM running this node (its properties file on the command line)."""
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        return self.command[-1].encode() in cmdline and alive(pid)

    def _find_pid(self) -> int | None:
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and self._runs_here(int(entry.name)):
                return int(entry.name)
        return None

    def launch(self) -> None:
        if self.alive:
            raise BrokerError(f"node {self.node_id} is already running (pid {self.pid})")
        if _listening(self.host, self.port):
            raise BrokerError(f"cannot start node {self.node_id}: port {self.port} is taken by another process")
        log = self.work_dir / "stdout.log"
        if self.detached:
            # Not our child: it outlives this command, and no Popen of ours waits for it (a shell starts it in
            # the background in its own session and prints its pid).
            started = subprocess.run(["sh", "-c", 'setsid "$@" >>"$NODE_LOG" 2>&1 </dev/null & echo $!', "sh",
                                      *self.command], env={**os.environ, "NODE_LOG": str(log)},
                                     capture_output=True, text=True, check=True)
            self.pid, self.process = int(started.stdout.strip()), None
            return
        with open(log, "ab") as out:
            self.process = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        self.pid = self.process.pid

    def kill(self) -> None:
        """SIGKILL: no controlled shutdown, leaderships stay with the dead node until the controller fences it."""
        self._signal(signal.SIGKILL, 10.0)

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM: a controlled shutdown (leaderships moved first), SIGKILL after ``timeout_s``."""
        if not self._signal(signal.SIGTERM, timeout_s):
            self._signal(signal.SIGKILL, 10.0)

    def _signal(self, sig: signal.Signals, wait_s: float) -> bool:
        if self.pid is None or not self.alive:
            return True
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)
        deadline = time.monotonic() + wait_s
        while self.alive and time.monotonic() < deadline:
            time.sleep(0.05)
        return not self.alive

    def log_tail(self, lines: int = 20) -> str:
        texts: list[str] = []
        for name in ("stdout.log", "broker.log"):
            path = self.work_dir / name
            if path.exists():
                texts.extend(path.read_text(errors="replace").splitlines()[-lines:])
        return "\n".join(texts[-lines:]) or "(no log)"


def _listening(host: str, port: int) -> bool:
    """Something accepts connections on the port (a bind test would also fail on a killed node's TIME_WAIT
    connections, which Kafka's own SO_REUSEADDR listener ignores)."""
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0
