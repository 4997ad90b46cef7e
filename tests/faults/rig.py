"""One fault scenario's deployment and what it shows, in real processes on fresh topics.

``Rig`` runs a paced producer (tests.cluster.producer_proc), two workers and one tracker (under a supervisor that
restarts it after a non-zero exit, as a deployment would), optionally in network namespaces; samples every
process's /readyz and CPU time every second; and at the end reads the handlers' own log into a ``Verdict``: lost,
duplicates (each explained), recovery, CPU, health seen during and after the fault, late acks, exits.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import sys
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient

from kmq import Config
from kmq.testing.faults.netns import Namespace
from kmq.testing.faults.process import Supervised
from kmq.wire import consumer_group
from tests.appended import complete_lines
from tests.cluster.analysis import Run, load_confirmed, load_runs
from tests.faults.handlers import WORK_S, fails_first
from tests.helpers import ROOT, env_for, free_port, members_holding_partitions, run_kmq
from tests.markers_io import wait_for

#: Fast enough for CI, slow enough to be production's shape (defaults: 60 s redelivery, 45 s session): a fault of
#: 30 s outlasts both.
REDELIVERY_TIMEOUT_MS = 8_000
SESSION_TIMEOUT_MS = 10_000
#: librdkafka's reconnect.backoff.max.ms: after a heal a client may wait this long before it dials again.
RECONNECT_S = 10.0
#: What we allow beyond the redelivery timeout for a redelivery to happen: a session to expire, a reconnect, a
#: rebalance and a partition's rebuild (stated in docs/guides/operations.md).
REDELIVERY_BOUND_S = SESSION_TIMEOUT_MS / 1000 + RECONNECT_S + 10.0
RATE_PER_S = 20.0
#: Handler threads per worker.
CONCURRENCY = 4
#: The workers' retry delay (--backoff-base and --backoff-max).
BACKOFF_S = 2.0
WORKERS = 2
#: Above this share of a core over a fault, a process is spinning (a spin is ~100%).
SPIN_PCT = 30.0
SAMPLE_S = 1.0


@dataclass
class Sample:
    t: float
    name: str
    status: int | None
    body: str
    cpu_s: float | None


@dataclass
class Verdict:
    """What one scenario showed (a row of the table in docs/guides/operations.md)."""

    fault: str
    sent: int
    handled: int
    lost: list[str]
    duplicates: int
    explained: dict[str, int]
    unexplained: list[str]
    #: The last redelivery the fault caused (a zombie's or an outage's message), in seconds from the fault's start.
    redelivery_s: float | None
    #: The last redelivery of a message the faulted process was running (owed from the moment it went silent), in
    #: seconds from the fault's start. A Start the frozen process had not sent yet goes out when it is thawed, so the
    #: message another worker handled meanwhile is redelivered once more a redelivery timeout after the fault's end:
    #: counted in ``redelivery_s`` only.
    zombie_redelivery_s: float | None
    #: The longest a retry (a release with the worker's backoff) came back after it was due, in seconds.
    retry_lag_s: float | None
    recovered_s: float | None
    late_acks: int
    cpu_fault_pct: dict[str, float]
    hot_threads: dict[str, str]
    cpu_idle_pct: dict[str, float]
    health_during: dict[str, list[str]]
    #: Seconds after the fault's end until every process answered /readyz 200 (None: not within a minute).
    healthy_s: float | None
    #: Per process: seconds after the fault's end until its first 200, and what it said before (who was slow, why).
    ready_after: dict[str, str]
    health_after: dict[str, str]
    exits: dict[str, list[str]]

    def line(self) -> str:
        return json.dumps(asdict(self))


@dataclass
class Rig:
    config: Config
    queue: str
    dir: Path
    #: Where each worker and the tracker run (None: this host's namespace) and the bootstrap servers each uses.
    worker_ns: list[Namespace | None] = field(default_factory=lambda: [None] * WORKERS)
    tracker_ns: Namespace | None = None
    bootstrap_for: dict[str, str] = field(default_factory=dict)
    procs: dict[str, Supervised] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    fault: tuple[float, float] | None = None
    #: Process → its busiest thread over the fault and its share of a core (where a spin would be).
    hot_threads: dict[str, str] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _sampler: threading.Thread | None = None

    @property
    def record(self) -> Path:
        return self.dir / "handled.jsonl"

    @property
    def confirmed(self) -> Path:
        return self.dir / "confirmed.tsv"

    def _env(self, ns: Namespace | None) -> dict[str, str]:
        bootstrap = self.bootstrap_for.get(ns.name if ns else "", self.config.bootstrap_servers)
        return {**env_for(self.config.replace(bootstrap_servers=bootstrap)), "KMQTEST_RECORD": str(self.record),
                "KMQ_LOG_LEVEL": "info"}

    def _spawn(self, name: str, args: list[str], ns: Namespace | None, *, restart: bool = False) -> Supervised:
        port = free_port()
        env = self._env(ns)
        if name == "tracker" and os.environ.get("FAULT_DEBUG"):
            # FAULT_DEBUG=cgrp: the tracker's group consumer's join states, every line, in its log.
            env.update(KMQ_LOG_LEVEL="debug", KMQ_CONSUMER_KAFKA_DEBUG=os.environ["FAULT_DEBUG"])
        if name.startswith("worker") and os.environ.get("FAULT_DEBUG_WORKERS"):
            # FAULT_DEBUG_WORKERS=broker,eos,metadata,cgrp: librdkafka's debug contexts of every client of the workers.
            env.update(KMQ_LOG_LEVEL="debug", KMQ_KAFKA_DEBUG=os.environ["FAULT_DEBUG_WORKERS"])
        proc = Supervised(name, [sys.executable, *args, "--metrics-port", str(port)], self.dir / f"{name}.log",
                          env, ns, f"127.0.0.1:{port}", restart=restart, cwd=ROOT)
        self.procs[name] = proc.start()
        return proc

    def start(self, timeout_s: float = 90.0, *, with_producer: bool = True) -> Rig:
        run_kmq(self.config, "topics", "create", "--partitions", "4", "--marker-partitions", "2")
        self._spawn("tracker", ["-m", "kmq.redelivery"], self.tracker_ns, restart=True)
        for i, ns in enumerate(self.worker_ns, start=1):
            self._spawn(f"worker-{i}", ["-m", "kmq.cli", "worker", "tests.faults.handlers:work", "--queue",
                                        self.queue, "--concurrency", str(CONCURRENCY), "--backoff-base", str(BACKOFF_S),
                                        "--backoff-max", str(BACKOFF_S)], ns)
        admin = AdminClient({"bootstrap.servers": self.config.bootstrap_servers, "log_level": 0})
        joined = wait_for(lambda: members_holding_partitions(admin, consumer_group(self.queue)) == WORKERS
                          and members_holding_partitions(admin, self.config.tracker_group) == 1,
                          timeout_s, interval_s=0.5)
        assert joined, f"workers and tracker did not all hold partitions within {timeout_s:.0f}s: {self.tails()}"
        if not with_producer:
            return self
        producer_env = {**env_for(self.config), "PYTHONPATH": str(ROOT)}
        self.procs["producer"] = Supervised(
            "producer", [sys.executable, "-m", "tests.cluster.producer_proc", self.queue, "1000000",
                         str(RATE_PER_S), str(self.confirmed)], self.dir / "producer.log", producer_env,
            cwd=ROOT).start()
        self._sampler = threading.Thread(target=self._sample, name="fault-sampler", daemon=True)
        self._sampler.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            for name, proc in list(self.procs.items()):
                if name == "producer" or not proc.alive:
                    continue
                status, body = proc.health("/readyz", timeout_s=5.0)
                with contextlib.suppress(OSError):
                    self.samples.append(Sample(time.time(), name, status, body, proc.cpu_seconds()))

    # --- faults ------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def during(self) -> Iterator[None]:
        """Marks the body of the ``with`` as the fault (its start and end times go into the verdict), and which
        thread of each process used the most CPU meanwhile."""
        start = time.time()
        before = {n: p.thread_cpu_seconds() for n, p in self.procs.items() if p.alive and n != "producer"}
        try:
            yield
        finally:
            self.fault = (start, time.time())
            for name, threads in before.items():
                with contextlib.suppress(OSError):
                    after = self.procs[name].thread_cpu_seconds()
                    hot = max(after, key=lambda t: after[t] - threads.get(t, 0.0))
                    share = 100 * (after[hot] - threads.get(hot, 0.0)) / (self.fault[1] - start)
                    self.hot_threads[name] = f"{hot.split('/')[0]} {share:.1f}%"

    # --- the end -------------------------------------------------------------------------------------------

    def finish(self, fault: str, *, faulted_pids: set[int], drain_s: float = 90.0, idle_s: float = 10.0) -> Verdict:
        """Stops the producer, waits for every confirmed message to be handled, measures an idle stretch, stops
        everything and reads the verdict."""
        assert self.fault is not None, "no fault was marked"
        producer = self.procs.pop("producer")
        producer.process.send_signal(15)  # type: ignore[union-attr]
        producer.process.wait(150)  # type: ignore[union-attr]
        wait_for(lambda: _all_done(load_confirmed(self.confirmed), load_runs(self.record)), drain_s, interval_s=0.5)
        # Health once the fault is over: every process ready again, in a sample taken after the fault's end (the
        # time it took is in the verdict; a fault that ends healthy, as a flapping link may, has no such sample yet).
        end = self.fault[1]
        wait_for(lambda: self._healthy_s(end) is not None, 60, interval_s=1.0)
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join(10)
        idle_from, cpu_from = time.time(), {n: p.cpu_seconds() for n, p in self.procs.items() if p.alive}
        time.sleep(idle_s)
        cpu_idle = {n: round(100 * (self.procs[n].cpu_seconds() - c) / (time.time() - idle_from), 2)
                    for n, c in cpu_from.items() if self.procs[n].alive}
        late = sum(_late_acks(p) for n, p in self.procs.items() if n.startswith("worker"))
        after = {n: " ".join(str(x) for x in p.health("/readyz", timeout_s=5.0)) for n, p in self.procs.items()}
        exits = {n: [f"{e.code}: {e.last_line[-200:]}" for e in p.exits] for n, p in self.procs.items() if p.exits}
        for proc in self.procs.values():
            proc.stop()
        return self._verdict(fault, faulted_pids, late, cpu_idle, after, exits)

    def _verdict(self, fault: str, faulted_pids: set[int], late: int, cpu_idle: dict[str, float],
                 after: dict[str, str], exits: dict[str, list[str]]) -> Verdict:
        assert self.fault is not None
        start, end = self.fault
        confirmed = load_confirmed(self.confirmed)
        runs = load_runs(self.record)
        handled = {r.payload for r in runs}
        by_first: dict[str, list[Run]] = defaultdict(list)
        for run in runs:
            by_first[run.first].append(run)
        explained: dict[str, int] = defaultdict(int)
        unexplained = []
        copies_retried = self._copies_retried()
        rewound = self._starts_rewound()
        for first, its_runs in by_first.items():
            for i, earlier in enumerate(its_runs[:-1]):
                reason = _explain(earlier, its_runs, i, start, end, faulted_pids, copies_retried, rewound)
                if reason is None:
                    unexplained.append(f"{first}: runs {[(r.pid, r.count, round(r.t - start, 1)) for r in its_runs]}")
                else:
                    explained[reason] += 1
        # Redelivered by the tracker because of the fault: not the retries the handler asked for.
        redelivered = [r for r in runs if r.count > 1 and r.t >= start
                       and not any(fails_first(e.payload, e.count) for e in by_first[r.first] if e.count < r.count)]
        owed = [r for r in redelivered if any(e.pid in faulted_pids for e in by_first[r.first] if e.count < r.count)]
        in_fault = [s for s in self.samples if start <= s.t <= end]
        return Verdict(
            fault=fault, sent=len(confirmed), handled=len(confirmed & handled), lost=sorted(confirmed - handled)[:20],
            duplicates=sum(n for reason, n in explained.items() if reason != "retry") + len(unexplained),
            explained=dict(explained),
            unexplained=unexplained[:20],
            redelivery_s=round(max(r.t for r in redelivered) - start, 1) if redelivered else None,
            zombie_redelivery_s=round(max(r.t for r in owed) - start, 1) if owed else None,
            retry_lag_s=_retry_lag_s(by_first),
            recovered_s=_recovered_s(runs, confirmed, self.dir / "confirmed.tsv", end),
            late_acks=late, cpu_fault_pct=_cpu_pct(in_fault), hot_threads=dict(self.hot_threads),
            cpu_idle_pct=cpu_idle,
            health_during={n: sorted({f"{s.status} {_short(s.body)}" for s in in_fault if s.name == n})
                           for n in self.procs},
            healthy_s=self._healthy_s(end), ready_after=self._ready_after(end), health_after=after, exits=exits)

    def _copies_retried(self) -> set[str]:
        """Message ids whose copy the tracker wrote again after a failed write (its ``redelivery_retry`` lines)."""
        tracker = self.procs.get("tracker")
        text = tracker.log_text() if tracker is not None else ""
        return set(re.findall(r"message_id=(\S+) step=copy .*event=redelivery_retry", text))

    def _starts_rewound(self) -> set[str]:
        """Message ids whose Start a worker rewound (its ``starts_rewound`` lines): the Start may be durable, or land
        late, with no keep-alive after it."""
        ids: set[str] = set()
        for name, proc in self.procs.items():
            if name.startswith("worker"):
                for runs in re.findall(r'message_ids="?([0-9:,-]+)"? event=starts_rewound', proc.log_text()):
                    ids |= parse_id_ranges(runs)
        return ids

    def _healthy_s(self, end: float) -> float | None:
        """From the fault's end to the first moment every process's latest answer was 200."""
        latest: dict[str, Sample] = {}
        for sample in self.samples:
            latest[sample.name] = sample
            if sample.t >= end and len(latest) == len(self.procs) and all(s.status == 200 for s in latest.values()):
                return round(sample.t - end, 1)
        return None

    def _ready_after(self, end: float) -> dict[str, str]:
        """Per process, from the fault's end to its first 200 answer, and its last other answer before that."""
        ready: dict[str, str] = {}
        for name in self.procs:
            after = [s for s in self.samples if s.name == name and s.t >= end]
            first = next((s for s in after if s.status == 200), None)
            before = [s for s in after if first is None or s.t < first.t]
            said = f" after {before[-1].status} {_short(before[-1].body)}" if before else ""
            ready[name] = f"{'never' if first is None else round(first.t - end, 1)} s{said}"
        return ready

    def stop_all(self) -> None:
        """After a failed test: nothing may outlive it."""
        self._stop.set()
        for proc in self.procs.values():
            proc.stop(5)

    def tails(self) -> str:
        return "\n".join(f"--- {p.name}\n" + "\n".join(p.log_text().splitlines()[-12:]) for p in self.procs.values())


