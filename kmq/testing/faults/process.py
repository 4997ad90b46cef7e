"""The processes a fault run drives: started (in a network namespace or not), frozen and thawed, supervised, and
measured from /proc (CPU time, resident memory) and through their health endpoints.

``Supervised`` is what a deployment's supervisor does (systemd ``Restart=on-failure``, a Kubernetes pod): a process
that exits non-zero is started again, and each exit is recorded with the last line it wrote.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kmq.testing.broker import die_with_parent
from kmq.testing.faults.netns import Namespace

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (all its threads), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds so far of each thread of ``pid``, by ``name/tid`` (librdkafka names its threads rdk:…)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            fields = stat.rsplit(")", 1)[1].split()
            out[f"{name}/{tid}"] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    return out


def rss_kb(pid: int) -> int:
    """Resident memory of ``pid`` in KiB, from /proc/PID/statm."""
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_KB


@dataclass
class Exit:
    code: int
    at: float
    last_line: str


@dataclass
class Supervised:
    """One kmq process (worker, tracker, producer). ``restart``: started again after a non-zero exit."""

    name: str
    command: Sequence[str]
    log_path: Path
    env: Mapping[str, str] = field(default_factory=dict)
    namespace: Namespace | None = None
    #: host:port of its metrics endpoint (/readyz, /livez), if it serves one.
    metrics: str | None = None
    restart: bool = False
    cwd: Path | None = None
    exits: list[Exit] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _stopping: bool = field(default=False, repr=False)
    _watch: threading.Thread | None = field(default=None, repr=False)

    def start(self) -> Supervised:
        self._launch()
        if self.restart:
            self._watch = threading.Thread(target=self._supervise, name=f"supervise-{self.name}", daemon=True)
            self._watch.start()
        return self

    def _launch(self) -> None:
        prefix = self.namespace.exec_prefix() if self.namespace is not None else []
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen([*prefix, *self.command], stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env={**os.environ, **self.env},
                                            cwd=self.cwd, preexec_fn=die_with_parent)

    def _supervise(self) -> None:
        while not self._stopping:
            process = self.process
            assert process is not None
            code = process.wait()
            if self._stopping:
                return
            self.exits.append(Exit(code, time.monotonic(), self.last_line()))
            if code == 0:
                return
            time.sleep(1.0)  # a supervisor's restart delay
            if not self._stopping:
                self._launch()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def last_line(self) -> str:
        lines = self.log_path.read_text(errors="replace").strip().splitlines() if self.log_path.exists() else []
        return lines[-1] if lines else ""

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    # --- faults -------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """SIGSTOP for the body of the ``with`` (a GC pause, a VM freeze), SIGCONT after it whatever happens."""
        os.kill(self.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGCONT)

    # --- measures ------------------------------------------------------------------------------------------

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    def rss_kb(self) -> int:
        return rss_kb(self.pid)

    def thread_cpu_seconds(self) -> dict[str, float]:
        return thread_cpu_seconds(self.pid)

    def health(self, path: str = "/readyz", timeout_s: float = 2.0) -> tuple[int | None, str]:
        """(status, body) of a health endpoint; (None, why) when it does not answer (frozen, cut off, gone).
        Asked from inside its namespace, so a partition between it and the brokers does not hide its answer."""
        if self.metrics is None:
            return None, "no metrics endpoint"
        url = f"http://{self.metrics}{path}"
        if self.namespace is not None:
            code = ("import sys, urllib.request, urllib.error\n"
                    "try:\n r = urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2]))\n"
                    " print(r.status); print(r.read().decode().strip())\n"
                    "except urllib.error.HTTPError as e:\n print(e.code); print(e.read().decode().strip())\n"
                    "except Exception as e:\n print(0); print(type(e).__name__, e)\n")
            try:
                done = subprocess.run([*self.namespace.exec_prefix(), "python3", "-c", code, url, str(timeout_s)],
                                      capture_output=True, text=True, timeout=timeout_s + 5, check=False)
            except subprocess.TimeoutExpired:
                return None, "no answer"
            status, _, body = done.stdout.partition("\n")
            return (int(status) or None) if status.strip().isdigit() else None, body.strip()
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as answer:
                return answer.status, answer.read().decode().strip()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode().strip()
        except OSError as err:
            return None, f"{type(err).__name__}: {err}"

    # --- the end ---------------------------------------------------------------------------------------------

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGCONT (a frozen process cannot handle SIGTERM), SIGTERM, then SIGKILL after ``timeout_s``."""
        self._stopping = True
        process = self.process
        if process is None or process.poll() is not None:
            return None if process is None else process.returncode
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGCONT)
            process.terminate()
        try:
            return process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait(10)
