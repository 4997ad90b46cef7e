"""A Spark standalone cluster on this machine, from pyspark's own distribution: one master and N workers started
with ``spark-class org.apache.spark.deploy.master.Master`` / ``…worker.Worker``, each its own JVM, stopped (and
killed if need be) at the end, so no Spark process outlives it.

    with SparkCluster(workers=2) as cluster:
        spark = session(cluster.master_url, cluster.driver_conf())

Also ``python -m tests.spark_cluster`` (starts one, prints its URL, stops it on Enter or SIGTERM).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import pyspark

from kmq.testing.broker import die_with_parent, free_port

SPARK_HOME = Path(pyspark.__file__).parent


class ClusterError(RuntimeError):
    """Raised when the cluster cannot start; the message names the cause and the log to read."""


@dataclass
class SparkCluster:
    workers: int = 2
    cores_per_worker: int = 1
    worker_memory: str = "1536m"
    start_timeout_s: float = 120.0
    work_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="kmq-spark-cluster-")))
    port: int = 0
    ui_port: int = 0
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def driver_conf(self, executor_memory: str = "1g") -> dict[str, str]:
        """What a driver on this machine sets to use the cluster: every executor on the same interpreter."""
        return {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                "spark.executor.memory": executor_memory, "spark.executor.cores": str(self.cores_per_worker),
                "spark.cores.max": str(self.workers * self.cores_per_worker),
                "spark.pyspark.python": sys.executable, "spark.pyspark.driver.python": sys.executable}

    def _env(self) -> dict[str, str]:
        return {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_LOG_DIR": str(self.work_dir / "logs"), "SPARK_NO_DAEMONIZE": "1",
                "PYSPARK_PYTHON": sys.executable, "SPARK_WORKER_DIR": str(self.work_dir / "work")}

    def _spawn(self, name: str, *args: str) -> None:
        with (self.work_dir / f"{name}.log").open("wb") as log:
            self.processes.append(subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *args], env=self._env(), stdout=log,
                stderr=subprocess.STDOUT, preexec_fn=functools.partial(die_with_parent, signal.SIGKILL),
                start_new_session=True))

    def start(self) -> SparkCluster:
        if shutil.which("java") is None:
            raise ClusterError("Java is not on PATH: Spark needs Java 17 or newer")
        (self.work_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.port, self.ui_port = self.port or free_port(), self.ui_port or free_port()
        try:
            self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                        str(self.port), "--webui-port", str(self.ui_port))
            for i in range(self.workers):
                self._spawn(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", self.master_url, "--host",
                            "127.0.0.1", "--cores", str(self.cores_per_worker), "--memory", self.worker_memory,
                            "--webui-port", str(free_port()), "--work-dir", str(self.work_dir / f"work-{i}"))
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def alive_workers(self) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as answer:
            state = json.load(answer)
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            for proc in self.processes:
                if proc.poll() is not None:
                    raise ClusterError(f"a Spark process exited with {proc.returncode} at start; logs in "
                                       f"{self.work_dir}")
            with contextlib.suppress(OSError, ValueError):
                if self.alive_workers() == self.workers:
                    return
            time.sleep(0.5)
        raise ClusterError(f"{self.workers} worker(s) not registered with the master within "
                           f"{self.start_timeout_s:.0f}s; logs in {self.work_dir}")

    def stop(self, timeout_s: float = 20.0) -> None:
        """Stops every JVM it started (workers first: their executors go with them), then removes its files."""
        for proc in reversed(self.processes):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.processes):
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        self.processes.clear()
        shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> SparkCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


if __name__ == "__main__":
    with SparkCluster() as running:
        print(f"{running.master_url} (UI http://127.0.0.1:{running.ui_port}); Enter stops it", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            sys.stdin.readline()