def _explain(run: Run, runs: list[Run], i: int, start: float, end: float, faulted_pids: set[int],
             copies_retried: set[str], rewound: set[str]) -> str | None:
    """Why a run was followed by another of the same message, or None: the handler failed it on purpose (a
    retry); the tracker wrote its copy twice (the copy's write failed in the outage and was retried, in doubt:
    the tracker's log says so); its worker was the one faulted and the run had begun before the fault ended (a
    zombie: its ack came late or never); any worker's run in progress when the fault began or during it (its
    keep-alives or ack could not be written in time); or a run whose Start some worker had rewound before (the
    worker's log names it), redelivered by the tracker before its next reader Started it again."""
    if fails_first(run.payload, run.count):
        return "retry"
    if run.count > 1 and any(r.count == run.count for r in runs[i + 1:]):
        previous = [r.id for r in runs if r.count == run.count - 1]
        if any(p in copies_retried for p in previous):
            return "copy in doubt"
    if run.pid in faulted_pids and run.t <= end:
        return "zombie"
    if start - 5.0 <= run.t <= end:
        return "outage"
    if run.first in rewound and any(r.count > run.count for r in runs[i + 1:]):
        # A worker's Start of it was rewound (a Start not acknowledged in time while the broker was frozen, or a
        # batch given up with its partitions): the tracker redelivered it before its next reader Started it again.
        return "Start rewound"
    return None


