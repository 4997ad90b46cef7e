"""The audit at scale: generated topics of 1M, 3M, 10M messages, the audit on each (local mode, or a cluster),
its wall time and peak memory, and its figures checked against the generator's ground truth, per queue and state.

    python -m tests.bench.audit_scale --sizes 1000000 3000000 10000000 [--master spark://…] [--bootstrap H:P]

Without ``--bootstrap`` a broker of its own is started and stopped (data under ``--work``); with it, a size whose
truth file is in ``--work`` is not generated again (its topics are taken to be there). Reports, never asserts
timings; exits 1 if a figure differs from the truth.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kmq.config import Config
from kmq.ops.audit import generate
from kmq.ops.audit.job import AuditOptions, run, session
from kmq.testing.broker import LocalKafka
from kmq.wire import vocabulary as v


def _rss_kb(pid: int, field: str = "VmRSS") -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class MemorySampler:
    """Peak resident memory of the Spark driver JVM, its Python workers, and executor JVMs (cluster mode), sampled
    twice a second; the driver's own peak (VmHWM) too."""

    def __init__(self, driver_pid: int) -> None:
        self.driver_pid = driver_pid
        self.peak = {"driver_mb": 0.0, "python_workers_mb": 0.0, "executors_mb": 0.0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            workers = executors = 0
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                cmd = _cmdline(int(entry.name))
                if "pyspark" in cmd and ("daemon" in cmd or "worker" in cmd) and "python" in cmd:
                    workers += _rss_kb(int(entry.name))
                elif "CoarseGrainedExecutorBackend" in cmd:
                    executors += _rss_kb(int(entry.name))
            for key, kb in (("driver_mb", _rss_kb(self.driver_pid)), ("python_workers_mb", workers),
                            ("executors_mb", executors)):
                self.peak[key] = max(self.peak[key], kb / 1024)

    @contextmanager
    def sampling(self) -> Iterator[MemorySampler]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()


def compare(result: dict[str, Any], truth: dict[str, Any]) -> list[str]:
    """Every state and counter per queue, audit against truth; the differences."""
    wrong = []
    for queue, expected in truth["queues"].items():
        got = result["queues"].get(queue, {})
        for name in v.STATES:
            if got.get(name, 0) != expected["states"].get(name, 0):
                wrong.append(f"{queue} {name}: audit {got.get(name, 0)}, truth {expected['states'].get(name, 0)}")
        for name in v.COUNTERS:
            if got.get(name, 0) != expected["counters"].get(name, 0):
                wrong.append(f"{queue} {name}: audit {got.get(name, 0)}, truth {expected['counters'].get(name, 0)}")
    return wrong


def audit(bootstrap: str, truth: dict[str, Any], master: str, out: Path, conf: dict[str, str]) -> dict[str, Any]:
    c = truth["config"]
    config = Config(bootstrap_servers=bootstrap, message_topic=c["message_topic"], marker_topic=c["marker_topic"],
                    at_most_once_queues=tuple(c["at_most_once_queues"]))
    load_before = os.getloadavg()[0]
    spark = session(master, conf)
    try:
        gateway = spark.sparkContext._gateway  # type: ignore[attr-defined]
        pid = gateway.proc.pid if getattr(gateway, "proc", None) is not None else os.getpid()
        started = time.monotonic()
        with MemorySampler(pid).sampling() as sampler:
            result = run(config, AuditOptions(out_dir=out, now_ms=truth["now_ms"], master=master), spark)
        seconds = time.monotonic() - started
        driver_hwm = _rss_kb(pid, "VmHWM") / 1024
    finally:
        spark.stop()
    return {"result": result, "seconds": round(seconds, 1), "load": (round(load_before, 1),
                                                                    round(os.getloadavg()[0], 1)),
            "memory": {**{k: round(x) for k, x in sampler.peak.items()}, "driver_hwm_mb": round(driver_hwm)}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.audit_scale")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 3_000_000, 10_000_000])
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--bootstrap", help="an existing broker (default: one of its own)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/kmq-audit-scale"))
    parser.add_argument("--driver-memory", default="2g")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    broker = None
    if args.bootstrap is None:
        broker = LocalKafka(work_dir=args.work / "broker", heap="1g").start()
    bootstrap = args.bootstrap or broker.bootstrap_servers  # type: ignore[union-attr]
    failed = False
    rows = []
    try:
        for size in args.sizes:
            truth_file = args.work / f"truth-{size}.json"
            if broker is not None or not truth_file.exists():
                started = time.monotonic()
                generate.main(["--bootstrap-servers", bootstrap, "--prefix", f"scale-{size}", "--messages",
                               str(size), "--truth", str(truth_file)])
                print(f"generated {size:,} in {time.monotonic() - started:.0f} s", flush=True)
            truth = json.loads(truth_file.read_text())
            measured = audit(bootstrap, truth, args.master, args.work / f"audit-{size}",
                             {"spark.driver.memory": args.driver_memory})
            wrong = compare(measured["result"], truth)
            failed |= bool(wrong)
            read = measured["result"]["topics"]
            row = {"messages": size, "seconds": measured["seconds"], "load_1m": measured["load"],
                   **measured["memory"], "records_read": sum(t.get("records") or 0 for t in read.values()),
                   "mb_read": round(sum(t.get("bytes") or 0 for t in read.values()) / 1e6),
                   "equal_to_truth": not wrong}
            rows.append(row)
            print(json.dumps(row), flush=True)
            for line in wrong[:20]:
                print("  DIFFERS:", line, flush=True)
    finally:
        if broker is not None:
            broker.stop()
    base = rows[0] if rows else None
    for row in rows:
        ratio = row["seconds"] / base["seconds"] / (row["messages"] / base["messages"]) if base else 0
        print(f"{row['messages']:>11,} msgs  {row['seconds']:>7.1f} s  (x{ratio:.2f} of linear)  "
              f"driver {row['driver_mb']} MB  python {row['python_workers_mb']} MB  "
              f"executors {row['executors_mb']} MB  read {row['mb_read']:,} MB  load {row['load_1m']}  "
              f"truth {'equal' if row['equal_to_truth'] else 'DIFFERS'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
