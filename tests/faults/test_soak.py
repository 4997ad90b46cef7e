"""Soak (``make test-soak``): bursts and idle minutes with a tracker, two workers and a delayed-message load.

Each cycle sends a burst (a tenth of it delayed 20-40 s, which the consumers hand back to the tracker to bring
back when due), waits until every message has been handled, then measures an idle minute: each process's CPU
from /proc (target: at most 1% of a core) and its resident memory at the end of the minute (target: flat after the
first cycle, the warm-up). Nothing may be lost. ``SOAK_CYCLES`` (default 5, ~10 minutes) and ``SOAK_BURST``
(default 3000) size it; ``SOAK_CYCLES=2 SOAK_BURST=1000`` is a ~5 minute check that still measures an idle minute
after the warm-up. Not in .ci/run (its budget goes to make test-faults, which measures each process at rest after
every fault): run it before a release and after any change to a loop's waits.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kmq import Config, Service
from kmq.testing.broker import LocalKafka
from kmq.testing.faults.process import Supervised
from tests.cluster.analysis import load_runs
from tests.faults.rig import Rig
from tests.markers_io import wait_for

CYCLES = int(os.environ.get("SOAK_CYCLES", "5"))
BURST = int(os.environ.get("SOAK_BURST", "3000"))
IDLE_S = 60.0
#: The targets: a process at rest costs at most this share of a core, and its memory does not grow.
IDLE_CPU_PCT = 1.0
RSS_GROWTH_KB = 8 * 1024

pytestmark = [pytest.mark.timeout(3600), pytest.mark.soak]


@pytest.fixture
def soak_rig(broker: LocalKafka, tmp_path: Path) -> Iterator[Rig]:
    uid = uuid.uuid4().hex[:6]
    config = Config(bootstrap_servers=broker.bootstrap_servers, message_topic=f"soak-{uid}.messages",
                    marker_topic=f"soak-{uid}.markers", tracker_group=f"soak-{uid}-trackers")
    rig = Rig(config, "q-soak", tmp_path)
    try:
        yield rig
    finally:
        rig.stop_all()


def test_idle_minutes_between_bursts_cost_under_one_percent_of_a_core_and_memory_stays_flat(
        soak_rig: Rig, results: list[dict[str, object]]) -> None:
    rig = soak_rig
    rig.start(with_producer=False)
    service = Service(rig.config)
    sent: set[str] = set()
    table: list[dict[str, object]] = []
    rng = random.Random(7)
    with service.queue(rig.queue).producer() as producer:
        for cycle in range(CYCLES):
            burst_at = time.monotonic()
            futures = []
            for i in range(BURST):
                payload = f"c{cycle}-{i}"
                delay = rng.uniform(20, 40) if i % 10 == 0 else None
                futures.append(producer.send_async(payload.encode(), delay=delay))
                sent.add(payload)
            assert producer.flush(120) == 0, "the burst was not all acknowledged"
            assert wait_for(lambda: sent <= {r.payload for r in load_runs(rig.record)}, 180, interval_s=1.0), \
                f"cycle {cycle}: not all handled: {len(sent - {r.payload for r in load_runs(rig.record)})} missing"
            drained_s = time.monotonic() - burst_at
            row = _idle_minute(rig.procs)
            row.update(cycle=cycle, drained_s=round(drained_s, 1))
            table.append(row)
            print(f"soak cycle {cycle}: drained in {drained_s:.0f} s; idle minute: {row}", flush=True)
    handled = {r.payload for r in load_runs(rig.record)}
    lost = sorted(sent - handled)
    results.append({"fault": f"soak: {CYCLES} cycles of {BURST} (a tenth delayed 20-40 s) + {IDLE_S:.0f} s idle",
                    "lost": lost, "cycles": table})
    assert not lost, f"lost: {lost[:20]}"
    for name in rig.procs:
        cpu = [row[f"{name} cpu %"] for row in table]
        assert max(cpu) <= IDLE_CPU_PCT, f"{name} idle CPU per minute {cpu} % of a core (target <= {IDLE_CPU_PCT})"
        rss = [row[f"{name} rss KiB"] for row in table[1:]]  # after the warm-up cycle
        assert max(rss) - rss[0] <= RSS_GROWTH_KB, f"{name} resident memory grew after warm-up: {rss} KiB"  # type: ignore[operator]


def _idle_minute(procs: dict[str, Supervised]) -> dict[str, object]:
    """CPU (% of one core) of each process over IDLE_S at rest, and its resident memory at the end."""
    started = time.monotonic()
    before = {name: proc.cpu_seconds() for name, proc in procs.items()}
    time.sleep(IDLE_S)
    elapsed = time.monotonic() - started
    row: dict[str, object] = {}
    for name, proc in procs.items():
        row[f"{name} cpu %"] = round(100 * (proc.cpu_seconds() - before[name]) / elapsed, 2)
        row[f"{name} rss KiB"] = proc.rss_kb()
    return row