def drain_s(fault_s: float) -> float:
    """How long the workers, at full capacity, take to run what the producer sent while nothing could be consumed
    for ``fault_s`` (a frozen broker): a retry's copy written after the fault waits behind it in its partition."""
    return RATE_PER_S * fault_s * WORK_S / (WORKERS * CONCURRENCY)


def parse_id_ranges(text: str) -> set[str]:
    """The ids of ``id_ranges``' runs (``3:38-40,2:7``), each as ``partition:offset``."""
    ids: set[str] = set()
    for run in filter(None, text.split(",")):
        partition, _, offsets = run.partition(":")
        first, _, last = offsets.partition("-")
        ids.update(f"{partition}:{o}" for o in range(int(first), int(last or first) + 1))
    return ids


def _all_done(confirmed: set[str], runs: list[Run]) -> bool:
    """Every confirmed message handled, and every retry the handler asked for made."""
    handled = {r.payload for r in runs}
    retried = {r.payload for r in runs if r.count > 1}
    owed = {r.payload for r in runs if fails_first(r.payload, r.count)}
    return confirmed <= handled and owed <= retried


def _retry_lag_s(by_first: dict[str, list[Run]]) -> float | None:
    """The longest a retry came back after its due time (its failed run, the handler's work, the backoff)."""
    lags = []
    for its_runs in by_first.values():
        for failed, again in itertools.pairwise(its_runs):
            if fails_first(failed.payload, failed.count):
                lags.append(again.t - (failed.t + WORK_S + BACKOFF_S))
    return round(max(lags), 1) if lags else None


def _recovered_s(runs: list[Run], confirmed: set[str], confirmed_path: Path, end: float) -> float | None:
    """Seconds after the fault's end until every message confirmed before that end had been handled."""
    sent_at = {}
    for line in complete_lines(confirmed_path):
        payload, _, t = line.partition("\t")
        sent_at[payload] = float(t)
    owed = {p for p in confirmed if sent_at.get(p, 0) <= end}
    first_run: dict[str, float] = {}
    for run in runs:
        first_run.setdefault(run.payload, run.t)
    if not owed <= first_run.keys():
        return None
    return round(max(0.0, max((first_run[p] for p in owed), default=end) - end), 1)


def _cpu_pct(samples: list[Sample]) -> dict[str, float]:
    """Each process's CPU over the fault, in % of one core (from its first to its last sample)."""
    per: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        if s.cpu_s is not None:
            per[s.name].append(s)
    out = {}
    for name, xs in per.items():
        if len(xs) >= 2 and xs[-1].t > xs[0].t:
            out[name] = round(100 * (xs[-1].cpu_s - xs[0].cpu_s) / (xs[-1].t - xs[0].t), 1)  # type: ignore[operator]
    return out


def _short(body: str) -> str:
    return re.sub(r"\d+ s\b", "N s", body)[:110]


def _late_acks(proc: Supervised) -> int:
    if proc.metrics is None:
        return 0
    status, text = proc.health("/metrics")
    total = 0.0
    for line in text.splitlines() if status == 200 else []:
        if line.startswith("kmq_late_acks_total"):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


def metrics_text(proc: Supervised) -> str:
    with urllib.request.urlopen(f"http://{proc.metrics}/metrics", timeout=5) as answer:
        return str(answer.read().decode())
